"""Fusing rankings from several retrievers (dense, lexical) into one.

Scores of different retrievers are not comparable (cosine similarity against BM25),
so fusion works on ranks: reciprocal-rank fusion, each retriever weighted.
"""

from __future__ import annotations

from collections.abc import Sequence

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
