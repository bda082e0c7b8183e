"""The sync face of psycopg's async pool, for code inside
:func:`~llama_memory.core.asyncbridge.run_bridged`: each call awaits the async one on the
event loop, so the one sync body of the store serves ``aget``/``aput`` without a thread.
Only what :mod:`~llama_memory.storage.postgres` uses is covered.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Optional

import psycopg
from psycopg.rows import DictRow
from psycopg_pool import AsyncConnectionPool
from psycopg_pool.pool_async import StopWorker

from ...core.asyncbridge import await_only, in_bridge

_logger = logging.getLogger(__name__)


class LoopPool(AsyncConnectionPool):  # type: ignore[type-arg]
    """psycopg_pool's ``AsyncConnectionPool``, with maintenance workers that stop when
    cancelled: psycopg_pool's catch a cancellation that arrives while they run a task
    and wait on forever, which hung test teardowns after ``asyncio.run()`` ended.
    """

    @classmethod
    async def worker(cls, q: "asyncio.Queue[Any]") -> None:  # type: ignore[override]
        """Run tasks from ``q`` until a ``StopWorker`` or a cancellation (even one the
        running task swallowed); a failing task is logged."""
        me = asyncio.current_task()
        while True:
            task = await q.get()
            if isinstance(task, StopWorker):
                return
            try:
                await task.run()
            except Exception as exc:
                _logger.warning("pool task %s failed: %s: %s", task, type(exc).__name__, exc)
            if _cancel_requested(me):  # the task caught our cancellation
                raise asyncio.CancelledError


def _cancel_requested(task: "Optional[asyncio.Task[Any]]") -> bool:
    """Whether ``task`` was asked to cancel and has not honoured it (False on 3.10)."""
    cancelling = getattr(task, "cancelling", None)
    return bool(cancelling()) if cancelling is not None else False


class BridgedCursor:
    """An ``AsyncCursor`` with the sync cursor's methods."""

    def __init__(self, cursor: "psycopg.AsyncCursor[DictRow]") -> None:
        self._cursor = cursor

    def execute(self, sql: Any, params: Sequence[Any] | Mapping[str, Any] = ()) -> "BridgedCursor":
        await_only(self._cursor.execute(sql, params))
        return self

    def executemany(self, sql: Any, params_seq: Sequence[Any]) -> None:
        await_only(self._cursor.executemany(sql, params_seq))

    def fetchone(self) -> Optional[DictRow]:
        return await_only(self._cursor.fetchone())

    def fetchall(self) -> list[DictRow]:
        return await_only(self._cursor.fetchall())

    @property
    def description(self) -> Any:
        return self._cursor.description

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    def __enter__(self) -> "BridgedCursor":
        return self

    def __exit__(self, *exc: object) -> None:
        await_only(self._cursor.close())


class BridgedConnection:
    """An ``AsyncConnection`` with the sync connection's methods."""

    def __init__(self, conn: "psycopg.AsyncConnection[DictRow]") -> None:
        self.async_connection = conn

    def execute(self, sql: Any, params: Sequence[Any] | Mapping[str, Any] = ()) -> BridgedCursor:
        return BridgedCursor(await_only(self.async_connection.execute(sql, params)))

    def cursor(self) -> BridgedCursor:
        return BridgedCursor(self.async_connection.cursor())

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """A transaction block: committed when the body ends, rolled back if it raises."""
        block = self.async_connection.transaction()
        await_only(block.__aenter__())
        try:
            yield
        except BaseException as exc:
            if not await_only(block.__aexit__(type(exc), exc, exc.__traceback__)):
                raise
        else:
            await_only(block.__aexit__(None, None, None))

    def __enter__(self) -> "BridgedConnection":
        await_only(self.async_connection.__aenter__())
        return self

    def __exit__(
        self, exc_type: Optional[type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        # A pooled connection is not closed here (psycopg leaves that to the pool).
        await_only(self.async_connection.__aexit__(exc_type, exc, tb))


class BridgedPool:
    """An ``AsyncConnectionPool`` (of one event loop) with the sync pool's methods."""

    def __init__(self, pool: "AsyncConnectionPool[Any]") -> None:
        self.async_pool = pool

    @property
    def max_size(self) -> int:
        return self.async_pool.max_size

    @property
    def conninfo(self) -> Any:
        return self.async_pool.conninfo

    @property
    def kwargs(self) -> Any:
        return self.async_pool.kwargs

    def getconn(self, timeout: Optional[float] = None) -> BridgedConnection:
        return BridgedConnection(await_only(self.async_pool.getconn(timeout=timeout)))

    def putconn(self, conn: BridgedConnection) -> None:
        await_only(self.async_pool.putconn(conn.async_connection))

    def check(self) -> None:
        await_only(self.async_pool.check())

    def close(self, timeout: float = 5.0) -> None:
        await_only(self.async_pool.close(timeout=timeout))


def close_in_its_loop(loop: asyncio.AbstractEventLoop, pool: BridgedPool) -> None:
    """Close an async pool from sync code in its own loop (awaited in a bridged call,
    else scheduled on it); a pool of a closed loop is only dropped."""
    if loop.is_closed():
        return
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        if in_bridge():
            pool.close(timeout=0.5)
        else:
            loop.create_task(pool.async_pool.close(timeout=0.5))
    elif loop.is_running():
        asyncio.run_coroutine_threadsafe(pool.async_pool.close(timeout=0.5), loop)
    else:
        loop.run_until_complete(pool.async_pool.close(timeout=0.5))

