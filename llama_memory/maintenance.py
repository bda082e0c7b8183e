"""Maintenance of a :class:`~llama_memory.memory.ComposableMemory`'s long-term memory:
forgetting a user everywhere, purging expired records, reconciling and rebuilding the
derived dense indexes, and closing.

Functions of one memory; the memory's ``forget``, ``purge_expired``, ``reconcile``,
``reindex`` and ``close`` call them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from .errors import StorageError
from .sources.base import Closable, Expiring, Forgettable, Reconcilable, Reindexable
from .storage.reconcile import ReconcileReport
from .types import Scope

if TYPE_CHECKING:
    from .memory import ComposableMemory


def forget(memory: ComposableMemory, user_id: Optional[str]) -> None:
    """The body of :meth:`ComposableMemory.forget`."""
    user = user_id if user_id is not None else memory.user_id
    scope = Scope(user_id=user, tenant_id=memory.tenant_id)
    scope.require_user("forget()")
    with memory._lock:
        memory._check_open()
        if user == memory.user_id:
            memory.primary_memory.reset()
            memory._extracted_upto = memory._user_turns_pending = 0
        if memory._store is not None:
            memory._store.delete_user(scope)  # every table, any source, every session
        forget_in_indexes(memory, scope, user)


def forget_in_indexes(memory: ComposableMemory, scope: Scope, user: Any) -> None:
    """Call every source's ``forget``, then drop the user's collections of every
    kind; one index that cannot be reached does not stop the others, and the
    failures are raised together at the end."""
    failures: list[str] = []
    for source in memory._sources:
        if not isinstance(source, Forgettable):
            continue
        try:
            source.forget(scope)
        except StorageError as exc:
            failures.append(f"{source.name}: {exc}")
    try:
        if memory._drop_dense is not None:
            memory._drop_dense((scope.tenant_id, scope.require_user()))
    except StorageError as exc:
        failures.append(f"dense index: {exc}")
    if failures:
        raise StorageError(
            f"forget: user {user!r} was removed from the system of record, but not yet "
            f"from every index ({'; '.join(failures)}); call reconcile() once it is "
            "reachable again"
        )


def purge_expired(memory: ComposableMemory) -> int:
    """The body of :meth:`ComposableMemory.purge_expired`."""
    with memory._lock:
        memory._check_open()
        return sum(s.purge_expired() for s in memory._sources if isinstance(s, Expiring))


def reconcile(memory: ComposableMemory, catch_up: bool, scope: Optional[Scope]) -> dict[str, ReconcileReport]:
    """Every derived index's :meth:`reconcile`, for every user or the scope's."""
    with memory._lock:
        memory._check_open()
        return {
            s.name: s.reconcile(catch_up, scope) for s in memory._sources if isinstance(s, Reconcilable)
        }


def reindex(memory: ComposableMemory) -> int:
    """The body of :meth:`ComposableMemory.reindex`."""
    with memory._lock:
        memory._check_open()
        return sum(s.reindex() for s in memory._sources if isinstance(s, Reindexable))


def close(memory: ComposableMemory) -> None:
    """The body of :meth:`ComposableMemory.close`."""
    worker = memory._worker
    if worker is not None:
        # Before taking the lock: the job running now applies its pass under it.
        worker.stop()
    with memory._lock:
        if memory._closed:
            return
        memory._closed = True
        try:
            try:
                if memory._usage is not None:
                    memory._usage.write()
            finally:  # the sources close even if the last uses could not be written
                for source in memory._sources:
                    if isinstance(source, Closable):
                        source.close()
        finally:
            if memory._store is not None:
                memory._store.close()
