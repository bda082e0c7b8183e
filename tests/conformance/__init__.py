"""Conformance suite: behaviour every storage backend must have, written against the
storage parts the package uses (the ports of ``llama_memory.storage.ports`` and the
classes written once in ``llama_memory.storage.sql``, as each backend's bundle gives
them) and run once per backend (see conftest.py)."""
