"""Maintenance of a memory's long-term memory: forgetting a user everywhere, purging
expired records, reconciling and rebuilding the derived dense indexes, and closing.

Functions of a memory's :class:`~llama_memory.memory.runtime.Runtime`; the memory's
``forget``, ``purge_expired``, ``reconcile``, ``reindex`` and ``close`` call them.
"""

from __future__ import annotations

from typing import Any, Optional

from ..core.errors import StorageError
from ..core.types import Scope
from ..sources.base import Closable, Expiring, Forgettable, Reconcilable, Reindexable
from ..storage.reconcile import ReconcileReport
from .runtime import Runtime


def forget(rt: Runtime, user_id: Optional[str]) -> None:
    """The body of :meth:`ComposableMemory.forget`."""
    own = rt.settings.user_id
    user = user_id if user_id is not None else own
    scope = Scope(user_id=user, tenant_id=rt.settings.tenant_id)
    scope.require_user("forget()")
    with rt.lock:
        rt.check_open()
        if user == own:
            rt.primary.reset()
            rt.formed_upto = rt.user_turns_pending = 0
        if rt.store is not None:
            rt.store.delete_user(scope)  # every table, any source, every session
        forget_in_indexes(rt, scope, user)


def forget_in_indexes(rt: Runtime, scope: Scope, user: Any) -> None:
    """Call every source's ``forget``, then drop the user's collections of every
    kind; one index that cannot be reached does not stop the others, and the
    failures are raised together at the end."""
    failures: list[str] = []
    for source in rt.sources:
        if not isinstance(source, Forgettable):
            continue
        try:
            source.forget(scope)
        except StorageError as exc:
            failures.append(f"{source.name}: {exc}")
    try:
        if rt.drop_dense is not None:
            rt.drop_dense((scope.tenant_id, scope.require_user()))
    except StorageError as exc:
        failures.append(f"dense index: {exc}")
    if failures:
        raise StorageError(
            f"forget: user {user!r} was removed from the system of record, but not yet "
            f"from every index ({'; '.join(failures)}); call reconcile() once it is "
            "reachable again"
        )


def purge_expired(rt: Runtime) -> int:
    """The body of :meth:`ComposableMemory.purge_expired`."""
    with rt.lock:
        rt.check_open()
        return sum(s.purge_expired() for s in rt.sources if isinstance(s, Expiring))


def reconcile(rt: Runtime, catch_up: bool, scope: Optional[Scope]) -> dict[str, ReconcileReport]:
    """Every derived index's :meth:`reconcile`, for every user or the scope's."""
    with rt.lock:
        rt.check_open()
        return {
            s.name: s.reconcile(catch_up, scope) for s in rt.sources if isinstance(s, Reconcilable)
        }


def reindex(rt: Runtime) -> int:
    """The body of :meth:`ComposableMemory.reindex`."""
    with rt.lock:
        rt.check_open()
        return sum(s.reindex() for s in rt.sources if isinstance(s, Reindexable))


def close(rt: Runtime) -> None:
    """The body of :meth:`ComposableMemory.close`."""
    worker = rt.worker
    if worker is not None:
        # Before taking the lock: the job running now applies its pass under it.
        worker.stop()
    with rt.lock:
        if rt.closed:
            return
        rt.closed = True
        try:
            try:
                if rt.usage is not None:
                    rt.usage.write()
            finally:  # the sources close even if the last uses could not be written
                for source in rt.sources:
                    if isinstance(source, Closable):
                        source.close()
        finally:
            if rt.store is not None:
                rt.store.close()
