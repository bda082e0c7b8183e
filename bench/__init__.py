"""Benchmarks of llama-memory against LlamaIndex's stock memories (run as ``python -m bench.<name>``)."""
