"""The rows of the long-term records (with provenance, written with dedup, read by id
and in session order, with expiry applied by storage): what
:class:`~llama_memory.storage.sql.records.RecordStore` takes and returns; and the
lexical index port, records found by their words (BM25 or the backend's own full-text
ranking), best first."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple, Optional, Protocol, runtime_checkable

from ...core.types import Scope


@dataclass(frozen=True)
class NewRecord:
    """A record to be written by :meth:`~llama_memory.storage.sql.records.RecordStore.add_records`."""

    source: str
    scope: Scope
    text: str
    message_ids: tuple[str, ...]
    event_time: Optional[float]
    role: Optional[str] = None
    metadata: Optional[dict] = None
    #: Time to live in seconds and expiry time (epoch seconds); None: kept forever.
    ttl: Optional[float] = None
    expires_at: Optional[float] = None
    #: How much it matters, 0..1 (a formation pass's judgement); None: not judged. A
    #: record stated again keeps the higher of the two.
    importance: Optional[float] = None


class PendingRecord(NamedTuple):
    """A record waiting for its vector (or just deleted): what the dense index needs
    to add (or remove) it."""

    id: str
    text: str
    tenant_id: str
    user_id: str


def more_important(new: Optional[float], old: Optional[float]) -> bool:
    """Whether a record stated again with importance ``new`` takes it over its stored
    ``old`` one: the higher wins, a judgement wins over none (every backend's dedup)."""
    return new is not None and (old is None or new > old)


#: Every record id of a collection and whether the dense index holds it, per (tenant, user).
IndexFlags = dict[tuple[str, str], dict[str, bool]]


@runtime_checkable
class LexicalIndex(Protocol):
    """Full-text search over the records of one user and source."""

    def search_text(
        self, query: str, scope: Scope, source: str, limit: int, exclude: Collection[str] = ()
    ) -> list[tuple[str, float]]:
        """Records of the scope's user whose text (or event date in words, "8 May 2023")
        shares words with ``query``, best first, as (id, score) with higher scores
        better. Free text: the backend quotes it (no query syntax reaches the index).
        The records of ``exclude`` (ids) are left out where the matches are chosen: the
        ``limit`` best of the others, as if those were not stored."""
        ...

    def word_counts(self, words: Sequence[str], scope: Scope) -> tuple[int, dict[str, int]]:
        """(how many records the scope's user holds, how many of them match each of
        ``words``): what an inverse document frequency needs
        (:mod:`llama_memory.retrieval.relevance`). Only the user's own records count, never another
        user's: what one user said must not make another's question look answerable. A
        word none of the user's records holds but their triples or current profile do
        counts as held by one. Counts may be cached, sampled on a large user and a little
        stale."""
        ...


@runtime_checkable
class RankedLexicalIndex(LexicalIndex, Protocol):
    """A lexical index that also gives its ranking as far as a caller reads it (the
    records' lexical index, on every SQL backend)."""

    def rank_text(
        self, query: str, scope: Scope, source: str, exclude: Collection[str] = (), first: int = 30
    ) -> Iterator[tuple[str, float]]:
        """The hits of :meth:`search_text` in its order, as many as the caller reads:
        the index is searched once however far it reads (``first``: how many it is
        expected to read), so a caller that leaves some hits aside reads on instead of
        searching again for more."""
        ...
