"""Expiry (time to live) of long-term records: moved to :mod:`llama_memory.storage.expiry`
(expiry is applied by storage, the same for every kind of record); the names stay
importable from here."""

from .storage.expiry import NEVER, TTL, Expiry, is_alive, later_expiry, ttl_seconds

__all__ = ["NEVER", "TTL", "Expiry", "is_alive", "later_expiry", "ttl_seconds"]
