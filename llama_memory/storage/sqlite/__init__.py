"""The SQLite backend: one SQLite file (WAL mode) per memory directory, the system of
record every other index (Chroma) is derived from. :class:`SQLiteStore` implements the
ports of :mod:`llama_memory.storage.ports` over the shared :mod:`llama_memory.storage.sql`.
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
