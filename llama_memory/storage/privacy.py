"""Privacy on disk: owner-only files, and where the encryption key comes from.

A store holds what users told an assistant about themselves, so the library creates its
files readable by their owner only, whatever the umask: the memory directory and
Chroma's ``0700``, the SQLite database (and so its -wal and -shm files), lock files and
export files ``0600``. A store opened with wider modes (made by an older release, or
copied) is not changed, since whoever made it so may share it on purpose: it logs one
warning per process with the command that tightens it (:func:`warn_if_shared`).

Encryption at rest (SQLCipher, :mod:`.sqlite.driver`) takes its key from
``encryption_key=`` or from :data:`ENCRYPTION_KEY_ENV`.
"""

from __future__ import annotations

import logging
import os
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
    """TypeError for a passphrase that is not a string; ValueError for an empty or
    blank one (no secret at all: a store "encrypted" with it protects nothing) or one
    holding NUL, naming where it came from (``source``)."""
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
    """Create the directory ``path`` (and its parents) ``0700``, whatever the umask. An
    existing empty directory (made for the store, as ``mkdtemp`` does) is made ``0700``
    too; one that holds other things (the working directory, ``/tmp``) keeps its mode,
    and the store's own files stay private through theirs. Parents keep the umask's."""
    existed = path.exists()
    path.mkdir(parents=True, exist_ok=True, mode=PRIVATE_DIR)
    if not existed or not any(path.iterdir()):
        os.chmod(path, PRIVATE_DIR)


def create_private_file(path: Path) -> None:
    """Create ``path`` empty with mode ``0600`` unless it exists (an existing file keeps
    its mode and content): SQLite then opens it, and the files it adds beside it take
    its mode."""
    try:
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PRIVATE_FILE)
    except FileExistsError:
        return
    try:
        os.fchmod(descriptor, PRIVATE_FILE)  # a umask such as 0o277 would leave it unwritable
    finally:
        os.close(descriptor)


def open_private(path: Union[str, Path], mode: str = "w") -> IO[str]:
    """``open(path, mode, encoding="utf-8")`` for a file holding a user's data (an
    export): a new file is created ``0600``, an existing one is made ``0600`` before
    anything is written to it."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if "a" in mode else os.O_TRUNC)
    descriptor = os.open(path, flags, PRIVATE_FILE)
    try:
        os.fchmod(descriptor, PRIVATE_FILE)
    except OSError:  # a file of someone else's we may write to but not chmod (/dev/stdout)
        pass
    return os.fdopen(descriptor, mode, encoding="utf-8")


def tighten_entries(directory: Path) -> None:
    """Make the files under ``directory`` ``0600`` and its sub-directories ``0700``,
    for backups that keep modes. A sub-directory already ``0700`` is not walked (it
    was tightened before, and whatever is below it is private through it), so the cost
    follows what was added since the last call. Entries that vanish meanwhile, or that
    are not ours, are skipped."""
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
    """The memory directory itself and those of its entries ``names`` (the database and
    its -wal/-shm files, the Chroma directory, lock files) that exist and grant anything
    to their group or others. Other files of the directory are not the store's."""
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
    """Log one warning (once per directory and process) when the store under
    ``directory`` (its entries ``names``) can be read by other accounts, with the
    one-liner that tightens it."""
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
    commands = [f"chmod go-rwx {_quoted(str(directory))}"] if shared[0] == directory else []
    entries = [_quoted(str(p)) for p in shared if p != directory]
    if entries:
        commands.append("chmod -R go-rwx " + " ".join(entries))
    logger.warning(
        "memory store %s can be read by other accounts on this machine: %s. Make it "
        "owner-only with: %s (or pass owner_only=False to leave its modes to you; see "
        "docs/security.md)",
        directory, listed, " && ".join(commands),
    )


def _quoted(text: str) -> str:
    import shlex

    return shlex.quote(text)
