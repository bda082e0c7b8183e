"""Vector memory of past messages: recall across the conversations of one user."""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple, Optional

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding

from ..embeddings import embedding_dimension, vector_cache
from ..errors import StorageError
from ..excerpts import JOIN_GAP, pack_excerpts
from ..expiry import NEVER, Expiry
from ..retrieval import fuse_scores
from ..storage.chroma import DenseIndex
from ..storage.reconcile import ReconcileReport, reconcile_index
from ..storage.resident import ResidentVectors
from ..storage.sqlite import NewRecord, SQLiteStore
from ..types import MemoryRecord, Scope, StoredMessage
from .base import MemorySource
from .dimension import DimensionGuard

logger = logging.getLogger(__name__)

#: Users with at most this many indexed records are searched in memory, exactly
#: (:mod:`llama_memory.storage.resident`); larger ones in Chroma. 20,000 vectors of
#: 384 dimensions take 31 MB and about 2 ms to search.
RESIDENT_LIMIT = 20_000


class _Embedded(NamedTuple):
    tenant_id: str
    user_id: str
    vector: np.ndarray


class VectorSource(MemorySource):
    """Each user or assistant message becomes a record, found again by meaning and by words.

    Retrieval fuses two rankings of the user's records: by meaning (cosine
    similarity of embeddings, in Chroma and the overlay below) and by words (BM25
    over the text and the event date in SQLite's FTS5 index), by a weighted sum of
    normalised scores; then groups the best messages with their neighbours into
    excerpts of the conversation (:mod:`llama_memory.excerpts`).

    Writing: the record goes to the SQLite system of record at once, in one
    transaction per call, and that is all ``put`` costs.

    Indexing is deferred and batched. Before a retrieval, records without a
    vector are embedded (in batches) and kept in an in-memory overlay that is
    searched exactly alongside the Chroma index; the overlay is written to Chroma
    once ``batch_size`` vectors wait in it, on :meth:`flush` and on :meth:`close`.
    So an agent turn does not pay for a Chroma write, a bulk import embeds and
    writes in batches, and a crash loses nothing: rows whose vectors never reached
    Chroma are still flagged in SQLite and embedded again on the next read.

    Args:
        store: the system of record.
        index: the dense index derived from it (one Chroma collection per user).
        embed_model: any LlamaIndex embedding; its dimension, name and fingerprint
            (the vector of a fixed probe text) are recorded in the store, and another
            model is refused (:class:`~llama_memory.sources.dimension.DimensionGuard`).
        roles: which message roles are remembered (tool results and system
            prompts are not, by default).
        batch_size: how many records are embedded per call to the model (which
            batches them again by length, see :meth:`OfflineEmbedding.embed_array`), how
            many vectors wait in the overlay before they are written to Chroma, and how
            many records a bulk import writes before it embeds them.
        name: the source's name in the store and in the memory block.
        dense_weight: weight of the normalised dense (Chroma) score in fusion
            (:func:`~llama_memory.retrieval.fuse_scores`; 0 turns it off).
        lexical_weight: weight of the normalised lexical (FTS5) score (0 turns it off).
        candidate_factor: each retriever ranks ``k * candidate_factor`` candidates.
        excerpt_messages: a search for ``k`` records returns up to ``k`` excerpts
            holding up to ``excerpt_messages * k`` messages in all, each excerpt a run
            of consecutive messages of one session around the best matches
            (:mod:`llama_memory.excerpts`); 1 returns single messages.
        expiry: time to live of new records, refresh on read, and the clock
            (default: records are kept until forgotten).
        resident_limit: a user with at most this many indexed records has their
            vectors held in memory (from the copies in SQLite) and searched exactly
            there, instead of asking Chroma; 0 always asks Chroma.
    """

    def __init__(
        self,
        store: SQLiteStore,
        index: DenseIndex,
        embed_model: BaseEmbedding,
        *,
        roles: Sequence[str] = ("user", "assistant"),
        batch_size: int = 256,
        name: str = "vector",
        dense_weight: float = 1.0,
        lexical_weight: float = 1.0,
        candidate_factor: int = 3,
        excerpt_messages: float = 2.5,
        expiry: Expiry = NEVER,
        resident_limit: int = RESIDENT_LIMIT,
    ) -> None:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if not excerpt_messages >= 1:
            raise ValueError(
                f"excerpt_messages must be 1 (single messages) or more, got {excerpt_messages}"
            )
        self.store = store
        self.index = index
        self.embed_model = embed_model
        self.roles = frozenset(roles)
        self.batch_size = batch_size
        self.name = name
        self.dense_weight = dense_weight
        self.lexical_weight = lexical_weight
        self.candidate_factor = candidate_factor
        self.excerpt_messages = excerpt_messages
        self.expiry = expiry
        self.resident_limit = resident_limit
        store.ensure_session_order()
        self._lock = threading.RLock()
        self._overlay: dict[str, _Embedded] = {}
        self._unflushed = 0  # records added since the last flush
        # Users' vectors held in memory (None: too many, or not all copied), valid while
        # no other connection has written to the store (see _resident_vectors).
        self._resident: dict[tuple[str, str], Optional[ResidentVectors]] = {}
        self._data_version: Optional[int] = None
        # Shared with the other sources of this model: a query is embedded once per get(),
        # and (symmetric models) not at all when it is the user message just embedded.
        self._vectors = vector_cache(embed_model)
        self._dimensions = DimensionGuard(store, embed_model)
        known = embedding_dimension(embed_model)
        if known is not None:
            self._dimensions.check(known)

    # -- writing --------------------------------------------------------------------

    def add(self, messages: Sequence[StoredMessage], scope: Scope) -> None:
        """Store the messages with text in one of ``roles`` as records."""
        scope.require_user(f"the {self.name!r} memory source")
        ttl, expires_at = self.expiry.for_write()
        records = [
            NewRecord(
                source=self.name,
                scope=scope,
                text=m.text,
                message_ids=(m.message_id,),
                event_time=m.event_time,
                role=m.role,
                ttl=ttl,
                expires_at=expires_at,
            )
            for m in messages
            if m.role in self.roles and m.text.strip()
        ]
        if not records:
            return
        self.store.add_records(records)
        self._unflushed += len(records)
        # A bulk import indexes as it goes, a batch at a time: texts of similar length
        # are embedded together (less padding), and each batch is one Chroma write.
        if self._unflushed >= self.batch_size:
            # Once committed: a vector in Chroma must never precede its record.
            self.store.after_commit(self._flush_or_defer)

    def _flush_or_defer(self) -> None:
        """Flush; an unreachable index only defers the indexing: the records are
        committed and flagged as waiting, and the index catches up on a later flush,
        read or reconcile. A write must not fail for that."""
        try:
            self.flush()
        except StorageError as exc:
            logger.warning("records stored, dense indexing deferred: %s", exc)

    def flush(self) -> int:
        """Embed every record still without a vector and write all waiting vectors to
        Chroma; return how many vectors were written."""
        with self._lock:
            self._unflushed = 0
            written = self._embed_pending()
            return written + self._write_overlay()

    def reindex(self) -> int:
        """Rebuild the dense index from the system of record; return how many records."""
        with self._lock:
            self.index.clear()
            self._overlay.clear()
            self._resident.clear()
            self.store.mark_all_unindexed(self.name)
            return self.flush()

    def close(self) -> None:
        """Write waiting vectors to Chroma, so the next process need not embed them again.
        An unreachable index is logged, not raised: the records stay flagged as waiting
        and are embedded again after reopening."""
        try:
            self.flush()
        except StorageError as exc:
            logger.warning("closing with vectors not written to the dense index: %s", exc)

    def reconcile(self, catch_up: bool = True, scope: Optional[Scope] = None) -> ReconcileReport:
        """Bring the dense index in line with the system of record, for every user or
        the scope's user (see :func:`~llama_memory.storage.reconcile.reconcile_index`);
        with ``catch_up``, embed and write the missing vectors now, else on the next
        read or flush."""
        owner = (scope.tenant_id, scope.require_user()) if scope is not None else None
        with self._lock:
            # Waiting vectors first, so the index holds all it is going to hold.
            written = self._write_overlay()
            self._resident.clear()  # records it finds missing from Chroma lose their copies
            report = reconcile_index(
                self.index,
                lambda: self.store.index_flags(self.name, owner),
                lambda ids, indexed: self.store.mark_indexed(ids, indexed),
                owner,
            )
            report.indexed = written + (self.flush() if catch_up else 0)
            return report

    def purge_expired(self) -> int:
        """Delete expired records from the record and the dense index; return how many."""
        with self._lock:
            gone = self.store.delete_expired(self.name, self.expiry.now())
            by_user: dict[tuple[str, str], list[str]] = {}
            for row in gone:
                self._overlay.pop(row.id, None)
                by_user.setdefault((row.tenant_id, row.user_id), []).append(row.id)
            for (tenant, user), ids in by_user.items():
                self._resident.pop((tenant, user), None)
                self.index.delete(tenant, user, ids)
            return len(gone)

    def _embed_pending(self) -> int:
        """Embed waiting records into the overlay; return how many vectors reached Chroma
        on the way (the overlay is written whenever a batch is full)."""
        written = 0
        while True:
            # Overlay rows are still pending in SQLite: ask for enough to see a full batch
            # of the others.
            limit = len(self._overlay) + self.batch_size
            rows = self.store.pending_records(self.name, limit)
            fresh = [r for r in rows if r.id not in self._overlay]
            if not fresh:
                return written
            vectors = self._embed_texts([r.text for r in fresh])
            for row, vector in zip(fresh, vectors):
                self._overlay[row.id] = _Embedded(row.tenant_id, row.user_id, vector)
            if len(self._overlay) >= self.batch_size:
                written += self._write_overlay()
            if len(rows) < limit:  # that was every pending row: no need to ask again
                return written

    def _write_overlay(self) -> int:
        by_user: dict[tuple[str, str], list[str]] = {}
        for record_id, item in self._overlay.items():
            by_user.setdefault((item.tenant_id, item.user_id), []).append(record_id)
        for (tenant, user), ids in by_user.items():
            self.index.upsert(tenant, user, ids, [self._overlay[i].vector for i in ids])
        written = list(self._overlay)
        copies = [_encode(self._overlay[i].vector) for i in written]
        self.store.mark_indexed(written, vectors=copies)
        for key, ids in by_user.items():
            resident = self._resident.get(key)
            if resident is not None:
                resident.add(ids, [self._overlay[i].vector for i in ids])
                if len(resident) > self.resident_limit:
                    self._resident[key] = None  # grown too large: Chroma answers now
        self._overlay.clear()
        return len(written)

    # -- reading --------------------------------------------------------------------

    def retrieve(self, query: str, scope: Scope, k: int) -> list[MemoryRecord]:
        """The ``k`` records of the scope's user that best match ``query``: excerpts of
        consecutive messages when ``excerpt_messages`` > 1 (see :mod:`llama_memory.excerpts`),
        single messages otherwise."""
        user = scope.require_user(f"the {self.name!r} memory source")
        if not query.strip() or k <= 0:
            return []
        ranked = self._fused(query, scope, user, max(k * self.candidate_factor, k))
        # The system of record has the last word: a vector whose row is gone, or has
        # expired, is skipped, and get_records checks the user again.
        alive_at = self.expiry.now()
        if self.excerpt_messages > 1:
            results = self._excerpts(ranked, scope, k, alive_at)
        else:
            results = self._single(ranked, scope, k, alive_at)
        if self.expiry.refresh_on_read and results:
            read = [p.id for r in results for p in (r.parts or [r]) if p.id]
            self.store.refresh_expiry(read, alive_at)
        return results

    def _excerpts(
        self, ranked: list[tuple[str, float]], scope: Scope, k: int, alive_at: float
    ) -> list[MemoryRecord]:
        """Up to ``k`` excerpts around the best of ``ranked`` (live records only)."""
        for attempt in range(2):
            excerpts = pack_excerpts(
                ranked,
                lambda ids: self.store.session_neighbours(ids, scope, self.name, JOIN_GAP),
                k,
                math.ceil(self.excerpt_messages * k),
            )
            members = self.store.get_records(
                [i for e in excerpts for i in e.record_ids], scope, self.name, alive_at
            )
            results = [r for r in (e.as_record(members) for e in excerpts) if r is not None]
            if len(results) == len(excerpts) or attempt:
                return results
            # A hit had expired or gone: pack again from the live candidates only.
            alive = self.store.get_records([i for i, _ in ranked], scope, self.name, alive_at)
            ranked = [(i, score) for i, score in ranked if i in alive]
        return results

    def _single(
        self, ranked: list[tuple[str, float]], scope: Scope, k: int, alive_at: float
    ) -> list[MemoryRecord]:
        """The ``k`` best live records of ``ranked``, one message each."""
        ids = [record_id for record_id, _ in ranked]
        rows = self.store.get_records(ids[:k], scope, self.name, alive_at)
        if len(rows) < len(ids[:k]):  # some expired or gone: look further down
            rows = self.store.get_records(ids, scope, self.name, alive_at)
        results: list[MemoryRecord] = []
        for record_id, score in ranked:
            record = rows.get(record_id)
            if record is not None and len(results) < k:
                record.score = score
                results.append(record)
        return results

    def _fused(self, query: str, scope: Scope, user: str, pool: int) -> list[tuple[str, float]]:
        """Every candidate of the two retrievers (``pool`` each), by fused score."""
        with self._lock:
            self._embed_pending()
            vector = self._query_vector(query)
            waiting = {
                record_id: item.vector
                for record_id, item in self._overlay.items()
                if item.tenant_id == scope.tenant_id and item.user_id == user
            }
            # Held vectors serve only the dense side: none are loaded when it is off.
            resident = (
                self._resident_vectors(scope.tenant_id, user, len(vector))
                if self.dense_weight > 0
                else None
            )
            dense: dict[str, float] = {}
            if resident is not None:
                dense = dict(resident.search(vector, pool))
        if self.dense_weight > 0:
            if resident is None:
                dense = dict(self.index.query(scope.tenant_id, user, vector, pool))
            if waiting:
                self._cosines(dense, waiting, vector)
            dense = dict(sorted(dense.items(), key=lambda item: item[1], reverse=True)[:pool])
        lexical = (
            self.store.search_text(query, scope, self.name, pool) if self.lexical_weight > 0 else []
        )
        if dense and lexical:
            # A lexical candidate outside the dense pool still gets its cosine, so that
            # fusion compares like with like (a missing score would count as the worst).
            missing = [i for i, _ in lexical if i not in dense]
            vectors: dict[str, Any] = {i: waiting[i] for i in missing if i in waiting}
            rest = [i for i in missing if i not in vectors]
            if resident is not None:
                with self._lock:
                    vectors.update(resident.vectors(rest))
                rest = [i for i in rest if i not in vectors]
            vectors.update(self._vector_copies(rest, len(vector)))
            rest = [i for i in rest if i not in vectors]
            if resident is None:  # records indexed before copies were kept
                vectors.update(self.index.vectors(scope.tenant_id, user, rest))
            # else: what is left was written by another process after this search began
            # and is not embedded yet; it competes on words alone until the next search.
            self._cosines(dense, vectors, vector)
        return fuse_scores(
            lexical, dense, lexical_weight=self.lexical_weight, dense_weight=self.dense_weight
        )

    def _resident_vectors(
        self, tenant_id: str, user_id: str, dimension: int
    ) -> Optional[ResidentVectors]:
        """The user's vectors held in memory, loaded on first use; None when the user
        has more than ``resident_limit`` of them, or some lack a copy in SQLite (Chroma
        answers then). Call with the lock held.

        What this source writes it adds here itself; a write by anyone else (another
        memory on the file, another process) changes the store's data version, and
        then every user's set is loaded again.
        """
        if self.resident_limit <= 0:
            return None
        version = self.store.data_version()
        if version != self._data_version:
            self._resident.clear()
            self._data_version = version
        key = (tenant_id, user_id)
        if key not in self._resident:
            copies = self.store.user_vectors(self.name, tenant_id, user_id, self.resident_limit)
            resident: Optional[ResidentVectors] = None
            blobs = list(copies.values()) if copies is not None else []
            if copies is not None and all(_encodes(blob, dimension) for blob in blobs):
                # One decode of all the copies at once: reloading follows every write by
                # another connection, and decoding them one by one took 3x as long.
                resident = ResidentVectors(dimension)
                resident.add(list(copies), _decode(b"".join(blobs)).reshape(-1, dimension))
            self._resident[key] = resident
        held = self._resident[key]
        return held if held is not None and len(held) <= self.resident_limit else None

    def _vector_copies(self, ids: Sequence[str], dimension: int) -> dict[str, np.ndarray]:
        """The vectors of records kept in the system of record (:func:`_encode`), by id;
        a copy of another dimension (from before a model change) is left out."""
        copies = self.store.stored_vectors(ids).items()
        return {i: _decode(blob) for i, blob in copies if _encodes(blob, dimension)}

    @staticmethod
    def _cosines(into: dict[str, float], vectors: Mapping[str, Any], query: np.ndarray) -> None:
        """Add the cosine of each vector with ``query`` to ``into`` (the larger one wins
        where both have an id)."""
        if not vectors:
            return
        ids = list(vectors)
        matrix = np.stack([np.asarray(vectors[i], dtype=np.float32) for i in ids])
        for record_id, score in zip(ids, _cosine(matrix, query)):
            into[record_id] = max(score, into.get(record_id, -1.0))

    # -- forgetting -------------------------------------------------------------------

    def reset(self, scope: Scope) -> None:
        """Delete the scope's user's records from the record and the index."""
        user = scope.require_user(f"resetting the {self.name!r} memory source")
        with self._lock:
            self.store.delete_user(scope, source=self.name)
            for record_id in [
                i for i, item in self._overlay.items()
                if item.tenant_id == scope.tenant_id and item.user_id == user
            ]:
                del self._overlay[record_id]
            self._resident.pop((scope.tenant_id, user), None)
            self._vectors.clear()  # it holds recent texts, the user's among them
            # Last: when the index is unreachable the record is already clean, and
            # reconcile() drops the collection later.
            self.index.drop(scope.tenant_id, user)

    def forget_records(self, ids: Sequence[str], scope: Scope) -> None:
        """Drop the vectors of records of the scope's user already deleted from the
        system of record: from Chroma, the overlay and the vectors held in memory."""
        user = scope.require_user(f"the {self.name!r} memory source")
        with self._lock:
            for record_id in ids:
                self._overlay.pop(record_id, None)
            # Loaded again on the next search: a held set must not keep deleted vectors.
            self._resident.pop((scope.tenant_id, user), None)
            self.index.delete(scope.tenant_id, user, list(ids))

    # -- embedding ----------------------------------------------------------------------

    def _embed_texts(self, texts: list[str]) -> list[np.ndarray]:
        vectors = self._vectors.documents(texts)
        if vectors:
            self._dimensions.check_vectors(len(vectors[0]))
        return vectors

    def _query_vector(self, query: str) -> np.ndarray:
        vector = self._vectors.query(query)
        self._dimensions.check_vectors(len(vector))
        return vector


def _encode(vector: Any) -> bytes:
    """A record vector's copy for the system of record: its direction (all a cosine
    needs) as float16, half the bytes of float32; the cosines it gives differ from
    the exact ones by about 1e-3."""
    array = np.asarray(vector, dtype=np.float32)
    norm = float(np.linalg.norm(array))
    return (array / norm if norm > 0 else array).astype(np.float16).tobytes()


def _decode(data: bytes) -> np.ndarray:
    """The vector :func:`_encode` made (or several, end to end), as float32."""
    return np.frombuffer(data, dtype=np.float16).astype(np.float32)


def _encodes(data: bytes, dimension: int) -> bool:
    """Whether ``data`` is the copy of a vector of ``dimension`` (not one from before a
    change of model)."""
    return len(data) == dimension * np.dtype(np.float16).itemsize


def _cosine(matrix: np.ndarray, vector: np.ndarray) -> list[float]:
    """Cosine similarity of each row of ``matrix`` with ``vector``."""
    norms = np.linalg.norm(matrix, axis=1) * (np.linalg.norm(vector) or 1.0)
    return (matrix @ vector / np.where(norms == 0, 1.0, norms)).tolist()
