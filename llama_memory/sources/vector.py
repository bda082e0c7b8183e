"""Vector memory of past messages: recall across the conversations of one user."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from llama_index.core.base.embeddings.base import BaseEmbedding

from ..embeddings import embedding_dimension
from ..errors import EmbeddingDimensionError
from ..storage.chroma import DenseIndex
from ..storage.sqlite import NewRecord, SQLiteStore
from ..types import MemoryRecord, Scope, StoredMessage
from .base import MemorySource

_DIM_KEY = "embedding_dimension"
_MODEL_KEY = "embedding_model"


def model_label(model: BaseEmbedding) -> str:
    """A readable name for an embedding model, as recorded in the store."""
    return f"{model.class_name()}:{getattr(model, 'model_name', '') or ''}"


class VectorSource(MemorySource):
    """Each user or assistant message becomes a record, found again by meaning.

    Writes go to the SQLite system of record at once (one transaction per call);
    vectors are computed in batches and added to the dense index before the next
    retrieval, or as soon as ``batch_size`` records are waiting. So ``put`` costs
    a row insert, a bulk import embeds in batches, and a crash between the two
    stores loses nothing: unindexed rows are picked up on the next flush.

    Args:
        store: the system of record.
        index: the dense index derived from it.
        embed_model: any LlamaIndex embedding; its dimension is recorded in the
            store, and a model of another dimension is refused.
        roles: which message roles are remembered (tool results and system
            prompts are not, by default).
        batch_size: how many records are embedded per call to the model.
        name: the source's name in the store and in the memory block.
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
    ) -> None:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.store = store
        self.index = index
        self.embed_model = embed_model
        self.roles = frozenset(roles)
        self.batch_size = batch_size
        self.name = name
        self._flush_lock = threading.Lock()
        self._waiting = 0
        self._dimension: int | None = None  # confirmed against the store once, then cached
        known = embedding_dimension(embed_model)
        if known is not None:
            self._check_dimension(known)

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
        self._waiting += len(records)
        if self._waiting >= self.batch_size:
            self.flush()

    def flush(self) -> int:
        """Bring the dense index up to date with the system of record; return how many
        records were indexed."""
        done = 0
        with self._flush_lock:
            while batch := self.store.pending_records(self.name, self.batch_size):
                ids = [record_id for record_id, _ in batch]
                vectors = self.embed_model.get_text_embedding_batch([text for _, text in batch])
                self._check_dimension(len(vectors[0]))
                scopes = self.store.index_metadata(ids)
                self.index.upsert(ids, vectors, [scopes[i] for i in ids])
                self.store.mark_indexed(ids)
                done += len(ids)
            self._waiting = 0
        return done

    def reindex(self) -> int:
        """Rebuild the dense index from the system of record; return how many records."""
        with self._flush_lock:
            self.index.clear()
            self.store.mark_all_unindexed(self.name)
        return self.flush()

    # -- reading --------------------------------------------------------------------

    def retrieve(self, query: str, scope: Scope, k: int) -> list[MemoryRecord]:
        """The ``k`` records of the scope's user closest in meaning to ``query``."""
        user = scope.require_user(f"the {self.name!r} memory source")
        if not query.strip() or k <= 0:
            return []
        self.flush()
        vector = self.embed_model.get_query_embedding(query)
        self._check_dimension(len(vector))
        hits = self.index.query(vector, k, {"tenant_id": scope.tenant_id, "user_id": user})
        # The system of record has the last word: a vector whose row is gone is skipped,
        # and get_records filters by user again.
        rows = self.store.get_records([record_id for record_id, _ in hits], scope, self.name)
        results = []
        for record_id, score in hits:
            record = rows.get(record_id)
            if record is not None:
                record.score = score
                results.append(record)
        return results

    # -- forgetting -------------------------------------------------------------------

    def reset(self, scope: Scope) -> None:
        """Delete the scope's user's records from the record and the index."""
        user = scope.require_user(f"resetting the {self.name!r} memory source")
        self.store.delete_user(scope, source=self.name)
        self.index.delete(where={"tenant_id": scope.tenant_id, "user_id": user})

    # -- helpers ----------------------------------------------------------------------

    def _check_dimension(self, dim: int) -> None:
        if dim == self._dimension:
            return
        stored = self.store.get_meta(_DIM_KEY)
        if stored is None:
            self.store.set_meta(_DIM_KEY, str(dim))
            self.store.set_meta(_MODEL_KEY, model_label(self.embed_model))
        elif int(stored) != dim:
            raise EmbeddingDimensionError(
                int(stored), self.store.get_meta(_MODEL_KEY) or "unknown", dim,
                model_label(self.embed_model),
            )
        self._dimension = dim
