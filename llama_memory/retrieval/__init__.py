"""Retrieval above the storage ports: fusing rankings (:mod:`.ranking`), keeping a dense
index in step with its rows (:mod:`.sync`, the one index sync) and searching rows by
words and meaning at once (:mod:`.hybrid`, the one hybrid search)."""

from .ranking import RRF_K, Ranking, fuse_rankings, fuse_scores

__all__ = ["RRF_K", "Ranking", "fuse_rankings", "fuse_scores"]
