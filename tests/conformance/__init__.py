"""Conformance suite: behaviour every storage backend must have, written against the
ports (``llama_memory.storage.ports``) and run once per backend (see conftest.py)."""
