"""The dense index in PostgreSQL (pgvector, table ``record_embeddings``): in the store's
database, so its writes join the open transaction and forgetting a user deletes them."""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Sequence
from typing import Any

import numpy as np

from ..ports.vectors import Vector
from .connection import Connection
from .store import PostgresStore

#: Users with at least this many vectors in a collection are searched through the HNSW
#: index, smaller ones exactly: the two meet near 10,000 rows (docs/benchmarks.md,
#: "PostgreSQL", 384 dimensions); below it, exact is as fast and its recall is 1.
HNSW_THRESHOLD = 10_000

#: ``hnsw.ef_search`` of a search (pgvector's default is 40): the candidate list of the
#: graph walk; with iterative scan, the size of each batch of candidates.
EF_SEARCH = 100

#: ``hnsw.max_scan_tuples`` of a search (pgvector's default is 20,000): how many index
#: tuples an iterative scan may visit before it stops. A user holding 1% of the table
#: needs about ef_search / 1% of them; if it stops short, the exact search takes over.
MAX_SCAN_TUPLES = 50_000


def _literal(vector: Vector) -> str:
    """pgvector's text form of a vector, ``[0.1,0.2]``."""
    return "[" + ",".join(repr(float(x)) for x in vector) + "]"


def _floats(vector: Vector) -> list[float]:
    """A vector as a ``float8[]`` query parameter in binary (text took 0.4 ms at 384 dims);
    the same float4 values either way."""
    return list(np.asarray(vector, dtype=np.float64).tolist())


def _decode(blob: bytes) -> np.ndarray:
    """A float32 vector from pgvector's binary form (int16 dimension and reserved word,
    then big-endian float4): exact, where parsing text took 0.2 ms."""
    return np.frombuffer(blob, dtype=">f4", offset=4).astype(np.float32)


