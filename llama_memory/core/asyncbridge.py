"""Run sync code on the event loop, awaiting its I/O: the bridge behind ``aget``/``aput``
on PostgreSQL (SQLAlchemy's asyncio pattern). :func:`run_bridged` runs the sync pipeline
in a greenlet whose parent is the calling coroutine; where it reaches async I/O it calls
:func:`await_only`, which switches to the parent to await it on the loop. No thread, no
duplicated sync code.
"""

from __future__ import annotations

import asyncio
import contextvars
import threading
import weakref
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Optional, TypeVar

import greenlet

T = TypeVar("T")


class _Bridge(greenlet.greenlet):
    """A greenlet running sync code for a coroutine (its parent)."""

    def __init__(self, fn: Callable[..., Any], parent: greenlet.greenlet) -> None:
        super().__init__(self._body, parent)
        self._fn = fn
        #: Run (last first) inside the greenlet when ``fn`` ends: see :func:`on_exit`.
        self.exits: list[Callable[[], object]] = []
        # The caller's context vars (as a coroutine's task would see them): the pipeline
        # reads e.g. the instrumentation span and the active agent from them.
        self.gr_context = contextvars.copy_context()

    def _body(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return self._fn(*args, **kwargs)
        finally:
            while self.exits:
                self.exits.pop()()


def on_exit(callback: Callable[[], object]) -> None:
    """Run ``callback`` when the current bridged call ends (inside it)."""
    current = greenlet.getcurrent()
    if not isinstance(current, _Bridge):
        raise RuntimeError("on_exit() called outside run_bridged()")
    current.exits.append(callback)


def in_bridge() -> bool:
    """Whether the current code runs inside :func:`run_bridged` (so it may await_only)."""
    return isinstance(greenlet.getcurrent(), _Bridge)


def await_only(awaitable: Awaitable[T]) -> T:
    """Await ``awaitable`` on the event loop from sync code inside :func:`run_bridged`
    and return its result (or raise its exception).

    Raises:
        RuntimeError: not inside :func:`run_bridged` (a plain sync caller must use the
            sync API instead).
    """
    current = greenlet.getcurrent()
    if not isinstance(current, _Bridge):
        if isinstance(awaitable, Coroutine):
            awaitable.close()  # never awaited: no "was never awaited" warning
        raise RuntimeError(
            "await_only() called outside run_bridged(): async I/O from sync code needs the bridge "
            "(call the memory's a* method, or its sync method from a thread)"
        )
    # The parent awaits it and switches back with the result (or throws into us).
    parent = current.parent
    assert parent is not None
    return parent.switch(awaitable)  # type: ignore[no-any-return]


async def run_bridged(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run ``fn(*args, **kwargs)`` (sync code) on the current event loop, awaiting on
    the loop whatever it passes to :func:`await_only`; return its result."""
    bridge = _Bridge(fn, greenlet.getcurrent())
    result = bridge.switch(*args, **kwargs)
    while not bridge.dead:
        # The greenlet passed an awaitable up: await it here, then resume the greenlet.
        try:
            value = await result
        except BaseException as exc:  # noqa: BLE001 - every exception goes back into fn
            result = bridge.throw(exc)
        else:
            result = bridge.switch(value)
    return result  # type: ignore[no-any-return]


class SuspendedCallError(RuntimeError):
    """A sync call wanted a lock that an async call of the same object, suspended on
    this thread's event loop, holds: waiting would block that loop for ever."""


class BridgeSafeRLock:
    """A reentrant lock held by one thread or one bridged call (greenlet): a
    ``threading.RLock`` would let a second greenlet of the thread re-enter, a ``Lock``
    would deadlock. On the owner's thread, a blocking acquire by another greenlet raises
    :class:`SuspendedCallError` (a non-blocking one returns False).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: Optional[greenlet.greenlet] = None
        self._thread: Optional[int] = None
        self._count = 0

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Take the lock (again, when this thread or greenlet holds it)."""
        me = greenlet.getcurrent()
        if self._owner is me:
            self._count += 1
            return True
        # Only greenlets of this thread set _thread to its id, and none of them runs now.
        if self._thread == threading.get_ident():
            if not blocking:
                return False
            raise SuspendedCallError(
                "a sync call of this memory from the event loop's thread while an async call of it "
                "(aget/aput...) is suspended there: await the async method instead of calling the "
                "sync one from a coroutine"
            )
        if not self._lock.acquire(blocking, timeout):
            return False
        self._thread, self._owner, self._count = threading.get_ident(), me, 1
        return True

    def release(self) -> None:
        """Give the lock back (once per acquire)."""
        if self._owner is not greenlet.getcurrent():
            raise RuntimeError("cannot release a lock held by another thread or greenlet")
        self._count -= 1
        if self._count == 0:
            self._owner = self._thread = None
            self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class LoopLocks:
    """One asyncio lock per event loop for one object, so its bridged calls never
    interleave (locks of loops gone are dropped)."""

    def __init__(self) -> None:
        self._locks: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Lock] = (
            weakref.WeakKeyDictionary()
        )

    def here(self) -> asyncio.Lock:
        """The lock of the running loop."""
        loop = asyncio.get_running_loop()
        lock = self._locks.get(loop)
        if lock is None:
            lock = self._locks[loop] = asyncio.Lock()
        return lock


async def run_io(locks: LoopLocks, store: Any, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run the sync ``fn`` of an object from a coroutine: through :func:`run_bridged`
    under the object's ``locks`` lock for this loop when ``store.supports_async``
    (PostgreSQL from a URL), else in a worker thread.
    """
    if getattr(store, "supports_async", False):
        async with locks.here():
            return await run_bridged(fn, *args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)
