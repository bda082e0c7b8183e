"""Chat history in PostgreSQL: each conversation's messages, losslessly as JSON, in
commit order, shared by every worker on the database."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple, Optional

from llama_index.core.base.llms.types import ChatMessage

from ...core.types import Scope
from ..ports.chat import ChatLogChanges
from ..sql.store import SQLChatLog, SQLChatTables, conversation_key, replaced
from .connection import Connection, PostgresConnection

# One statement, so one snapshot: the conversation's bounds and its rows after a cursor.
_SINCE = (
    "WITH b AS (SELECT min(seq) AS first, max(seq) AS last FROM chat_messages "
    "WHERE tenant_id = %(t)s AND user_id = %(u)s AND session_id = %(s)s) "
    "SELECT b.first, b.last, m.seq, m.message_json FROM b LEFT JOIN chat_messages m "
    "ON m.tenant_id = %(t)s AND m.user_id = %(u)s AND m.session_id = %(s)s AND m.seq > %(after)s "
    "ORDER BY m.seq"
)


class ChatCursor(NamedTuple):
    """How far a reader read: the ``seq`` of the first and last messages seen (None, 0: empty)."""

    first: Optional[int]
    last: int


class ChatTables(PostgresConnection, SQLChatTables):
    """The chat history part of the store (table ``chat_messages``)."""

    def _since(self, scope: Scope, after: int) -> tuple[list[ChatMessage], ChatCursor]:
        rows = self.query("read chat history", _SINCE, {**_key(scope), "after": after})
        messages = [_load(row["message_json"]) for row in rows if row["seq"] is not None]
        first = rows[0]["first"] if rows else None
        last = rows[0]["last"] if rows else None
        return messages, ChatCursor(first, last or 0)

    def _lock_conversation(self, conn: Connection, scope: Scope) -> None:
        # Writers of one conversation take turns until they commit, so that sequence
        # numbers (taken after the lock) follow commit order: a reader that has seen
        # seq n never misses a later commit with a smaller one.
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 0))", (json.dumps(conversation_key(scope)),))

    def append_chat_after(
        self, scope: Scope, after: int, messages: Sequence[ChatMessage]
    ) -> tuple[list[ChatMessage], ChatCursor, ChatCursor]:
        """Append under the conversation's lock; what others committed after ``after``
        before them, the bounds then, and the bounds after."""
        with self.transaction("append chat history") as conn:
            self._lock_conversation(conn, scope)
            before, bounds = self._since(scope, after)
            self._insert_chat(conn, scope, messages)
            _, end = self._since(scope, 2**62)
        return before, bounds, end

    def replace_chat(self, scope: Scope, messages: Sequence[ChatMessage]) -> ChatCursor:
        """Make ``messages`` the whole conversation; its bounds after."""
        with self.transaction("replace chat history") as conn:
            self._lock_conversation(conn, scope)
            self._delete_chat(conn, scope)
            self._insert_chat(conn, scope, messages)
            _, end = self._since(scope, 2**62)
        return end


class PostgresChatLog(SQLChatLog):
    """One conversation's shared chat log in PostgreSQL ("nothing changed": one lookup)."""

    store: ChatTables

    def load(self) -> list[ChatMessage]:
        return self.store._since(self.scope, 0)[0]

    def append(self, messages: Sequence[ChatMessage]) -> None:
        self.store.append_chat_after(self.scope, 2**62, messages)

    def changes(self, cursor: Optional[ChatCursor]) -> Optional[ChatLogChanges]:
        messages, bounds = self.store._since(self.scope, cursor.last if cursor is not None else 0)
        if cursor is not None and bounds == cursor:
            return None
        return ChatLogChanges(messages, replaced(cursor, bounds.first), bounds)

    def append_after(self, cursor: Optional[ChatCursor], messages: Sequence[ChatMessage]) -> ChatLogChanges:
        before, bounds, end = self.store.append_chat_after(self.scope, cursor.last if cursor is not None else 0, messages)
        return ChatLogChanges(before, replaced(cursor, bounds.first), end)

    def replace_all(self, messages: Sequence[ChatMessage]) -> ChatCursor:
        return self.store.replace_chat(self.scope, messages)


def _load(data: Any) -> ChatMessage:
    return ChatMessage.model_validate(data if not isinstance(data, str) else json.loads(data))


def _key(scope: Scope) -> dict[str, str]:
    # The conversation's key as the named parameters of the statements here.
    return dict(zip("tus", conversation_key(scope)))
