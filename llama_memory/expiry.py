"""Expiry (time to live) of long-term records: moved to :mod:`llama_memory.storage.expiry`
(expiry is applied by storage, the same for every kind of record); the names stay
importable from here."""

from .storage.expiry import NEVER, TTL, Expiry, is_alive, later_expiry, ttl_seconds

# The SQL form, for the triple and profile sources until their SQL moves into storage
# (issue 14, parts T and P); nothing else outside storage may use it.
from .storage.sqlite.expiry import ALIVE_SQL

__all__ = ["ALIVE_SQL", "NEVER", "TTL", "Expiry", "is_alive", "later_expiry", "ttl_seconds"]
