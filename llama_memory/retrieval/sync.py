"""The one index sync: rows of the system of record -> vectors in the dense index.

Rows are written flagged; before a search (or when a batch is full) the waiting rows are
embedded into an in-memory overlay searched beside the index, written to the index once
``batch_size`` vectors wait, then marked indexed with a float16 copy of their vector
(:func:`encode`). An agent turn pays no index write, and a crash loses nothing (flagged
rows are embedded again). Also here: reconcile, reindex, and the users' vectors held in
memory (:class:`ResidentVectors`): for a user of some tens of thousands of records an
exact matrix product costs less than one round trip to Chroma's approximate index.
Another collection (triples) implements :class:`SyncedRows`; with ``resident_limit=0`` it
needs no vector copies.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Hashable, Iterable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any, NamedTuple, Optional, Protocol

import numpy as np

from ..storage.ports import IndexFlags, PendingRecord, Transactional, VectorIndex
from ..storage.reconcile import ReconcileReport, reconcile_index

#: At most this many vectors held in memory by one index sync over all its users (150 MB
#: at 384 dimensions): a memory serving many users keeps those searched most recently,
#: where it kept every user it had searched (a thousand users of 1,000 records: 1.5 GB).
RESIDENT_TOTAL = 100_000


class SyncedRows(Transactional, Protocol):
    """What the index sync needs of the system of record: a collection's index flags, the
    vector copies and the change token (a ``RecordStore``, the triples' ``TripleRows``)."""

    def pending_records(self, source: str, limit: int) -> list[PendingRecord]:
        """Up to ``limit`` rows the dense index has not caught up with, oldest first."""

    def mark_indexed(
        self, ids: Sequence[str], indexed: bool = True, vectors: Optional[Sequence[bytes]] = None
    ) -> None:
        """Record that the dense index holds (or no longer holds) these rows, keeping
        ``vectors`` (encoded, one per id) as their copies."""

    def mark_all_unindexed(self, source: str) -> int:
        """Flag every row of ``source`` for re-indexing (copies dropped); return how many."""

    def index_flags(self, source: str, owner: Optional[tuple[str, str]] = None) -> IndexFlags:
        """Every row id of ``source`` (of one (tenant, user) ``owner``, or all) and
        whether the dense index holds it."""

    def stored_vectors(self, ids: Sequence[str]) -> dict[str, bytes]:
        """The vector copies of these ids, by id (ids without one left out)."""

    def user_vectors(self, source: str, tenant_id: str, user_id: str, limit: int) -> Optional[dict[str, bytes]]:
        """Every copy of one user's indexed records of ``source``, read in one snapshot;
        None when they are more than ``limit`` or some indexed record has no copy."""


class _Embedded(NamedTuple):
    tenant_id: str
    user_id: str
    vector: np.ndarray


class IndexSync:
    """Keeps the dense ``index`` of one ``collection`` (the source's name) in step with
    its ``rows``; ``embed`` maps texts to vectors in one call.

    Args:
        batch_size: rows embedded per call, and vectors waiting before an index write.
        resident_limit: a user with at most this many indexed rows has their vectors
            held in memory and searched exactly there; 0 always asks the index.
        resident_total: at most this many vectors held over all users (those searched
            longest ago are dropped first, and loaded again when next searched).
    """

    def __init__(
        self, rows: SyncedRows, index: VectorIndex, collection: str, embed: Callable[[list[str]], list[np.ndarray]],
        *, batch_size: int = 256, resident_limit: int = 20_000, resident_total: int = RESIDENT_TOTAL
    ) -> None:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.rows = rows
        self.index = index
        self.collection = collection
        self.embed = embed
        self.batch_size = batch_size
        self.resident_limit = resident_limit
        self.resident_total = resident_total
        #: Held by every operation on the overlay and the held vectors (and by the
        #: source around its own reads of them).
        self.lock = threading.RLock()
        self.overlay: dict[str, _Embedded] = {}
        # Users' vectors held in memory (None: too many, or not all copied), valid while
        # no other connection has written to the store (see resident()); the user
        # searched longest ago first.
        self._resident: OrderedDict[tuple[str, str], Optional[ResidentVectors]] = OrderedDict()
        self._token: Optional[Hashable] = None

    # -- writing the index -----------------------------------------------------------------

    def flush(self) -> int:
        """Embed every waiting row and write all waiting vectors to the index; return
        how many vectors were written."""
        with self.lock:
            written = self.embed_pending()
            return written + self.write_overlay()

    def embed_pending(self) -> int:
        """Embed waiting rows into the overlay; return how many vectors reached the
        index on the way (the overlay is written whenever a batch is full)."""
        written = 0
        with self.lock:
            while True:
                # Overlay rows are still pending in the record: ask for enough to see a
                # full batch of the others.
                limit = len(self.overlay) + self.batch_size
                rows = self.rows.pending_records(self.collection, limit)
                fresh = [r for r in rows if r.id not in self.overlay]
                if not fresh:
                    return written
                vectors = self.embed([r.text for r in fresh])
                for row, vector in zip(fresh, vectors):
                    self.overlay[row.id] = _Embedded(row.tenant_id, row.user_id, vector)
                if len(self.overlay) >= self.batch_size:
                    written += self.write_overlay()
                if len(rows) < limit:  # that was every pending row: no need to ask again
                    return written

    def write_overlay(self) -> int:
        """Write the overlay's vectors to the index and mark their rows indexed."""
        with self.lock:
            by_user: dict[tuple[str, str], list[str]] = {}
            for record_id, item in self.overlay.items():
                by_user.setdefault((item.tenant_id, item.user_id), []).append(record_id)
            for (tenant, user), ids in by_user.items():
                self.index.upsert(tenant, user, ids, [self.overlay[i].vector for i in ids])
            written = list(self.overlay)
            copies = [encode(self.overlay[i].vector) for i in written]
            self.rows.mark_indexed(written, vectors=copies)
            for key, ids in by_user.items():
                resident = self._resident.get(key)
                if resident is not None:
                    resident.add(ids, [self.overlay[i].vector for i in ids])
                    if len(resident) > self.resident_limit:
                        self._resident[key] = None  # grown too large: the index answers now
            self._hold_at_most(self.resident_total)
            self.overlay.clear()
            return len(written)

    def reindex(self) -> int:
        """Rebuild the dense index from the rows; return how many were indexed."""
        with self.lock:
            self.index.clear()
            self.overlay.clear()
            self._resident.clear()
            self.rows.mark_all_unindexed(self.collection)
            return self.flush()

    def reconcile(self, catch_up: bool = True, owner: Optional[tuple[str, str]] = None) -> ReconcileReport:
        """Bring the index in line with the rows, for every user or one (tenant, user)
        ``owner`` (see :func:`~llama_memory.storage.reconcile.reconcile_index`); with
        ``catch_up``, embed and write the missing vectors now."""
        with self.lock:
            # Waiting vectors first, so the index holds all it is going to hold.
            written = self.write_overlay()
            self._resident.clear()  # rows it finds missing from the index lose their copies
            report = reconcile_index(
                self.index, lambda: self.rows.index_flags(self.collection, owner),
                lambda ids, indexed: self.rows.mark_indexed(ids, indexed), owner,
            )
            report.indexed = written + (self.flush() if catch_up else 0)
            return report

    # -- forgetting ----------------------------------------------------------------------

    def forget(self, owner: tuple[str, str], ids: Optional[Sequence[str]] = None) -> None:
        """Drop vectors of rows already deleted from the record: ``ids`` of one (tenant,
        user) ``owner``, or (``ids`` None) the whole user, index partition included."""
        with self.lock:
            if ids is None:
                for record_id in [
                    i for i, item in self.overlay.items() if (item.tenant_id, item.user_id) == owner
                ]:
                    del self.overlay[record_id]
            else:
                for record_id in ids:
                    self.overlay.pop(record_id, None)
            # Loaded again on the next search: a held set must not keep deleted vectors.
            self._resident.pop(owner, None)
            if ids is None:
                # Last: when the index is unreachable the record is already clean, and
                # reconcile() drops the partition later.
                self.index.drop(*owner)
            else:
                self.index.delete(*owner, list(ids))

    # -- reading -------------------------------------------------------------------------

    def waiting(self, owner: tuple[str, str]) -> dict[str, np.ndarray]:
        """The overlay's vectors of one user (embedded, not yet in the index)."""
        with self.lock:
            return {
                record_id: item.vector
                for record_id, item in self.overlay.items()
                if (item.tenant_id, item.user_id) == owner
            }

    def resident(self, owner: tuple[str, str], dimension: int) -> Optional[ResidentVectors]:
        """The user's vectors held in memory, loaded on first use; None when more than
        ``resident_limit`` or some lack a copy (the index answers then). This sync adds
        its own writes; anyone else's moves the change token, and every set is reloaded.
        """
        if self.resident_limit <= 0:
            return None
        with self.lock:
            token = self.rows.change_token()
            if token != self._token:
                self._resident.clear()
                self._token = token
            if owner not in self._resident:
                copies = self.rows.user_vectors(self.collection, *owner, self.resident_limit)
                resident: Optional[ResidentVectors] = None
                blobs = list(copies.values()) if copies is not None else []
                if copies is not None and all(encodes(blob, dimension) for blob in blobs):
                    # One decode of all the copies at once: reloading follows every write by
                    # another connection, and decoding them one by one took 3x as long.
                    resident = ResidentVectors(dimension)
                    resident.add(list(copies), decode(b"".join(blobs)).reshape(-1, dimension))
                self._resident[owner] = resident
                self._hold_at_most(self.resident_total, keep=owner)
            self._resident.move_to_end(owner)
            held = self._resident[owner]
            return held if held is not None and len(held) <= self.resident_limit else None

    def _hold_at_most(self, total: int, keep: Optional[tuple[str, str]] = None) -> None:
        """Drop the sets of the users searched longest ago (never ``keep``'s) until at most
        ``total`` vectors are held."""
        held = sum(len(r) for r in self._resident.values() if r is not None)
        for owner in list(self._resident):
            if held <= total:
                return
            if owner != keep:
                dropped = self._resident.pop(owner)
                held -= len(dropped) if dropped is not None else 0

    def known_vectors(
        self, owner: tuple[str, str], ids: Sequence[str], dimension: int, resident: Optional[ResidentVectors]
    ) -> dict[str, Any]:
        """The vectors of some of one user's ids, by id: from ``resident``, then the
        copies in the record (not those of another dimension, from before a model change),
        then the dense index only when nothing is held (with vectors held, an id missing
        there was written since by another process and has no vector yet)."""
        found: dict[str, Any] = {}
        rest = list(ids)
        if resident is not None:
            with self.lock:
                found.update(resident.vectors(rest))
            rest = [i for i in rest if i not in found]
        copies = self.rows.stored_vectors(rest).items()
        found.update((i, decode(blob)) for i, blob in copies if encodes(blob, dimension))
        rest = [i for i in rest if i not in found]
        if resident is None:
            found.update(self.index.vectors(*owner, rest))
        return found


# -- vectors: the copies kept in the record, and cosines ----------------------------------------


def unit(vector: Any) -> np.ndarray:
    """``vector`` as a float32 array of length 1 (a zero vector stays zero)."""
    array = np.asarray(vector, dtype=np.float32).ravel()
    norm = float(np.linalg.norm(array))
    return array / norm if norm > 0 else array


def encode(vector: Any) -> bytes:
    """A record vector's copy for the system of record: its direction as float16 (half
    the bytes; cosines within about 1e-3 of the exact ones)."""
    return unit(vector).astype(np.float16).tobytes()


def decode(data: bytes) -> np.ndarray:
    """The vector :func:`encode` made (or several, end to end), as float32."""
    return np.frombuffer(data, dtype=np.float16).astype(np.float32)


def encodes(data: bytes, dimension: int) -> bool:
    """Whether ``data`` is the copy of a vector of ``dimension`` (not of an older model)."""
    return len(data) == dimension * np.dtype(np.float16).itemsize


def cosines(matrix: np.ndarray, vector: np.ndarray) -> np.ndarray:
    """Each row of ``matrix`` times ``vector`` (float32), on the calling thread:
    ``matrix @ vector`` hands a large product to OpenBLAS's threads, and on a busy
    machine a search of 2,000 vectors cost 8-12 ms of CPU against 0.15 ms on one thread.
    """
    return np.einsum("ij,j->i", matrix, vector)


def cosine(matrix: np.ndarray, vector: np.ndarray) -> list[float]:
    """Cosine similarity of each row of ``matrix`` with ``vector`` (on this thread)."""
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


# -- the vectors held in memory -------------------------------------------------------------


class ResidentVectors:
    """Unit vectors of one ``dimension`` by record id, with exact cosine search."""

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
        """Add vectors (one per id, or a matrix's rows; normalised here), replacing an
        id's held vector."""
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
        """Every held vector but those of ``exclude``, as (id, cosine) best first, read
        as far as the caller reads (cosines computed at once; sorted ``first`` at a time,
        then four times as many)."""
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
    """(id, score) best first of the ``valid`` best ``scores`` (the others are -inf),
    sorted ``first`` at a time, then four times as many: reading far is rare."""
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
