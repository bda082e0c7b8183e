"""The SQLite store: every part (chat, records, lexical index, vector copies) on one
connection, and what spans them (forgetting a user)."""

from __future__ import annotations

import sqlite3
from collections.abc import Hashable
from typing import TYPE_CHECKING, Optional

from ...types import Scope
from ..ports.base import Storage, user_meta_infix
from ..ports.records import PendingRecord
from .chat import ChatTables, SQLiteChatLog
from .jobs import JobTables
from .lexical import LexicalTables
from .records import RecordTables
from .vectors import VectorTables

# Rows that belong to a user through a row of another table, with no trigger to delete
# them with it: deleted first when the user is (see SQLiteStore.delete_user).
_USER_DEPENDENTS: dict[str, tuple[str, ...]] = {
    "triples": (
        "DELETE FROM triples_fts WHERE rowid IN "
        "(SELECT seq FROM triples WHERE tenant_id = ? AND user_id = ?)",
        "DELETE FROM triple_mentions WHERE triple_seq IN "
        "(SELECT seq FROM triples WHERE tenant_id = ? AND user_id = ?)",
    ),
}


class SQLiteStore(ChatTables, RecordTables, LexicalTables, VectorTables, JobTables):
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
    re-raised as :class:`~llama_memory.errors.StorageError` naming the file.

    It implements every port of :mod:`llama_memory.storage.ports` (the
    :class:`~llama_memory.storage.ports.Storage` facade), one part per module of this
    package.
    """

    def chat_log(self, scope: Scope) -> SQLiteChatLog:
        """The shared log of the scope's conversation."""
        return SQLiteChatLog(self, scope)

    def change_token(self) -> Hashable:
        """Changes when another connection commits to the file (``PRAGMA data_version``)."""
        return self.data_version()

    def purge_expired(self, at: float) -> list[PendingRecord]:
        """Delete every record of every source expired at ``at``; return them."""
        with self.transaction("purge expired records") as conn:
            sources = [row[0] for row in conn.execute("SELECT DISTINCT source FROM records")]
            return [gone for source in sources for gone in self.delete_expired(source, at)]

    def delete_user(self, scope: Scope, source: Optional[str] = None) -> list[str]:
        """Delete one user's records of ``source``; return their ids.

        Without ``source``: the user from every table of the file, whichever sources
        the caller has open (the right to be forgotten): records (their lexical index
        rows and vector copies go with them, by trigger), chat history of every
        session, and every other table with per-user rows (triples with their
        mentions and lexical index, profile fields and their history). Returns the
        deleted record ids.
        """
        user = scope.require_user("forgetting a user")
        source_clause, params = ("", ()) if source is None else (" AND source = ?", (source,))
        owner = (scope.tenant_id, user)
        with self.transaction("delete user") as conn:
            self._word_counts.clear()  # the counts shrink with the deleted rows
            rows = conn.execute(
                "SELECT id FROM records WHERE tenant_id = ? AND user_id = ?" + source_clause,
                (*owner, *params),
            ).fetchall()
            conn.execute(
                "DELETE FROM records WHERE tenant_id = ? AND user_id = ?" + source_clause,
                (*owner, *params),
            )
            if source is None:
                for table in _user_tables(conn):
                    for statement in _USER_DEPENDENTS.get(table, ()):
                        conn.execute(statement, owner)
                    conn.execute(f'DELETE FROM "{table}" WHERE tenant_id = ? AND user_id = ?', owner)
                conn.execute("DELETE FROM meta WHERE instr(key, ?) > 0", (user_meta_infix(*owner),))
        return [row["id"] for row in rows]


def _user_tables(conn: sqlite3.Connection) -> list[str]:
    """The tables of the file that hold per-user rows (a ``tenant_id`` and a ``user_id``
    column), whichever component created them."""
    names = [
        row[0]
        for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        if not row[0].startswith("sqlite_")
    ]
    return [
        name
        for name in names
        if {"tenant_id", "user_id"} <= {col[1] for col in conn.execute(f'PRAGMA table_info("{name}")')}
    ]



if TYPE_CHECKING:  # mypy checks here that the store implements every port

    def _implements_the_ports(store: SQLiteStore) -> Storage:
        return store
