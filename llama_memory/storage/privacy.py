"""Privacy on disk: owner-only files (the directory and Chroma's ``0700``, the database,
lock and export files ``0600``, whatever the umask; a store with wider modes is left as
it is, with one warning per process), and where the encryption key comes from.
"""

from __future__ import annotations

import logging
import os
import shlex
import stat
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any, Optional, Union

logger = logging.getLogger(__name__)

#: The environment variable read for the encryption key when none is passed.
ENCRYPTION_KEY_ENV = "LLAMA_MEMORY_ENCRYPTION_KEY"

#: Mode of a directory the library creates: its owner only.
PRIVATE_DIR = 0o700
#: Mode of a file the library creates: its owner reads and writes it, no one else.
PRIVATE_FILE = 0o600

_warned: set[str] = set()
_warned_lock = threading.Lock()


def environment_key() -> Optional[str]:
    """The encryption key set in :data:`ENCRYPTION_KEY_ENV`, or None (unset or empty)."""
    return os.environ.get(ENCRYPTION_KEY_ENV) or None


def check_passphrase(key: Any, source: str = "encryption_key") -> None:
    """TypeError for a passphrase that is not a string; ValueError naming ``source`` for a
    blank one or NUL."""
    if not isinstance(key, str):
        raise TypeError(f"{source} takes a passphrase (a string), not {type(key).__name__}")
    if not key.strip():
        raise ValueError(
            f"{source} is {'empty' if not key else 'blank (only whitespace)'}: an encryption "
            "key must be a passphrase with something in it"
        )
    if "\x00" in key:
        raise ValueError(f"{source} holds a NUL character, which no passphrase may hold")


def is_private(path: Union[str, Path]) -> bool:
    """Whether ``path`` (a file or directory) grants nothing to its group and others."""
    return os.stat(path).st_mode & 0o077 == 0


def make_private_dir(path: Path) -> None:
    """Create ``path`` (and its parents), ``path`` ``0700`` whatever the umask (an existing
    empty directory too; one holding other things keeps its mode)."""
    existed = path.exists()
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    if not existed or not any(path.iterdir()):
        os.chmod(path, PRIVATE_DIR)


def create_private_file(path: Path) -> None:
    """Create ``path`` empty with mode ``0600`` unless it exists (SQLite's files follow it)."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    except FileExistsError:
        return
    try:
        os.fchmod(descriptor, PRIVATE_FILE)  # a umask such as 0o277 would leave it unwritable
    finally:
        os.close(descriptor)


def open_private(path: Union[str, Path]) -> IO[str]:
    """``open(path, "w", encoding="utf-8")``, the file made ``0600`` before any write."""
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, PRIVATE_FILE)
    try:
        os.fchmod(descriptor, PRIVATE_FILE)
    except OSError:  # a file of someone else's we may write to but not chmod (/dev/stdout)
        pass
    return os.fdopen(descriptor, "w", encoding="utf-8")


def tighten_entries(directory: Path) -> None:
    """Make the files under ``directory`` ``0600`` and sub-directories ``0700`` (one already
    ``0700`` is not walked: the cost follows what was added); vanished or foreign entries
    are skipped."""
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        try:
            if entry.is_symlink():
                continue
            mode = stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode)
            if entry.is_dir(follow_symlinks=False):
                if mode != PRIVATE_DIR:
                    os.chmod(entry.path, PRIVATE_DIR)
                    tighten_entries(Path(entry.path))
            elif mode != PRIVATE_FILE:
                os.chmod(entry.path, PRIVATE_FILE)
        except OSError:
            continue


def shared_entries(directory: Path, names: Sequence[str]) -> list[Path]:
    """The directory and its entries ``names`` that exist and grant anything to group or others."""
    found = [directory] if not is_private(directory) else []
    for name in names:
        try:
            entry = directory / name
            if not entry.is_symlink() and os.stat(entry).st_mode & 0o077:
                found.append(entry)
        except OSError:  # absent, or vanished meanwhile
            continue
    return found


def warn_if_shared(directory: Path, names: Sequence[str]) -> None:
    """Warn once per directory and process when others can read the store, with the fix."""
    shared = shared_entries(directory, names)
    if not shared:
        return
    key = os.path.realpath(directory)
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    listed = ", ".join(f"{p.name or p} ({stat.filemode(os.stat(p).st_mode)})" for p in shared)
    # Not -R on the directory: it may hold other things than the store.
    commands = [f"chmod go-rwx {shlex.quote(str(directory))}"] if shared[0] == directory else []
    entries = [shlex.quote(str(p)) for p in shared if p != directory]
    if entries:
        commands.append("chmod -R go-rwx " + " ".join(entries))
    logger.warning(
        "memory store %s can be read by other accounts on this machine: %s. Make it "
        "owner-only with: %s (or pass owner_only=False to leave its modes to you; see "
        "docs/security.md)",
        directory, listed, " && ".join(commands),
    )
