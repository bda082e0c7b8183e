"""The dense index: vectors of memory records in a Chroma collection.

The index is derived data. It shares ids with the SQLite records, keeps only the
scope metadata it needs to filter (tenant, user, session), and can be rebuilt
from the system of record at any time.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Optional

from ..errors import StorageError

#: Sub-directory of a memory directory that holds Chroma's files.
CHROMA_DIRNAME = "chroma"


def _quiet_settings() -> Any:
    from chromadb.config import Settings

    return Settings(anonymized_telemetry=False, allow_reset=False)


def persistent_client(path: Path | str) -> Any:
    """An embedded Chroma client storing its files under ``path/chroma``."""
    import chromadb

    try:
        return chromadb.PersistentClient(
            path=str(Path(path) / CHROMA_DIRNAME), settings=_quiet_settings()
        )
    except Exception as exc:  # chromadb raises many types; name the place
        raise StorageError(f"cannot open the Chroma index under {path}: {exc}") from exc


def ephemeral_client() -> Any:
    """An in-memory Chroma client (nothing written to disk)."""
    import chromadb

    return chromadb.EphemeralClient(settings=_quiet_settings())


def _chroma_filter(where: Mapping[str, str]) -> dict[str, Any]:
    """Chroma's filter syntax for "every key equals its value"."""
    clauses = [{key: value} for key, value in where.items()]
    return clauses[0] if len(clauses) == 1 else {"$and": clauses}


class DenseIndex:
    """One Chroma collection of record vectors, filtered by scope at query time.

    Args:
        client: a Chroma client (persistent, ephemeral or HTTP).
        name: the collection name (3-512 characters of ``[a-zA-Z0-9._-]``).

    Chroma errors are re-raised as :class:`~llama_memory.errors.StorageError`, so
    an unreachable or broken index never looks like an empty memory.
    """

    def __init__(self, client: Any, name: str) -> None:
        self.client = client
        self.name = name
        self._collection = self._open()

    @classmethod
    def unique_name(cls, prefix: str) -> str:
        """A collection name no other memory uses (for in-memory memories, which
        share one process-wide ephemeral Chroma)."""
        return f"{prefix}-{uuid.uuid4().hex[:12]}"

    def _open(self) -> Any:
        try:
            return self.client.get_or_create_collection(
                self.name, embedding_function=None, configuration={"hnsw": {"space": "cosine"}}
            )
        except Exception as exc:
            raise StorageError(f"cannot open Chroma collection {self.name!r}: {exc}") from exc

    def upsert(
        self,
        ids: Sequence[str],
        embeddings: Sequence[Sequence[float]],
        metadatas: Sequence[Mapping[str, str]],
    ) -> None:
        """Add or replace vectors with their scope metadata."""
        if not ids:
            return
        try:
            self._collection.upsert(
                ids=list(ids), embeddings=[list(e) for e in embeddings], metadatas=list(metadatas)
            )
        except Exception as exc:
            raise StorageError(f"Chroma upsert into {self.name!r} failed: {exc}") from exc

    def query(
        self, embedding: Sequence[float], k: int, where: Mapping[str, str]
    ) -> list[tuple[str, float]]:
        """The ``k`` nearest ids with their cosine similarity, among vectors matching ``where``."""
        if k <= 0:
            return []
        try:
            result = self._collection.query(
                query_embeddings=[list(embedding)],
                n_results=k,
                where=_chroma_filter(where),
                include=["distances"],
            )
        except Exception as exc:
            raise StorageError(f"Chroma query on {self.name!r} failed: {exc}") from exc
        ids = result["ids"][0] if result["ids"] else []
        distances = result["distances"][0] if result.get("distances") else [0.0] * len(ids)
        return [(i, 1.0 - float(d)) for i, d in zip(ids, distances)]

    def delete(self, ids: Optional[Sequence[str]] = None, where: Optional[Mapping[str, str]] = None) -> None:
        """Delete vectors by id or by metadata filter."""
        if not ids and not where:
            return
        kwargs: dict[str, Any] = {}
        if ids:
            kwargs["ids"] = list(ids)
        if where:
            kwargs["where"] = _chroma_filter(where)
        try:
            self._collection.delete(**kwargs)
        except Exception as exc:
            raise StorageError(f"Chroma delete from {self.name!r} failed: {exc}") from exc

    def count(self) -> int:
        """How many vectors the collection holds."""
        try:
            return int(self._collection.count())
        except Exception as exc:
            raise StorageError(f"Chroma count of {self.name!r} failed: {exc}") from exc

    def clear(self) -> None:
        """Drop and recreate the collection (used by re-indexing)."""
        try:
            self.client.delete_collection(self.name)
        except Exception as exc:
            raise StorageError(f"cannot drop Chroma collection {self.name!r}: {exc}") from exc
        self._collection = self._open()
