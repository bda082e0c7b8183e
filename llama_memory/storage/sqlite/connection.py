"""The connection of the SQLite store: opening, transactions, migrations, meta, and
SQLite's spelling of the shared SQL algorithms (:class:`SQLiteDialect`).
"""

from __future__ import annotations

import os
import re
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar, Optional

from ...core.errors import StorageError
from ..privacy import create_private_file, make_private_dir, warn_if_shared
from ..sql.dialect import Dialect, insert_sql
from ..sql.records import WordCountCache
from ..sql.store import MetaStore
from .driver import SQLiteDriver, sqlite_driver
from .schema import MIGRATIONS, sql_statements


class SQLiteDialect(Dialect):
    """``?`` placeholders, ``IN (?, ...)`` lists, JSON kept as text, 0/1 booleans."""

    name = "SQLite"
    true, false = "1", "0"
    # A write transaction (BEGIN IMMEDIATE) holds the file's one write lock from its start.
    row_lock = skip_locked = ""
    #: Values per ``IN`` list: well under SQLite's bound-parameter limit (999 before 3.32).
    max_list = 500

    def same_as(self, column: str) -> str:
        return f"{column} IS ?"

    def contains(self, column: str) -> str:
        return f"instr({column}, ?) > 0"

    def utc_day(self, column: str) -> str:
        return f"date({column}, 'unixepoch')"

    def insert(
        self, conn: Any, table: str, values: Mapping[str, Any], returning: Optional[str] = None
    ) -> Optional[int]:
        """The row's ``rowid`` for ``returning`` (the table's ``INTEGER PRIMARY KEY``)."""
        cursor = conn.execute(insert_sql(table, list(values)), list(values.values()))
        return int(cursor.lastrowid or 0) if returning is not None else None

    def delete(
        self, conn: Any, table: str, where: str, params: Sequence[Any], returning: str
    ) -> list[Any]:
        """Read, then deleted (the write transaction holds the file; no ``RETURNING``
        before SQLite 3.35)."""
        rows = conn.execute(f"SELECT {returning} FROM {table} WHERE {where}", params).fetchall()
        if rows:
            conn.execute(f"DELETE FROM {table} WHERE {where}", params)
        return list(rows)

    def user_tables(self, conn: Any) -> list[str]:
        tables = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        names = [row[0] for row in tables if not row[0].startswith("sqlite_")]
        return [
            name
            for name in names
            if {"tenant_id", "user_id"} <= {col[1] for col in conn.execute(f'PRAGMA table_info("{name}")')}
        ]

    def lock(self, conn: Any, key: str) -> None:
        """Nothing: ``BEGIN IMMEDIATE`` already holds the file's one write lock."""


#: The dialect of every SQLite store.
SQLITE = SQLiteDialect()


#: File name of the system of record inside a memory directory.
DB_FILENAME = "memory.sqlite3"

#: What a memory directory holds of the store: the database and its WAL files, and
#: Chroma's directory and lock file (storage.chroma's CHROMA_DIRNAME and OPEN_LOCK).
STORE_ENTRIES = (DB_FILENAME, f"{DB_FILENAME}-wal", f"{DB_FILENAME}-shm", "chroma", "chroma.lock")

# A database URL given as a path ("sqlite:///m.db", "postgresql://..."): a scheme of two
# characters or more, then ":/" (one letter is a Windows drive, "C:/..."; a Path made of
# "sqlite:///m.db" reads "sqlite:/m.db").
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:/")


