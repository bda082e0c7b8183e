"""The transaction that spans every part of a store (what a backend's connection gives),
and the keys of per-user meta. The store itself, every part written once over SQL, is
:class:`~llama_memory.storage.sql.store.Storage`."""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable
from contextlib import AbstractContextManager
from typing import Any, Protocol, runtime_checkable

from ...core.types import Scope


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


def user_meta_key(kind: str, scope: Scope) -> str:
    """A meta key that belongs to one user's session (``kind:["tenant", "user",
    "session"]``, e.g. an extraction cursor): ``delete_user`` deletes every such key of
    the user, so per-user state kept in the meta table is forgotten with the user."""
    return f"{kind}:" + json.dumps([scope.tenant_id, scope.user_id, scope.session_id])


def user_meta_infix(tenant_id: str, user_id: str) -> str:
    """What every :func:`user_meta_key` of one user contains (JSON quoting makes it
    unambiguous: no other user's key holds it)."""
    return ":" + json.dumps([tenant_id, user_id])[:-1] + ", "
