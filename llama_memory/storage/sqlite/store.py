"""The SQLite store: every part (chat, records, lexical index, vector copies, jobs) on
one connection."""

from __future__ import annotations

from collections.abc import Hashable

from ...core.types import Scope
from ..sql.store import Storage
from .chat import ChatTables, SQLiteChatLog
from .jobs import JobTables
from .lexical import LexicalTables
from .records import RecordTables

# Rows that belong to a user through a row of another table, with no trigger to delete
# them with it: deleted first when the user is (see RecordStore.delete_user).
_USER_DEPENDENTS: dict[str, tuple[str, ...]] = {
    "triples": (
        "DELETE FROM triples_fts WHERE rowid IN "
        "(SELECT seq FROM triples WHERE tenant_id = ? AND user_id = ?)",
        "DELETE FROM triple_mentions WHERE triple_seq IN "
        "(SELECT seq FROM triples WHERE tenant_id = ? AND user_id = ?)",
    ),
}


class SQLiteStore(ChatTables, RecordTables, LexicalTables, JobTables, Storage):
    """A thread-safe SQLite system of record.

    Args:
        path: directory of the memory (the file :data:`DB_FILENAME` is created in
            it), or ``None`` for a private in-memory database.
        timeout: seconds a statement waits for another process's write lock.
        driver: how the file is opened: plain ``sqlite3`` or SQLCipher with a key
            (:func:`~llama_memory.storage.sqlite.driver.sqlite_driver`), and whether
            the files are owner-only (the default: a ``0700`` directory, ``0600``
            files). Default: SQLCipher when ``LLAMA_MEMORY_ENCRYPTION_KEY`` is set.

    One connection is shared by all threads behind a lock; WAL mode and a busy
    timeout let several processes use one file. Every error of the driver is
    re-raised as :class:`~llama_memory.core.errors.StorageError` naming the file.

    It implements every port of :mod:`llama_memory.storage.ports` (the
    :class:`~llama_memory.storage.sql.store.Storage` facade), one part per module of this
    package.
    """

    user_dependents = _USER_DEPENDENTS

    def chat_log(self, scope: Scope) -> SQLiteChatLog:
        """The shared log of the scope's conversation."""
        return SQLiteChatLog(self, scope)

    def change_token(self) -> Hashable:
        """Changes when another connection commits to the file (``PRAGMA data_version``)."""
        return self.data_version()

