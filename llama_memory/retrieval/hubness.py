"""Hubness: a record close to many others in the store is a little less close to a query.

With a sentence-similarity embedding, chatter is a *hub*: a message of a long
conversation about the same people and days has many near neighbours in the store, and
sits near many questions for that reason alone. A fact told once in passing has few
neighbours. Ranked by the cosine alone, the fact ranks below dozens of chatter messages
that are as near the question only because they are near everything (in the everyday
large store, the fact's median rank by the cosine was 30 of 1,680 messages).

So the dense side ranks by the cosine less ``weight`` times the record's *hubness*: the
mean cosine of its :data:`NEIGHBOURS` nearest other records in the store (cross-domain
similarity local scaling, Conneau et al. 2018, with the record's side only: the query's
side is the same for every record of one query and changes no ranking). Measured on both
corpora: docs/benchmarks.md, "Fourth round on retrieval".

Only the ranking and the fusion's meaning score use it; the relevance judgement keeps the
plain cosine (absolute evidence, :mod:`llama_memory.retrieval.relevance`). It needs every
vector of the user's store, so it applies where they are held in memory (a user with at
most ``resident_limit`` records, :class:`~llama_memory.retrieval.sync.IndexSync`); past
that the dense index's own order stands.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Optional

import numpy as np

#: How many nearest other records a record's hubness is the mean cosine of.
NEIGHBOURS = 5
#: What hubness weighs against the cosine in the dense ranking (0 turns it off).
HUB_WEIGHT = 0.35
#: How far the dense ranking is read by the cosine before it is ranked again with
#: hubness: the first ``DEPTH`` (or twice what the caller reads, if more). Reading 60
#: gave the same recall as ranking the whole store again (docs/benchmarks.md).
DEPTH = 60
#: A record's hubness is computed again once the store has grown by this share since
#: (its neighbours change slowly; recomputing after every write would cost a product
#: with the whole store per candidate per turn).
STALE_GROWTH = 0.1

Hits = Iterator[tuple[str, float]]


def hubness(vectors: np.ndarray, held: np.ndarray, own_rows: Sequence[Optional[int]], neighbours: int = NEIGHBOURS) -> np.ndarray:
    """The mean cosine of each of ``vectors`` (unit rows) with its ``neighbours`` nearest
    rows of ``held`` (unit rows), its own row (``own_rows``: its index in ``held``, or
    None) left out; 0 for a store of no other record."""
    if not len(vectors):
        return np.zeros(0, dtype=np.float32)
    scores = vectors @ held.T
    for n, row in enumerate(own_rows):
        if row is not None:
            scores[n, row] = -np.inf
    k = min(neighbours, held.shape[0] - (1 if any(row is not None for row in own_rows) else 0))
    if k <= 0:
        return np.zeros(len(vectors), dtype=np.float32)
    top = -np.partition(-scores, k - 1, axis=1)[:, :k]
    top[~np.isfinite(top)] = 0.0
    return np.asarray(top.mean(axis=1), dtype=np.float32)


class HubnessCache:
    """Hubness by record id for one held set of vectors, kept until the set is replaced
    or has grown by :data:`STALE_GROWTH` since it was computed."""

    def __init__(self) -> None:
        self._held: object = None
        self._size = 0
        self._values: dict[str, float] = {}

    def values(
        self, held: object, size: int, ids: Sequence[str], compute: Callable[[Sequence[str]], Mapping[str, float]]
    ) -> dict[str, float]:
        """The hubness of ``ids`` (those ``compute`` knows) in the held set ``held`` of
        ``size`` vectors, reusing what was computed for the same set, not much smaller."""
        if held is not self._held or size > self._size * (1 + STALE_GROWTH) or size < self._size:
            self._held, self._size, self._values = held, size, {}
        missing = [i for i in dict.fromkeys(ids) if i not in self._values]
        if missing:
            self._values.update(compute(missing))
        return {i: self._values[i] for i in ids if i in self._values}


class Compute:
    """Computes the hubness of ids from the held matrix (a callable kept apart so that
    the cache can be tested alone)."""

    def __init__(self, held: np.ndarray, rows: Mapping[str, int], extra: Mapping[str, np.ndarray]) -> None:
        self.held = held
        self.rows = rows
        self.extra = extra

    def __call__(self, ids: Sequence[str]) -> dict[str, float]:
        known = [i for i in ids if i in self.rows or i in self.extra]
        if not known:
            return {}
        vectors = np.stack([self.held[self.rows[i]] if i in self.rows else self.extra[i] for i in known])
        values = hubness(vectors, self.held, [self.rows.get(i) for i in known], NEIGHBOURS)
        return dict(zip(known, values.tolist()))


#: Gives the hubness of ids (those it knows).
HubOf = Callable[[Sequence[str]], Mapping[str, float]]


def reranked(hits: Hits, hub: HubOf, first: int, weight: float = HUB_WEIGHT) -> Hits:
    """``hits`` (id, cosine) best first, the head (:data:`DEPTH`, or ``2 * first``) ranked
    again by cosine less ``weight`` times hubness (``hub`` gives it by id; an id it does
    not know counts 0), then the rest in their own order. The cosines are yielded as
    they came: the order alone changes."""
    head = list(islice(hits, max(DEPTH, 2 * first)))
    if weight > 0 and head:
        hubs = hub([i for i, _ in head])
        head.sort(key=lambda pair: pair[1] - weight * hubs.get(pair[0], 0.0), reverse=True)
    yield from head
    yield from hits