def memory_path(path: object) -> Path:
    """``path`` as a directory ``Path``; TypeError for a non-path, ValueError for a URL (a
    PostgreSQL URL goes to ``store=``)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"path takes a directory as a str or pathlib.Path, not {type(path).__name__} "
            f"{path!r}: pass e.g. path='./memory'"
        )
    text = str(os.fspath(path))
    if _URL.match(text):
        raise ValueError(
            f"path={text!r} looks like a database URL, but path is a directory where "
            "llama-memory keeps its SQLite file and Chroma index (e.g. path='./memory'); "
            "for a PostgreSQL database pass store='postgresql://...' instead of path"
        )
    return Path(text)


def store_exists(path: Path | str) -> bool:
    """Whether ``path`` is a memory directory holding a store (its database file)."""
    return (Path(path) / DB_FILENAME).is_file()


class SQLiteConnection(MetaStore):
    """The plumbing every part of :class:`~llama_memory.storage.sqlite.SQLiteStore`
    shares: one connection for all threads behind a lock (WAL mode and a busy timeout let
    processes share the file), nesting transactions, migrations, meta. Arguments as the
    store's; EncryptionError when the file's encryption does not match the driver's key,
    before anything is written.
    """

    dialect: ClassVar[Dialect] = SQLITE

    def __init__(
        self, path: Optional[Path | str] = None, *, timeout: float = 30.0, driver: Optional[SQLiteDriver] = None
    ) -> None:
        self._lock = threading.RLock()
        self._depth = 0  # how many transaction() blocks are open (nested ones join)
        self._after_commit: list[Callable[[], object]] = []
        self._word_counts = WordCountCache()
        # Commits of this connection: PRAGMA data_version only counts other connections'.
        self._commits = 0
        #: How the file is opened (plain or SQLCipher) and with which modes.
        # (An in-memory database has no file to protect: the environment's key is for files.)
        self.driver = driver if driver is not None else sqlite_driver(environ=path is not None)
        if path is None:
            self.file: Optional[Path] = None
            target = ":memory:"
        else:
            target = str(self._prepare_file(memory_path(path)))
        self._error_types = self.driver.errors
        with self._errors("open"):
            self._conn = self.driver.connect(target, timeout)
            try:
                if self.file is not None:
                    _switch_to_wal(self._conn, timeout, self._error_types)
                    self._conn.execute("PRAGMA synchronous=NORMAL")
                self._conn.execute("PRAGMA foreign_keys=ON")
                self._migrate()
            except BaseException:
                self._conn.close()
                raise
        self._closed = False
        _OPEN.add(self)

    def _prepare_file(self, directory: Path) -> Path:
        """Create the directory (owner-only unless the driver says otherwise), refuse what
        cannot be opened, warn once about a store others can read; the database file."""
        if directory.exists() and not directory.is_dir():
            raise StorageError(f"memory path {directory} exists and is not a directory")
        self.file = directory / DB_FILENAME
        new_store = not self.file.exists()
        try:
            if new_store and self.driver.owner_only:
                make_private_dir(directory)
            else:
                directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create memory directory {directory}: {exc}") from exc
        for part in (directory, self.file):
            # Said at once: SQLite would open a read-only file and fail on the first put.
            if part.exists() and not os.access(part, os.W_OK):
                raise StorageError(
                    f"memory path {part} is read-only: llama-memory writes every message "
                    "there; make it writable, or open a copy of the directory"
                )
        self.driver.check_file(self.file)
        if new_store and self.driver.owner_only:
            try:
                create_private_file(self.file)
            except OSError as exc:
                raise StorageError(f"cannot create {self.file}: {exc}") from exc
        elif self.driver.owner_only:
            warn_if_shared(directory, STORE_ENTRIES)
        return self.file

    # -- plumbing -----------------------------------------------------------------

    @property
    def location(self) -> str:
        """The database file, or ``":memory:"``."""
        return str(self.file) if self.file is not None else ":memory:"

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except self._error_types as exc:
            raise StorageError(f"SQLite store {self.location}: {action} failed: {exc}") from exc

    @contextmanager
    def transaction(self, action: str) -> Iterator[sqlite3.Connection]:
        """Yields the connection."""
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self._conn
                finally:
                    self._depth -= 1
                return
            with self._errors(action):
                self._conn.execute("BEGIN IMMEDIATE")
                self._depth = 1
                try:
                    yield self._conn
                    self._conn.execute("COMMIT")
                    self._commits += 1
                except BaseException:
                    self._after_commit.clear()
                    if self._conn.in_transaction:
                        self._conn.execute("ROLLBACK")
                    raise
                finally:
                    self._depth = 0
            callbacks, self._after_commit = self._after_commit, []
        # Outside the lock: a callback (indexing) takes its source's lock, and sources
        # take that lock before this one.
        for callback in callbacks:
            callback()

    def after_commit(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` once the open transaction commits (dropped on rollback)."""
        with self._lock:
            if self._depth:
                self._after_commit.append(callback)
                return
        callback()

    def query(self, action: str, sql: str, params: Sequence = ()) -> list[sqlite3.Row]:
        with self._lock, self._errors(action):
            return self._conn.execute(sql, params).fetchall()

    def _migrate(self) -> None:
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if version > len(MIGRATIONS):
            raise StorageError(
                f"SQLite store {self.location} has schema version {version}, newer than this "
                f"release of llama-memory understands ({len(MIGRATIONS)}): upgrade llama-memory"
            )
        for step in range(version, len(MIGRATIONS)):
            with self.transaction(f"migration to schema version {step + 1}") as conn:
                # Read again under the write lock: another process opening the same new
                # directory at the same moment may have applied this step already.
                if conn.execute("PRAGMA user_version").fetchone()[0] > step:
                    continue
                for statement in sql_statements(MIGRATIONS[step]):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {step + 1}")

    def ensure_schema(self, component: str, migrations: Sequence[str]) -> None:
        """Apply a component's migrations (entry i: version i to i + 1), its version in meta."""
        key = f"schema:{component}"
        with self._lock:
            rows = self.query("read schema version", "SELECT value FROM meta WHERE key = ?", (key,))
            version = int(rows[0]["value"]) if rows else 0
            if version > len(migrations):
                raise StorageError(
                    f"SQLite store {self.location}: the {component!r} schema is at version "
                    f"{version}, newer than this release understands ({len(migrations)}): "
                    "upgrade llama-memory"
                )
            for step in range(version, len(migrations)):
                with self.transaction(f"{component} migration to version {step + 1}") as conn:
                    done = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
                    if done is not None and int(done[0]) > step:
                        continue  # applied meanwhile by another process (see _migrate)
                    for statement in sql_statements(migrations[step]):
                        conn.execute(statement)
                    conn.execute(
                        "INSERT INTO meta (key, value) VALUES (?, ?) "
                        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                        (key, str(step + 1)),
                    )

    @property
    def schema_version(self) -> int:
        """The schema version of the database."""
        return int(self.query("read schema version", "PRAGMA user_version")[0][0])

    def close(self) -> None:
        """Close the connection (further calls raise StorageError)."""
        with self._lock:
            self._conn.close()
            self._closed = True

    # -- identity, expiry and reconciliation ------------------------------------------------

    def change_stamp(self, wait: bool = True) -> Optional[tuple[int, int]]:
        """Changes whenever any connection commits to the file (no table read); with
        ``wait=False``, None instead of waiting for another thread's write."""
        if not self._lock.acquire(blocking=wait):
            return None
        try:
            return self.data_version(), self._commits
        finally:
            self._lock.release()

    def _stamp_after_commit(self) -> tuple[int, int]:
        """Inside a write: the :meth:`change_stamp` once it commits (stale if it fails)."""
        with self._lock:
            return self.data_version(), self._commits + 1

    def data_version(self) -> int:
        """Changes when another connection commits; this one's own commits leave it."""
        return int(self.query("read data version", "PRAGMA data_version")[0][0])


#: The connections open in this process (the file's own locks cannot tell: see open_here).
_OPEN: "weakref.WeakSet[SQLiteConnection]" = weakref.WeakSet()


def open_here(file: Path) -> bool:
    """Whether a store object of this process has ``file`` open (POSIX locks belong to the
    process, so SQLCipher's library cannot see this process's connections)."""
    target = os.path.realpath(file)
    return any(
        c.file is not None and not c._closed and os.path.realpath(c.file) == target for c in list(_OPEN)
    )


def _switch_to_wal(conn: sqlite3.Connection, timeout: float, errors: tuple[type[Exception], ...]) -> None:
    """Put the file in WAL mode, retrying for up to ``timeout`` seconds: SQLite reports a
    racing opener's "database is locked" at once, without its busy timeout."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except errors as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)
