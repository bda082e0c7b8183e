"""The SQLite backend: the system of record, one SQLite file (WAL mode) per memory directory.

Everything a memory knows is written here first and committed; the dense index
(Chroma) is derived from these rows and can be rebuilt from them. The rows:

- ``chat_messages``: each conversation's messages, losslessly as JSON, so a new
  process resumes a session where the last one stopped (:mod:`.chat`);
- ``records``: long-term memory records of every source, with provenance
  (tenant, user, session, message ids, event and ingestion time) and an
  ``indexed`` flag that says whether the dense index has caught up with them
  (:mod:`.records`), their FTS5 index (:mod:`.store`) and vector copies
  (:mod:`.vectors`);
- ``jobs``: the job queue (:mod:`.jobs`).

:class:`SQLiteStore` implements every port of :mod:`llama_memory.storage.ports`.
The schema version is kept in ``PRAGMA user_version``; :data:`MIGRATIONS` is the
ordered list of steps applied on open, so a store written by an older release
opens in a newer one.
"""

from ...core.text import content_hash, normalize_text
from ..ports.records import NewRecord, PendingRecord
from ..sql.dialect import ALIVE_SQL
from .connection import DB_FILENAME, memory_path, store_exists
from .schema import JOB_MIGRATIONS, MIGRATIONS, SESSION_ORDER_MIGRATIONS, sql_statements
from .store import (
    LEXICAL_POSTINGS_BUDGET,
    MAX_TERM_SHARE,
    PRUNE_FROM_RECORDS,
    ChatCursor,
    ChatRows,
    SQLiteChatLog,
    SQLiteStore,
    fts_query,
    fts_words,
)

__all__ = [
    "ALIVE_SQL",
    "DB_FILENAME",
    "JOB_MIGRATIONS",
    "LEXICAL_POSTINGS_BUDGET",
    "MAX_TERM_SHARE",
    "MIGRATIONS",
    "PRUNE_FROM_RECORDS",
    "SESSION_ORDER_MIGRATIONS",
    "ChatCursor",
    "ChatRows",
    "NewRecord",
    "PendingRecord",
    "SQLiteChatLog",
    "SQLiteStore",
    "content_hash",
    "fts_query",
    "fts_words",
    "memory_path",
    "normalize_text",
    "sql_statements",
    "store_exists",
]
