"""The PostgreSQL backend as one bundle: the store and its vectors (pgvector) in one
database, at a ``postgresql://`` URL or on a ``psycopg_pool.ConnectionPool``, and the parts
written once over SQL as PostgreSQL keeps them. Importing it needs the ``postgres`` extra.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional

from ...core.text import word_tokens
from ...core.types import Scope
from ..backend import Backend, Location, OpenBackend
from ..chroma import server_address
from ..ports import ChatLog, VectorIndex
from ..ports.profile import DOCUMENTS, ProfileChange
from ..sql.admin import AdminRows
from ..sql.dialect import owner
from ..sql.profile import CURRENT_COLUMNS, CURRENT_ROWS, ProfileRows
from ..sql.store import Storage
from ..sql.triples import MentionLink, TripleTimeline
from .dialect import POSTGRES
from .records import event_date_words
from .store import PostgresStore
from .vectors import PgVectorIndex

# The current rows of every document of one user (expiry left to the reader: each reads
# at its own time); parameters: tenant and user, once per document.
_CURRENT_OF_EVERY_DOCUMENT = POSTGRES.sql(
    "SELECT * FROM ("
    + " UNION ALL ".join(
        f"SELECT '{table}' AS doc, {CURRENT_COLUMNS}, expires_at FROM {table} WHERE {CURRENT_ROWS}"
        for table in DOCUMENTS.values()
    )
    + ") AS d ORDER BY id"
)


class PostgresProfileRows(ProfileRows):
    """The profile (or instructions) rows of one :class:`PostgresStore`; a ``get()`` reads
    every document's current rows in one round trip."""

    dialect = POSTGRES
    store: PostgresStore

    def __init__(self, store: PostgresStore, document: str = "profile") -> None:
        if not isinstance(store, PostgresStore):
            raise TypeError(
                f"PostgresProfileRows keeps the profile in a PostgresStore, not "
                f"{type(store).__name__} {store!r}: pass PostgresStore('postgresql://...')"
            )
        self._open(store, document)

    def current(self, scope: Scope, at: float) -> list[ProfileChange]:
        """Within one ``get()`` the first read fetches every document's current rows, and
        later reads (each retrieval reads the profile) take theirs from there until a
        transaction of this store object; expiry is applied at each read's own time."""
        ahead = self.store.read_ahead()
        if ahead is None:
            return super().current(scope, at)
        user = owner(scope, "the profile memory")
        key = ("current profile rows", self._table, user)
        if key not in ahead:
            every = self.store.query(f"read {self.document}", _CURRENT_OF_EVERY_DOCUMENT, user * len(DOCUMENTS))
            for table in DOCUMENTS.values():
                ahead[("current profile rows", table, user)] = [r for r in every if r["doc"] == table]
        return [self._to_change(row) for row in ahead[key] if row["expires_at"] is None or row["expires_at"] > at]


class PostgresTripleTimeline(TripleTimeline):
    """The triple timeline on a :class:`PostgresStore`: words searched with ``ts_rank_cd``
    over a generated ``tsvector``; deleting a triple cascades to its mentions."""

    dialect = POSTGRES
    # Mentions lead with the user's key (tables sharded by user) and point at the id.
    mentions = MentionLink(
        columns="tenant_id, user_id, triple_id", sources="tenant_id, user_id, id",
        key=("triple_id", "id"), order="seq", scoped=True,
    )  # fmt: skip

    def __init__(self, store: PostgresStore) -> None:
        if not isinstance(store, PostgresStore):
            raise TypeError(
                f"PostgresTripleTimeline keeps triples in a PostgresStore, not "
                f"{type(store).__name__} {store!r}: pass PostgresStore('postgresql://...')"
            )
        self.store = store

    def _insert_row(self, conn: Any, row: Mapping[str, Any], search_text: str) -> None:
        # The lexical entry is the generated tsvector column of search_text.
        self.dialect.insert(conn, "triples", {**row, "search_text": search_text})

    def _delete_where(self, conn: Any, condition: str, params: Sequence[Any]) -> list[Any]:
        # The mentions' foreign key cascades.
        statement = f"DELETE FROM triples WHERE {condition} RETURNING id, tenant_id, user_id"
        return self.dialect.execute(conn, statement, params).fetchall()

    def search_words(
        self, scope: Scope, query: str, k: int, include_history: bool
    ) -> list[tuple[str, float]]:
        """``ts_rank_cd`` of words OR-ed by ``websearch_to_tsquery`` (no user text is syntax)."""
        user = owner(scope, "the knowledge-triple store")
        words = list(dict.fromkeys(w for w in word_tokens(query) if w != "or"))
        if not words or k <= 0:
            return []
        current = "" if include_history else " AND valid_to IS NULL"
        rows = self.store.query(
            "search knowledge triples by words",
            "SELECT id, ts_rank_cd(tsv, q) AS score FROM triples, "
            "websearch_to_tsquery('english', %s) AS q "
            f"WHERE tenant_id = %s AND user_id = %s{current} AND tsv @@ q "
            "ORDER BY score DESC, seq LIMIT %s",
            (" or ".join(words), *user, k),
        )
        return [(r["id"], float(r["score"])) for r in rows]


