"""The rows of the long-term records, and the lexical index port (records found by their
words, best first)."""

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
    """A record waiting for its vector (or just deleted)."""

    id: str
    text: str
    tenant_id: str
    user_id: str


def more_important(new: Optional[float], old: Optional[float]) -> bool:
    """Whether importance ``new`` of a record stated again beats its stored ``old``: the
    higher wins, a judgement wins over none."""
    return new is not None and (old is None or new > old)


#: Every record id of a collection and whether the dense index holds it, per (tenant, user).
IndexFlags = dict[tuple[str, str], dict[str, bool]]


@runtime_checkable
class LexicalIndex(Protocol):
    """Full-text search over the records of one user and source."""

    def search_text(
        self, query: str, scope: Scope, source: str, limit: int, exclude: Collection[str] = ()
    ) -> list[tuple[str, float]]:
        """Records of the scope's user whose text (or event date in words) shares words
        with ``query``, best first, as (id, score), higher better; the backend quotes the
        free text. The ``limit`` best leaving out the ids of ``exclude``."""
        ...

    def word_counts(self, words: Sequence[str], scope: Scope) -> tuple[int, dict[str, int]]:
        """(how many records the scope's user holds, how many match each of ``words``),
        for an idf (:mod:`llama_memory.retrieval.relevance`). Only the user's own records
        count; a word only their triples or current profile hold counts as one. Counts
        may be cached, sampled on a large user and a little stale."""
        ...


@runtime_checkable
class RankedLexicalIndex(LexicalIndex, Protocol):
    """A lexical index that also gives its ranking as far as a caller reads it."""

    def rank_text(
        self, query: str, scope: Scope, source: str, exclude: Collection[str] = (), first: int = 30
    ) -> Iterator[tuple[str, float]]:
        """The hits of :meth:`search_text` in its order, as many as the caller reads,
        from one search (``first``: how many it is expected to read)."""
        ...
