"""Fusing rankings from several retrievers (dense, lexical) into one.

Two ways are offered:

- :func:`fuse_scores`, what the vector source uses: each retriever's scores are
  put on a common 0..1 scale (BM25 divided by the best BM25 of the query; cosine
  min-max scaled over the candidates) and added, weighted, the words' part weighed
  by how close in meaning the record is. A candidate found by
  one retriever only still gets the other's score when it can be computed (the
  cosine of a lexical hit), so a strong match on one side is not drowned by a
  mediocre match on both, which is what reciprocal-rank fusion rewards.
- :func:`fuse_rankings`, reciprocal-rank fusion, for rankings whose scores have no
  common meaning at all (the triple source's dense, lexical and entity lists).

Measured on LoCoMo (docs/benchmarks.md): score fusion beats reciprocal-rank fusion
of the same candidates, and reciprocal-rank fusion gets worse as the pools grow.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

#: The rank offset of reciprocal-rank fusion (Cormack et al., 2009).
RRF_K = 60

Ranking = Sequence[tuple[str, float]]


def fuse_rankings(
    rankings: Sequence[tuple[Ranking, float]], *, rrf_k: int = RRF_K
) -> list[tuple[str, float]]:
    """Weighted reciprocal-rank fusion.

    Args:
        rankings: pairs of (ranking, weight); a ranking is (id, score) best first.
        rrf_k: the rank offset; larger values flatten the difference between ranks.

    Returns:
        (id, fused score) best first; an id's score is the sum over the rankings
        that hold it of ``weight / (rrf_k + rank)`` (ranks start at 1). Ties keep
        the order in which ids were first seen.
    """
    fused: dict[str, float] = {}
    for ranking, weight in rankings:
        if weight <= 0:
            continue
        for rank, (item, _) in enumerate(ranking, start=1):
            fused[item] = fused.get(item, 0.0) + weight / (rrf_k + rank)
    return sorted(fused.items(), key=lambda pair: pair[1], reverse=True)


def fuse_scores(
    lexical: Ranking,
    dense: Mapping[str, float],
    *,
    lexical_weight: float = 1.0,
    dense_weight: float = 1.0,
) -> list[tuple[str, float]]:
    """Weighted sum of normalised lexical and dense scores over their candidates.

    Args:
        lexical: (id, BM25 score, higher is better) best first.
        dense: cosine similarity by id, for the dense candidates and, where known,
            for the lexical ones (an id missing here scores as the worst dense one).
        lexical_weight, dense_weight: the weights of the two (0 turns one off).

    Returns:
        (id, score in 0..1) best first over every candidate of either retriever.
        A lexical score is divided by the best lexical score of the query (so the
        best word match scores 1 and one without words 0); a dense score is scaled
        so that the worst candidate scores 0 and the best 1. The lexical score is then
        weighed by how close the record is in meaning, from half (the farthest
        candidate) to all of it (the closest): word overlap alone cannot bury a strong
        meaning match (measured: docs/benchmarks.md, "Everyday recall"). With both
        sides on, the :data:`MEANING_PLACES` closest records in meaning are lifted to
        a place near the top, however many records share more words. Ties keep the
        order of first appearance: lexical candidates, then dense ones.
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
        # Words count in full only where the meaning agrees: a record that shares a
        # common word with the question ("eat", "mum", "morning") and nothing else
        # counts half, so it can never outrank the closest record in meaning.
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
    """``ranked`` with the ``places`` closest records in meaning lifted (:data:`MEANING_PLACES`)."""
    scores = dict(ranked)
    closest = sorted((i for i in scores if i in dense), key=lambda i: dense[i], reverse=True)[:places]
    for n, item in enumerate(closest):
        floor = ranked[min(2 * n + 1, len(ranked) - 1)][1]
        if scores[item] < floor:
            scores[item] = floor
    return sorted(scores.items(), key=lambda pair: pair[1], reverse=True)
