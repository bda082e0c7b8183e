"""The system of record of every SQL backend, as one object: its parts (meta, chat
history, records, the job queue) are written once in this package; a backend's store
class adds its connection (the :class:`~.dialect.SQLStore` port: transactions and
reads), its lexical index, its chat logs and what its records do their own way.

Here too are the two small parts: the ``meta`` table (:class:`MetaStore`: one text value
a key, the store's id, what the dense index was built with, per-user marks) and what
the chat history of every SQL backend does alike (table ``chat_messages``,
:class:`SQLChatTables`, :class:`SQLChatLog`): a conversation's key, writing and deleting
a conversation's rows, listing a user's sessions, the chat log facade's plain calls,
and how a reader tells a replaced conversation from an addition. How a backend reads
what changed (SQLite's commit stamp, PostgreSQL's bounds under a lock) stays in its own
``chat`` code: the two databases tell news apart differently."""

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
    per-user marks): reads and writes of the ``meta`` table (``key`` its primary key)."""

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
        """Store ``value`` under ``key`` unless a value is there already; return the value
        kept (atomic: of two processes recording at once, both see the first one's)."""
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
        """A random id given to this store when first asked, kept in the meta table: it
        keeps the collections of different stores apart on a shared Chroma server."""
        return self.set_meta_once("store_id", uuid.uuid4().hex[:12])


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


class Storage(MetaStore, SQLChatTables, RecordStore, JobQueue, SQLStore, RankedLexicalIndex, ABC):
    """Everything a memory needs from its system of record, as one object
    (``llama_memory.storage.sqlite.SQLiteStore``,
    ``llama_memory.storage.postgres.PostgresStore``). The dense index
    (:class:`~llama_memory.storage.ports.vectors.VectorIndex`) is separate: it is
    derived, and may live elsewhere (a Chroma server)."""

    @abstractmethod
    def chat_log(self, scope: Scope) -> SharedChatLog:
        """The shared log of the scope's conversation."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection."""