#: Tables whose size :meth:`PostgresStoreAdmin.size_bytes` adds up (with their indexes).
TABLES = (
    "chat_messages", "records", "record_embeddings", "profile_fields", "instruction_fields",
    "triples", "triple_mentions", "jobs", "meta",
)  # fmt: skip


class PostgresStoreAdmin(AdminRows):
    """The admin rows of one PostgreSQL store (every table exists from the first migration)."""

    dialect = POSTGRES
    record_order = "seq"
    tables_on_first_use = False
    timeline_class = PostgresTripleTimeline

    def _record_extras(self, row: dict[str, Any]) -> dict[str, Any]:
        return {"event_date": event_date_words(row["event_time"])}

    def size_bytes(self) -> int:
        """Bytes the llama-memory tables take in the database, indexes included."""
        row = self._one(
            "measure tables",
            "SELECT coalesce(sum(pg_total_relation_size(to_regclass(t))), 0) AS n FROM unnest(?::text[]) AS t",
            (list(TABLES),),
        )
        return int(row["n"])

    def refresh_statistics(self) -> None:
        """ANALYZE after a bulk import (until autovacuum does, the planner may walk user rows)."""
        self.store.query("analyze the tables", "ANALYZE")


class ServerStore(OpenBackend):
    """The parts on one opened :class:`PostgresStore` (``given``: the URL or pool)."""

    timeline_type = PostgresTripleTimeline
    profile_type = PostgresProfileRows
    admin_type = PostgresStoreAdmin

    path: Optional[str] = None
    #: The vectors are rows of the same database, written in the same transaction.
    index_drifts = False

    def __init__(self, store: PostgresStore, given: Any = None) -> None:
        self.store: Storage = store
        self._postgres = store
        self._given = given

    @property
    def location(self) -> str:
        return str(self._postgres.location)

    @property
    def settings(self) -> dict[str, Any]:
        """The URL without its password; a pool as given."""
        return {"store": self._postgres.url if isinstance(self._given, str) else self._given}

    def chat_log(self, scope: Scope) -> Optional[ChatLog]:
        return self._postgres.chat_log(scope)

    def vector_index(self, collection: str) -> VectorIndex:
        """pgvector rows in the store's database."""
        return PgVectorIndex(self._postgres, collection)

    def sizes(self) -> dict[str, int]:
        size = PostgresStoreAdmin(self._postgres).size_bytes()
        return {"postgres": size, "total": size}


class ServerBackend(Backend):
    """PostgreSQL with pgvector (see :class:`ServerStore`)."""

    name = "PostgreSQL"
    copy_target = True
    store_type = PostgresStore

    def open(self, location: Location, *, for_admin: bool = False) -> ServerStore:
        """Migrates the schema; ValueError for dense-index options, TypeError for a store object."""
        given = location.store
        if location.chroma_url is not None or location.chroma_client is not None:
            if location.chroma_url is not None:
                server_address(location.chroma_url)  # a malformed URL is named as such first
            raise ValueError(
                "a PostgreSQL store keeps its vectors in the same database (pgvector): "
                "drop chroma_url / chroma_client (--chroma-url)"
            )
        if isinstance(given, PostgresStore):
            raise TypeError(
                "store takes a PostgreSQL URL or a psycopg_pool.ConnectionPool, not a PostgresStore "
                "(a memory opens its own): to share connections among memories, or to pass pool "
                "settings such as prepare_threshold, pass a pool, e.g. "
                "ConnectionPool(url, kwargs={'prepare_threshold': None})"
            )
        return ServerStore(PostgresStore(given), given)

    def on(self, store: Storage, location: Location = Location()) -> ServerStore:
        if not isinstance(store, PostgresStore):
            raise TypeError(f"the PostgreSQL backend's parts need a PostgresStore, not {type(store).__name__}")
        return ServerStore(store)

    def describe_sizes(self, sizes: dict[str, int], size: Any) -> str:
        return f"in the database: {size(sizes['postgres'])} (tables and their indexes)"

    def encrypt(self, where: Any, key: str, *, keep_backup: bool = False, source: str = "the key given") -> Any:
        raise ValueError(
            "encrypt turns a SQLite memory directory into an encrypted one; a PostgreSQL "
            "store is encrypted at rest by the server's disk encryption, and in transit by "
            "TLS (docs/security.md)"
        )


#: The bundle the registry hands out for a PostgreSQL URL or pool.
BACKEND = ServerBackend()
