"""The SQLite store: every part (chat, records, lexical index, vector copies, jobs) on
one connection; what SQLite's chat history, records and jobs do their own way is here
(the chat history: each conversation's messages, losslessly as JSON, in commit order,
shared by every reader of the file)."""

from __future__ import annotations

import sqlite3
from collections.abc import Hashable, Sequence
from typing import TYPE_CHECKING, NamedTuple, Optional

if TYPE_CHECKING:
    from llama_index.core.base.llms.types import ChatMessage

from ...core.types import Scope
from ..codec import load_message
from ..ports.chat import ChatLogChanges
from ..sql.chat import SQLChatLog, SQLChatTables, conversation_key, replaced
from ..sql.store import Storage
from .connection import SQLiteConnection
from .lexical import LexicalTables
from .schema import JOB_MIGRATIONS, SESSION_ORDER_MIGRATIONS


class ChatRows(NamedTuple):
    """Messages of one conversation and its bounds: the sequence numbers of its first
    (None when it is empty) and last (0 when empty) stored messages."""

    messages: list[ChatMessage]
    first: Optional[int]
    last: int


class ChatTables(SQLiteConnection, SQLChatTables):
    """The chat history part of the store (table ``chat_messages``)."""

    def load_chat(self, scope: Scope) -> list[ChatMessage]:
        """The stored messages of one conversation, oldest first."""
        rows = self.query(
            "load chat history",
            "SELECT message_json FROM chat_messages "
            "WHERE tenant_id = ? AND user_id = ? AND session_id = ? ORDER BY seq",
            conversation_key(scope),
        )
        return [load_message(row["message_json"]) for row in rows]

    def append_chat(self, scope: Scope, messages: Sequence[ChatMessage]) -> None:
        """Append messages to one conversation, in one transaction."""
        with self.transaction("append chat history") as conn:
            self._insert_chat(conn, scope, messages)

    def replace_chat(self, scope: Scope, messages: Sequence[ChatMessage]) -> None:
        """Replace one conversation's messages, atomically."""
        with self.transaction("replace chat history") as conn:
            self._delete_chat(conn, scope)
            self._insert_chat(conn, scope, messages)

    def chat_since(self, scope: Scope, after: int) -> ChatRows:
        """One conversation's messages stored after sequence number ``after``, with its
        first and last sequence numbers, read in one snapshot. Both use the session
        index: the cost follows the new rows, not the length of the conversation."""
        with self._lock, self._errors("read new chat history"):
            own = not self._conn.in_transaction
            if own:  # one snapshot: the rows and the bounds must agree
                self._conn.execute("BEGIN")
            try:
                return self._chat_since(self._conn, scope, after)
            finally:
                if own:
                    self._conn.execute("COMMIT")

    def append_chat_after(
        self, scope: Scope, after: int, messages: Sequence[ChatMessage]
    ) -> tuple[ChatRows, ChatRows, tuple[int, int]]:
        """Append messages to one conversation and say what was committed before them.

        Returns, read under the write lock (nothing else can commit meanwhile): the
        conversation as :meth:`chat_since` ``after`` saw it before the append, its
        bounds after the append (no rows), and the :meth:`change_stamp` once the
        append is committed.
        """
        with self.transaction("append chat history") as conn:
            stamp = self._stamp_after_commit()
            before = self._chat_since(conn, scope, after)
            self._insert_chat(conn, scope, messages)
            after_append = self._chat_bounds(conn, scope)
        return before, after_append, stamp

    def replace_chat_bounds(
        self, scope: Scope, messages: Sequence[ChatMessage]
    ) -> tuple[ChatRows, tuple[int, int]]:
        """:meth:`replace_chat`, returning the new bounds and the stamp once committed."""
        with self.transaction("replace chat history") as conn:
            stamp = self._stamp_after_commit()
            self._delete_chat(conn, scope)
            self._insert_chat(conn, scope, messages)
            bounds = self._chat_bounds(conn, scope)
        return bounds, stamp

    @staticmethod
    def _chat_bounds(conn: sqlite3.Connection, scope: Scope) -> ChatRows:
        # Two queries: SQLite answers a lone MIN or MAX from the index in one step, but
        # scans the session's rows for both in one query.
        key = conversation_key(scope)
        where = "FROM chat_messages WHERE tenant_id = ? AND user_id = ? AND session_id = ?"
        first = conn.execute(f"SELECT MIN(seq) {where}", key).fetchone()[0]
        last = conn.execute(f"SELECT MAX(seq) {where}", key).fetchone()[0]
        return ChatRows([], first, last or 0)

    @classmethod
    def _chat_since(cls, conn: sqlite3.Connection, scope: Scope, after: int) -> ChatRows:
        rows = conn.execute(
            "SELECT seq, message_json FROM chat_messages "
            "WHERE tenant_id = ? AND user_id = ? AND session_id = ? AND seq > ? ORDER BY seq",
            (*conversation_key(scope), after),
        ).fetchall()
        bounds = cls._chat_bounds(conn, scope)
        return ChatRows([load_message(row["message_json"]) for row in rows], bounds.first, bounds.last)

