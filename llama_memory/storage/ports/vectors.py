"""The dense index port (Chroma, or pgvector in the database)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any, Protocol, runtime_checkable

#: A vector: any sequence of floats (lists, numpy arrays).
Vector = Any


@runtime_checkable
class VectorIndex(Protocol):
    """Derived dense index: one partition (collection) per (tenant, user), ids shared
    with the system of record. Failures raise
    :class:`~llama_memory.core.errors.StorageError`, never look like an empty index."""

    def upsert(self, tenant_id: str, user_id: str, ids: Sequence[str], embeddings: Sequence[Vector]) -> None:
        """Add or replace one user's vectors."""
        ...

    def query(
        self, tenant_id: str, user_id: str, embedding: Vector, k: int, exclude: Collection[str] = ()
    ) -> list[tuple[str, float]]:
        """The ``k`` nearest of one user's vectors, as (id, cosine similarity), best
        first, leaving out the ids of ``exclude``."""
        ...

    def vectors(self, tenant_id: str, user_id: str, ids: Sequence[str]) -> dict[str, Vector]:
        """The stored vectors of some of one user's ids (absent ones left out)."""
        ...

    def count(self, tenant_id: str, user_id: str) -> int:
        """How many vectors one user has."""
        ...

    def ids(self, tenant_id: str, user_id: str) -> set[str]:
        """Every id of one user."""
        ...

    def delete(self, tenant_id: str, user_id: str, ids: Sequence[str]) -> None:
        """Delete some of one user's vectors."""
        ...

    def drop(self, tenant_id: str, user_id: str) -> None:
        """Delete one user's partition."""
        ...

    def clear(self) -> None:
        """Delete every partition of this index (re-indexing)."""
        ...

    def collection_name(self, tenant_id: str, user_id: str) -> str:
        """The name of one user's partition."""
        ...

    def collection_names(self) -> list[str]:
        """The names of every partition of this index."""
        ...

    def drop_collection(self, name: str) -> None:
        """Delete one partition by name (nothing if absent)."""
        ...
