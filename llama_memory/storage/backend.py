"""What a storage backend gives the rest of the package: one bundle per backend.

A backend package (``storage/sqlite`` with ``storage/chroma``, ``storage/postgres``)
exports one :class:`Backend`: how to open its store at a location, and, on an opened
store (:class:`OpenBackend`), every part the memory, the admin and the command line
build on: the vector index, the triple timeline, the profile and instructions rows,
the job queue, the admin rows, its sizes, and what ``to_dict`` writes of its
location. :mod:`llama_memory.storage.registry` picks the bundle from the location
given, so the code above storage never asks which database it is talking to.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from ..core.types import Scope
from .ports import ChatLog, VectorIndex
from .sql.admin import AdminRows
from .sql.jobs import JobQueue
from .sql.profile import ProfileRows
from .sql.store import Storage
from .sql.triples import TripleTimeline


@dataclass(frozen=True)
class Location:
    """Where a memory's data lives, as its settings (or an admin command) give it.

    Attributes:
        path: a directory (``path=``); None with no ``store``: a store in memory.
        store: the ``store=`` value of a server backend (a URL, a connection pool).
        chroma_client: a dense-index client given instead of the embedded one.
        chroma_host: a dense-index server's host.
        chroma_port: its port, with ``chroma_host``.
        chroma_url: the server as a URL, instead of host and port.
        encryption_key: the key of a store encrypted at rest (backends on files; None:
            the environment's, else plain).
        owner_only: files the backend creates are its owner's alone (0700/0600), and a
            store others can read is warned about.
    """

    path: Optional[str] = None
    store: Any = None
    chroma_client: Any = None
    chroma_host: Optional[str] = None
    chroma_port: int = 8000
    chroma_url: Optional[str] = None
    encryption_key: Any = None
    owner_only: bool = True

    @classmethod
    def of(cls, settings: Any) -> "Location":
        """The location fields of any object that has them (``MemorySettings``)."""
        return cls(**{name: getattr(settings, name) for name in cls.__dataclass_fields__})


class OpenBackend(ABC):
    """One backend's parts on an opened store: what construction, the admin and the
    command line build on. A backend's bundle names its classes of the parts written
    once over SQL (:attr:`timeline_type`, :attr:`profile_type`, :attr:`admin_type`) and
    writes the rest."""

    #: The store: records, chat logs, meta, transactions, the job queue.
    store: Storage
    #: The directory that holds the store's files, or None (in memory, or on a server).
    path: Optional[str]
    #: Whether the dense index lives apart from the store and may drift from it while
    #: the store is closed (a server or a given client): a memory catches its user up
    #: on open.
    index_drifts: bool
    #: The backend's triple timeline, profile rows and admin rows, each made on the store.
    timeline_type: ClassVar[Any]
    profile_type: ClassVar[Any]
    admin_type: ClassVar[Any]

    @property
    def jobs(self) -> JobQueue:
        """The store's job queue (background formation passes): a table of the store."""
        return self.store

    def triple_timeline(self) -> TripleTimeline:
        """The knowledge triples' timeline in the store."""
        return self.timeline_type(self.store)

    def profile_rows(self, document: str = "profile") -> ProfileRows:
        """The rows of one profile document (``"profile"``, ``"instructions"``)."""
        return self.profile_type(self.store, document)

    def admin_rows(self) -> AdminRows:
        """Plain rows of every tenant, for the admin and copies between stores."""
        return self.admin_type(self.store)

    def close(self) -> None:
        """Close the store (and its pool, when it opened one)."""
        self.store.close()

    @property
    @abstractmethod
    def location(self) -> str:
        """The store as messages name it: its directory, or ``host:port/dbname``."""

    @property
    @abstractmethod
    def settings(self) -> dict[str, Any]:
        """What ``to_dict`` writes of the location: settings fields and their values as
        opened (an absolute path, a URL without its password, a server by its URL)."""

    @abstractmethod
    def chat_log(self, scope: Scope) -> Optional[ChatLog]:
        """The conversation's log in the store, or None when the store keeps no chat
        (in memory: the buffer holds the messages)."""

    @abstractmethod
    def vector_index(self, collection: str) -> VectorIndex:
        """The dense index of one kind of collection (one per source)."""

    @abstractmethod
    def sizes(self) -> dict[str, int]:
        """Bytes the store takes, by part, with their ``total``."""

    def drop_dense(self, owner: tuple[str, str], collections: Sequence[str]) -> None:
        """Drop one (tenant, user)'s dense collections of the kinds named (those kept
        apart from the store; rows in it went with ``delete_user``). Nothing by default:
        vectors kept as rows of the store went with ``delete_user``'s transaction."""


class Backend(ABC):
    """A storage backend's bundle: how to open its store at a location, and the parts
    on it (:class:`OpenBackend`). A backend writes the abstract methods; the others
    say what a backend on a database server does (no files to look for or to remove,
    encryption at rest left to the server)."""

    #: How messages name the backend (``"SQLite"``).
    name: str
    #: Whether a copy between stores may write into it (``llama-memory copy --to``).
    copy_target: bool

    @abstractmethod
    def open(self, location: Location, *, for_admin: bool = False) -> OpenBackend:
        """Open (creating when new) the store at ``location``: ValueError or TypeError
        naming what is wrong with it before anything is created. ``for_admin``: a tool
        opens a store it did not write; it refuses to start a dense index of its own
        beside a store whose vectors are elsewhere."""

    @abstractmethod
    def owns(self, store: Any) -> bool:
        """Whether ``store`` is this backend's store object."""

    @abstractmethod
    def on(self, store: Storage, location: Location = Location()) -> OpenBackend:
        """The parts on a store already open (``location``: its dense-index options)."""

    @abstractmethod
    def describe_sizes(self, sizes: dict[str, int], size: Any) -> str:
        """One line for ``llama-memory stats``: ``sizes`` (:meth:`OpenBackend.sizes`)
        with ``size`` turning bytes into text."""

    def missing(self, where: Any) -> Optional[str]:
        """Why no store is at ``where`` (``"does not exist"``), or None when one is
        (or when opening creates it, as a database server's tables are: the default)."""
        return None

    def encrypt(self, where: Any, key: str, *, keep_backup: bool = False, source: str = "the key given") -> Any:
        """Encrypt the store at ``where`` at rest with ``key`` (``llama-memory encrypt``)
        and return what was done; ValueError for a backend whose encryption at rest is
        the server's or the disk's (the default)."""
        raise ValueError(f"a {self.name} store is encrypted at rest by its server's disks, not by llama-memory")

    @contextmanager
    def undo_failed_creation(self, where: Any) -> Iterator[None]:
        """A context in which a failure removes what a first write created at ``where``
        (no empty store is left behind a failed import). Nothing to undo by default:
        each batch is one transaction, and there are no files."""
        yield
