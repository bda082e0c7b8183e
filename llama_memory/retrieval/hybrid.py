"""The one hybrid search: rows found by words (the lexical index port) and by meaning
(the dense index, the overlay and the held vectors of :class:`~.sync.IndexSync`), fused by
:func:`~.ranking.fuse_scores`; and the second hop (:func:`second_hop`): the best hits'
rare link words searched with the query, one lexical search and no embedding
(docs/concepts.md, "The second hop"; ``python -m bench.multihop``).

Records left out (the conversation's own messages) and candidates set apart (the user's
earlier questions) take no place among a retriever's candidates and no part in scaling
the others' scores: the message an agent had just stored was every question's best
candidate (docs/benchmarks.md, "The agent flow and earlier questions in retrieval").
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from itertools import chain, islice
from typing import Any, Optional

import numpy as np

from ..core.types import Scope
from ..storage.ports import LexicalIndex, RankedLexicalIndex
from .apart import Hits, Ranking, grown, take_beside
from .ranking import fuse_scores
from .relevance import content_stems, content_words, stem
from .sync import IndexSync, add_cosines

#: Picks, among candidate ids, those to set apart (:class:`~.apart.SetApart`).
Apart = Callable[[Sequence[str]], set[str]]


class HybridSearch:
    """Lexical + dense search over one indexed collection (``sync``: the dense side),
    one fusion; ``query_vector`` embeds a query (cached by the caller)."""

    def __init__(
        self, sync: IndexSync, lexical: LexicalIndex, query_vector: Callable[[str], np.ndarray]
    ) -> None:
        self.sync = sync
        self.lexical = lexical
        self.query_vector = query_vector

    def search(
        self, query: str, scope: Scope, pool: int, *, dense_weight: float = 1.0, lexical_weight: float = 1.0,
        cosines: Optional[dict[str, float]] = None
    ) -> Ranking:
        """Every candidate of the two retrievers (``pool`` each) of the scope's user, by
        fused score, best first; their cosines with the query are put in ``cosines`` when
        given (a fused score is rescaled per query, a cosine is absolute evidence)."""
        ranked, _ = self.search_apart(
            query, scope, pool, lambda ids: set(), dense_weight=dense_weight,
            lexical_weight=lexical_weight, cosines=cosines,
        )
        return ranked

    def search_apart(
        self, query: str, scope: Scope, pool: int, apart: Apart, *, exclude: Collection[str] = (), spare: int = 0,
        dense_weight: float = 1.0, lexical_weight: float = 1.0, cosines: Optional[dict[str, float]] = None
    ) -> tuple[Ranking, Ranking]:
        """:meth:`search`, ``exclude`` (ids) left out by each retriever: the candidates
        ``apart`` does not pick by fused score, and those it picks (ranked before a
        retriever's ``pool``-th other), fused among themselves. Those set apart take no
        place in the ``pool`` (each ranking is read ``spare`` further at first, then as needed)."""
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
        self, query: str, scope: Scope, pool: int, *, dense_weight: float = 1.0, lexical_weight: float = 1.0,
        exclude: Collection[str] = ()
    ) -> tuple[Ranking, dict[str, float]]:
        """The two rankings before fusion, ``exclude`` (ids) left out: lexical (id, score)
        best first, and the cosine by id of the dense candidates and, where it can be had,
        of the lexical ones (for a caller fusing more signals: the triple source)."""
        lexical, dense, _ = self._candidates(query, scope, pool, dense_weight, lexical_weight, exclude=exclude)
        return lexical, dense

    def dense_hits(self, query: str, scope: Scope, exclude: Collection[str] = (), first: int = 30) -> Hits:
        """The dense ranking alone (id, cosine), best first, ``exclude`` left out, read as
        far as the caller reads (``first``: how far it expects to)."""
        owner = (scope.tenant_id, scope.require_user(f"the {self.sync.collection!r} memory source"))
        return self._hits(query, scope, owner, first, 1.0, 0.0, exclude)[1]

    def _candidates(
        self, query: str, scope: Scope, pool: int, dense_weight: float, lexical_weight: float,
        apart: Optional[Apart] = None, exclude: Collection[str] = (), spare: int = 0
    ) -> tuple[Ranking, dict[str, float], set[str]]:
        """:meth:`candidates`, and the ids ``apart`` set apart; each retriever is searched
        once and its ranking read further for those (:func:`~.apart.take_beside`)."""
        sync = self.sync
        owner = (scope.tenant_id, scope.require_user(f"the {sync.collection!r} memory source"))
        first = pool + (max(spare, 0) if apart is not None else 0)
        lexical_hits, dense_hits, found = self._hits(query, scope, owner, first, dense_weight, lexical_weight, exclude)
        aside: set[str] = set()
        if apart is None:
            lexical, dense = list(islice(lexical_hits, pool)), list(islice(dense_hits, pool))
        else:
            # The heads of both sides checked at once (one read of the texts not known).
            heads = list(islice(lexical_hits, first)), list(islice(dense_hits, first))
            apart(list(dict.fromkeys(i for head in heads for i, _ in head)))
            lexical, aside = take_beside(chain(heads[0], lexical_hits), apart, pool, first)
            dense, dense_aside = take_beside(chain(heads[1], dense_hits), apart, pool, first)
            aside |= dense_aside
        scores = dict(dense)
        if scores and lexical:
            self._add_cosines(scores, [i for i, _ in lexical if i not in scores], owner, found)
        return lexical, scores, aside

    def _hits(
        self, query: str, scope: Scope, owner: tuple[str, str], first: int,
        dense_weight: float, lexical_weight: float, exclude: Collection[str] = (),
    ) -> tuple[Hits, Hits, dict[str, Any]]:
        """Each retriever's lazy ranking, best first, ``exclude`` left out: lexical (id,
        score), dense (id, cosine); and what the dense side found, to read vectors from."""
        sync = self.sync
        resident_hits: Optional[Hits] = None
        with sync.lock:
            sync.embed_pending()
            vector = self.query_vector(query)
            waiting = sync.waiting(owner)
            # Held vectors serve only the dense side: none are loaded when it is off.
            resident = sync.resident(owner, len(vector)) if dense_weight > 0 else None
            if resident is not None:
                resident_hits = resident.ranking(vector, exclude, first)
        dense_hits: Hits = iter(())
        if dense_weight > 0:
            if resident_hits is None:
                resident_hits = grown(
                    lambda n, left_out: _best_first(sync.index.query(*owner, vector, n, left_out)), exclude, first
                )
            dense_hits = resident_hits
            if waiting:
                cosines: dict[str, float] = {}
                add_cosines(cosines, {i: v for i, v in waiting.items() if i not in exclude} if exclude else waiting, vector)
                dense_hits = _merged(resident_hits, _best_first(cosines.items()))
        lexical_hits: Hits = iter(())
        if lexical_weight > 0:
            lexical = self.lexical
            if isinstance(lexical, RankedLexicalIndex):
                lexical_hits = lexical.rank_text(query, scope, sync.collection, exclude, first)
            else:
                lexical_hits = grown(
                    lambda n, left_out: lexical.search_text(query, scope, sync.collection, n, left_out), exclude, first
                )
        return lexical_hits, dense_hits, {"vector": vector, "resident": resident, "waiting": waiting}

    def _add_cosines(
        self, dense: dict[str, float], missing: Sequence[str], owner: tuple[str, str], found: dict[str, Any]
    ) -> None:
        """Put in ``dense`` the cosine of each ``missing`` lexical candidate, so that
        fusion compares like with like (a missing score would count as the worst)."""
        sync, vector, resident, waiting = self.sync, found["vector"], found["resident"], found["waiting"]
        vectors: dict[str, Any] = {i: waiting[i] for i in missing if i in waiting}
        rest = [i for i in missing if i not in vectors]
        # An id left without one was written by another process after this search began
        # and is not embedded yet; it competes on words alone until the next search.
        vectors.update(sync.known_vectors(owner, rest, len(vector), resident))
        add_cosines(dense, vectors, vector)


def _best_first(pairs: Iterable[tuple[str, float]]) -> Ranking:
    """(id, score) pairs by score, best first (ties in the order given)."""
    return sorted(pairs, key=lambda pair: pair[1], reverse=True)


def _merged(held: Hits, waiting: Ranking) -> Hits:
    """Two rankings by cosine as one, best first (ties: ``held``'s first; an id once)."""
    given: set[str] = set()
    for i, score in heapq.merge(held, waiting, key=lambda pair: -pair[1]):
        if i not in given:
            given.add(i)
            yield i, score


# -- the second hop ---------------------------------------------------------------------------

#: How many of the first ranking's hits seed a second hop.
SEEDS = 3
#: How many link words a seed contributes (the rarest).
LINKS = 4
#: What a hop is worth against the first ranking, by default (chosen by leave-one-out).
HOP_WEIGHT = 0.5
#: A word held by more than this share of the store's records is no link.
MAX_LINK_SHARE = 0.02
#: The hop's search returns this many times the ``k`` of the retrieval: 2 was chosen
#: leave-one-conversation-out among 1, 2 and 3 (every fold chose it; 1 lost multi-hop
#: recall); each found message's text is read, so fewer cost less.
HOP_FOUND = 2


def link_words(seed_text: str, query: str, counts: Mapping[str, int], total: int, links: int = LINKS) -> list[str]:
    """A seed's link words, rarest first: content words of ``seed_text`` not in ``query``
    (by stem), held by 2 to ``MAX_LINK_SHARE * total`` of the store's records."""
    asked = {stem(w) for w in content_words(query)}
    most = max(2, int(MAX_LINK_SHARE * total))
    candidates = [
        w for w in content_words(seed_text)
        if stem(w) not in asked and not w.isdigit() and 2 <= counts.get(w, 0) <= most
    ]
    return sorted(candidates, key=lambda w: counts[w])[:links]


def second_hop(
    query: str, ranked: Ranking, seed_texts: Mapping[str, str],
    word_counts: Callable[[Sequence[str]], tuple[int, Mapping[str, int]]],
    search: Callable[[str], Ranking], texts: Callable[[Sequence[str]], Mapping[str, str]],
    weight: float, seeds: int = SEEDS,
) -> list[tuple[str, float]]:
    """``ranked`` (the fused ranking, scores in 0..1) with what its best ``seeds`` hits
    link to, best first: a found message joins at ``weight`` times its seed's score times
    its score normalised among that seed's finds (never more than its seed), or keeps its
    own score when higher; a ``weight`` of 0 turns the hop off.

    ``seed_texts`` holds the seeds' texts; ``word_counts`` gives (records in the store,
    records holding each word); ``search`` is one lexical search for a text; ``texts``
    gives the found records' texts (which seed's links each holds).
    """
    if weight <= 0 or seeds <= 0 or not ranked:
        return list(ranked)
    tops = [(i, s) for i, s in ranked[:seeds] if i in seed_texts]
    # Only the words that could link are counted (a count is a look-up in the index).
    asked = {stem(w) for w in content_words(query)}
    words = {
        w for i, _ in tops for w in content_words(seed_texts[i])
        if stem(w) not in asked and not w.isdigit()
    }
    total, counts = word_counts(sorted(words))
    linking = [(s, link_words(seed_texts[i], query, counts, total)) for i, s in tops]
    linking = [(s, links) for s, links in linking if links]
    if not linking:
        return list(ranked)
    # One search for every seed's links: a search per seed cost three times as much
    # (docs/benchmarks.md, "Multi-hop"). Each candidate is still normalised per seed:
    # normalising by the best of all let one seed's very rare link sink the others'.
    links = dict.fromkeys(w for _, seed_links in linking for w in seed_links)
    seeded = {i for i, _ in tops}
    found = [(i, s) for i, s in search(" ".join([query, *links])) if i not in seeded and s > 0]
    if not found:
        return list(ranked)
    every_link = {stem(w) for w in links}
    held = {i: content_stems(t) & every_link for i, t in texts([i for i, _ in found]).items()}
    scores = dict(ranked)
    for seed_score, seed_links in linking:
        wanted = {stem(w) for w in seed_links}
        # a candidate with none of any seed's links matched the query's words only:
        # every seed's own search would have found it too
        mine = [(i, s) for i, s in found if held.get(i, set()) & wanted or not held.get(i)]
        best = max((s for i, s in mine if held.get(i, set()) & wanted), default=0.0)
        if best <= 0:
            continue
        for record_id, score in mine:
            hop = weight * seed_score * min(1.0, score / best)
            if hop > scores.get(record_id, 0.0):
                scores[record_id] = hop
    return sorted(scores.items(), key=lambda pair: pair[1], reverse=True)