class ChatCursor(NamedTuple):
    """How far a reader of a :class:`SQLiteChatLog` has read: the store's
    :meth:`~SQLiteStore.change_stamp` then, and the bounds of the conversation it saw
    (see :class:`ChatRows`)."""

    stamp: tuple[int, int]
    first: Optional[int]
    last: int


class SQLiteChatLog(SQLChatLog):
    """One conversation's persisted messages: the :class:`~llama_memory.write.buffer.ChatLog` of a buffer.

    It is a :class:`~llama_memory.write.buffer.SharedChatLog`: every buffer on the same
    file and session (threads, processes) sees the messages the others commit, in
    commit order. Sequence numbers only grow (``AUTOINCREMENT``), so a conversation
    whose first sequence number changed was replaced or cleared by another writer.
    """

    store: ChatTables

    def load(self) -> list[ChatMessage]:
        """The conversation's messages, oldest first."""
        return self.store.load_chat(self.scope)

    def append(self, messages: Sequence[ChatMessage]) -> None:
        """Append messages."""
        self.store.append_chat(self.scope, messages)

    def changes(self, cursor: Optional[ChatCursor]) -> Optional[ChatLogChanges]:
        """What was committed since ``cursor`` (everything when it is None), or None
        when nothing at all was committed to the file since (one ``PRAGMA``), or
        when another thread is writing through this store right now."""
        # Read before the rows: a commit after it shows next time. A reader never waits
        # for another thread's write through this store: it learns the news next time.
        stamp = self.store.change_stamp(wait=cursor is None)
        if stamp is None or (cursor is not None and cursor.stamp == stamp):
            return None
        rows = self.store.chat_since(self.scope, cursor.last if cursor is not None else 0)
        return ChatLogChanges(
            rows.messages, replaced(cursor, rows.first), ChatCursor(stamp, rows.first, rows.last)
        )

    def append_after(
        self, cursor: Optional[ChatCursor], messages: Sequence[ChatMessage]
    ) -> ChatLogChanges:
        """Append ``messages`` after whatever was committed since ``cursor``, which is
        returned (the cursor returned is after ``messages``)."""
        before, bounds, stamp = self.store.append_chat_after(
            self.scope, cursor.last if cursor is not None else 0, messages
        )
        return ChatLogChanges(
            before.messages, replaced(cursor, before.first), ChatCursor(stamp, bounds.first, bounds.last)
        )

    def replace_all(self, messages: Sequence[ChatMessage]) -> ChatCursor:
        """Make ``messages`` the whole conversation; return the cursor after them."""
        bounds, stamp = self.store.replace_chat_bounds(self.scope, messages)
        return ChatCursor(stamp, bounds.first, bounds.last)


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


