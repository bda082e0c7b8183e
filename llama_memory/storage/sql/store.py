"""The system of record of every SQL backend as one object (:class:`Storage`), with its
meta table (:class:`MetaStore`) and what every backend's chat history does alike
(:class:`SQLChatTables`, :class:`SQLChatLog`); how a backend reads what changed stays in
its own chat code."""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar, Optional, Protocol

from ...core.types import Scope, now
from ..codec import dump_message
from ..ports.chat import SharedChatLog
from ..ports.records import RankedLexicalIndex
from .dialect import Dialect, SQLStore
from .jobs import JobQueue
from .records import RecordStore

if TYPE_CHECKING:
    from llama_index.core.base.llms.types import ChatMessage

__all__ = ["MetaStore", "SQLChatLog", "SQLChatTables", "Storage", "conversation_key", "replaced"]


class MetaStore:
    """Store-wide key/value settings (the embedding model's identity, schema versions,
    per-user marks) in the ``meta`` table."""

    dialect: ClassVar[Dialect]

    if TYPE_CHECKING:  # what the store this part belongs to provides

        def transaction(self, action: str) -> AbstractContextManager[Any]: ...

        def query(self, action: str, sql: str, params: Sequence[Any] = ()) -> Sequence[Any]: ...

    def get_meta(self, key: str) -> Optional[str]:
        """The value stored under ``key`` in the meta table, or None."""
        rows = self.query("read meta", self.dialect.sql("SELECT value FROM meta WHERE key = ?"), (key,))
        return str(rows[0]["value"]) if rows else None

    def set_meta(self, key: str, value: str) -> None:
        """Store ``value`` under ``key`` in the meta table."""
        with self.transaction("write meta") as conn:
            self.dialect.execute(
                conn,
                "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def set_meta_once(self, key: str, value: str) -> str:
        """Store ``value`` under ``key`` unless one is there; the value kept (atomic)."""
        with self.transaction("write meta") as conn:
            self.dialect.insert_new(conn, "meta", {"key": key, "value": value})
            return str(self.dialect.execute(conn, "SELECT value FROM meta WHERE key = ?", (key,)).fetchone()["value"])

    def delete_meta(self, keys: Sequence[str]) -> None:
        """Remove ``keys`` from the meta table (absent ones are ignored)."""
        with self.transaction("delete meta") as conn:
            for batch in self.dialect.batches(keys):
                listed, values = self.dialect.in_list("key", batch)
                self.dialect.execute(conn, f"DELETE FROM meta WHERE {listed}", values)

    @property
    def store_id(self) -> str:
        """A random id given when first asked (keeps stores apart on a Chroma server)."""
        return self.set_meta_once("store_id", uuid.uuid4().hex[:12])


def conversation_key(scope: Scope) -> tuple[str, str, str]:
    """``(tenant_id, user_id, session_id)`` of the scope's conversation (None as '')."""
    return scope.tenant_id, scope.user_id or "", scope.session_id or ""


class _Seen(Protocol):
    """A reader's cursor: the first message it saw (None: it saw an empty conversation)."""

    @property
    def first(self) -> Optional[int]: ...


def replaced(cursor: Optional[_Seen], first: Optional[int]) -> bool:
    """Whether the rows read after ``cursor`` are the whole conversation: nothing was read
    before, or the first message seen is gone (replaced or cleared)."""
    return cursor is None or (cursor.first is not None and first != cursor.first)


class SQLChatTables:
    """The chat history part of every SQL store (table ``chat_messages``)."""

    dialect: ClassVar[Dialect]

    if TYPE_CHECKING:  # what the store this part belongs to provides

        def query(self, action: str, sql: str, params: Sequence[Any] = ()) -> Sequence[Any]: ...

    def _insert_chat(self, conn: Any, scope: Scope, messages: Sequence[ChatMessage]) -> None:
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
    """One conversation of a SQL store: the plain calls of the chat log (a backend adds
    loading, appending and reading what changed)."""

    def __init__(self, store: Any, scope: Scope) -> None:
        self.store = store
        self.scope = scope

    def replace(self, messages: Sequence[ChatMessage]) -> None:
        self.store.replace_chat(self.scope, messages)

    def clear(self) -> None:
        self.store.replace_chat(self.scope, [])


class Storage(MetaStore, SQLChatTables, RecordStore, JobQueue, SQLStore, RankedLexicalIndex, ABC):
    """Everything a memory needs from its system of record, but the (derived) dense index."""

    #: The backend's shared chat log, made on the store and a scope.
    chat_log_type: ClassVar[type[SharedChatLog]]

    def chat_log(self, scope: Scope) -> SharedChatLog:
        """The shared log of the scope's conversation."""
        return self.chat_log_type(self, scope)  # type: ignore[call-arg]  # (a Protocol names no __init__)

    @abstractmethod
    def replace_chat(self, scope: Scope, messages: Sequence[ChatMessage]) -> Any:
        """Replace the scope's conversation with ``messages`` (:class:`SQLChatLog`'s
        ``replace`` and ``clear``)."""

    @property
    @abstractmethod
    def schema_version(self) -> int:
        """The version of the store's schema (``llama-memory stats`` shows it)."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection."""
