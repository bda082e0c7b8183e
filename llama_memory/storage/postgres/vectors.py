"""The dense index in PostgreSQL (pgvector): the
:class:`~llama_memory.storage.ports.vectors.VectorIndex` port on table
``record_embeddings``, in the same database as the records, so its writes join the
store's open transaction and forgetting a user deletes their vectors with their rows."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from typing import Any

from ..ports.vectors import Vector
from .store import PostgresStore


def _literal(vector: Vector) -> str:
    """pgvector's text form of a vector, ``[0.1,0.2]``."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def _parse(text: str) -> list[float]:
    return [float(x) for x in text.strip("[]").split(",") if x]


class PgVectorIndex:
    """One collection of vectors in a :class:`PostgresStore`, a partition per (tenant,
    user) (a partition is the rows with those keys: no table per user).

    Args:
        store: the store whose database (and open transaction) it writes to.
        prefix: names this index's collections (as Chroma's ``DenseIndex`` does), so
            that several indexes share the table.

    Searches are exact (cosine, per user along the primary key's btree): the column
    has no fixed dimension yet, which an HNSW index needs.
    """

    def __init__(self, store: PostgresStore, prefix: str) -> None:
        self.store = store
        self.prefix = prefix

    def collection_name(self, tenant_id: str, user_id: str) -> str:
        """The name of one user's partition."""
        digest = hashlib.sha256(f"{tenant_id}\x1f{user_id}".encode("utf-8")).hexdigest()[:32]
        return f"{self.prefix}-{digest}"

    def _key(self, tenant_id: str, user_id: str) -> tuple[str, str, str]:
        return tenant_id, user_id, self.collection_name(tenant_id, user_id)

    def upsert(self, tenant_id: str, user_id: str, ids: Sequence[str], embeddings: Sequence[Vector]) -> None:
        """Add or replace one user's vectors (joining the store's open transaction)."""
        if len(ids) != len(embeddings):
            raise ValueError(f"{len(ids)} ids but {len(embeddings)} embeddings")
        key = self._key(tenant_id, user_id)
        with self.store.transaction("write vectors") as conn, conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO record_embeddings (tenant_id, user_id, collection, id, embedding) "
                "VALUES (%s, %s, %s, %s, %s::vector) ON CONFLICT (tenant_id, user_id, collection, id) "
                "DO UPDATE SET embedding = excluded.embedding",
                [(*key, i, _literal(e)) for i, e in zip(ids, embeddings)],
            )

    def query(self, tenant_id: str, user_id: str, embedding: Vector, k: int) -> list[tuple[str, float]]:
        """The ``k`` nearest of one user's vectors, as (id, cosine similarity)."""
        if k <= 0:
            return []
        rows = self.store.query(
            "search vectors",
            "SELECT id, 1 - (embedding <=> %s::vector) AS similarity FROM record_embeddings "
            "WHERE tenant_id = %s AND user_id = %s AND collection = %s "
            "ORDER BY embedding <=> %s::vector LIMIT %s",
            (_literal(embedding), *self._key(tenant_id, user_id), _literal(embedding), k),
        )
        return [(row["id"], float(row["similarity"])) for row in rows]

    def vectors(self, tenant_id: str, user_id: str, ids: Sequence[str]) -> dict[str, Vector]:
        """The stored vectors of some of one user's ids (absent ones left out)."""
        if not ids:
            return {}
        rows = self.store.query(
            "read vectors",
            "SELECT id, embedding::text AS embedding FROM record_embeddings "
            "WHERE tenant_id = %s AND user_id = %s AND collection = %s AND id = ANY(%s)",
            (*self._key(tenant_id, user_id), list(ids)),
        )
        return {row["id"]: _parse(row["embedding"]) for row in rows}

    def count(self, tenant_id: str, user_id: str) -> int:
        """How many vectors one user has."""
        rows = self.store.query(
            "count vectors",
            "SELECT count(*) AS n FROM record_embeddings WHERE tenant_id = %s AND user_id = %s "
            "AND collection = %s",
            self._key(tenant_id, user_id),
        )
        return int(rows[0]["n"])

    def ids(self, tenant_id: str, user_id: str) -> set[str]:
        """Every id of one user."""
        rows = self.store.query(
            "list vector ids",
            "SELECT id FROM record_embeddings WHERE tenant_id = %s AND user_id = %s AND collection = %s",
            self._key(tenant_id, user_id),
        )
        return {row["id"] for row in rows}

    def delete(self, tenant_id: str, user_id: str, ids: Sequence[str]) -> None:
        """Delete some of one user's vectors."""
        if ids:
            with self.store.transaction("delete vectors") as conn:
                conn.execute(
                    "DELETE FROM record_embeddings WHERE tenant_id = %s AND user_id = %s "
                    "AND collection = %s AND id = ANY(%s)",
                    (*self._key(tenant_id, user_id), list(ids)),
                )

    def drop(self, tenant_id: str, user_id: str) -> None:
        """Delete one user's partition."""
        self.drop_collection(self.collection_name(tenant_id, user_id))

    def collection_names(self) -> list[str]:
        """The names of every partition of this index (this prefix, any user)."""
        rows: list[dict[str, Any]] = self.store.query(
            "list vector collections",
            "SELECT DISTINCT collection FROM record_embeddings WHERE starts_with(collection, %s) "
            "ORDER BY collection",
            (self.prefix + "-",),
        )
        return [row["collection"] for row in rows]

    def clear(self) -> None:
        """Delete every partition of this index (re-indexing)."""
        with self.store.transaction("clear vectors") as conn:
            conn.execute(
                "DELETE FROM record_embeddings WHERE starts_with(collection, %s)", (self.prefix + "-",)
            )

    def drop_collection(self, name: str) -> None:
        """Delete one partition by name (nothing if absent)."""
        with self.store.transaction("drop vector collection") as conn:
            conn.execute("DELETE FROM record_embeddings WHERE collection = %s", (name,))
