"""The SQLite backend: the system of record, one SQLite file (WAL mode) per memory directory.

Everything a memory knows is written here first and committed (chat messages, records
with their FTS5 index and vector copies, profile rows, triples, jobs); the dense index
(Chroma) is derived from these rows and can be rebuilt from them. :class:`SQLiteStore`
implements every port of :mod:`llama_memory.storage.ports` (the algorithms shared with
PostgreSQL are :mod:`llama_memory.storage.sql`'s). The schema version is kept in
``PRAGMA user_version``; :data:`MIGRATIONS` is the ordered list of steps applied on open,
so a store written by an older release opens in a newer one.
"""

from ...core.text import content_hash, normalize_text
from ..ports.records import NewRecord
from .connection import DB_FILENAME
from .schema import MIGRATIONS, sql_statements
from .store import PRUNE_FROM_RECORDS, SQLiteChatLog, SQLiteStore, fts_query

__all__ = [
    "DB_FILENAME",
    "MIGRATIONS",
    "PRUNE_FROM_RECORDS",
    "NewRecord",
    "SQLiteChatLog",
    "SQLiteStore",
    "content_hash",
    "fts_query",
    "normalize_text",
    "sql_statements",
]
