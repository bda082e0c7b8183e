"""Stores opened once per process: tools that manage one store (an MCP server beside a
maintenance thread) share one opening, closed when the last holder lets go. Two openings
are the same when they name the same place with the same options (directory or URL, a
pool by identity, dense-index options, file modes, a digest of the key).
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any, Optional

from .backend import Location, OpenBackend
from .privacy import environment_key

__all__ = ["SHARED", "SharedBackends", "location_key"]


def _identity(value: Any) -> Hashable:
    """A text as itself, any other object (a pool, a client) by its identity."""
    if value is None or isinstance(value, (str, int)):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    return ("object", id(value))


def _digest(key: Any) -> Optional[str]:
    """A digest of an encryption key (the key itself is not kept in the table)."""
    if key is None:
        return None
    return hashlib.sha256(str(key).encode("utf-8", "surrogatepass")).hexdigest()


def location_key(location: Location) -> Hashable:
    """What makes two openings of a store the same (see the module)."""
    path = None if location.path is None else os.path.realpath(os.path.expanduser(os.fspath(location.path)))
    key = location.encryption_key if location.encryption_key is not None else environment_key()
    return (
        path, _identity(location.store), _identity(location.chroma_client), location.chroma_host,
        location.chroma_port, location.chroma_url, _digest(key), location.owner_only,
    )  # fmt: skip


@dataclass
class _Held:
    backend: OpenBackend
    holders: int


class SharedBackends:
    """The stores this process holds open for tools (never one in memory), with holders."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[Hashable, _Held] = {}

    def acquire(self, location: Location, open_backend: Callable[[], OpenBackend]) -> OpenBackend:
        """The backend open at ``location``, else ``open_backend()``'s; one holder more."""
        if location.path is None and location.store is None:
            return open_backend()
        key = location_key(location)
        with self._lock:  # one opening at a time: two threads never open one store twice
            held = self._held.get(key)
            if held is None:
                held = self._held[key] = _Held(open_backend(), 0)
            held.holders += 1
            return held.backend

    def release(self, backend: OpenBackend) -> None:
        """One holder lets go; the last one closes it (one not held here closes at once)."""
        with self._lock:
            key = next((k for k, h in self._held.items() if h.backend is backend), None)
            if key is not None:
                held = self._held[key]
                held.holders -= 1
                if held.holders > 0:
                    return
                del self._held[key]
        backend.close()

    def forget_all(self) -> None:
        """Hold nothing, closing nothing (a forked child's connections are its parent's)."""
        self._lock = threading.Lock()
        self._held = {}

    def holders(self, location: Location) -> int:
        """How many hold the store at ``location`` open (0: it is not open here)."""
        with self._lock:
            held = self._held.get(location_key(location))
            return 0 if held is None else held.holders


#: The process's table of shared stores (used by :class:`~llama_memory.admin.memory_admin.MemoryAdmin`).
SHARED = SharedBackends()
if hasattr(os, "register_at_fork"):  # a forked child opens its own stores
    os.register_at_fork(after_in_child=SHARED.forget_all)
