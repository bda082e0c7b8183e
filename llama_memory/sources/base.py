"""What a memory source is: one narrow protocol (:class:`Source`: a ``name``, a
``priority``, ``add`` and ``retrieve``), optional protocols the memory checks for before
calling them, :class:`MemorySource`, a base class implementing them all with defaults
that do nothing, and :class:`IndexedSource`, one with a dense index's upkeep. A source of
higher ``priority`` is served first from the block's token budget (the opposite of
LlamaIndex's block priorities: docs/concepts.md).
"""

from __future__ import annotations

import logging
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, Optional, Protocol, Union, runtime_checkable

from llama_index.core.base.llms.types import ChatMessage

from ..core.errors import EmbeddingModelError, StorageError
from ..core.types import MemoryRecord, Scope, StoredMessage
from ..retrieval.sync import IndexSync
from ..storage.ports import PendingRecord, Transactional
from ..storage.ports.triples import TripleRef
from ..storage.reconcile import ReconcileReport


@runtime_checkable
class Source(Protocol):
    """What every source must do: a name and a priority, take in messages, retrieve."""

    #: Short name shown next to each injected item (``"vector"``, ``"triples"``...).
    name: str
    #: Order in the memory block: higher first; equal priorities share round-robin.
    priority: int

    def add(self, messages: Sequence[StoredMessage], scope: Scope) -> None:
        """Take in new conversation messages (a source that learns nothing from them
        does nothing)."""

    def retrieve(self, query: str, scope: Scope, k: int) -> list[MemoryRecord]:
        """Up to ``k`` records relevant to ``query``, best first, all within ``scope``."""


@runtime_checkable
class Forgettable(Protocol):
    """A source that holds per-user data it can delete."""

    def reset(self, scope: Scope) -> None:
        """Remove what this source holds for the scope's user."""

    def forget(self, scope: Scope) -> None:
        """Remove every trace of the scope's user, in every index and cache."""


@runtime_checkable
class Reconcilable(Protocol):
    """A source that keeps a derived index."""

    def reconcile(self, catch_up: bool = True, scope: Optional[Scope] = None) -> ReconcileReport:
        """Bring derived indexes in line with the system of record."""


@runtime_checkable
class Reindexable(Protocol):
    """A source whose dense index can be rebuilt from the system of record."""

    def reindex(self) -> int:
        """Rebuild the dense index; return how many records were indexed."""


@runtime_checkable
class Expiring(Protocol):
    """A source whose records can expire."""

    def purge_expired(self) -> int:
        """Delete records whose time to live is over; return how many."""


@runtime_checkable
class WithTools(Protocol):
    """A source that offers agent tools."""

    def tools(self, scope: Scope) -> list[Any]:
        """LlamaIndex tools acting within ``scope``."""


@runtime_checkable
class Extracting(Protocol):
    """A source that forms structured memories with an LLM its own way (memory
    formation outside a formation pass's parts: its own LLM call)."""

    def extract(self, messages: Sequence[ChatMessage], llm: Any, scope: Scope) -> Any:
        """Form and store structured memories from ``messages``."""


@runtime_checkable
class Recent(Protocol):
    """A source that can give its records by time, for a message that refers back
    ("what did we talk about last time?", "what did I say yesterday?")."""

    def recent(self, scope: Scope, k: int, span: Optional[tuple[float, float]] = None) -> list[MemoryRecord]:
        """Up to ``k`` records of ``span`` (start, end in epoch seconds), or of the
        latest earlier session when ``span`` is None."""


@runtime_checkable
class WindowAware(Protocol):
    """A source whose records include the conversation's own latest messages: it can
    leave those the window shows out of a retrieval and its evidence (the query would
    otherwise match itself)."""

    def retrieve_beside(self, query: str, scope: Scope, k: int, shown: frozenset[str]) -> list[MemoryRecord]:
        """:meth:`Source.retrieve`, leaving out the records whose normalised text
        (:func:`llama_memory.core.text.normalize_text`) is in ``shown``."""


@runtime_checkable
class Embedded(Protocol):
    """A source whose records have vectors: it gives those stored and embeds a query as
    its retrieval does (for :mod:`llama_memory.read.superseded`)."""

    def record_vectors(self, ids: Sequence[str], scope: Scope, dimension: int) -> dict[str, Any]:
        """The stored vectors (of ``dimension``) of those of ``ids`` that have one, by id."""

    def query_vector(self, text: str) -> Any:
        """``text`` embedded as a query (cached: retrieval embedded it already)."""


@runtime_checkable
class EmbedsAhead(Protocol):
    """A source that can start embedding the queries a ``get()`` will retrieve for
    before it asks (in the background, beside the store's statements)."""

    def embed_ahead(self, texts: Sequence[str]) -> None:
        """Start embedding ``texts`` as queries; a retrieval for one takes its vector."""


@runtime_checkable
class Closable(Protocol):
    """A source that holds resources."""

    def close(self) -> None:
        """Release them."""


@runtime_checkable
class Stored(Protocol):
    """A source (or chat log) that writes to a store: the memory writes a batch to all
    of them in one transaction of that store when they share it."""

    store: Transactional


@runtime_checkable
class ProfileHolder(Protocol):
    """A source holding the user's profile (``memory.profile``)."""

    schema: Any

    def get_profile(self, scope: Scope) -> Any:
        """The scope user's profile."""


@runtime_checkable
class TripleHolder(Protocol):
    """A source holding knowledge triples (``memory.triple_source``)."""

    def add_triples(self, triples: Sequence[Any], scope: Scope, **kwargs: Any) -> Any:
        """Store triples for the scope's user."""


