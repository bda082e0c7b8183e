"""The PostgreSQL backend as one bundle: the system of record and its vectors (pgvector)
in one database, at a ``postgresql://`` URL or on a ``psycopg_pool.ConnectionPool``.

:data:`BACKEND` is what the registry hands out for such a ``store=``; importing this
module needs the ``postgres`` extra (the registry imports it only for such a store).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Optional

from ...core.types import Scope
from ..backend import Location, OpenBackend
from ..chroma import server_address
from ..ports import ChatLog, VectorIndex
from ..sql.admin import AdminRows
from ..sql.store import Storage
from .dialect import POSTGRES
from .profile import PostgresProfileRows
from .records import _event_date
from .store import PostgresStore
from .triples import PostgresTripleTimeline
from .vectors import PgVectorIndex

#: Tables whose size :meth:`PostgresStoreAdmin.size_bytes` adds up (with their indexes).
TABLES = (
    "chat_messages", "records", "record_embeddings", "profile_fields", "instruction_fields",
    "triples", "triple_mentions", "jobs", "meta",
)  # fmt: skip


class PostgresStoreAdmin(AdminRows):
    """The admin rows (:class:`~llama_memory.storage.sql.admin.AdminRows`) of one
    PostgreSQL store: every table exists from the first migration on, a record row
    carries its event date in words for the full-text index, the tables' size is
    measured, and a bulk import is followed by ``ANALYZE``."""

    dialect = POSTGRES
    record_order = "seq"
    tables_on_first_use = False
    timeline_class = PostgresTripleTimeline

    def _record_extras(self, row: dict[str, Any]) -> dict[str, Any]:
        return {"event_date": _event_date(row["event_time"])}

    def size_bytes(self) -> int:
        """Bytes the llama-memory tables take in the database, indexes included."""
        row = self._one(
            "measure tables",
            "SELECT coalesce(sum(pg_total_relation_size(to_regclass(t))), 0) AS n FROM unnest(?::text[]) AS t",
            (list(TABLES),),
        )
        return int(row["n"])

    def refresh_statistics(self) -> None:
        """ANALYZE the store's tables, after a bulk import: until autovacuum's first
        ANALYZE (up to a minute), the planner walks a user's rows where an index serves
        (docs/howto/postgres.md, "The fifth round")."""
        self.store.query("analyze the tables", "ANALYZE")


class ServerStore(OpenBackend):
    """The PostgreSQL backend's parts on one opened :class:`PostgresStore`.

    Args:
        store: the store.
        given: the ``store=`` value it was opened from (a URL, a pool), or None.
    """

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
        """``host:port/dbname`` (no password), or the pool's name."""
        return str(self._postgres.location)

    @property
    def settings(self) -> dict[str, Any]:
        """The URL without its password; a pool as given (a live object, marked by
        ``to_dict``)."""
        return {"store": self._postgres.url if isinstance(self._given, str) else self._given}

    def chat_log(self, scope: Scope) -> Optional[ChatLog]:
        """The conversation's log in the database."""
        return self._postgres.chat_log(scope)

    def vector_index(self, collection: str) -> VectorIndex:
        """pgvector rows of one kind of collection, in the store's database."""
        return PgVectorIndex(self._postgres, collection)

    def sizes(self) -> dict[str, int]:
        """``postgres``: bytes the tables take with their indexes; ``total`` the same."""
        size = PostgresStoreAdmin(self._postgres).size_bytes()
        return {"postgres": size, "total": size}

    def drop_dense(self, owner: tuple[str, str], collections: Sequence[str]) -> None:
        """Nothing: the vectors are rows that ``delete_user`` removed in its transaction."""


class ServerBackend:
    """PostgreSQL with pgvector (see :class:`ServerStore`)."""

    name = "PostgreSQL"
    copy_target = True

    def open(self, location: Location, *, for_admin: bool = False) -> ServerStore:
        """Open the store at ``location.store`` (its schema is created or migrated now).
        ValueError for a dense-index option (the vectors are in the database), TypeError
        for a store object instead of a URL or pool."""
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

    def owns(self, store: Any) -> bool:
        """Whether ``store`` is a :class:`PostgresStore`."""
        return isinstance(store, PostgresStore)

    def on(self, store: Storage, location: Location = Location()) -> ServerStore:
        """The parts on an open store (``location`` has no options for this backend)."""
        if not isinstance(store, PostgresStore):
            raise TypeError(f"the PostgreSQL backend's parts need a PostgresStore, not {type(store).__name__}")
        return ServerStore(store)

    def missing(self, where: Any) -> Optional[str]:
        """None: the database exists, and opening makes its tables."""
        return None

    def describe_sizes(self, sizes: dict[str, int], size: Any) -> str:
        """The bytes the tables take in the database."""
        return f"in the database: {size(sizes['postgres'])} (tables and their indexes)"

    def encrypt(self, where: Any, key: str, *, keep_backup: bool = False, source: str = "the key given") -> Any:
        """Refused: a PostgreSQL store is encrypted at rest by its server and disks."""
        raise ValueError(
            "encrypt turns a SQLite memory directory into an encrypted one; a PostgreSQL "
            "store is encrypted at rest by the server's disk encryption, and in transit by "
            "TLS (docs/security.md)"
        )

    @contextmanager
    def undo_failed_creation(self, where: Any) -> Iterator[None]:
        """Nothing to undo: each batch is one transaction; there are no files."""
        yield


#: The bundle the registry hands out for a PostgreSQL URL or pool.
BACKEND = ServerBackend()
