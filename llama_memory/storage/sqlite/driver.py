"""How the SQLite store opens its file: the standard library's ``sqlite3``, or SQLCipher
with a key (encryption at rest), and with which file modes.

:class:`SQLiteDriver` opens a plain file; :class:`SQLCipherDriver` opens it through
``sqlcipher3`` (the ``llama-index-memory-composable[encrypted]`` extra: SQLCipher 4 with FTS5, a DB-API
module like ``sqlite3``) after ``PRAGMA key``. :func:`sqlite_driver` picks one from an
explicit key or :data:`ENCRYPTION_KEY_ENV`.

Both read the file's first bytes before opening it: a plain SQLite file starts with
``"SQLite format 3\\0"``, an encrypted one with its random salt. So a plain store opened
with a key, or an encrypted one without, is refused with a message saying which, and a
wrong key is told apart from a plain file, all before anything is written.

SQLCipher's keys are derived once per store and passphrase in a process.
SQLCipher turns a passphrase into the database's key with PBKDF2 (256,000 rounds of
HMAC-SHA512 in SQLCipher 4) salted with the 16 random bytes at the start of the file.
That costs some 150 ms of CPU on every open: ten times what the rest of opening a store
costs, paid by every ``MemoryBlocks`` session, every admin command, every MCP call that
opens a store. So the derivation is done here, with SQLCipher's own parameters, once per
salt (that is, per store file) and passphrase; SQLCipher is then handed the result as a
raw key with the store's salt (``PRAGMA key = "x'<key><salt>'"``), which it uses as it is.

The derived keys live in this process's memory only, never on disk: a key in the
process is as sensitive as the passphrase that is there already. A new store gets its
salt from here (random, as SQLCipher would draw it); SQLCipher writes it at the start of
the file.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import threading
from collections import OrderedDict
from pathlib import Path
from types import ModuleType
from typing import Any, NamedTuple, Optional, Union

from ...core.distribution import install_hint
from ...core.errors import EncryptionError
from ..privacy import ENCRYPTION_KEY_ENV, check_passphrase, environment_key

#: Bytes of salt at the start of an encrypted file (SQLCipher's ``FILE_HEADER_SZ``).
SALT_BYTES = 16
#: Bytes of the AES-256 key.
KEY_BYTES = 32
#: Derived keys kept per process (least recently used dropped first): one per store
#: file and passphrase in use.
KEPT = 64

#: SQLCipher's names of its key derivations, as ``hashlib.pbkdf2_hmac`` names the hash.
_HASHES = {"PBKDF2_HMAC_SHA512": "sha512", "PBKDF2_HMAC_SHA256": "sha256", "PBKDF2_HMAC_SHA1": "sha1"}


class Derivation(NamedTuple):
    """How SQLCipher derives a key from a passphrase: PBKDF2 with this hash and rounds."""

    hash_name: str
    iterations: int


_lock = threading.Lock()
_derived: OrderedDict[tuple[bytes, bytes], bytes] = OrderedDict()
_derivation: dict[int, Optional[Derivation]] = {}


def derivation_of(module: Any) -> Optional[Derivation]:
    """The key derivation the SQLCipher ``module`` applies to passphrases (read from it
    once), or None when it is not one this module can do the same way (then the
    passphrase is given to SQLCipher as it is)."""
    with _lock:
        if id(module) in _derivation:
            return _derivation[id(module)]
    conn = module.connect(":memory:")
    try:
        algorithm = str(conn.execute("PRAGMA cipher_default_kdf_algorithm").fetchone()[0])
        iterations = int(conn.execute("PRAGMA cipher_default_kdf_iter").fetchone()[0])
    except (module.Error, TypeError, ValueError):
        found = None
    else:
        found = Derivation(_HASHES[algorithm], iterations) if algorithm in _HASHES and iterations > 0 else None
    finally:
        conn.close()
    with _lock:
        _derivation[id(module)] = found
    return found


def salt_of(file: Path) -> Optional[bytes]:
    """The salt at the start of an encrypted store's file; None when the file is absent
    or empty (a new store) or too short to hold one."""
    try:
        with open(file, "rb") as stream:
            head = stream.read(SALT_BYTES)
    except FileNotFoundError:
        return None
    return head if len(head) == SALT_BYTES else None


def new_salt() -> bytes:
    """A random salt for a new encrypted file."""
    return os.urandom(SALT_BYTES)


def derived_key(passphrase: str, salt: bytes, derivation: Derivation) -> bytes:
    """The key SQLCipher derives from ``passphrase`` for a file salted with ``salt``:
    computed on the first call for this salt and passphrase in the process, then kept
    in memory."""
    # The passphrase is kept as a digest in the cache's key: no second copy of it.
    cache_key = (salt, hashlib.sha256(passphrase.encode("utf-8")).digest() + derivation.hash_name.encode())
    with _lock:
        key = _derived.get(cache_key)
        if key is not None:
            _derived.move_to_end(cache_key)
            return key
    key = hashlib.pbkdf2_hmac(derivation.hash_name, passphrase.encode("utf-8"), salt, derivation.iterations, KEY_BYTES)
    with _lock:
        _derived[cache_key] = key
        while len(_derived) > KEPT:
            _derived.popitem(last=False)
    return key


def raw_key(key: bytes, salt: bytes) -> str:
    """The SQL literal of a raw key with its salt, as ``PRAGMA key`` and
    ``ATTACH ... KEY`` take it: SQLCipher uses it without deriving anything."""
    return f"\"x'{key.hex()}{salt.hex()}'\""


def forget_derived_keys() -> None:
    """Drop every derived key this process holds (the next open of each store derives
    its key again)."""
    with _lock:
        _derived.clear()


__all__ = [
    "Derivation",
    "derivation_of",
    "derived_key",
    "forget_derived_keys",
    "new_salt",
    "raw_key",
    "salt_of",
]


#: A raw key given as the passphrase, as SQLCipher takes one: ``x'<64 hex digits>'``,
#: with the salt's 32 more (used as it is: nothing is derived).
RAW_KEY = re.compile(r"^x'([0-9a-fA-F]{64}|[0-9a-fA-F]{96})'$")

#: The first 16 bytes of every plain SQLite database file.
SQLITE_HEADER = b"SQLite format 3\x00"

_INSTALL = install_hint("encrypted")


def file_is_plain(file: Path) -> Optional[bool]:
    """True for a plain SQLite file, False for one whose header is not SQLite's (an
    encrypted store), None for a file that is absent or empty (a new store)."""
    try:
        with open(file, "rb") as stream:
            head = stream.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        return None
    if not head:
        return None
    return head == SQLITE_HEADER


class SQLiteDriver:
    """Opens a store's file with the standard library's ``sqlite3``, unencrypted.

    Args:
        owner_only: create the memory directory ``0700`` and the database ``0600``
            (its -wal/-shm files follow), whatever the umask, and warn once when an
            existing store is readable by others; False leaves modes to the umask.
    """

    #: Whether the file is encrypted.
    encrypted = False

    def __init__(self, *, owner_only: bool = True) -> None:
        self.owner_only = owner_only

    @property
    def module(self) -> ModuleType:
        """The DB-API module (its ``Error``, ``OperationalError`` and ``Row``)."""
        return sqlite3

    @property
    def errors(self) -> tuple[type[Exception], ...]:
        """The exception classes a statement of this driver's connections raises."""
        return (sqlite3.Error,)

    def check_file(self, file: Path) -> None:
        """:class:`EncryptionError` when ``file`` looks like an encrypted store (no key
        given): not SQLite's header, and whole pages (SQLCipher writes pages of a power
        of two bytes). Anything else not SQLite's is left to SQLite to report as
        damaged ("file is not a database")."""
        if file_is_plain(file) is False and file.stat().st_size % 512 == 0:
            said = (
                f"the SQLite store {file} is encrypted, or damaged: without a key it is not "
                "a database (its header is not SQLite's). If it is encrypted, "
            )
            raise EncryptionError(
                said + f"pass encryption_key= to from_defaults (or MemoryAdmin), or set "
                f"{ENCRYPTION_KEY_ENV}. Nothing was changed.",
                command_line=said + f"set {ENCRYPTION_KEY_ENV} to its key. Nothing was changed.",
            )

    def connect(self, target: str, timeout: float) -> Any:
        """A connection to ``target`` (a file or ``":memory:"``), in autocommit mode,
        usable from every thread (the store serialises access itself)."""
        conn = self.module.connect(target, timeout=timeout, check_same_thread=False, isolation_level=None)
        conn.row_factory = self.module.Row
        return conn

    def __repr__(self) -> str:
        return f"{type(self).__name__}(owner_only={self.owner_only})"


