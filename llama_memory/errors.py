"""Exceptions raised by llama-memory.

Every error says what was wrong; none of them is ever swallowed into an empty
result, so "nothing remembered" and "storage failed" can always be told apart.
"""

from __future__ import annotations


class LlamaMemoryError(Exception):
    """Base class of every error this library raises on purpose."""


class ScopeError(LlamaMemoryError, ValueError):
    """A long-term operation was asked for without the scope it needs (a user id)."""


class EmbeddingDimensionError(LlamaMemoryError, ValueError):
    """The embedding model's vectors do not have the dimension the store was built with."""

    def __init__(self, stored_dim: int, stored_model: str, new_dim: int, new_model: str) -> None:
        self.stored_dim = stored_dim
        self.new_dim = new_dim
        super().__init__(
            f"embedding dimension mismatch: this memory store holds {stored_dim}-dimensional "
            f"vectors from {stored_model!r}, but the embedding model {new_model!r} produces "
            f"{new_dim}-dimensional vectors. Open the store with the model it was built with, "
            f"or use a new path."
        )


class StorageError(LlamaMemoryError, RuntimeError):
    """The system of record or the dense index failed; nothing was silently dropped."""


class MemoryClosedError(StorageError):
    """A memory was used after :meth:`~llama_memory.ComposableMemory.close`: open a new one.

    A :class:`StorageError`, so code that caught the closed database's error before
    still catches it.
    """


class ModelIntegrityError(LlamaMemoryError, RuntimeError):
    """The offline embedding model's files are missing or do not match their checksum."""
