"""The connection pool of the PostgreSQL store: transactions that span every port,
migrations under an advisory lock, meta, and errors that name the server."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import weakref
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional, Union

import greenlet
import psycopg
from psycopg.rows import DictRow, dict_row
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolClosed, PoolTimeout

from ...core.asyncbridge import await_only, in_bridge, on_exit
from ...core.errors import StorageError
from ..sql.dialect import Dialect
from ..sql.records import WordCountCache
from ..sql.store import MetaStore
from .bridged import BridgedPool, LoopPool, close_in_its_loop
from .changes import ChangeWatch, read_snapshot
from .dialect import POSTGRES
from .schema import migrate
from .urls import describe_url, shown_store, url_without_password

#: A connection of the pool: rows come back as dicts.
Connection = psycopg.Connection[DictRow]

logger = logging.getLogger(__name__)

#: Stores of one process with pools of their own on one database, above which opening
#: another logs a warning (once per database): each keeps a connection while open.
MANY_OWN_POOLS = 16

#: Seconds a call waits for a pooled connection before asking the server itself whether
#: it is up: a call to a dead server fails in about this long, not the whole timeout.
PROBE_AFTER = 0.5


class ServerUnreachable(psycopg.OperationalError):
    """A new connection to the server failed (it is down, restarting or cut off): the
    store raises it, as a StorageError, at once instead of waiting for the pool."""


@dataclass
class _Held:
    """The open transaction of one thread or bridged call and what waits for its commit."""

    conn: Any
    after: list[Callable[[], object]] = field(default_factory=list)


@dataclass
class _Lent:
    """A connection out of its pool: the pool to give it back to, and the settings of
    an application's connection to restore first (None for the store's own)."""

    pool: Any
    conn: Any
    saved: Optional[tuple[bool, Any]] = None
    #: Rows read ahead for a later read of the same hold (:meth:`PostgresConnection.read_ahead`).
    ahead: dict[Hashable, Any] = field(default_factory=dict)


class _OwnPools:
    """How many stores of this process hold their own pool on each database: past
    :data:`MANY_OWN_POOLS`, a warning says to share one pool."""

    def __init__(self) -> None:
        self._open: dict[str, int] = {}
        self._warned: set[str] = set()
        self._lock = threading.Lock()

    def opened(self, location: str) -> None:
        with self._lock:
            count = self._open[location] = self._open.get(location, 0) + 1
            warn = count > MANY_OWN_POOLS and location not in self._warned
            if warn:
                self._warned.add(location)
        if warn:
            logger.warning(
                "%d PostgreSQL stores of this process hold a pool of their own on %s, each with "
                "at least one connection open: for a memory per user, open them all on one "
                "psycopg_pool.ConnectionPool (store=pool; docs/howto/postgres.md, 'Many users "
                "in one process')",
                count,
                location,
            )

    def closed(self, location: str) -> None:
        with self._lock:
            self._open[location] = max(0, self._open.get(location, 0) - 1)


_own_pools = _OwnPools()


class PostgresConnection(MetaStore):
    """The plumbing every part of :class:`~llama_memory.storage.postgres.PostgresStore`
    shares: a bounded pool, thread-local transactions that nest, migrations, meta.

    Args:
        url: a ``postgresql://`` URL, or an open ``psycopg_pool.ConnectionPool`` of the
            application's: its connections are borrowed (autocommit and dict rows set
            back on return), the settings below are the pool's, and :meth:`close`
            leaves it open.
        max_size: most connections this store object opens (behind pgbouncer, keep the
            sum over workers under its pool size).
        max_idle: seconds an idle connection above ``min_size`` is kept.
        max_lifetime: seconds after which a connection is replaced.
        prepare_threshold: psycopg's; ``None`` behind pgbouncer in transaction mode.
        timeout: seconds to wait for a connection before raising StorageError.

    When no connection comes within :data:`PROBE_AFTER` seconds the store probes the
    server and raises at once while it is down. ``psycopg`` errors are re-raised as
    StorageError naming the server (never the password); a failed write is never retried.
    """

    dialect: ClassVar[Dialect] = POSTGRES

    def __init__(
        self,
        url: Union[str, "ConnectionPool[Any]"],
        *,
        min_size: int = 1,
        max_size: int = 4,
        max_idle: float = 300.0,
        max_lifetime: float = 1800.0,
        prepare_threshold: Optional[int] = 5,
        timeout: float = 10.0,
    ) -> None:
        # The open transaction of each thread or bridged call (a greenlet: many run in the
        # event loop's thread, so a thread-local would mix them up).
        self._held_by: dict[greenlet.greenlet, _Held] = {}
        # The async pools of bridged calls, one per event loop (that owns its connections).
        self._async_pools: dict[asyncio.AbstractEventLoop, BridgedPool] = {}
        # The connection each bridged call keeps for all its statements until it ends.
        self._pinned: dict[greenlet.greenlet, _Lent] = {}
        # Threads (their main greenlets) inside one_connection(): they pin one too.
        self._holding: set[greenlet.greenlet] = set()
        self._timeout = timeout
        # Set when a call found the server unreachable: the next call asks the server
        # directly (failing fast while it is down) and, once it answers, starts afresh.
        self._down = False
        self._closed = False
        self._counted: Optional[weakref.finalize] = None  # see _OwnPools
        self._recovering = threading.Lock()
        self._word_counts = WordCountCache()
        self._changes = ChangeWatch()
        # The server's snapshot as the pool's check read it (_check), for the change token.
        self._checked: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
        # What else the check read, for the read-ahead of the hold it hands the connection to.
        self._checked_ahead: weakref.WeakKeyDictionary[Any, dict[Hashable, Any]] = weakref.WeakKeyDictionary()
        if isinstance(url, ConnectionPool):
            if url.closed:
                raise ValueError(
                    f"the ConnectionPool {url.name!r} is closed: open it first (pool.open(), or "
                    "ConnectionPool(..., open=True)), or pass the database URL instead"
                )
            self._owns_pool = False
            self._pool: ConnectionPool[Any] = url
            self.location = f"pool {url.name!r}"
            dsn = url.conninfo
            if not isinstance(dsn, str):  # a function making it: ask a connection (libpq
                with self._errors("connect"), url.connection(timeout=timeout) as conn:
                    dsn = conn.info.dsn  # leaves the password out)
            self.location = describe_url(dsn)
            #: The URL of the database, without its password.
            self.url = url_without_password(dsn)
            self._migrate_or_close()
            return
        if not isinstance(url, str) or not url.startswith(("postgresql://", "postgres://")):
            raise ValueError(
                f"a PostgreSQL store takes a URL such as 'postgresql://user@host:5432/dbname' "
                f"or a psycopg_pool.ConnectionPool, not {shown_store(url)}"
            )
        if not 1 <= min_size <= max_size:
            raise ValueError(f"need 1 <= min_size <= max_size, got min_size={min_size}, max_size={max_size}")
        self.location = describe_url(url)
        self.url = url_without_password(url)
        self._owns_pool = True
        self._pool_settings: dict[str, Any] = {
            "conninfo": url,
            "min_size": min_size,
            "max_size": max_size,
            "max_idle": max_idle,
            "max_lifetime": max_lifetime,
            # Checked when taken: a connection cut by the server or a proxy is replaced.
            "check": self._check,
            "connection_class": Connection,
            "kwargs": {"autocommit": True, "row_factory": dict_row, "prepare_threshold": prepare_threshold},
            "timeout": timeout,
            "name": f"llama-memory {self.location}",
        }
        self._pool = ConnectionPool(**self._pool_settings, open=False)
        with self._errors("connect"):
            # A server that is down says why at once (the pool would wait out its timeout).
            reason = self._probe()
            if reason is not None:
                raise ServerUnreachable(f"cannot connect to the server: {reason}")
            self._pool.open(wait=True, timeout=timeout)
        _own_pools.opened(self.location)
        # Counted out by close() (also when migrating fails), or when collected unclosed
        # (an app that drops its memories: psycopg_pool then closes the pool itself).
        self._counted = weakref.finalize(self, _own_pools.closed, self.location)
        self._migrate_or_close()

    @property
    def supports_async(self) -> bool:
        """Whether ``aget``/``aput`` run on the event loop (an application's pool: in a thread)."""
        return self._owns_pool

    def _current_pool(self) -> Any:
        """The sync pool, or inside a bridged call the running loop's async pool."""
        if not in_bridge():
            return self._pool
        if self._closed:
            raise PoolClosed(f"the store {self.location} is closed")
        if not self._owns_pool:
            raise RuntimeError(
                "a PostgreSQL store on an application's ConnectionPool serves async calls from a "
                "worker thread: run the sync call, not a bridged one"
            )
        loop = asyncio.get_running_loop()
        pool = self._async_pools.get(loop)
        if pool is not None:
            return pool
        for old in [old for old in self._async_pools if old.is_closed()]:
            # asyncio.run() closed its loop: the connections close when collected.
            del self._async_pools[old]
        settings = {
            **self._pool_settings,
            "check": AsyncConnectionPool.check_connection,
            "connection_class": psycopg.AsyncConnection,
        }
        fresh = BridgedPool(LoopPool(**settings, open=False))
        await_only(fresh.async_pool.open(wait=False))
        pool = self._async_pools.setdefault(loop, fresh)
        if pool is not fresh:  # another call of this loop opened one meanwhile
            fresh.close(timeout=0.5)
        return pool

    def _migrate_or_close(self) -> None:
        try:
            self._migrate()
        except BaseException:
            self.close()
            raise

    # -- plumbing -----------------------------------------------------------------

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except (psycopg.Error, PoolTimeout) as exc:
            raise StorageError(f"PostgreSQL store {self.location}: {action} failed: {exc}") from exc

    @contextmanager
    def _connection(self) -> Iterator[Connection]:
        """A connection with autocommit and dict rows; inside a bridged call or
        :meth:`one_connection`, the one it keeps (given back at its end, or on a failure)."""
        me = greenlet.getcurrent()
        keep = in_bridge() or me in self._holding
        lent = self._pinned.get(me) if keep else None
        if lent is None:
            lent = self._borrow()
            if keep:
                self._pinned[me] = lent
                if in_bridge():
                    on_exit(lambda: self._unpin(me))  # (one_connection() gives it back itself)
        try:
            with lent.conn:  # as ConnectionPool.connection(): a failed body rolls back
                yield lent.conn
        except BaseException:
            if keep:
                self._unpin(me)
            raise
        finally:
            if not keep:
                self._give_back(lent)

    def _borrow(self) -> "_Lent":
        pool, conn = self._take()
        saved = None
        if not self._owns_pool:
            saved = conn.autocommit, conn.row_factory
            conn.autocommit, conn.row_factory = True, dict_row
        return _Lent(pool, conn, saved, self._checked_ahead.pop(conn, {}))

    def _give_back(self, lent: "_Lent") -> None:
        if lent.saved is not None:
            try:
                lent.conn.autocommit, lent.conn.row_factory = lent.saved
            except psycopg.Error:
                pass  # a broken connection: the pool discards it on return
        lent.pool.putconn(lent.conn)

    @contextmanager
    def one_connection(self) -> Iterator[None]:
        """The body's statements, in this thread, share one connection, taken and checked
        once (a ``get()`` makes 15-20). Nested uses join; a bridged call has one already."""
        me = greenlet.getcurrent()
        if in_bridge() or me in self._holding:
            yield
            return
        self._holding.add(me)
        try:
            yield
        finally:
            self._holding.discard(me)
            self._unpin(me)

    def _unpin(self, me: greenlet.greenlet) -> None:
        lent = self._pinned.pop(me, None)
        if lent is not None:
            self._give_back(lent)

    def _take(self) -> tuple["ConnectionPool[Any]", Connection]:
        """A checked connection and its pool: ServerUnreachable after :data:`PROBE_AFTER`
        s when the server is down, PoolTimeout when all stay in use for the timeout."""
        if self._down:
            self._recover()
        deadline = time.monotonic() + self._timeout
        for attempt in (1, 2):  # a second time only if the pool was replaced meanwhile
            pool = self._current_pool()
            try:
                try:
                    return pool, pool.getconn(timeout=min(PROBE_AFTER, self._timeout))
                except PoolTimeout:
                    pass
                reason = self._probe()
                if reason is not None:
                    self._down = True
                    raise ServerUnreachable(f"cannot connect to the server: {reason}") from None
                # The server answers: replace at once the idle connections it (or a proxy) cut.
                pool.check()
                try:
                    return pool, pool.getconn(timeout=max(deadline - time.monotonic(), 0.001))
                except PoolTimeout:
                    raise PoolTimeout(
                        f"no connection free after {self._timeout:g} s: the server answers, but all "
                        f"{pool.max_size} connections of the pool stay in use (a larger max_size, or "
                        "fewer threads per process)"
                    ) from None
            except PoolClosed:
                if attempt == 2 or self._closed or pool is self._current_pool():
                    raise
        raise AssertionError("unreachable")  # pragma: no cover

    def _probe(self) -> Optional[str]:
        """None when a new connection opens, else libpq's reason (no password)."""
        conninfo = self._pool.conninfo
        kwargs = self._pool.kwargs
        args: dict[str, Any] = {
            **(kwargs() if callable(kwargs) else kwargs or {}),  # type: ignore[operator]
            "connect_timeout": max(2, round(min(self._timeout, 5))),
        }
        dsn = conninfo() if callable(conninfo) else conninfo
        try:
            if in_bridge():  # the loop runs on while the server is asked
                aconn = await_only(psycopg.AsyncConnection.connect(dsn, **args))
                await_only(aconn.close())
            else:
                psycopg.connect(dsn, **args).close()
        except psycopg.Error as exc:
            return " ".join(str(exc).split()) or type(exc).__name__
        return None

    def _recover(self) -> None:
        """After a call found the server down: ask again (ServerUnreachable if still down);
        once it answers, replace an own pool rather than wait out its back-off (an
        application's pool is checked instead)."""
        # Asked outside the lock, which would block the other bridged calls of the loop.
        reason = self._probe()
        if reason is not None:
            raise ServerUnreachable(f"cannot connect to the server: {reason}")
        old: Any = None
        with self._recovering:
            if not self._down:
                return  # another thread recovered meanwhile
            if self._owns_pool and not self._closed:
                old, self._pool = self._pool, ConnectionPool(**self._pool_settings, open=False)
                self._pool.open(wait=False)
                old_async, self._async_pools = self._async_pools, {}
            self._down = False
        if old is None:
            self._current_pool().check()
            return
        old.close(timeout=0.5)  # connections still out are closed on their return
        for loop, pool in old_async.items():
            close_in_its_loop(loop, pool)

    def read_ahead(self) -> Optional[dict[Hashable, Any]]:
        """Inside :meth:`one_connection`: a dict for rows one read fetched for a later read
        of the same ``get()`` (emptied by every transaction); None outside."""
        lent = self._pinned.get(greenlet.getcurrent())
        return None if lent is None else lent.ahead

    def holds_connection(self) -> bool:
        """Whether this thread's (or bridged call's) statements share one connection."""
        return in_bridge() or greenlet.getcurrent() in self._holding

    def _held(self) -> Optional[_Held]:
        return self._held_by.get(greenlet.getcurrent())

    @contextmanager
    def transaction(self, action: str) -> Iterator[Connection]:
        """Yields the connection the transaction holds (every port's write in this thread
        goes through it)."""
        held = self._held()
        if held is not None:
            yield held.conn
            return
        me = greenlet.getcurrent()
        callbacks: list[Callable[[], object]] = []
        with self._errors(action):
            with self._connection() as conn:
                # This write may change what was read ahead (read after the connection is
                # taken: a hold's first statement gets with it what the pool's check read).
                ahead = self.read_ahead()
                if ahead:
                    ahead.clear()
                self._held_by[me] = held = _Held(conn)
                try:
                    with conn.transaction():
                        yield conn
                        # Before the commit: this store's own write, not another's (changes.py).
                        own = conn.execute("SELECT pg_current_xact_id_if_assigned()::text AS x").fetchone()
                        self._changes.note_own(own["x"] if own else None)
                    callbacks = held.after
                finally:
                    del self._held_by[me]
        for callback in callbacks:  # committed: run what waited for it
            callback()

    def after_commit(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` once this thread's transaction commits (dropped on rollback)."""
        held = self._held()
        if held is not None:
            held.after.append(callback)
            return
        callback()

    def query(
        self, action: str, sql: Any, params: Sequence[Any] | Mapping[str, Any] = ()
    ) -> list[dict[str, Any]]:
        """Run one statement (in this thread's open transaction, if any); its rows."""
        held = self._held()
        if held is not None:
            cur = held.conn.execute(sql, params)
            return cur.fetchall() if cur.description else []
        with self._errors(action), self._connection() as conn:
            cur = conn.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def change_token(self) -> Hashable:
        """Read from the server's snapshot (changes.py), so data read after it is never
        older than the token says; the one the pool's check read as it handed the
        connection out serves once (no statement of its own in a ``get()``)."""
        held = self._held()
        if held is not None:
            return self._changes.token(read_snapshot(held.conn))
        with self._errors("read change token"), self._connection() as conn:
            checked = self._checked.pop(conn, None)
            return self._changes.token(checked if checked is not None else read_snapshot(conn))

    def _check(self, conn: Connection) -> None:
        """The pool's check (a round trip anyway): reads the snapshot for :meth:`change_token`."""
        self._checked[conn] = read_snapshot(conn)

    def _migrate(self) -> None:
        with self.transaction("migrate the schema") as conn:
            migrate(conn, self.location)

    @property
    def schema_version(self) -> int:
        """The schema version of the database."""
        rows = self.query("read schema version", "SELECT coalesce(max(version), 0) AS v FROM llama_memory_migrations")
        return int(rows[0]["v"])

    def close(self) -> None:
        """Close the pool (further calls raise StorageError); not an application's."""
        if self._counted is not None:
            self._counted()  # once: a finalizer runs at most once
        self._closed = True
        if self._owns_pool:
            with self._recovering:
                self._pool.close()
                pools, self._async_pools = self._async_pools, {}
            for loop, pool in pools.items():
                close_in_its_loop(loop, pool)
