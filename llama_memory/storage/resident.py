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

from collections.abc import Collection, Iterable, Mapping, Sequence
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
        size = len(self._ids)
        if k <= 0 or not size:
            return []
        scores = cosines(self._matrix[:size], _unit_rows([query], self.dimension)[0])
        left_out = [row for row in set(map(self._rows.get, exclude)) if row is not None]
        if left_out:
            scores[left_out] = -np.inf
        k = min(k, size - len(left_out))
        if k <= 0:
            return []
        if k < size:
            top = np.argpartition(-scores, k - 1)[:k]
            top = top[np.argsort(-scores[top], kind="stable")]
        else:
            top = np.argsort(-scores, kind="stable")
        return [(self._ids[i], float(scores[i])) for i in top]

    def vectors(self, ids: Iterable[str]) -> Mapping[str, np.ndarray]:
        """The held vectors of those ``ids`` that are here, by id."""
        return {i: self._matrix[self._rows[i]] for i in ids if i in self._rows}


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
