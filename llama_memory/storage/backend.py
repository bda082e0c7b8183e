"""What a storage backend gives the rest of the package: one bundle per backend
(:class:`Backend`: how to open its store; :class:`OpenBackend`: every part on an opened
store), picked by :mod:`llama_memory.storage.registry` from the location given, so the
code above storage never asks which database it is talking to.
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
        chroma_client, chroma_host, chroma_port, chroma_url: a dense-index client given
            instead of the embedded one, or a server by host and port or URL.
        encryption_key: the key of a store encrypted at rest (None: the environment's,
            else plain).
        owner_only: files the backend creates are its owner's alone (0700/0600).
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
    """One backend's parts on an opened store: it names its classes of the parts written
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
        """What ``to_dict`` writes of the location, as opened (an absolute path, a URL
        without its password, a server by its URL)."""

    @abstractmethod
    def chat_log(self, scope: Scope) -> Optional[ChatLog]:
        """The conversation's log, or None when the store keeps no chat (in memory)."""

    @abstractmethod
    def vector_index(self, collection: str) -> VectorIndex:
        """The dense index of one kind of collection (one per source)."""

    @abstractmethod
    def sizes(self) -> dict[str, int]:
        """Bytes the store takes, by part, with their ``total``."""

    def drop_dense(self, owner: tuple[str, str], collections: Sequence[str]) -> None:
        """Drop one (tenant, user)'s dense collections of the kinds named, where they
        are kept apart from the store (nothing by default: rows went with
        ``delete_user``)."""


class Backend(ABC):
    """A storage backend's bundle: how to open its store at a location, and the parts on
    it. The defaults say what a database server's backend does (no files, encryption at
    rest left to the server)."""

    #: How messages name the backend (``"SQLite"``).
    name: str
    #: Whether a copy between stores may write into it (``llama-memory copy --to``).
    copy_target: bool
    #: The class of the backend's store object.
    store_type: ClassVar[type[Storage]]

    @abstractmethod
    def open(self, location: Location, *, for_admin: bool = False) -> OpenBackend:
        """Open (creating when new) the store at ``location``; ValueError or TypeError
        naming what is wrong before anything is created. ``for_admin``: a tool opening a
        store it did not write starts no dense index beside one kept elsewhere."""

    def owns(self, store: Any) -> bool:
        """Whether ``store`` is this backend's store object (a :attr:`store_type`)."""
        return isinstance(store, self.store_type)

    @abstractmethod
    def on(self, store: Storage, location: Location = Location()) -> OpenBackend:
        """The parts on a store already open (``location``: its dense-index options)."""

    @abstractmethod
    def describe_sizes(self, sizes: dict[str, int], size: Any) -> str:
        """One line for ``llama-memory stats`` of ``sizes``, ``size`` formatting bytes."""

    def missing(self, where: Any) -> Optional[str]:
        """Why no store is at ``where`` (``"does not exist"``), or None (the default:
        opening creates it)."""
        return None

    def encrypt(self, where: Any, key: str, *, keep_backup: bool = False, source: str = "the key given") -> Any:
        """Encrypt the store at ``where`` with ``key`` (``llama-memory encrypt``);
        ValueError where encryption at rest is the server's (the default)."""
        raise ValueError(f"a {self.name} store is encrypted at rest by its server's disks, not by llama-memory")

    @contextmanager
    def undo_failed_creation(self, where: Any) -> Iterator[None]:
        """A context in which a failure removes what a first write created at ``where``
        (nothing by default: there are no files)."""
        yield
