"""The transaction that spans every part of a store, the keys of per-user meta, and the
store-wide summaries the admin rows return."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, runtime_checkable

from ...core.types import Scope


@runtime_checkable
class Transactional(Protocol):
    """Atomic writes across every port of one store."""

    def transaction(self, action: str) -> AbstractContextManager[Any]:
        """One atomic write: committed on success, rolled back (and raised as
        :class:`~llama_memory.core.errors.StorageError` naming ``action``) on failure. A
        port write or a nested ``transaction`` in the same thread joins it."""
        ...

    def after_commit(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` once the open transaction commits (at once when none is
        open), dropped on rollback: derived work (embedding, the dense index) waits."""
        ...

    def change_token(self) -> Hashable:
        """A value that changes when another connection or process commits to the store
        (caches of derived data compare it to know when to reload)."""
        ...


def user_meta_key(kind: str, scope: Scope) -> str:
    """A meta key of one user's session (``kind:["tenant", "user", "session"]``), which
    ``delete_user`` deletes with the user."""
    return f"{kind}:" + json.dumps([scope.tenant_id, scope.user_id, scope.session_id])


def user_meta_infix(tenant_id: str, user_id: str) -> str:
    """What every :func:`user_meta_key` of one user contains, and no other user's."""
    return ":" + json.dumps([tenant_id, user_id])[:-1] + ", "


@dataclass(frozen=True)
class UserSummary:
    """One user of a tenant and how much is remembered of them.

    Attributes:
        user_id: the user.
        sessions: conversations with stored chat history.
        messages: chat messages stored (all sessions).
        records: long-term records (every source that keeps records: past messages...).
        triples: knowledge triples that currently hold.
        profile_fields: fields of the current profile.
        last_active: the latest time something of theirs was written (epoch seconds).
    """

    user_id: str
    sessions: int = 0
    messages: int = 0
    records: int = 0
    triples: int = 0
    profile_fields: int = 0
    last_active: Optional[float] = None


@dataclass(frozen=True)
class SessionSummary:
    """One conversation of a user.

    Attributes:
        session_id: the session.
        messages: chat messages stored in it.
        records: long-term records written from it.
        first_at, last_at: when its first and latest messages were stored (epoch
            seconds; None for a session known only from records).
    """

    session_id: str
    messages: int = 0
    records: int = 0
    first_at: Optional[float] = None
    last_at: Optional[float] = None


@dataclass
class StoreCounts:
    """What a store holds for one tenant, and what its dense index has not caught up with.

    Attributes:
        users, sessions, messages: chat history.
        records: long-term records by source name.
        triples, triples_current: knowledge triples (with history) and those that hold.
        profile_rows, profile_fields: profile rows (with history) and current fields.
        pending: records (by source name, ``"triples"`` for triples) written but not
            in the dense index yet: embedded on the next read, flush or reindex.
        expired: records, triples and profile rows past their time to live, not yet
            purged.
    """

    users: int = 0
    sessions: int = 0
    messages: int = 0
    records: dict[str, int] = field(default_factory=dict)
    triples: int = 0
    triples_current: int = 0
    profile_rows: int = 0
    profile_fields: int = 0
    pending: dict[str, int] = field(default_factory=dict)
    expired: int = 0
