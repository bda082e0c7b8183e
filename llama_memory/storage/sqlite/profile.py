"""Profile rows (the :class:`~llama_memory.storage.sql.profile.ProfileRows` port) in SQLite.

One table per document (``profile_fields``, ``instruction_fields``: see
:data:`~llama_memory.storage.ports.profile.DOCUMENTS`) in the memory's SQLite file, created
by the migrations here; the reads and writes are
:class:`~llama_memory.storage.sql.profile.ProfileRows`' (shared with PostgreSQL).
"""

from __future__ import annotations

from ..sql.profile import ProfileRows
from .connection import SQLITE
from .store import SQLiteStore

#: The columns of a document's field rows: one row per value a field had (a removal has
#: no value).
_FIELD_COLUMNS = """
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        path TEXT NOT NULL,
        value_json TEXT,
        op TEXT NOT NULL,
        session_id TEXT,
        message_ids TEXT NOT NULL DEFAULT '[]',
        created_at REAL NOT NULL,
        superseded_at REAL"""

#: The profile's own schema in the memory's SQLite file (see ``SQLiteStore.ensure_schema``).
MIGRATIONS: tuple[str, ...] = (
    f"""
    CREATE TABLE profile_fields ({_FIELD_COLUMNS}
    );
    CREATE INDEX profile_fields_current ON profile_fields (tenant_id, user_id, superseded_at);
    CREATE INDEX profile_fields_by_path ON profile_fields (tenant_id, user_id, path);
    """,
    # 2: expiry (see llama_memory.core.types.Expiry); NULL: kept until forgotten.
    """
    ALTER TABLE profile_fields ADD COLUMN ttl REAL;
    ALTER TABLE profile_fields ADD COLUMN expires_at REAL;
    """,
)

#: The instructions document's table (same rows as the profile's; see
#: :data:`~llama_memory.storage.ports.profile.DOCUMENTS`), created whole.
INSTRUCTION_MIGRATIONS: tuple[str, ...] = (
    f"""
    CREATE TABLE instruction_fields ({_FIELD_COLUMNS},
        ttl REAL,
        expires_at REAL
    );
    CREATE INDEX instruction_fields_current ON instruction_fields (tenant_id, user_id, superseded_at);
    """,
)
#: Each document's migrations, applied under its own schema component name.
_MIGRATIONS = {"profile": MIGRATIONS, "instructions": INSTRUCTION_MIGRATIONS}


class SQLiteProfileRows(ProfileRows):
    """The profile rows of one :class:`SQLiteStore` (creates or migrates the table).

    Args:
        store: the memory's SQLite system of record; it provides the transactions.
        document: which document of the user these rows hold (a key of
            :data:`~llama_memory.storage.ports.profile.DOCUMENTS`): ``"profile"``, or
            ``"instructions"`` (procedural memory), each in its own table.
    """

    dialect = SQLITE

    def __init__(self, store: SQLiteStore, document: str = "profile") -> None:
        if not isinstance(store, SQLiteStore):
            raise TypeError(
                "the profile is kept in a SQLiteStore (or any implementation of "
                f"llama_memory.storage.sql.profile.ProfileRows), not {type(store).__name__} "
                f"{store!r}: pass the memory's store, e.g. SQLiteProfileRows(SQLiteStore('./memory'))"
            )
        self._open(store, document)
        store.ensure_schema(document, _MIGRATIONS[document])
