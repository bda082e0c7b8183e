"""SQLCipher's keys, derived once per store and passphrase in a process.

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
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, NamedTuple, Optional

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
