"""What the chat history of every SQL backend does alike (table ``chat_messages``): a
conversation's key, writing and deleting a conversation's rows, listing a user's
sessions, the chat log facade's plain calls, and how a reader tells a replaced
conversation from an addition. How a backend reads what changed (SQLite's commit
stamp, PostgreSQL's bounds under a lock) stays in its ``chat.py``: the two databases
tell news apart differently."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Protocol

from ...core.types import Scope, now
from ..codec import dump_message
from .dialect import Dialect

if TYPE_CHECKING:
    from llama_index.core.base.llms.types import ChatMessage

__all__ = ["SQLChatLog", "SQLChatTables", "conversation_key", "replaced"]


def conversation_key(scope: Scope) -> tuple[str, str, str]:
    """``(tenant_id, user_id, session_id)`` of the scope's conversation in
    ``chat_messages``: the buffer of an anonymous memory is still persisted, under the
    empty user (and a memory without a session under the empty session)."""
    return scope.tenant_id, scope.user_id or "", scope.session_id or ""


class _Seen(Protocol):
    """A reader's cursor: the first message it saw (None: it saw an empty conversation)."""

    @property
    def first(self) -> Optional[int]: ...


def replaced(cursor: Optional[_Seen], first: Optional[int]) -> bool:
    """Whether the rows read after ``cursor`` are the whole conversation rather than
    an addition: nothing was read before, or the first message the reader saw is gone
    (another writer replaced or cleared the conversation; its new rows all come after
    the cursor). A reader that saw an empty conversation takes every row as new."""
    return cursor is None or (cursor.first is not None and first != cursor.first)


class SQLChatTables:
    """What the chat history part of every SQL store (table ``chat_messages``) writes
    and lists alike: a part of the store, after its connection class."""

    dialect: ClassVar[Dialect]

    if TYPE_CHECKING:  # what the store this part belongs to provides

        def query(self, action: str, sql: str, params: Sequence[Any] = ()) -> Sequence[Any]: ...

    def _insert_chat(self, conn: Any, scope: Scope, messages: Sequence[ChatMessage]) -> None:
        """Append ``messages`` to the scope's conversation in the open transaction."""
        if not messages:
            return
        created = now()
        key = conversation_key(scope)
        self.dialect.execute_many(
            conn,
            "INSERT INTO chat_messages (tenant_id, user_id, session_id, message_json, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            [(*key, dump_message(m), created) for m in messages],
        )

    def _delete_chat(self, conn: Any, scope: Scope) -> None:
        """Delete the scope's conversation in the open transaction."""
        self.dialect.execute(
            conn,
            "DELETE FROM chat_messages WHERE tenant_id = ? AND user_id = ? AND session_id = ?",
            conversation_key(scope),
        )

    def sessions(self, scope: Scope) -> list[str]:
        """The session ids with stored chat history for the scope's user, oldest first."""
        rows = self.query(
            "list sessions",
            self.dialect.sql(
                "SELECT session_id FROM chat_messages WHERE tenant_id = ? AND user_id = ? "
                "GROUP BY session_id ORDER BY min(seq)"
            ),
            conversation_key(scope)[:2],
        )
        return [row["session_id"] for row in rows]


class SQLChatLog:
    """One conversation of a SQL store: the plain calls of the
    :class:`~llama_memory.storage.ports.chat.SharedChatLog` facade (a backend adds
    loading, appending and reading what changed)."""

    def __init__(self, store: Any, scope: Scope) -> None:
        self.store = store
        self.scope = scope

    def replace(self, messages: Sequence[ChatMessage]) -> None:
        """Replace all messages."""
        self.store.replace_chat(self.scope, messages)

    def clear(self) -> None:
        """Remove all messages."""
        self.store.replace_chat(self.scope, [])
