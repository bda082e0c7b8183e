"""The backends, chosen by the location given (a directory, a URL, a pool), each loaded
only when first asked for (the PostgreSQL extra stays optional). A new backend is one
package exporting a bundle plus one entry here.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Optional

from ..core.distribution import install_hint
from ..core.text import short
from .backend import Backend, Location, OpenBackend
from .sql.store import Storage


@dataclass(frozen=True)
class Entry:
    """One backend in the registry.

    Attributes:
        name: how messages name the backend before it is loaded.
        bundle: ``"module:attribute"`` of its :class:`Backend`, imported on first use.
        claims: whether a ``store=`` value (or location string) is this backend's,
            without importing it.
        store_forms: what ``store=`` takes for it, for errors; None for directories.
        path_form: what ``path=`` takes for it (the backend of directories only).
        extra: the optional extra it needs.
    """

    name: str
    bundle: str
    claims: Callable[[Any], bool]
    store_forms: Optional[str] = None
    path_form: Optional[str] = None
    extra: Optional[str] = None

    def load(self) -> Backend:
        module, _, attribute = self.bundle.partition(":")
        try:
            loaded: Backend = getattr(importlib.import_module(module), attribute)
        except ImportError as exc:
            if self.extra is None:
                raise
            raise ImportError(
                f"store= needs the {self.name} driver ({exc}): {install_hint(self.extra)}"
            ) from exc
        return loaded

    @property
    def package(self) -> str:
        """The backend's package (a store is this backend's only once it is imported)."""
        return self.bundle.partition(":")[0].rpartition(".")[0]


POSTGRES_SCHEMES = ("postgresql://", "postgres://")


def _postgres_claims(value: Any) -> bool:
    if isinstance(value, str):
        return value.startswith(POSTGRES_SCHEMES)
    # A pool, or a store object passed by mistake (its bundle names the right form):
    # checked by name, as psycopg may be missing.
    return type(value).__module__.split(".")[0] == "psycopg_pool" or any(
        cls.__name__ == "PostgresStore" for cls in type(value).__mro__
    )


#: Every backend: the first whose ``claims`` accepts a location is chosen; a location
#: none claims is a directory, of the entry with a ``path_form``.
ENTRIES: tuple[Entry, ...] = (
    Entry(
        "PostgreSQL",
        "llama_memory.storage.postgres.bundle:BACKEND",
        _postgres_claims,
        store_forms="a PostgreSQL URL ('postgresql://user@host:5432/dbname') or a psycopg_pool.ConnectionPool",
        extra="postgres",
    ),
    Entry(
        "SQLite",
        "llama_memory.storage.sqlite.bundle:BACKEND",
        lambda value: False,
        path_form="a SQLite directory",
    ),
)


def _directories() -> Entry:
    return next(e for e in ENTRIES if e.path_form is not None)


def entry_for(where: Any) -> Entry:
    """The entry of a location: a string or pool a server backend claims, else a directory."""
    return next((e for e in ENTRIES if e.claims(where)), _directories())


def backend_for(where: Any) -> Backend:
    """The bundle of a location (see :func:`entry_for`)."""
    return entry_for(where).load()


def check_path(path: str) -> None:
    """ValueError for an empty or blank ``path``: ``""`` would be the current directory
    (what an unset environment variable gives), so it is refused, not opened."""
    if not path.strip():
        raise ValueError(
            f"path is {'empty' if not path else 'blank'} ({path!r}): pass a directory, e.g. "
            "path='./memory' (an empty path is not taken for the current directory)"
        )


def location_of(where: Any, **options: Any) -> Location:
    """A :class:`Location` from one value (``--store``, ``MemoryAdmin(path)``) and options."""
    if entry_for(where).store_forms is not None:
        return Location(store=where, **options)
    return Location(path=where, **options)


def backend_at(location: Location) -> Backend:
    """The bundle of a :class:`Location`; TypeError naming what ``store=`` takes when no
    backend claims it, ValueError for a string that is no URL."""
    if location.store is None:
        return _directories().load()
    found = next((e for e in ENTRIES if e.claims(location.store)), None)
    is_text = isinstance(location.store, str)
    if found is None and is_text and "://" in location.store:
        # A URL of no known scheme: the first server backend's driver says what is
        # wrong with it (a malformed connection string).
        found = next(e for e in ENTRIES if e.store_forms is not None)
    if found is None:
        forms = " or ".join(e.store_forms for e in ENTRIES if e.store_forms)
        given = f"{type(location.store).__name__} {short(location.store)}"
        hint = f"for {_directories().path_form} pass path= instead"
        if is_text:  # most often a directory given to the wrong argument
            raise ValueError(f"store takes {forms}, not the path {short(location.store)}; {hint}")
        raise TypeError(f"store takes {forms}, not {given}; {hint}")
    return found.load()


def open_backend(location: Location, *, for_admin: bool = False) -> OpenBackend:
    """Open the store at ``location`` with its backend's parts."""
    return backend_at(location).open(location, for_admin=for_admin)


def backend_of(store: Storage, location: Location = Location()) -> OpenBackend:
    """The parts on a store already open; TypeError for an object no backend knows."""
    for entry in ENTRIES:
        if entry.package in sys.modules or entry.path_form is not None:
            backend = entry.load()
            if backend.owns(store):
                return backend.on(store, location)
    raise TypeError(f"{type(store).__name__} is not the store of any llama-memory backend")


def require_store(where: Any) -> None:
    """StorageError unless a store is at ``where`` (a restore never opens an empty one)."""
    from ..core.errors import StorageError

    why = backend_for(where).missing(where)
    if why is not None:
        raise StorageError(
            f"cannot restore this memory: its store {where} does not exist (the path {why}; "
            "moved or deleted?). Pass path= to from_dict with where the store is now; "
            "restoring never opens a new, empty memory in its place "
            "(ComposableMemory.from_defaults starts one)"
        )


def open_existing(where: Any) -> Storage:
    """The existing store at ``where``, for a worker; StorageError when there is none."""
    require_store(where)
    return backend_for(where).open(location_of(where)).store

