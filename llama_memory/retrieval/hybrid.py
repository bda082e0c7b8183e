"""The one hybrid search: rows found by words (the lexical index port) and by meaning
(the dense index, the overlay and the vectors held in memory of :class:`~.sync.IndexSync`),
fused by :func:`~.fusion.fuse_scores` (measured better than reciprocal-rank fusion on
LoCoMo, docs/benchmarks.md).

A caller may leave some records out (the vector source: the conversation's own
messages, by id): each retriever leaves them out where it chooses its candidates. It may
also set some candidates apart (the user's own earlier questions, and a record of the
window's text under another role): they take no place among a retriever's candidates,
which asks for more instead, and no part in scaling the others' scores. Without that,
the message an agent has just stored was every question's best candidate (cosine 1,
every word shared): it took a place of the pool, scaled every other score down and
seeded the second hop (docs/benchmarks.md, "The agent flow and earlier questions in
retrieval")."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from typing import Any, Optional

import numpy as np

from ..core.types import Scope
from ..storage.ports import LexicalIndex
from .apart import MAX_ASKS, Ranking, more_needed
from .fusion import fuse_scores
from .sync import IndexSync
from .vectors import add_cosines

#: Picks, among candidate ids, those to set apart (:class:`~.apart.SetApart`).
Apart = Callable[[Sequence[str]], set[str]]


class HybridSearch:
    """Lexical + dense search over one indexed collection, one fusion.

    Args:
        sync: the collection's index sync (dense side: index, overlay, held vectors).
        lexical: the lexical index port.
        query_vector: a query's vector (embedded once per query, cached by the caller).
    """

    def __init__(
        self, sync: IndexSync, lexical: LexicalIndex, query_vector: Callable[[str], np.ndarray]
    ) -> None:
        self.sync = sync
        self.lexical = lexical
        self.query_vector = query_vector

    def search(
        self,
        query: str,
        scope: Scope,
        pool: int,
        *,
        dense_weight: float = 1.0,
        lexical_weight: float = 1.0,
        cosines: Optional[dict[str, float]] = None,
    ) -> Ranking:
        """Every candidate of the two retrievers (``pool`` each) of the scope's user, by
        fused score (:func:`~.fusion.fuse_scores`), best first. Given ``cosines``, the
        candidates' cosines with the query are put in it (fused scores are rescaled per
        query; a cosine is absolute evidence, :mod:`llama_memory.retrieval.relevance`)."""
        ranked, _ = self.search_apart(
            query, scope, pool, _nothing_apart, dense_weight=dense_weight, lexical_weight=lexical_weight, cosines=cosines
        )
        return ranked

    def search_apart(
        self,
        query: str,
        scope: Scope,
        pool: int,
        apart: Apart,
        *,
        exclude: Collection[str] = (),
        spare: int = 0,
        dense_weight: float = 1.0,
        lexical_weight: float = 1.0,
        cosines: Optional[dict[str, float]] = None,
    ) -> tuple[Ranking, Ranking]:
        """:meth:`search`, the records of ``exclude`` (ids) left out by each retriever,
        with the candidates that ``apart`` picks set apart: the others by fused score,
        best first, and those set apart, fused among themselves.

        A record left out is no candidate at all. A candidate set apart takes no place
        among a retriever's ``pool`` (each is asked for ``spare`` more to begin with, and
        again for more as needed) and no part in scaling the others' scores: they rank
        as if neither were stored. Those set apart are the ones ranked before a
        retriever's ``pool``-th other candidate: what it was asked for beyond that
        changes nothing."""
        lexical, dense, aside = self._candidates(
            query, scope, pool, dense_weight, lexical_weight, apart, exclude, spare
        )
        if cosines is not None:
            cosines.update(dense)
        weights = {"lexical_weight": lexical_weight, "dense_weight": dense_weight}
        return (
            fuse_scores([(i, s) for i, s in lexical if i not in aside],
                        {i: c for i, c in dense.items() if i not in aside}, **weights),
            fuse_scores([(i, s) for i, s in lexical if i in aside],
                        {i: c for i, c in dense.items() if i in aside}, **weights) if aside else [],
        )

    def candidates(
        self,
        query: str,
        scope: Scope,
        pool: int,
        *,
        dense_weight: float = 1.0,
        lexical_weight: float = 1.0,
        exclude: Collection[str] = (),
    ) -> tuple[Ranking, dict[str, float]]:
        """The two rankings before fusion: lexical (id, score) best first, and the cosine
        by id of the dense candidates and, where it can be had, of the lexical ones; the
        records of ``exclude`` (ids) left out. A caller with more signals (the triple
        source's entity links) fuses them itself."""
        lexical, dense, _ = self._candidates(query, scope, pool, dense_weight, lexical_weight, exclude=exclude)
        return lexical, dense

    def _candidates(
        self,
        query: str,
        scope: Scope,
        pool: int,
        dense_weight: float,
        lexical_weight: float,
        apart: Optional[Apart] = None,
        exclude: Collection[str] = (),
        spare: int = 0,
    ) -> tuple[Ranking, dict[str, float], set[str]]:
        """:meth:`candidates`, and the ids among them that ``apart`` set apart (each
        retriever keeps ``pool`` others besides them, see :meth:`search_apart`)."""
        sync = self.sync
        owner = (scope.tenant_id, scope.require_user(f"the {sync.collection!r} memory source"))
        extra, aside = max(spare, 0) if apart is not None else 0, set()
        lexical: Ranking = []
        dense: Ranking = []
        found: dict[str, Any] = {}
        ask_lexical, ask_dense = lexical_weight > 0, dense_weight > 0
        for _ in range(MAX_ASKS):
            asked_lexical, asked_dense, found_now = self._rankings(
                query, scope, owner, pool + extra, dense_weight if ask_dense else 0.0,
                lexical_weight if ask_lexical else 0.0, exclude,
            )
            if ask_lexical:
                lexical = asked_lexical
            if ask_dense:
                dense, found = asked_dense, found_now
            if apart is None:
                break
            aside = apart(list(dict.fromkeys(i for side in (lexical, dense) for i, _ in side)))
            # A side asked again finds what it found before and more past it: one that
            # already holds ``pool`` others, or gave fewer hits than it was asked for
            # (it holds no more), would end the same after its cut (:func:`beside`), so
            # only the others are asked again (a lexical search costs the same however
            # many hits it is asked for: every match is scored).
            ask_lexical = ask_lexical and _short(lexical, aside, pool, pool + extra)
            ask_dense = ask_dense and _short(dense, aside, pool, pool + extra)
            # A retriever that gave all it was asked for may hold more past its cut: when
            # those set apart leave it short of ``pool``, it is asked for more, as many as
            # the share set apart so far says it needs.
            needed = max((more_needed(pool, pool + extra, sum(i in aside for i, _ in side))
                          for side in (lexical, dense) if len(side) >= pool + extra), default=0)
            if needed <= extra:
                break
            extra = needed
        lexical, dense = beside(lexical, aside, pool), beside(dense, aside, pool)
        scores = dict(dense)
        if scores and lexical:
            self._add_cosines(scores, [i for i, _ in lexical if i not in scores], owner, found)
        held = {i for i, _ in lexical} | set(scores)
        return lexical, scores, aside & held

    def _rankings(
        self, query: str, scope: Scope, owner: tuple[str, str], count: int,
        dense_weight: float, lexical_weight: float, exclude: Collection[str] = (),
    ) -> tuple[Ranking, Ranking, dict[str, Any]]:
        """Each retriever's ``count`` best, the records of ``exclude`` left out: lexical
        (id, score) and dense (id, cosine), best first; and what the dense side found
        to read vectors from later."""
        sync = self.sync
        with sync.lock:
            sync.embed_pending()
            vector = self.query_vector(query)
            waiting = sync.waiting(owner)
            # Held vectors serve only the dense side: none are loaded when it is off.
            resident = sync.resident(owner, len(vector)) if dense_weight > 0 else None
            dense: dict[str, float] = {}
            if resident is not None:
                dense = dict(resident.search(vector, count, exclude))
        if dense_weight > 0:
            if resident is None:
                dense = dict(sync.index.query(*owner, vector, count, exclude))
            if waiting:
                add_cosines(dense, {i: v for i, v in waiting.items() if i not in exclude} if exclude else waiting, vector)
        ranked = sorted(dense.items(), key=lambda item: item[1], reverse=True)[:count] if dense_weight > 0 else []
        lexical = (
            self.lexical.search_text(query, scope, sync.collection, count, exclude) if lexical_weight > 0 else []
        )
        return lexical, ranked, {"vector": vector, "resident": resident, "waiting": waiting}

    def _add_cosines(
        self, dense: dict[str, float], missing: Sequence[str], owner: tuple[str, str], found: dict[str, Any]
    ) -> None:
        """Put in ``dense`` the cosine of each ``missing`` lexical candidate outside the
        dense pool, so that fusion compares like with like (a missing score would count
        as the worst)."""
        sync, vector, resident, waiting = self.sync, found["vector"], found["resident"], found["waiting"]
        vectors: dict[str, Any] = {i: waiting[i] for i in missing if i in waiting}
        rest = [i for i in missing if i not in vectors]
        # An id left without one was written by another process after this search began
        # and is not embedded yet; it competes on words alone until the next search.
        vectors.update(sync.known_vectors(owner, rest, len(vector), resident))
        add_cosines(dense, vectors, vector)


def beside(ranking: Ranking, aside: set[str], pool: int) -> Ranking:
    """``ranking`` cut after its ``pool``-th id not in ``aside`` (the ids set apart
    before it are kept: they take no place). Whatever lies past the cut is left, so the
    result is the same however far the ranking was read."""
    kept: Ranking = []
    others = 0
    for item in ranking:
        if others >= pool:
            break
        kept.append(item)
        if item[0] not in aside:
            others += 1
    return kept


def _short(ranking: Ranking, aside: set[str], pool: int, asked: int) -> bool:
    """Whether a side that was asked for ``asked`` hits gave them all and holds fewer
    than ``pool`` not in ``aside``: only then may asking it for more change its cut."""
    return len(ranking) >= asked and sum(i not in aside for i, _ in ranking) < pool


def _nothing_apart(ids: Sequence[str]) -> set[str]:
    return set()
