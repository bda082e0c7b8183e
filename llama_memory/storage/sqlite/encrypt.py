"""Turning a plain SQLite store into an encrypted one (``llama-memory encrypt``): take the
store alone with SQLite's exclusive lock, export it into an encrypted file beside it,
check the copy (a digest of every table's rows and rowids, the integrity check), swap the
files and check once more before the plain backup goes. Any failure before that leaves the
plain store in place; Chroma's files are not touched (docs/security.md).
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from ...core.errors import EncryptionError, StorageError
from ..privacy import create_private_file
from .connection import DB_FILENAME, memory_path, open_here
from .driver import SQLCipherDriver, file_is_plain, quote

#: Suffix of the encrypted copy while it is made and checked.
WORK_SUFFIX = ".encrypting"
#: Suffix of the plain file kept until the encrypted one is checked in its place.
BACKUP_SUFFIX = ".plain-backup"
#: Seconds ``encrypt`` waits for the store to be free (a process that is closing it)
#: before it says the store is in use.
IN_USE_WAIT = 1.0


@dataclass
class EncryptReport:
    """What :func:`encrypt_store` did.

    Attributes:
        file: the store's database file, now encrypted.
        tables: tables copied and checked.
        rows: rows copied and checked (every table).
        backup: the plain copy kept (``keep_backup=True``), else None.
    """

    file: Path
    tables: int
    rows: int
    backup: Optional[Path] = None


def encrypt_store(
    path: Union[str, Path], key: str, *, keep_backup: bool = False, source: str = "the key given"
) -> EncryptReport:
    """Encrypt the plain SQLite store under the memory directory ``path`` with ``key``.

    Stop every process that uses the store first: one that has it open is refused before
    anything is read or copied.

    Raises:
        StorageError: no store under ``path``, or the store is in use.
        EncryptionError: the store is encrypted already; or the copy did not match the
            original (the plain store is left in place).
        ImportError: SQLCipher is not installed (``llama-index-memory-composable[encrypted]``).
    """
    driver = SQLCipherDriver(key, source=source)
    directory = memory_path(path)
    file = directory / DB_FILENAME
    plain = file_is_plain(file)
    if plain is None:
        raise StorageError(f"no memory store under {directory} (no {DB_FILENAME} there, or it is empty)")
    if plain is False:
        raise EncryptionError(f"the SQLite store {file} is encrypted already; nothing was changed")
    if open_here(file):
        raise StorageError(
            f"the store {directory} is open in this process: close its memories (and MemoryAdmin "
            "objects) first; nothing was changed"
        )
    work = file.with_name(file.name + WORK_SUFFIX)
    backup = file.with_name(file.name + BACKUP_SUFFIX)
    for leftover in (work, backup):
        if leftover.exists():
            raise StorageError(
                f"{leftover} exists: an earlier `llama-memory encrypt` stopped half way. The store "
                f"{file} is the one in use; remove {leftover.name} (after checking it) and run again"
            )
    module = driver.module
    alone = hold_alone(module, file)  # refused here, before anything is read or copied
    try:
        try:
            expected, tables, rows = _copy(module, alone, file, work, driver)
            _check(module, work, driver, expected, "the encrypted copy")
        finally:
            alone.close()
        _tidy(module, file)
        _swap_in(file, work, backup)
    except BaseException:
        work.unlink(missing_ok=True)
        raise
    try:
        from .store import SQLiteStore

        SQLiteStore(directory, driver=driver).close()  # opens as a memory would, migrations and all
        _check(module, file, driver, expected, "the encrypted store in place")
    except BaseException:
        os.replace(backup, file)  # the plain store goes back; the encrypted one is dropped
        raise
    if not keep_backup:
        backup.unlink()
    return EncryptReport(file=file, tables=tables, rows=rows, backup=backup if keep_backup else None)


def hold_alone(module: Any, file: Path, wait: float = IN_USE_WAIT) -> Any:
    """A connection holding the plain store ``file`` alone (SQLite's exclusive lock) until
    closed; StorageError when another process has it open after ``wait`` seconds, nothing
    read or written."""
    conn = module.connect(str(file), isolation_level=None, timeout=wait)
    try:
        # Never released until the connection closes; taken before the first access,
        # so this connection keeps the WAL index to itself and touches no -shm.
        conn.execute("PRAGMA locking_mode = EXCLUSIVE")
        conn.execute("BEGIN EXCLUSIVE")
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        conn.execute("COMMIT")
    except module.OperationalError as exc:
        conn.close()
        if "locked" not in str(exc) and "busy" not in str(exc):
            raise StorageError(f"cannot open {file} to encrypt it: {exc}; nothing was changed") from exc
        raise StorageError(
            f"the store {file.parent} is in use by another process (a memory, a worker, an MCP "
            "server or a llama-memory command has it open): stop the processes that use it and run "
            "`llama-memory encrypt` again; nothing was read or changed"
        ) from None
    except BaseException:
        conn.close()
        raise
    return conn


def _tidy(module: Any, file: Path) -> None:
    """Open and close ``file`` so the last connection removes the -wal and -shm files."""
    try:
        conn = module.connect(str(file), isolation_level=None, timeout=IN_USE_WAIT)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            conn.close()
    except module.Error as exc:
        raise StorageError(f"cannot reopen {file} after copying it: {exc}; nothing was changed") from exc


def _copy(module: Any, conn: Any, file: Path, work: Path, driver: SQLCipherDriver) -> tuple[str, int, int]:
    """Export ``file`` into the encrypted ``work``; the original's digest, tables, rows."""
    create_private_file(work)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute(f"ATTACH DATABASE {quote(str(work))} AS encrypted KEY {driver.key_clause(work)}")
        conn.execute("BEGIN IMMEDIATE")
        digest, tables, rows = _digest(conn)
        conn.execute("SELECT sqlcipher_export('encrypted')")
        version = int(conn.execute("PRAGMA main.user_version").fetchone()[0])
        conn.execute(f"PRAGMA encrypted.user_version = {version}")
        conn.execute("COMMIT")
        conn.execute("DETACH DATABASE encrypted")
    except module.Error as exc:
        raise StorageError(f"cannot copy {file} into an encrypted file: {exc}") from exc
    return digest, tables, rows


def _check(module: Any, file: Path, driver: SQLCipherDriver, expected: str, what: str) -> None:
    """EncryptionError unless ``file`` opens, passes the integrity check, has ``expected``."""
    conn = driver.connect(str(file), 30.0)
    try:
        integrity = conn.execute("PRAGMA integrity_check").fetchone()[0]
        digest, _, _ = _digest(conn)
    except module.Error as exc:
        raise EncryptionError(f"{what} ({file}) cannot be read back: {exc}; the plain store is unchanged") from exc
    finally:
        conn.close()
    if integrity != "ok" or digest != expected:
        raise EncryptionError(
            f"{what} ({file}) does not match the plain store (integrity check: {integrity}); "
            "the plain store is unchanged"
        )


def _digest(conn: Any) -> tuple[str, int, int]:
    """One digest of every table's rows (with rowids, which FTS5 refers to) and the
    schema version; with the number of tables and rows."""
    total = hashlib.sha256()
    total.update(str(conn.execute("PRAGMA user_version").fetchone()[0]).encode())
    tables = conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND rootpage > 0 "
        "AND name NOT LIKE 'sqlite_%' ORDER BY name"
    )
    names = [row[0] for row in tables]
    rows = 0
    for name in names:
        total.update(name.encode())
        try:
            cursor = conn.execute(f'SELECT rowid, * FROM "{name}" ORDER BY rowid')
        except Exception:  # a WITHOUT ROWID table: its scan is in primary key order
            cursor = conn.execute(f'SELECT * FROM "{name}"')
        for row in cursor:
            total.update(repr(tuple(row)).encode())
            rows += 1
    return total.hexdigest(), len(names), rows


def _swap_in(file: Path, work: Path, backup: Path) -> None:
    """Put ``work`` in place of ``file``, kept as ``backup``; StorageError (nothing moved)
    while another connection has the store open."""
    for extra in ("-wal", "-shm"):
        sibling = file.with_name(file.name + extra)
        if sibling.exists():
            # The last connection to close removes them: another process has the store open.
            raise StorageError(
                f"the store {file.parent} is in use ({sibling.name} exists): stop the processes "
                "that use it (memories, workers, MCP servers) and run `llama-memory encrypt` again; "
                "nothing was changed"
            )
    os.replace(file, backup)
    os.replace(work, file)
