"""Vector helpers of retrieval: the float16 copies kept in the system of record, and cosines."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np


def unit(vector: Any) -> np.ndarray:
    """``vector`` as a float32 array of length 1 (a zero vector stays zero)."""
    array = np.asarray(vector, dtype=np.float32).ravel()
    norm = float(np.linalg.norm(array))
    return array / norm if norm > 0 else array


def encode(vector: Any) -> bytes:
    """A record vector's copy for the system of record: its direction (all a cosine
    needs) as float16, half the bytes of float32; the cosines it gives differ from
    the exact ones by about 1e-3."""
    return unit(vector).astype(np.float16).tobytes()


def decode(data: bytes) -> np.ndarray:
    """The vector :func:`encode` made (or several, end to end), as float32."""
    return np.frombuffer(data, dtype=np.float16).astype(np.float32)


def encodes(data: bytes, dimension: int) -> bool:
    """Whether ``data`` is the copy of a vector of ``dimension`` (not one from before a
    change of model)."""
    return len(data) == dimension * np.dtype(np.float16).itemsize


def cosines(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """Each row of ``matrix`` times ``vector`` (float32), on the calling thread.

    ``matrix @ vector`` hands a product of more than about 9,000 numbers to OpenBLAS,
    which splits it over every core: on a busy machine the threads wait for one another,
    and a search of 2,000 vectors cost 8-12 ms of CPU (spinning included) against 0.15 ms
    on one thread. einsum's own loop stays on this thread.
    """
    return np.einsum("ij,j->i", matrix, vector)


def cosine(matrix: np.ndarray, vector: np.ndarray) -> list[float]:
    """Cosine similarity of each row of ``matrix`` with ``vector`` (on the calling
    thread: see :func:`cosines`)."""
    norms = np.linalg.norm(matrix, axis=1) * (np.linalg.norm(vector) or 1.0)
    return (cosines(matrix, vector) / np.where(norms == 0, 1.0, norms)).tolist()


def add_cosines(into: dict[str, float], vectors: Mapping[str, Any], query: np.ndarray) -> None:
    """Add the cosine of each vector with ``query`` to ``into`` (the larger one wins
    where both have an id)."""
    if not vectors:
        return
    ids = list(vectors)
    matrix = np.stack([np.asarray(vectors[i], dtype=np.float32) for i in ids])
    for record_id, score in zip(ids, cosine(matrix, query)):
        into[record_id] = max(score, into.get(record_id, -1.0))
