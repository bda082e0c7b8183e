"""Vector memory of past messages: recall across the conversations of one user."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding

from ..embeddings import embedding_dimension, vector_cache
from ..retrieval import fuse_rankings
from ..storage.chroma import DenseIndex
from ..storage.sqlite import NewRecord, SQLiteStore
from ..types import MemoryRecord, Scope, StoredMessage
from .base import MemorySource
from .dimension import DimensionGuard


class _Embedded(NamedTuple):
    tenant_id: str
    user_id: str
    vector: np.ndarray


class VectorSource(MemorySource):
    """Each user or assistant message becomes a record, found again by meaning and by words.

    Retrieval fuses two rankings of the user's records: by meaning (cosine
    similarity of embeddings, in Chroma and the overlay below) and by words (BM25
    over the text and the event date in SQLite's FTS5 index), by weighted
    reciprocal-rank fusion.

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
        embed_model: any LlamaIndex embedding; its dimension is recorded in the
            store, and a model of another dimension is refused.
        roles: which message roles are remembered (tool results and system
            prompts are not, by default).
        batch_size: how many records are embedded per call to the model, and how
            many vectors wait in the overlay before they are written to Chroma.
        name: the source's name in the store and in the memory block.
        dense_weight, lexical_weight: weights of the two rankings in reciprocal-rank
            fusion (0 turns a retriever off).
        candidate_factor: each retriever ranks ``k * candidate_factor`` candidates.
    """

    def __init__(
        self,
        store: SQLiteStore,
        index: DenseIndex,
        embed_model: BaseEmbedding,
        *,
        roles: Sequence[str] = ("user", "assistant"),
        batch_size: int = 64,
        name: str = "vector",
        dense_weight: float = 1.0,
        lexical_weight: float = 1.0,
        candidate_factor: int = 3,
    ) -> None:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.store = store
        self.index = index
        self.embed_model = embed_model
        self.roles = frozenset(roles)
        self.batch_size = batch_size
        self.name = name
        self.dense_weight = dense_weight
        self.lexical_weight = lexical_weight
        self.candidate_factor = candidate_factor
        self._lock = threading.RLock()
        self._overlay: dict[str, _Embedded] = {}
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
        records = [
            NewRecord(
                source=self.name,
                scope=scope,
                text=m.text,
                message_ids=(m.message_id,),
                event_time=m.event_time,
                role=m.role,
            )
            for m in messages
            if m.role in self.roles and m.text.strip()
        ]
        if not records:
            return
        self.store.add_records(records)
        if len(records) >= self.batch_size:  # a bulk import: index as it goes
            self.flush()

    def flush(self) -> int:
        """Embed every record still without a vector and write all waiting vectors to
        Chroma; return how many vectors were written."""
        with self._lock:
            self._embed_pending()
            return self._write_overlay()

    def reindex(self) -> int:
        """Rebuild the dense index from the system of record; return how many records."""
        with self._lock:
            self.index.clear()
            self._overlay.clear()
            self.store.mark_all_unindexed(self.name)
            return self.flush()

    def close(self) -> None:
        """Write waiting vectors to Chroma, so the next process need not embed them again."""
        self.flush()

    def _embed_pending(self) -> None:
        while True:
            # Overlay rows are still pending in SQLite: ask for enough to see a full batch
            # of the others.
            limit = len(self._overlay) + self.batch_size
            rows = self.store.pending_records(self.name, limit)
            fresh = [r for r in rows if r.id not in self._overlay]
            if not fresh:
                return
            vectors = self._embed_texts([r.text for r in fresh])
            for row, vector in zip(fresh, vectors):
                self._overlay[row.id] = _Embedded(row.tenant_id, row.user_id, vector)
            if len(self._overlay) >= self.batch_size:
                self._write_overlay()
            if len(rows) < limit:  # that was every pending row: no need to ask again
                return

    def _write_overlay(self) -> int:
        by_user: dict[tuple[str, str], list[str]] = {}
        for record_id, item in self._overlay.items():
            by_user.setdefault((item.tenant_id, item.user_id), []).append(record_id)
        for (tenant, user), ids in by_user.items():
            self.index.upsert(tenant, user, ids, [self._overlay[i].vector for i in ids])
        written = list(self._overlay)
        self.store.mark_indexed(written)
        self._overlay.clear()
        return len(written)

    # -- reading --------------------------------------------------------------------

    def retrieve(self, query: str, scope: Scope, k: int) -> list[MemoryRecord]:
        """The ``k`` records of the scope's user that best match ``query``."""
        user = scope.require_user(f"the {self.name!r} memory source")
        if not query.strip() or k <= 0:
            return []
        pool = max(k * self.candidate_factor, k)
        with self._lock:
            self._embed_pending()
            vector = self._query_vector(query)
            waiting = [
                (record_id, item.vector)
                for record_id, item in self._overlay.items()
                if item.tenant_id == scope.tenant_id and item.user_id == user
            ]
        dense = dict(self.index.query(scope.tenant_id, user, vector, pool))
        if waiting:
            matrix = np.stack([v for _, v in waiting])
            for (record_id, _), score in zip(waiting, _cosine(matrix, vector)):
                dense[record_id] = max(score, dense.get(record_id, -1.0))
        dense_ranking = sorted(dense.items(), key=lambda item: item[1], reverse=True)[:pool]
        lexical_ranking = (
            self.store.search_text(query, scope, self.name, pool) if self.lexical_weight > 0 else []
        )
        ranked = fuse_rankings(
            [(dense_ranking, self.dense_weight), (lexical_ranking, self.lexical_weight)]
        )[:k]
        # The system of record has the last word: a vector whose row is gone is
        # skipped, and get_records checks the user again.
        rows = self.store.get_records([record_id for record_id, _ in ranked], scope, self.name)
        results = []
        for record_id, score in ranked:
            record = rows.get(record_id)
            if record is not None:
                record.score = score
                results.append(record)
        return results

    # -- forgetting -------------------------------------------------------------------

    def reset(self, scope: Scope) -> None:
        """Delete the scope's user's records from the record and the index."""
        user = scope.require_user(f"resetting the {self.name!r} memory source")
        with self._lock:
            self.store.delete_user(scope, source=self.name)
            self.index.drop(scope.tenant_id, user)
            for record_id in [
                i for i, item in self._overlay.items()
                if item.tenant_id == scope.tenant_id and item.user_id == user
            ]:
                del self._overlay[record_id]

    # -- embedding ----------------------------------------------------------------------

    def _embed_texts(self, texts: list[str]) -> list[np.ndarray]:
        vectors = self._vectors.documents(texts)
        if vectors:
            self._dimensions.check(len(vectors[0]))
        return vectors

    def _query_vector(self, query: str) -> np.ndarray:
        vector = self._vectors.query(query)
        self._dimensions.check(len(vector))
        return vector


def _cosine(matrix: np.ndarray, vector: np.ndarray) -> list[float]:
    """Cosine similarity of each row of ``matrix`` with ``vector``."""
    norms = np.linalg.norm(matrix, axis=1) * (np.linalg.norm(vector) or 1.0)
    return (matrix @ vector / np.where(norms == 0, 1.0, norms)).tolist()