class PgVectorIndex:
    """One collection of vectors in a :class:`PostgresStore`, rows per (tenant, user).

    Args:
        store: the store whose database (and open transaction) it writes to.
        prefix: names this index's collections, so that several share the table.
        hnsw_threshold: users with at least this many vectors are searched through HNSW,
            smaller ones exactly (:data:`HNSW_THRESHOLD`).
        ef_search: pgvector's ``hnsw.ef_search`` for those searches.
        max_scan_tuples: pgvector's ``hnsw.max_scan_tuples`` (:data:`MAX_SCAN_TUPLES`).

    A large user is searched through the HNSW index of the query's dimension with an
    iterative scan, re-sorted by exact distance; when that returns fewer than ``k`` rows
    of a user who has them, the exact search answers (docs/howto/postgres.md).
    """

    def __init__(
        self, store: PostgresStore, prefix: str, *, hnsw_threshold: int = HNSW_THRESHOLD,
        ef_search: int = EF_SEARCH, max_scan_tuples: int = MAX_SCAN_TUPLES
    ) -> None:
        if hnsw_threshold < 1:
            raise ValueError(f"hnsw_threshold must be at least 1, got {hnsw_threshold}")
        if not 1 <= ef_search <= 1000:
            raise ValueError(f"ef_search must be between 1 and 1000 (pgvector's range), got {ef_search}")
        self.store = store
        self.prefix = prefix
        self.hnsw_threshold = hnsw_threshold
        if max_scan_tuples < 1:
            raise ValueError(f"max_scan_tuples must be at least 1, got {max_scan_tuples}")
        self.ef_search = ef_search
        self.max_scan_tuples = max_scan_tuples
        self._indexed_dimensions: set[int] = set()
        # Dimensions whose index writes need not look for again (there, or left to ensure_hnsw).
        self._checked_dimensions: set[int] = set()

    def collection_name(self, tenant_id: str, user_id: str) -> str:
        digest = hashlib.sha256(f"{tenant_id}\x1f{user_id}".encode("utf-8")).hexdigest()[:32]
        return f"{self.prefix}-{digest}"

    def _key(self, tenant_id: str, user_id: str) -> tuple[str, str, str]:
        return tenant_id, user_id, self.collection_name(tenant_id, user_id)

    def upsert(self, tenant_id: str, user_id: str, ids: Sequence[str], embeddings: Sequence[Vector]) -> None:
        """Joins the store's open transaction."""
        if len(ids) != len(embeddings):
            raise ValueError(f"{len(ids)} ids but {len(embeddings)} embeddings")
        if not ids:
            return
        key = self._key(tenant_id, user_id)
        with self.store.transaction("write vectors") as conn:
            for dimension in {len(e) for e in embeddings} - self._checked_dimensions:
                self._ensure_hnsw(conn, dimension)
            # xmax = 0 tells a new row from a replaced one: the count grows by new rows only.
            rows = conn.execute(
                "INSERT INTO record_embeddings (tenant_id, user_id, collection, id, embedding) "
                "SELECT %s, %s, %s, i, e::vector FROM unnest(%s::text[], %s::text[]) AS v(i, e) "
                "ON CONFLICT (tenant_id, user_id, collection, id) "
                "DO UPDATE SET embedding = excluded.embedding RETURNING (xmax = 0) AS inserted",
                (*key, list(ids), [_literal(e) for e in embeddings]),
            ).fetchall()
            self._add_to_count(conn, key, sum(1 for row in rows if row["inserted"]))

    @staticmethod
    def _add_to_count(conn: Connection, key: tuple[str, str, str], delta: int) -> None:
        if delta:
            conn.execute(
                "INSERT INTO vector_counts (tenant_id, user_id, collection, n) VALUES (%s, %s, %s, %s) "
                "ON CONFLICT (tenant_id, user_id, collection) DO UPDATE SET n = vector_counts.n + excluded.n",
                (*key, delta),
            )

    @staticmethod
    def hnsw_index_name(dimension: int) -> str:
        """The name of the HNSW index of vectors of ``dimension``."""
        return f"record_embeddings_hnsw_{int(dimension)}"

    @classmethod
    def hnsw_index_sql(cls, dimension: int, *, concurrently: bool = False) -> str:
        """The statement creating the HNSW index of ``dimension`` (``concurrently``: built
        without blocking writers)."""
        d = int(dimension)
        if not 1 <= d <= 2000:
            raise ValueError(f"pgvector's HNSW indexes vectors of 1 to 2000 dimensions, not {dimension}")
        # An expression index, partial on the dimension, not a typed column: the table holds
        # every collection, whose models may differ, and an existing store needs no rewrite.
        # Searches name the same expression and predicate; exact searches cannot use it.
        return (
            f"CREATE INDEX {'CONCURRENTLY ' if concurrently else ''}IF NOT EXISTS "
            f"{cls.hnsw_index_name(d)} ON record_embeddings USING hnsw "
            f"((embedding::vector({d})) vector_cosine_ops) WHERE vector_dims(embedding) = {d}"
        )

    def ensure_hnsw(self, dimension: int) -> None:
        """Create the HNSW index of ``dimension`` over the rows there (blocks writers)."""
        with self.store.transaction("create the HNSW index") as conn:
            self._ensure_hnsw(conn, dimension, build=True)

    def _ensure_hnsw(self, conn: Connection, dimension: int, build: bool = False) -> None:
        """Create a new dimension's index, empty, as its first vector is written; never over
        existing rows (minutes at 100k rows): searched exactly until :meth:`ensure_hnsw`."""
        if self._has_hnsw(conn, dimension):
            self._checked_dimensions.add(dimension)
            return
        name = self.hnsw_index_name(dimension)
        # Workers writing a new dimension at once would collide creating the index.
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (name,))
        if not build:
            rows = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM record_embeddings WHERE vector_dims(embedding) = %s) AS held",
                (int(dimension),),
            ).fetchone()
            if rows is not None and rows["held"]:
                self.store.after_commit(lambda: self._checked_dimensions.add(dimension))
                return
        conn.execute(self.hnsw_index_sql(dimension))
        self.store.after_commit(lambda: self._indexed_dimensions.add(dimension))
        self.store.after_commit(lambda: self._checked_dimensions.add(dimension))

    def query(
        self, tenant_id: str, user_id: str, embedding: Vector, k: int, exclude: Collection[str] = ()
    ) -> list[tuple[str, float]]:
        """Exact below ``hnsw_threshold`` vectors, else through HNSW."""
        if k <= 0:
            return []
        key = self._key(tenant_id, user_id)
        skip, left_out = ("AND NOT (id = ANY(%(x)s::text[])) ", {"x": list(exclude)}) if exclude else ("", {})
        # Most users are small: their count and their exact search in one statement (one
        # round trip and snapshot, where a transaction took five). The search runs only
        # when the count says exact; a large user's count sends it to the HNSW path below.
        # The query vector is a sub-select: converted once, not for every row (1.4 vs 4.2 ms).
        rows = self.store.query(
            "search vectors",
            "SELECT c.n, e.id, e.similarity FROM (SELECT coalesce((SELECT n FROM vector_counts "
            "WHERE tenant_id = %(t)s AND user_id = %(u)s AND collection = %(c)s), 0) AS n) AS c "
            "LEFT JOIN LATERAL (SELECT id, 1 - (embedding <=> (SELECT %(q)b::float8[]::vector)) AS similarity "
            "FROM record_embeddings WHERE (c.n < %(h)s OR c.n <= %(k)s) AND tenant_id = %(t)s "
            f"AND user_id = %(u)s AND collection = %(c)s {skip}ORDER BY embedding <=> (SELECT %(q)b::float8[]::vector) "
            "LIMIT %(k)s) "
            "AS e ON true",
            {"t": key[0], "u": key[1], "c": key[2], "q": _floats(embedding), "h": self.hnsw_threshold, "k": k,
             **left_out},
        )
        if not self._large(int(rows[0]["n"]), k):
            return [(row["id"], float(row["similarity"])) for row in rows if row["id"] is not None]
        query = _literal(embedding)
        with self.store.transaction("search vectors") as conn:
            row = conn.execute(
                "SELECT n FROM vector_counts WHERE tenant_id = %s AND user_id = %s AND collection = %s", key
            ).fetchone()
            held = int(row["n"]) if row else 0
            if self._large(held, k) and self._has_hnsw(conn, len(embedding)):
                found = self._approximate(conn, key, query, len(embedding), k, exclude)
                if len(found) >= k:
                    return found
            rows = conn.execute(
                "SELECT id, 1 - (embedding <=> %(q)s::vector) AS similarity FROM record_embeddings "
                f"WHERE tenant_id = %(t)s AND user_id = %(u)s AND collection = %(c)s {skip}"
                "ORDER BY embedding <=> %(q)s::vector LIMIT %(k)s",
                {"q": query, "t": key[0], "u": key[1], "c": key[2], "k": k, **left_out},
            ).fetchall()
        return [(row["id"], float(row["similarity"])) for row in rows]

    def _large(self, held: int, k: int) -> bool:
        return held >= self.hnsw_threshold and held > k

    def _has_hnsw(self, conn: Connection, dimension: int) -> bool:
        if dimension not in self._indexed_dimensions:
            present = conn.execute(
                "SELECT to_regclass(%s) IS NOT NULL AS present", (self.hnsw_index_name(dimension),)
            ).fetchone()
            if not (present and present["present"]):
                return False  # an upgraded store before its index is built: exact
            self._indexed_dimensions.add(dimension)
        return True

    def _approximate(
        self, conn: Connection, key: tuple[str, str, str], query: str, dimension: int, k: int,
        exclude: Collection[str] = (),
    ) -> list[tuple[str, float]]:
        """One user's ``k`` nearest through the HNSW index of ``dimension``, re-sorted."""
        candidates = max(2 * k, 20)
        # set_config(..., true) is SET LOCAL. enable_sort off: the planner would often
        # prefer the btree and a sort of the user's rows (what this path avoids).
        conn.execute(
            "SELECT set_config('hnsw.iterative_scan', 'relaxed_order', true), "
            "set_config('enable_sort', 'off', true), "
            "set_config('hnsw.ef_search', %s, true), set_config('hnsw.max_scan_tuples', %s, true)",
            (str(max(self.ef_search, candidates)), str(self.max_scan_tuples)),
        )
        d = int(dimension)
        # relaxed_order returns rows nearly in order: take more candidates than asked
        # and sort them by exact distance (MATERIALIZED keeps the walk's LIMIT inside).
        skip = "AND NOT (id = ANY(%s::text[])) " if exclude else ""
        rows = conn.execute(
            f"WITH candidates AS MATERIALIZED (SELECT id, embedding::vector({d}) <=> %s::vector({d}) "
            "AS distance FROM record_embeddings WHERE tenant_id = %s AND user_id = %s "
            f"AND collection = %s AND vector_dims(embedding) = {d} {skip}"
            f"ORDER BY embedding::vector({d}) <=> %s::vector({d}) LIMIT %s) "
            "SELECT id, 1 - distance AS similarity FROM candidates ORDER BY distance LIMIT %s",
            (query, *key, *([list(exclude)] if exclude else []), query, candidates, k),
        ).fetchall()
        # Inside a caller's longer transaction the settings would outlive this search.
        conn.execute("RESET enable_sort; RESET hnsw.iterative_scan")
        return [(row["id"], float(row["similarity"])) for row in rows]

    def vectors(self, tenant_id: str, user_id: str, ids: Sequence[str]) -> dict[str, Vector]:
        """Decoded from the binary form."""
        if not ids:
            return {}
        rows = self.store.query(
            "read vectors",
            "SELECT id, vector_send(embedding) AS embedding FROM record_embeddings "
            "WHERE tenant_id = %s AND user_id = %s AND collection = %s AND id = ANY(%s)",
            (*self._key(tenant_id, user_id), list(ids)),
        )
        return {row["id"]: _decode(row["embedding"]) for row in rows}

    def count(self, tenant_id: str, user_id: str) -> int:
        """The count kept with every write."""
        rows = self.store.query(
            "count vectors",
            "SELECT n FROM vector_counts WHERE tenant_id = %s AND user_id = %s AND collection = %s",
            self._key(tenant_id, user_id),
        )
        return int(rows[0]["n"]) if rows else 0

    def ids(self, tenant_id: str, user_id: str) -> set[str]:
        rows = self.store.query(
            "list vector ids",
            "SELECT id FROM record_embeddings WHERE tenant_id = %s AND user_id = %s AND collection = %s",
            self._key(tenant_id, user_id),
        )
        return {row["id"] for row in rows}

    def delete(self, tenant_id: str, user_id: str, ids: Sequence[str]) -> None:
        if ids:
            key = self._key(tenant_id, user_id)
            with self.store.transaction("delete vectors") as conn:
                deleted = conn.execute(
                    "DELETE FROM record_embeddings WHERE tenant_id = %s AND user_id = %s "
                    "AND collection = %s AND id = ANY(%s) RETURNING id",
                    (*key, list(ids)),
                ).fetchall()
                self._add_to_count(conn, key, -len(deleted))

    def drop(self, tenant_id: str, user_id: str) -> None:
        self.drop_collection(self.collection_name(tenant_id, user_id))

    def collection_names(self) -> list[str]:
        """This prefix's partitions, of any user."""
        rows: list[dict[str, Any]] = self.store.query(
            "list vector collections",
            "SELECT DISTINCT collection FROM record_embeddings WHERE starts_with(collection, %s) "
            "ORDER BY collection",
            (self.prefix + "-",),
        )
        return [row["collection"] for row in rows]

    def clear(self) -> None:
        with self.store.transaction("clear vectors") as conn:
            for table in ("record_embeddings", "vector_counts"):
                conn.execute(f"DELETE FROM {table} WHERE starts_with(collection, %s)", (self.prefix + "-",))

    def drop_collection(self, name: str) -> None:
        with self.store.transaction("drop vector collection") as conn:
            for table in ("record_embeddings", "vector_counts"):
                conn.execute(f"DELETE FROM {table} WHERE collection = %s", (name,))