class MemorySource(ABC):
    """A secondary memory: it receives the conversation and retrieves records for a query.

    Subclass it and write ``add``, ``retrieve`` and ``reset``; every optional protocol of
    this module has a default that does nothing. A source never returns records of a user
    other than ``scope.user_id``.
    """

    #: Short name shown next to each injected item (``"vector"``, ``"triples"``...).
    name: str = "source"
    #: Order in the memory block: higher first; equal priorities share round-robin.
    priority: int = 0
    #: True for a source whose records do not depend on the query (a profile): they go
    #: into every memory block, but not into ``search`` results, which rank by relevance.
    query_independent: bool = False

    @abstractmethod
    def add(self, messages: Sequence[StoredMessage], scope: Scope) -> None:
        """Take in new conversation messages."""

    @abstractmethod
    def retrieve(self, query: str, scope: Scope, k: int) -> list[MemoryRecord]:
        """Up to ``k`` records relevant to ``query``, best first, all within ``scope``;
        ``query`` may be empty (a profile still returns its records)."""

    @abstractmethod
    def reset(self, scope: Scope) -> None:
        """Remove what this source holds for the scope's user."""

    def forget(self, scope: Scope) -> None:
        """Remove every trace of the scope's user, in every index and cache (default:
        :meth:`reset`); ``memory.forget()`` calls it."""
        self.reset(scope)

    def reconcile(self, catch_up: bool = True, scope: Optional[Scope] = None) -> ReconcileReport:
        """Bring derived indexes in line with the system of record, for every user or the
        scope's; with ``catch_up``, write what is missing now (default: no index)."""
        return ReconcileReport()

    def recent(self, scope: Scope, k: int, span: Optional[tuple[float, float]] = None) -> list[MemoryRecord]:
        """Up to ``k`` records of ``span`` (start, end in epoch seconds), or of the latest
        earlier session when None, for a message that refers back (none by default)."""
        return []

    def purge_expired(self) -> int:
        """Delete records whose time to live is over; return how many (default: none)."""
        return 0

    def tools(self, scope: Scope) -> list[Any]:
        """LlamaIndex tools for agents, acting within ``scope`` (none by default). Inside
        an agent run, ``memory.tools()`` calls this again on the run's memory's source of
        the same class and name: keep it cheap and the tool names fixed.
        """
        return []

    def extract(self, messages: Sequence[ChatMessage], llm: Any, scope: Scope) -> Any:
        """Derive and store structured memories from ``messages`` with ``llm`` (nothing by
        default)."""
        return None

    def close(self) -> None:
        """Release resources (connections); the default holds none."""


def require_port(value: Any, port: Any, source: str, instead: str) -> Any:
    """``value`` if it implements the storage ``port`` (a runtime-checkable protocol), else
    a TypeError saying what ``source`` takes and what to pass ``instead``. (``port`` is
    ``Any``: mypy takes no protocol class for a ``type[P]``.)"""
    if isinstance(value, port):
        return value
    raise TypeError(f"{source} takes {port.__name__} (a storage port), not {type(value).__name__} {value!r}: pass {instead}")


def forget_in_each(sources: Sequence[Source], scope: Scope) -> list[str]:
    """Every :class:`Forgettable` source's ``forget`` of ``scope``: one index that cannot
    be reached does not stop the others; its StorageError is returned as ``"name: error"``."""
    failures: list[str] = []
    for source in sources:
        if isinstance(source, Forgettable):
            try:
                source.forget(scope)
            except StorageError as exc:
                failures.append(f"{source.name}: {exc}")
    return failures


class IndexedSource(MemorySource):
    """A :class:`MemorySource` with a dense index; a subclass sets ``_sync`` (and
    ``_lock``, the sync's lock) and names what waits in ``_waiting``."""

    _sync: IndexSync
    #: What a close that cannot write the index leaves waiting, for its warning.
    _waiting = "vectors"

    @property
    def batch_size(self) -> int:
        """Rows embedded per call, and vectors waiting before a dense-index write."""
        return self._sync.batch_size

    def flush(self) -> int:
        """Embed every row still without a vector and write all waiting vectors to the
        dense index; return how many vectors were written."""
        return self._sync.flush()

    def reindex(self) -> int:
        """Rebuild the dense index from the system of record; return how many rows."""
        return self._sync.reindex()

    def close(self) -> None:
        """Write waiting vectors to the dense index; an unreachable index or refused
        model is logged, not raised (the rows stay flagged waiting)."""
        try:
            self.flush()
        except (StorageError, EmbeddingModelError) as exc:
            logging.getLogger(type(self).__module__).warning(
                "closing with %s not written to the dense index: %s", self._waiting, exc
            )

    def reconcile(self, catch_up: bool = True, scope: Optional[Scope] = None) -> ReconcileReport:
        """Bring the dense index in line with the system of record (see
        :func:`~llama_memory.storage.reconcile.reconcile_index`); with ``catch_up``, embed
        and write the missing vectors now, else on the next read or flush."""
        owner = (scope.tenant_id, scope.require_user()) if scope is not None else None
        return self._sync.reconcile(catch_up, owner)

    def _forget_rows(self, gone: Sequence[Union[PendingRecord, TripleRef]]) -> int:
        """Drop the vectors of rows already deleted from the record; return how many."""
        by_user: dict[tuple[str, str], list[str]] = {}
        for row in gone:
            by_user.setdefault((row.tenant_id, row.user_id), []).append(row.id)
        for owner, ids in by_user.items():
            self._sync.forget(owner, ids)
        return len(gone)