class SQLCipherDriver(SQLiteDriver):
    """Opens a store's file through SQLCipher (AES-256, a key derived from ``key`` by
    PBKDF2-HMAC-SHA512): every page of the database, its -wal file included, is
    encrypted on disk; FTS5 and every statement work as on a plain file. The key is
    derived once per store file and passphrase in a process (:func:`derived_key`): a reopen
    costs about what a plain open does.

    Args:
        key: the passphrase (a string that is not blank); never written anywhere by the
            library, nor is the key derived from it.
        source: where the key came from, named in error messages.
        owner_only: as :class:`SQLiteDriver`.

    Raises:
        ValueError: an empty or blank passphrase
            (:func:`~llama_memory.storage.privacy.check_passphrase`).
        ImportError: the ``sqlcipher3`` module is missing (the message says which extra
            to install).
    """

    encrypted = True

    def __init__(self, key: str, *, source: str = "encryption_key", owner_only: bool = True) -> None:
        super().__init__(owner_only=owner_only)
        check_passphrase(key, source)
        try:
            from sqlcipher3 import dbapi2
        except ImportError as exc:
            raise ImportError(
                f"an encryption key was given ({source}), but SQLCipher is not installed "
                f"({exc}): {_INSTALL}"
            ) from exc
        self._module = dbapi2
        self._key = key
        self.source = source
        self._derivation = derivation_of(dbapi2)

    def key_clause(self, file: Path) -> str:
        """The key of ``file`` as ``PRAGMA key`` and ``ATTACH ... KEY`` take it: SQLCipher's
        raw key with the file's salt (a new salt for a new file), derived from the
        passphrase once per file and passphrase in this process (:func:`derived_key`);
        the passphrase itself when SQLCipher derives keys in a way not done here."""
        if self._derivation is None or RAW_KEY.match(self._key):
            return quote(self._key)  # SQLCipher derives it, or a raw key given as such
        salt = salt_of(file) or new_salt()
        return raw_key(derived_key(self._key, salt, self._derivation), salt)

    @property
    def module(self) -> ModuleType:
        """``sqlcipher3.dbapi2``."""
        return self._module

    @property
    def errors(self) -> tuple[type[Exception], ...]:
        """SQLCipher's exception classes (its own, not ``sqlite3``'s), and ``sqlite3``'s."""
        return (self._module.Error, sqlite3.Error)

    def check_file(self, file: Path) -> None:
        """:class:`EncryptionError` when ``file`` is a plain (unencrypted) store."""
        if file_is_plain(file):
            said = f"the SQLite store {file} is not encrypted, but a key was given ({self.source}): "
            encrypt = f"encrypt it first with `llama-memory encrypt --store {file.parent}`. Nothing was changed."
            raise EncryptionError(
                said + "open it without a key, or " + encrypt,
                command_line=said + f"unset {ENCRYPTION_KEY_ENV} to open it as it is, or " + encrypt,
            )

    def connect(self, target: str, timeout: float) -> Any:
        """A connection with the key set, checked by reading the schema:
        :class:`EncryptionError` (the connection closed) for a wrong key."""
        if target == ":memory:":  # no file, no salt: SQLCipher derives its key
            return self._keyed(target, timeout, quote(self._key))
        file = Path(target)
        salted = salt_of(file)
        try:
            return self._keyed(target, timeout, self.key_clause(file))
        except EncryptionError:
            # A new file salted here and, meanwhile, by another process that wrote it
            # first: its key is the one of the salt now in the file.
            if salted is not None or salt_of(file) is None:
                raise
            return self._keyed(target, timeout, self.key_clause(file))

    def _keyed(self, target: str, timeout: float, key: str) -> Any:
        conn = super().connect(target, timeout)
        try:
            # SQLCipher would print every failed page decryption (a wrong key) on stderr.
            conn.execute("PRAGMA cipher_log_level = NONE")
            conn.execute(f"PRAGMA key = {key}")
            conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        except self._module.DatabaseError as exc:
            conn.close()
            if "not a database" not in str(exc):
                raise
            raise EncryptionError(
                f"cannot open the encrypted SQLite store {target}: wrong key ({self.source}). "
                "Nothing was changed."
            ) from None
        return conn

    def __repr__(self) -> str:  # never the key
        return f"SQLCipherDriver(key=***, owner_only={self.owner_only})"


def quote(text: str) -> str:
    """``text`` as an SQL string literal (PRAGMA and ATTACH ... KEY take no parameters)."""
    return "'" + text.replace("'", "''") + "'"


def sqlite_driver(
    encryption_key: Union[str, Any, None] = None, *, owner_only: bool = True, environ: bool = True
) -> SQLiteDriver:
    """The driver for a store: SQLCipher with ``encryption_key`` (a ``str`` or a
    pydantic ``SecretStr``) when given, else with :data:`ENCRYPTION_KEY_ENV` when that
    is set (and ``environ``), else plain ``sqlite3``."""
    if encryption_key is not None:
        secret = getattr(encryption_key, "get_secret_value", None)
        return SQLCipherDriver(secret() if secret else encryption_key, owner_only=owner_only)
    from_env = environment_key() if environ else None
    if from_env:
        return SQLCipherDriver(from_env, source=f"the {ENCRYPTION_KEY_ENV} environment variable", owner_only=owner_only)
    return SQLiteDriver(owner_only=owner_only)
