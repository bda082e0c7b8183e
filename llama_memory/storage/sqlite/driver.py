"""How the SQLite store opens its file: ``sqlite3``, or SQLCipher with a key (encryption
at rest), and with which file modes.

Both drivers read the file's header first, so a plain store opened with a key, an
encrypted one without, and a wrong key are refused apart, before anything is written.
SQLCipher's PBKDF2 (about 150 ms an open) is done here once per salt and passphrase in a
process and handed to SQLCipher as a raw key with the salt; derived keys live in memory
only (docs/security.md).
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
    """The key derivation the SQLCipher ``module`` applies to passphrases, or None when it
    cannot be done the same way here (the passphrase then goes to SQLCipher as is)."""
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
    """The salt at the start of an encrypted store's file; None when absent or too short."""
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
    """The key SQLCipher derives from ``passphrase`` for ``salt`` (kept in memory)."""
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
    """The SQL literal of a raw key with its salt (for ``PRAGMA key``, ``ATTACH ... KEY``)."""
    return f"\"x'{key.hex()}{salt.hex()}'\""


__all__ = [
    "Derivation",
    "derivation_of",
    "derived_key",
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
    """True for a plain SQLite file, False for another header, None for an absent or empty one."""
    try:
        with open(file, "rb") as stream:
            head = stream.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        return None
    if not head:
        return None
    return head == SQLITE_HEADER


class SQLiteDriver:
    """Opens a store's file with ``sqlite3``, unencrypted.

    Args:
        owner_only: create the directory ``0700`` and the database ``0600`` whatever the
            umask, and warn once when an existing store is readable by others.
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
        """:class:`EncryptionError` when ``file`` looks encrypted (not SQLite's header,
        whole pages); anything else SQLite reports as damaged itself."""
        if file_is_plain(file) is False and file.stat().st_size % 512 == 0:
            said = (
                f"the SQLite store {file} is encrypted, or damaged: without a key it is not "
                "a database (its header is not SQLite's). If it is encrypted, "
            )
            raise EncryptionError(
                said + f"pass encryption_key= where it is opened (ComposableMemory.from_defaults, "
                f"MemoryBlocks.open or MemoryAdmin), or set "
                f"{ENCRYPTION_KEY_ENV}. Nothing was changed.",
                command_line=said + f"set {ENCRYPTION_KEY_ENV} to its key. Nothing was changed.",
            )

    def connect(self, target: str, timeout: float) -> Any:
        """An autocommit connection to ``target`` usable from every thread (the store
        serialises access)."""
        conn = self.module.connect(target, timeout=timeout, check_same_thread=False, isolation_level=None)
        conn.row_factory = self.module.Row
        return conn

    def __repr__(self) -> str:
        return f"{type(self).__name__}(owner_only={self.owner_only})"


class SQLCipherDriver(SQLiteDriver):
    """Opens a store's file through SQLCipher (AES-256, key derived by PBKDF2-HMAC-SHA512
    once per file and passphrase in a process); FTS5 and every statement work as usual.

    Args:
        key: the passphrase (not blank); never written anywhere, nor its derived key.
        source: where the key came from, named in error messages.
        owner_only: as :class:`SQLiteDriver`.

    Raises:
        ValueError: an empty or blank passphrase.
        ImportError: ``sqlcipher3`` is missing (the message names the extra).
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
        """``PRAGMA key``'s: the raw derived key with the file's salt (new for a new file),
        or the passphrase when SQLCipher derives differently."""
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
        """SQLCipher's exception classes and ``sqlite3``'s."""
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
        """A connection with the key set, checked (EncryptionError for a wrong key)."""
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
    """SQLCipher with ``encryption_key``, else with :data:`ENCRYPTION_KEY_ENV`, else plain."""
    if encryption_key is not None:
        secret = getattr(encryption_key, "get_secret_value", None)
        return SQLCipherDriver(secret() if secret else encryption_key, owner_only=owner_only)
    from_env = environment_key() if environ else None
    if from_env:
        return SQLCipherDriver(from_env, source=f"the {ENCRYPTION_KEY_ENV} environment variable", owner_only=owner_only)
    return SQLiteDriver(owner_only=owner_only)