class SQLiteStore(ChatTables, LexicalTables, Storage):
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

    It is the :class:`~llama_memory.storage.sql.store.Storage` facade: the parts
    written once over SQL, with what SQLite does its own way: the connection
    (``connection.py``), the chat logs (``chat.py``), FTS5 (``lexical.py``), and here the
    records' session neighbours and vector copies and the job queue's table.
    """

    user_dependents = _USER_DEPENDENTS
    _jobs_ready = False

    def _jobs_table(self) -> None:
        """Make the job queue's table on first use (a claim runs under the file's write
        lock, ``BEGIN IMMEDIATE``: two workers never hold one job)."""
        if not self._jobs_ready:
            self.ensure_schema("jobs", JOB_MIGRATIONS)
            self._jobs_ready = True

    # -- what SQLite's records do their own way: session neighbours along ``rowid``, and
    # vector copies in the table ``record_vectors`` (deleted with their record by a trigger)

    write_order = "rowid"
    with_copies, copy_column = "records r LEFT JOIN record_vectors v ON v.id = r.id", "v.vector"

    def session_neighbours(
        self, ids: Sequence[str], scope: Scope, source: str, radius: int
    ) -> dict[str, list[tuple[int, str]]]:
        """For each record id of the scope's user in ``source``: the ids of the records
        of its session from ``radius`` before it to ``radius`` after it, itself
        included, as (position, id) in the order they were written. Ids not found (or
        another user's) are left out.

        Call :meth:`ensure_session_order` once first, or each lookup scans the user's
        records.
        """
        if not ids or radius < 0:
            return {}
        user = scope.require_user(f"the {source!r} memory source")
        marks = ",".join("?" * len(ids))
        hits = [
            row
            for row in self.query(
                "read record positions",
                f"SELECT id, rowid AS pos, session_id, source, tenant_id, user_id FROM records "
                f"WHERE id IN ({marks})",
                tuple(ids),
            )
            if (row["source"], row["tenant_id"], row["user_id"]) == (source, scope.tenant_id, user)
        ]
        if not hits:
            return {}
        # One statement for all hits: per hit, the rows up to it and the rows after it
        # in its session, each read backwards or forwards along records_by_session.
        same = "source = ? AND tenant_id = ? AND user_id = ? AND session_id IS ?"
        parts, params = [], []
        for n, hit in enumerate(hits):
            key = (source, scope.tenant_id, user, hit["session_id"])
            parts.append(
                f"SELECT * FROM (SELECT {n} AS hit, rowid AS pos, id FROM records WHERE {same} "
                f"AND rowid <= ? ORDER BY rowid DESC LIMIT ?)"
            )
            parts.append(
                f"SELECT * FROM (SELECT {n} AS hit, rowid AS pos, id FROM records WHERE {same} "
                f"AND rowid > ? ORDER BY rowid LIMIT ?)"
            )
            params += [*key, hit["pos"], radius + 1, *key, hit["pos"], radius]
        rows = self.query("read session neighbours", " UNION ALL ".join(parts), params)
        found: dict[str, list[tuple[int, str]]] = {hit["id"]: [] for hit in hits}
        for row in rows:
            found[hits[row["hit"]]["id"]].append((row["pos"], row["id"]))
        return {hit: sorted(around) for hit, around in found.items()}

    def ensure_session_order(self) -> None:
        """Create the index that finds a record's session neighbours (once per file)."""
        self.ensure_schema("session-order", SESSION_ORDER_MIGRATIONS)

    def mark_indexed(
        self, ids: Sequence[str], indexed: bool = True, vectors: Optional[Sequence[bytes]] = None
    ) -> None:
        """Record that the dense index holds (or no longer holds) these records.

        ``vectors`` (one encoded vector per id) keeps a copy of each record's vector
        (:meth:`stored_vectors`); un-indexing a record drops its copy.
        """
        if vectors is not None and len(vectors) != len(ids):
            raise ValueError(f"{len(ids)} record ids but {len(vectors)} vectors")
        with self.transaction("mark records indexed") as conn:
            conn.executemany(
                "UPDATE records SET indexed = ? WHERE id = ?", [(int(indexed), i) for i in ids]
            )
            if not indexed:
                conn.executemany("DELETE FROM record_vectors WHERE id = ?", [(i,) for i in ids])
            elif vectors is not None:
                conn.executemany(
                    "INSERT OR REPLACE INTO record_vectors (id, vector) "
                    "SELECT id, ? FROM records WHERE id = ?",  # a record deleted meanwhile: none
                    [(v, i) for i, v in zip(ids, vectors)],
                )

    def mark_all_unindexed(self, source: str) -> int:
        """Flag every record of ``source`` for re-indexing (their vector copies are
        dropped: the model may have changed); return how many."""
        with self.transaction("reset index flags") as conn:
            conn.execute(
                "DELETE FROM record_vectors WHERE id IN (SELECT id FROM records WHERE source = ?)",
                (source,),
            )
            cur = conn.execute("UPDATE records SET indexed = 0 WHERE source = ?", (source,))
            return cur.rowcount

    def chat_log(self, scope: Scope) -> SQLiteChatLog:
        """The shared log of the scope's conversation."""
        return SQLiteChatLog(self, scope)

    def change_token(self) -> Hashable:
        """Changes when another connection commits to the file (``PRAGMA data_version``)."""
        return self.data_version()

