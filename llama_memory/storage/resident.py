"""One user's record vectors held in memory and searched exactly.

For a user with up to some tens of thousands of records, a matrix product over
all their vectors takes well under a millisecond to a few milliseconds, less
than one round trip to Chroma; and it is exact where Chroma's HNSW graph is
approximate. The vector source keeps such a set per user, loaded from the
vector copies in the system of record (:meth:`SQLiteStore.user_vectors`), and
keeps it up to date with its own writes; Chroma stays the durable index, and
answers for users too large to hold in memory.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any

import numpy as np

__all__ = ["ResidentVectors"]


class ResidentVectors:
    """Unit vectors by record id, with exact cosine search.

    Args:
        dimension: the length of every vector.
    """

    def __init__(self, dimension: int) -> None:
        self.dimension = dimension
        self._ids: list[str] = []
        self._rows: dict[str, int] = {}
        self._matrix = np.zeros((0, dimension), dtype=np.float32)

    def __len__(self) -> int:
        return len(self._ids)

    def __contains__(self, record_id: object) -> bool:
        return record_id in self._rows

    def add(self, ids: Sequence[str], vectors: Sequence[Any] | np.ndarray) -> None:
        """Add vectors (one per id, or a matrix of them as rows; normalised here); an
        id already held gets its new vector."""
        rows = _unit_rows(vectors, self.dimension)
        if len(rows) != len(ids):
            raise ValueError(f"{len(ids)} record ids but {len(rows)} vectors")
        fresh: list[int] = []
        for n, record_id in enumerate(ids):
            row = self._rows.get(record_id)
            if row is None:
                self._rows[record_id] = len(self._ids)
                self._ids.append(record_id)
                fresh.append(n)
            else:
                self._matrix[row] = rows[n]
        if fresh:
            self._matrix = _grown(self._matrix, len(self._ids))
            self._matrix[len(self._ids) - len(fresh) : len(self._ids)] = rows[fresh]

    def search(self, query: Any, k: int, exclude: Collection[str] = ()) -> list[tuple[str, float]]:
        """The ``k`` vectors most similar to ``query``, as (id, cosine), best first;
        the ids of ``exclude`` are left out (the others rank as if they were not held)."""
        if k <= 0:
            return []
        return list(islice(self.ranking(query, exclude, k), k))

    def ranking(self, query: Any, exclude: Collection[str] = (), first: int = 64) -> Iterator[tuple[str, float]]:
        """Every held vector but those of ``exclude``, most similar to ``query`` first,
        as (id, cosine), read as far as the caller reads: the cosines are computed here,
        at once (a later change to what is held is not seen); the order is sorted
        ``first`` at a time, then four times as many (the first ``first`` are those of
        :meth:`search` for ``first``)."""
        size = len(self._ids)
        if not size:
            return iter(())
        scores = cosines(self._matrix[:size], _unit_rows([query], self.dimension)[0])
        left_out = [row for row in set(map(self._rows.get, exclude)) if row is not None]
        if left_out:
            scores[left_out] = -np.inf
        return _best_first(scores, self._ids[:size], size - len(left_out), max(first, 1))

    def vectors(self, ids: Iterable[str]) -> Mapping[str, np.ndarray]:
        """The held vectors of those ``ids`` that are here, by id."""
        return {i: self._matrix[self._rows[i]] for i in ids if i in self._rows}


def _best_first(scores: np.ndarray, ids: Sequence[str], valid: int, first: int) -> Iterator[tuple[str, float]]:
    """(id, score) by score, best first, of the ``valid`` best ``scores`` (the others
    are -inf), sorted ``first`` at a time, then four times as many: the ranking read
    past the first few is rare and sorting all of it would cost more."""
    given: set[int] = set()
    k = first
    while len(given) < valid:
        k = min(k, valid)
        if k < len(scores):
            top = np.argpartition(-scores, k - 1)[:k]
            top = top[np.argsort(-scores[top], kind="stable")]
        else:
            top = np.argsort(-scores, kind="stable")[:k]
        # A tie at the cut may fall either side of it from one sort to the next.
        for i in top.tolist():
            if i not in given:
                given.add(i)
                yield ids[i], float(scores[i])
        if k >= valid:
            return
        k *= 4


def cosines(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """Each row of ``matrix`` times ``vector`` (float32), on the calling thread.

    ``matrix @ vector`` hands a product of more than about 9,000 numbers to OpenBLAS,
    which splits it over every core: on a busy machine the threads wait for one another,
    and a search of 2,000 vectors cost 8-12 ms of CPU (spinning included) against 0.15 ms
    on one thread. einsum's own loop stays on this thread.
    """
    return np.einsum("ij,j->i", matrix, vector)


def _unit_rows(vectors: Sequence[Any] | np.ndarray, dimension: int) -> np.ndarray:
    matrix = np.asarray(vectors, dtype=np.float32).reshape(-1, dimension)
    norms = np.linalg.norm(matrix, axis=1, keepdims=True)
    return matrix / np.where(norms == 0, 1.0, norms)


def _grown(matrix: np.ndarray, size: int) -> np.ndarray:
    """``matrix`` with room for ``size`` rows (capacity doubles: adding stays cheap)."""
    if size <= len(matrix):
        return matrix
    bigger = np.zeros((max(size, 2 * len(matrix), 64), matrix.shape[1]), dtype=np.float32)
    bigger[: len(matrix)] = matrix
    return bigger
