"""Importance and recency: what, besides relevance, ranks a record.

A source's ranking is by how well a record matches the query. Two small terms are
added to it, so that among records that match about as well the one that matters more,
or is more recent, comes first ("I now prefer coffee" before last year's "I prefer tea"):

    rank = score / best score of the query
           + recency_weight * 2 ** (-age / half_life)
           + importance_weight * importance

``age`` is the time since the record happened or was last shown in a block, whichever
is later; ``importance`` is in 0..1: a formation pass's judgement when it gave one, else
simple signals (:func:`signal_importance`). The weights are small (0.15 and 0.1 by
default): a record must match nearly as well as another to overtake it. Measured on
LoCoMo in docs/benchmarks.md ("Importance and recency").
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..core.types import MemoryRecord

DAY = 86_400.0


@dataclass(frozen=True)
class Salience:
    """The weights of recency and importance in a source's ranking.

    Args:
        recency_weight: what a record happened (or was used) just now adds to its
            normalised score (0 turns recency off).
        half_life: seconds after which the recency term is halved (default 90 days).
        importance_weight: what an importance of 1 adds (0 turns importance off).
    """

    recency_weight: float = 0.15
    half_life: float = 90 * DAY
    importance_weight: float = 0.1

    def __post_init__(self) -> None:
        if self.recency_weight < 0 or self.importance_weight < 0:
            raise ValueError(
                "recency_weight and importance_weight must be 0 (off) or more, got "
                f"{self.recency_weight} and {self.importance_weight}"
            )
        if not self.half_life > 0:
            raise ValueError(f"half_life must be positive seconds, got {self.half_life}")

    @property
    def off(self) -> bool:
        """Whether both terms are off (the ranking is the score alone)."""
        return self.recency_weight == 0 and self.importance_weight == 0

    def recency(self, record: MemoryRecord, now: float) -> float:
        """1 for a record of just now, halved every ``half_life``; 0 without a time."""
        when = latest_time(record)
        if when is None:
            return 0.0
        return float(2.0 ** (-max(0.0, now - when) / self.half_life))

    def rerank(self, records: Sequence[MemoryRecord], now: float) -> list[MemoryRecord]:
        """The records best first by score plus recency and importance; each record's
        ``score`` becomes that sum (comparable within this query only)."""
        if self.off or not records:
            return list(records)
        best = max((r.score for r in records), default=0.0)
        scale = best if best > 0 else 1.0
        for record in records:
            record.score = (
                record.score / scale
                + self.recency_weight * self.recency(record, now)
                + self.importance_weight * signal_importance(record)
            )
        return sorted(records, key=lambda r: r.score, reverse=True)


#: No salience: rank by the score alone.
NO_SALIENCE = Salience(recency_weight=0.0, importance_weight=0.0)


def latest_time(record: MemoryRecord) -> float | None:
    """When the record (the latest of its parts, for an excerpt) happened, or was last
    shown in a block, whichever is later; its storage time when it has no event time."""
    parts = record.parts or [record]
    happened = [r.event_time if r.event_time is not None else r.ingested_at for r in parts]
    times = [t for t in (*happened, *(r.last_used for r in (record, *parts))) if t is not None]
    return max(times) if times else None


def signal_importance(record: MemoryRecord) -> float:
    """The record's importance in 0..1: a formation pass's judgement when there is one
    (the highest of its parts), else simple signals: 0.4, plus 0.2 if the user said it,
    plus 0.2 if it was said more than once (the dedup merged its messages), plus 0.2 if
    it was shown in a block before."""
    parts = record.parts or [record]
    judged = [r.importance for r in (record, *parts) if r.importance is not None]
    if judged:
        return max(judged)
    said_by_user = any(r.role == "user" for r in parts)
    repeated = any(len(r.message_ids) > 1 for r in parts)
    used = any(r.last_used is not None for r in (record, *parts))
    return 0.4 + 0.2 * said_by_user + 0.2 * repeated + 0.2 * used
