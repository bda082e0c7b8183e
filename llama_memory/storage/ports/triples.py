"""The triple timeline port: where a backend keeps knowledge triples and their provenance.

A user's triples form, per (subject key, predicate key), a timeline of intervals
``[valid_from, valid_to)``; which interval a new statement ends or extends is
decided above storage (:mod:`llama_memory.sources.triples.timeline`, pure
functions). The port only reads and writes rows:

- writes join the transaction opened by :meth:`TripleTimeline.transaction` (a batch
  of triples is written all or nothing, and a memory's write spanning several
  ports joins the same transaction);
- reads never return expired triples when they are given ``alive_at``;
- "write order" below means the order triples were first written (SQLite: its
  autoincrement key; PostgreSQL: a sequence), used to break ties between equal
  ``valid_from`` and to find the spelling an entity was first written with.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Optional, Protocol, runtime_checkable

from ...core.types import Scope

__all__ = [
    "NewTriple",
    "StoredTriple",
    "TimelineEntry",
    "TripleEdge",
    "TripleMention",
    "TripleRef",
    "TripleRow",
    "TripleTimeline",
]

#: Every triple id and whether the dense index holds it, per (tenant, user).
IndexFlags = dict[tuple[str, str], dict[str, bool]]


@dataclass(frozen=True)
class TripleMention:
    """One statement of a triple: its provenance.

    Attributes:
        session_id: the session it was stated in (``None``: outside a session).
        message_ids: the chat messages it came from.
        event_time: when it was stated (epoch seconds).
        ingested_at: when it was stored.
        origin: how it arrived: ``"api"``, ``"tool"``, ``"extraction"``, ``"import"``.
    """

    session_id: Optional[str]
    message_ids: tuple[str, ...]
    event_time: float
    ingested_at: float
    origin: str


@dataclass(frozen=True)
class TimelineEntry:
    """A triple as its (subject, predicate) timeline sees it.

    Attributes:
        id: the triple's id.
        object_key: its normalised object.
        valid_from, valid_to: its interval (``valid_to`` ``None``: it holds now).
        ttl, expires_at: its lifetime (``None``: kept until forgotten).
    """

    id: str
    object_key: str
    valid_from: float
    valid_to: Optional[float] = None
    ttl: Optional[float] = None
    expires_at: Optional[float] = None

    @property
    def current(self) -> bool:
        """Whether the triple holds now (no later value ended it)."""
        return self.valid_to is None

    def holds_at(self, t: float) -> bool:
        """Whether the interval contains the instant ``t``."""
        return self.valid_from <= t and (self.valid_to is None or t < self.valid_to)


@dataclass(frozen=True)
class TripleRow:
    """What every triple row holds: whose fact, its text and keys, and its interval.

    Attributes:
        id: the triple's id.
        tenant_id, user_id: whose fact it is.
        subject, predicate, object: the text as shown.
        subject_key, predicate_key, object_key: the normalised matching keys.
        valid_from, valid_to, superseded_by: its interval (``valid_to`` ``None``: it
            holds now) and the triple that replaced it.
    """

    id: str
    tenant_id: str
    user_id: str
    subject: str
    predicate: str
    object: str
    subject_key: str
    predicate_key: str
    object_key: str
    valid_from: float
    valid_to: Optional[float]
    superseded_by: Optional[str]


@dataclass(frozen=True)
class NewTriple(TripleRow):
    """A triple to insert, with its first mention. Its ``id`` is chosen by the caller (a
    random id, not a content hash: the same fact may hold again later as a new interval).

    Attributes:
        ttl, expires_at: its lifetime (``None``: kept until forgotten).
        search_text: what the lexical index holds of it.
        mention: the statement that created it (its ``ingested_at`` is the triple's).
    """

    ttl: Optional[float]
    expires_at: Optional[float]
    search_text: str
    mention: TripleMention


@dataclass(frozen=True)
class StoredTriple(TripleRow):
    """A triple as read back, with its lifetime and every mention (oldest stored first)."""

    ingested_at: float
    ttl: Optional[float]
    expires_at: Optional[float]
    mentions: tuple[TripleMention, ...] = ()


@dataclass(frozen=True)
class TripleEdge:
    """A triple as the entity neighbourhood sees it: which entities it joins, and when."""

    id: str
    subject_key: str
    object_key: str
    valid_from: float


@dataclass(frozen=True)
class TripleRef:
    """Where a triple (or a triple waiting for the dense index) belongs, and its text.

    ``subject``, ``predicate`` and ``object`` are filled in by :meth:`TripleTimeline.pending`
    (the text to embed) and left empty by :meth:`TripleTimeline.delete_expired`.
    """

    tenant_id: str
    user_id: str
    id: str
    subject: str = ""
    predicate: str = ""
    object: str = ""


@runtime_checkable
class TripleTimeline(Protocol):
    """Knowledge triples, their provenance and their lexical index, for every user."""

    @property
    def store(self) -> Any:
        """The storage the timeline lives in; a source keeps beside its triples what the
        store's meta table holds (the embedding model's identity)."""
        ...

    def transaction(self, action: str) -> AbstractContextManager[Any]:
        """One atomic write: the port's writes inside it commit or roll back together,
        and it joins a transaction already open (``action`` names it in errors)."""
        ...

    # -- the update rules' reads and writes (inside a transaction) ---------------------

    def timeline(
        self, scope: Scope, subject_key: str, predicate_key: str
    ) -> list[TimelineEntry]:
        """Every triple of the (subject, predicate) pair, expired ones included, by
        ``valid_from`` then write order."""
        ...

    def current(
        self, scope: Scope, subject_key: str, predicate_key: str, object_key: str
    ) -> Optional[TimelineEntry]:
        """The triple with these three keys that holds now (at most one does), if any."""
        ...

    def entity_spelling(self, scope: Scope, entity_key: str) -> Optional[str]:
        """The text the user's earliest-written triple naming this entity (as subject or
        object) gives it, if any."""
        ...

    def predicate_spelling(self, scope: Scope, predicate_key: str) -> Optional[str]:
        """The text the user's earliest-written triple with this predicate gives it."""
        ...

    def insert(self, triple: NewTriple) -> None:
        """Write a new triple with its first mention and its lexical entry."""
        ...

    def add_mention(
        self,
        triple_id: str,
        mention: TripleMention,
        ttl: Optional[float],
        expires_at: Optional[float],
    ) -> None:
        """Record another statement of a triple, and set its lifetime (as renewed)."""
        ...

    def move_start(self, triple_id: str, valid_from: float) -> None:
        """Set a triple's ``valid_from`` (earlier evidence that it held)."""
        ...

    def end(self, triple_ids: Sequence[str], valid_to: float, superseded_by: Optional[str]) -> None:
        """End triples' intervals at ``valid_to``, replaced by ``superseded_by`` (``None``: retracted, nothing replaces them)."""
        ...

    # -- reads -------------------------------------------------------------------------

    def select(
        self,
        scope: Scope,
        alive_at: float,
        *,
        ids: Optional[Sequence[str]] = None,
        include_history: bool = True,
        subject_key: Optional[str] = None,
        predicate_key: Optional[str] = None,
    ) -> list[StoredTriple]:
        """The user's triples not expired at ``alive_at``, by ``valid_from`` then write
        order: those with the given ids, current ones only unless ``include_history``,
        optionally of one subject and/or predicate key."""
        ...

    def counts(self, scope: Scope, alive_at: float) -> tuple[int, int]:
        """(all triples, current triples) of the user, not counting expired ones."""
        ...

    def current_ids(self, scope: Scope, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` are the user's current triples."""
        ...

    def search_words(
        self, scope: Scope, query: str, k: int, include_history: bool
    ) -> list[tuple[str, float]]:
        """The user's triples whose words best match ``query`` (any word of it, as plain
        words: never query syntax), best first, at most ``k``, as (id, score): higher is
        better (SQLite: BM25 turned positive); score fusion divides by the best one."""
        ...

    def touching(
        self, scope: Scope, entity_keys: Sequence[str], include_history: bool
    ) -> list[TripleEdge]:
        """The user's triples whose subject or object is one of ``entity_keys``, in no
        particular order."""
        ...

    def entity_names(self, scope: Scope) -> list[str]:
        """Subjects and objects of the user's current triples as written, newest first
        (repeats kept)."""
        ...

    def refresh_expiry(self, triple_ids: Sequence[str], at: float) -> None:
        """Triples read at ``at`` live their ``ttl`` from then (those with a ttl)."""
        ...

    # -- the dense index's bookkeeping ---------------------------------------------------

    def pending(self, limit: int) -> list[TripleRef]:
        """Up to ``limit`` triples (of any user) not yet in the dense index, in write
        order, with their text."""
        ...

    def mark_indexed(self, triple_ids: Sequence[str], indexed: bool = True) -> None:
        """Flag triples as in the dense index (or as waiting for it)."""
        ...

    def mark_all_unindexed(self) -> None:
        """Flag every triple as waiting for the dense index (a rebuild)."""
        ...

    def index_flags(self, scope: Optional[Scope] = None) -> IndexFlags:
        """Every triple id and whether it is in the dense index, per (tenant, user), for
        every user or one (tenant, user)."""
        ...

    # -- forgetting ----------------------------------------------------------------------

    def delete_user(self, scope: Scope) -> None:
        """Delete the user's triples, their provenance and lexical entries."""
        ...

    def delete_expired(self, at: float) -> list[TripleRef]:
        """Delete the triples expired at ``at`` (current or not) with their provenance and
        lexical entries; return which ones (triples they superseded keep the id)."""
        ...
