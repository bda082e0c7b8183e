"""Turning a plain SQLite store into an encrypted one: ``llama-memory encrypt``.

Copy, verify, swap, nothing lost:

1. the store is taken alone, with SQLite's exclusive lock (the lock every process that
   has the store open shares): a store another process has open is refused there, before
   anything is read, checkpointed or copied;
2. the plain file is copied into a new encrypted file beside it (SQLCipher's
   ``sqlcipher_export``, every table, index, trigger and FTS5 index, and the schema
   version) while that lock keeps every other process out;
3. the copy is checked against the original: every table's rows (with their rowids,
   which the lexical index refers to) give the same digest, and SQLite's integrity
   check passes;
4. the files are swapped (the plain one kept as a backup), the encrypted store is
   opened as a memory would open it and checked once more; only then is the backup
   removed (unless asked to keep it). Any failure before that leaves the plain store
   where it was.

The Chroma index beside it is not touched: its vectors and ids stay as they are
(see docs/security.md: Chroma's files are not encrypted).
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

    Stop every process that uses the store first: a process that still holds the old
    file open would keep writing to it. The command asks SQLite's locks first, and
    refuses a store another process has open before it reads or copies anything.

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
    """A connection to the plain store ``file`` that holds it alone until it is closed:
    SQLite's exclusive lock on the file, the lock every connection of an open memory
    (a worker, an MCP server, a command) shares while it has the store open. So the
    question "does another process use the store?" is asked of SQLite's own locks, at
    once: :class:`StorageError` saying so when another process has it open (after
    ``wait`` seconds, for one that is closing it), nothing read or written."""
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
    """Open and close ``file`` as any process does: the last connection to close removes
    the -wal and -shm files. (The connection that held the store alone kept its WAL
    index to itself, so a -shm left by a process that crashed is still there.)"""
    try:
        conn = module.connect(str(file), isolation_level=None, timeout=IN_USE_WAIT)
        try:
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        finally:
            conn.close()
    except module.Error as exc:
        raise StorageError(f"cannot reopen {file} after copying it: {exc}; nothing was changed") from exc


def _copy(module: Any, conn: Any, file: Path, work: Path, driver: SQLCipherDriver) -> tuple[str, int, int]:
    """Export ``file`` (held alone by ``conn``) into the encrypted ``work``; the digest
    of the original, with its table and row counts."""
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
    """EncryptionError unless ``file`` opens with the key, passes the integrity check
    and has the digest ``expected``."""
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
    """One digest of every table's rows (rowids included: the FTS5 indexes refer to
    them) and of the schema version; with the number of tables and rows."""
    total = hashlib.sha256()
    total.update(str(conn.execute("PRAGMA user_version").fetchone()[0]).encode())
    names = [
        row[0]
        for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND rootpage > 0 "
            "AND name NOT LIKE 'sqlite_%' ORDER BY name"
        )
    ]
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
    """Put ``work`` in place of ``file``, keeping ``file`` as ``backup``; StorageError
    (nothing moved) while another connection has the store open."""
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
