"""The rows of the triple timeline (knowledge triples and their provenance). A user's
triples form, per (subject key, predicate key), a timeline of intervals
``[valid_from, valid_to)``, decided above storage (:mod:`llama_memory.sources.triples.timeline`);
writes join the open transaction, reads given ``alive_at`` leave out expired triples, and
"write order" breaks ties between equal ``valid_from``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

__all__ = [
    "NewTriple",
    "StoredTriple",
    "TimelineEntry",
    "TripleEdge",
    "TripleMention",
    "TripleRef",
    "TripleRow",
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
    """Where a triple belongs, and its text (empty when not read: ``delete_expired``)."""

    tenant_id: str
    user_id: str
    id: str
    subject: str = ""
    predicate: str = ""
    object: str = ""
