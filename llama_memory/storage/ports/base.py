"""The storage facade: the transaction that spans every port, store-wide meta, and the
operations that cross every kind of row (forgetting a user, purging what expired)."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Optional, Protocol, runtime_checkable

from ...core.types import Scope
from .chat import ChatStore
from .jobs import JobQueue
from .lexical import LexicalIndex
from .records import IndexedRows, PendingRecord, RecordStore
from .vectors import VectorCopies


@runtime_checkable
class Transactional(Protocol):
    """Atomic writes across every port of one store."""

    def transaction(self, action: str) -> AbstractContextManager[Any]:
        """One atomic write: committed on success, rolled back (and raised as
        :class:`~llama_memory.core.errors.StorageError` naming ``action``) on failure.
        A port write called inside it joins it, as does a nested ``transaction``
        in the same thread: a memory writes a batch to the chat log and to every
        source all or nothing."""
        ...

    def after_commit(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` once the open transaction commits (at once when none is
        open); drop it if the transaction rolls back. Derived work (embedding,
        writing the dense index) waits for the commit this way."""
        ...

    def change_token(self) -> Hashable:
        """A value that changes when another connection or process commits to the
        store (this connection's own commits may leave it): caches of derived data
        compare it to know when to reload."""
        ...


@runtime_checkable
class MetaStore(Protocol):
    """Store-wide key/value settings (the embedding model's identity, schema versions)."""

    def get_meta(self, key: str) -> Optional[str]:
        """The value under ``key``, or None."""
        ...

    def set_meta(self, key: str, value: str) -> None:
        """Store ``value`` under ``key``."""
        ...

    def set_meta_once(self, key: str, value: str) -> str:
        """Store ``value`` unless a value is there; return the value kept (atomic)."""
        ...

    def delete_meta(self, keys: Sequence[str]) -> None:
        """Remove ``keys`` (absent ones ignored)."""
        ...


def user_meta_key(kind: str, scope: Scope) -> str:
    """A meta key that belongs to one user's session (``kind:["tenant", "user",
    "session"]``, e.g. an extraction cursor): ``delete_user`` deletes every such key of
    the user, so per-user state kept in the meta table is forgotten with the user."""
    return f"{kind}:" + json.dumps([scope.tenant_id, scope.user_id, scope.session_id])


def user_meta_infix(tenant_id: str, user_id: str) -> str:
    """What every :func:`user_meta_key` of one user contains (JSON quoting makes it
    unambiguous: no other user's key holds it)."""
    return ":" + json.dumps([tenant_id, user_id])[:-1] + ", "


@runtime_checkable
class UserDeletion(Protocol):
    """Forgetting a user."""

    def delete_user(self, scope: Scope, source: Optional[str] = None) -> list[str]:
        """Delete one user's records of ``source``; without ``source``, the user from
        every kind of row of the store (records, chat history, triples, profile,
        jobs...): the right to be forgotten. Returns the deleted record ids."""
        ...


@runtime_checkable
class Storage(
    Transactional,
    MetaStore,
    UserDeletion,
    ChatStore,
    RecordStore,
    IndexedRows,
    LexicalIndex,
    VectorCopies,
    JobQueue,
    Protocol,
):
    """Everything a memory needs from its system of record, as one object: what a
    second backend implements (``llama_memory.storage.sqlite.SQLiteStore`` is the
    first). The dense index (:class:`~llama_memory.storage.ports.vectors.VectorIndex`)
    is separate: it is derived, and may live elsewhere (a Chroma server)."""

    @property
    def store_id(self) -> str:
        """A random id of this store, kept in it: it namespaces derived indexes."""
        ...

    def purge_expired(self, at: float) -> list[PendingRecord]:
        """Delete every record of every source expired at ``at``; return them (their
        vectors are the caller's to drop)."""
        ...

    def close(self) -> None:
        """Release the connection."""
        ...


def one_connection(store: object) -> AbstractContextManager[Any]:
    """A context in which ``store``'s reads share one connection, when the store has a
    pool of them (PostgreSQL's ``one_connection``); a no-op for any other store (SQLite
    has one connection anyway) or none. A ``get()`` reads in 15-20 statements: one
    connection taken and checked once saves a round trip per statement."""
    hold = getattr(store, "one_connection", None)
    return hold() if callable(hold) else nullcontext()
