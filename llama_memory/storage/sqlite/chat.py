"""Chat history in the SQLite system of record: each conversation's messages, losslessly
as JSON, in commit order, shared by every reader of the file."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple, Optional

if TYPE_CHECKING:
    from llama_index.core.base.llms.types import ChatMessage

from ...core.types import Scope
from ..codec import load_message
from ..ports.chat import ChatLogChanges
from ..sql.chat import SQLChatLog, SQLChatTables, conversation_key, replaced
from .connection import SQLiteConnection


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
