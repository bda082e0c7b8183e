"""How candidates are ranked: the rankings of several retrievers fused into one
(:func:`fuse_scores` for the vector source; :func:`fuse_rankings`, reciprocal-rank
fusion, for rankings whose scores share no meaning: the triple source's), then importance
and recency added with small weights (:class:`Salience`). Score fusion beat
reciprocal-rank fusion of the same candidates on LoCoMo, which got worse as the pools
grew (docs/benchmarks.md); the formulas are in docs/concepts.md ("Retrieval").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..core.types import MemoryRecord

#: The rank offset of reciprocal-rank fusion (Cormack et al., 2009).
RRF_K = 60

Ranking = Sequence[tuple[str, float]]


def fuse_rankings(
    rankings: Sequence[tuple[Ranking, float]], *, rrf_k: int = RRF_K
) -> list[tuple[str, float]]:
    """Weighted reciprocal-rank fusion of (ranking, weight) pairs, a ranking (id, score)
    best first: (id, sum of ``weight / (rrf_k + rank)``) best first, ties in the order of
    first appearance. A larger ``rrf_k`` flattens the difference between ranks."""
    fused: dict[str, float] = {}
    for ranking, weight in rankings:
        if weight <= 0:
            continue
        for rank, (item, _) in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + weight / (rrf_k + rank)
    return sorted(fused.items(), key=lambda pair: pair[1], reverse=True)


def fuse_scores(
    lexical: Ranking, dense: Mapping[str, float], *, lexical_weight: float = 1.0, dense_weight: float = 1.0
) -> list[tuple[str, float]]:
    """Weighted sum of normalised ``lexical`` (id, BM25 score) and ``dense`` (cosine by
    id; an id missing scores as the worst) scores: (id, score in 0..1) best first over
    every candidate, ties in the order of first appearance (a weight of 0 turns its
    retriever off). BM25 is divided by the query's best, the cosine min-max scaled, the
    words' part weighed from half (the farthest in meaning) to all (the closest), so word
    overlap alone cannot bury a strong meaning match (docs/benchmarks.md, "Everyday
    recall"); the :data:`MEANING_PLACES` closest in meaning are lifted near the top.
    """
    total = max(lexical_weight, 0.0) + max(dense_weight, 0.0)
    if total == 0:
        return []
    wl, wd = max(lexical_weight, 0.0) / total, max(dense_weight, 0.0) / total
    lexical_scores = dict(lexical) if wl > 0 else {}
    candidates = list(dict.fromkeys([*lexical_scores, *(dense if wd > 0 else {})]))
    best_lexical = max(lexical_scores.values(), default=0.0)
    cosines = [dense[i] for i in candidates if i in dense] if wd > 0 else []
    low, high = (min(cosines), max(cosines)) if cosines else (0.0, 0.0)
    spread = high - low
    fused = []
    for item in candidates:
        words = lexical_scores.get(item, 0.0) / best_lexical if best_lexical > 0 else 0.0
        meaning = (dense.get(item, low) - low) / spread if spread > 0 else 0.0
        # A record sharing only a common word ("eat", "mum") counts half: it can never
        # outrank the closest record in meaning.
        agreement = (1.0 + meaning) / 2.0 if wd > 0 and spread > 0 else 1.0
        fused.append((item, wl * words * agreement + wd * meaning))
    ranked = sorted(fused, key=lambda pair: pair[1], reverse=True)
    if MEANING_PLACES > 0 and wd > 0 and wl > 0 and spread > 0:
        ranked = _keep_meaning_places(ranked, dense, MEANING_PLACES)
    return ranked


#: The closest records in meaning keep a place near the top whatever the words say:
#: the n-th closest (n = 1, 2, 3) ranks no lower than (2n + 1)-th: it takes the score of
#: the record at 2n-th place, and comes after it (measured on both corpora:
#: docs/benchmarks.md, "Second round on retrieval").
MEANING_PLACES = 3


def _keep_meaning_places(ranked: list[tuple[str, float]], dense: Mapping[str, float], places: int) -> list[tuple[str, float]]:
    """``ranked`` with the ``places`` closest records in meaning lifted."""
    scores = dict(ranked)
    closest = sorted((i for i in scores if i in dense), key=lambda i: dense[i], reverse=True)[:places]
    for n, item in enumerate(closest):
        floor = ranked[min(2 * n + 1, len(ranked) - 1)][1]
        if scores[item] < floor:
            scores[item] = floor
    return sorted(scores.items(), key=lambda pair: pair[1], reverse=True)


DAY = 86_400.0


@dataclass(frozen=True)
class Salience:
    """The weights of recency and importance in a source's ranking.

    Args:
        recency_weight: what a record of just now adds to its normalised score (0: off).
        half_life: seconds after which the recency term is halved (default 90 days).
        importance_weight: what an importance of 1 adds (0: off).
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
    """When the record (its latest part) happened or was last shown, whichever is later;
    its storage time when it has no event time."""
    parts = record.parts or [record]
    happened = [r.event_time if r.event_time is not None else r.ingested_at for r in parts]
    times = [t for t in (*happened, *(r.last_used for r in (record, *parts))) if t is not None]
    return max(times) if times else None


def signal_importance(record: MemoryRecord) -> float:
    """The record's importance in 0..1: a formation pass's judgement (its parts'
    highest), else 0.4 plus 0.2 each if the user said it, it was said more than once,
    it was shown in a block before."""
    parts = record.parts or [record]
    judged = [r.importance for r in (record, *parts) if r.importance is not None]
    if judged:
        return max(judged)
    said_by_user = any(r.role == "user" for r in parts)
    repeated = any(len(r.message_ids) > 1 for r in parts)
    used = any(r.last_used is not None for r in (record, *parts))
    return 0.4 + 0.2 * said_by_user + 0.2 * repeated + 0.2 * used
