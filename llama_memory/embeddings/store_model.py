"""An embedding model as a store's sources use it: its recent vectors, cached once per
model (:class:`VectorCache`), and the model a store's vectors were built with, recorded
in the store and checked against every model that opens it (:class:`DimensionGuard`)."""

from __future__ import annotations

import json
import os
import threading
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding

from ..core.asyncbridge import await_only, in_bridge
from ..core.errors import EmbeddingDimensionError, EmbeddingMismatchError
from ..storage.sql.store import MetaStore
from .offline import OfflineEmbedding, is_symmetric

#: The text whose vector identifies an embedding model in a store (its fingerprint).
#: Never change it: stores compare the vector of this exact text.
PROBE_TEXT = (
    "llama-memory embedding fingerprint: the quick brown fox jumps over the lazy dog "
    "while a Lisbon bakery sells 12 custard tarts before noon."
)

#: How many recent texts keep their vector in a model's :class:`VectorCache`.
VECTORS_KEPT = 256

#: Threads embedding queries ahead (:meth:`VectorCache.embed_ahead`): a question of two
#: parts has three texts, and a machine two cores at least.
AHEAD_THREADS = 2

_ahead_lock = threading.Lock()
_ahead: tuple[int, ThreadPoolExecutor] | None = None


def ahead_executor() -> ThreadPoolExecutor:
    """The threads that embed queries ahead, made on first use in each process (a
    forked child gets its own: its parent's threads do not run in it)."""
    global _ahead
    with _ahead_lock:
        if _ahead is None or _ahead[0] != os.getpid():
            _ahead = (os.getpid(), ThreadPoolExecutor(AHEAD_THREADS, thread_name_prefix="llama-memory-embed"))
        return _ahead[1]


def awaits_io(model: BaseEmbedding) -> bool:
    """Whether to await ``model``'s async API here: inside a bridged call and for a model
    with an async API of its own (an HTTP client); a local model runs inline."""
    if not in_bridge() or isinstance(model, OfflineEmbedding):
        return False
    return type(model)._aget_query_embedding is not BaseEmbedding._aget_query_embedding


class VectorCache:
    """Recent vectors of one embedding model by text, shared by every source using it: a
    query asked of every source, and again after each tool round, is embedded once; for a
    symmetric model a document vector is also the query vector. Thread-safe; get a
    model's with :func:`vector_cache`.
    """

    def __init__(self, model: BaseEmbedding, size: int = VECTORS_KEPT) -> None:
        self._model = weakref.ref(model)
        self._symmetric = is_symmetric(model)
        self._size = size
        self._queries: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()
        self._fingerprint: np.ndarray | None = None
        # Queries being embedded ahead, by text; each leaves as its vector is kept.
        self._coming: dict[str, Future[np.ndarray]] = {}
        self._generation = 0  # moved by clear(): a vector embedded ahead of it is not kept

    @property
    def model(self) -> BaseEmbedding:
        """The embedding model."""
        model = self._model()
        if model is None:  # pragma: no cover - the sources hold the model
            raise RuntimeError("the embedding model of this cache is gone")
        return model

    def query(self, text: str) -> np.ndarray:
        """The query vector of ``text`` (float32), embedded only if not known yet (or
        waited for, when it is being embedded ahead)."""
        with self._lock:
            vector = self._queries.get(text)
            if vector is not None:
                self._queries.move_to_end(text)
                return vector
            coming = self._coming.get(text)
        if coming is not None:
            try:
                return coming.result()
            except Exception:  # raised again below, in the caller's thread
                pass
        return self._embed_query(text)

    def embed_ahead(self, texts: Sequence[str]) -> None:
        """Start embedding the query vectors of those of ``texts`` not known yet, in
        background threads, for :meth:`query` to take when asked (a question's parts run
        side by side). Each text is embedded alone, as :meth:`query` would: a batch would
        not give the same vector bit for bit (the offline model quantises each batch's
        activations by its range). Only for the offline model (thread-safe runs); another
        embeds when asked."""
        if not isinstance(self.model, OfflineEmbedding):
            return
        with self._lock:
            for text in dict.fromkeys(texts):
                if text and text not in self._queries and text not in self._coming:
                    self._coming[text] = ahead_executor().submit(self._embed_query, text, self._generation)

    def _embed_query(self, text: str, generation: int | None = None) -> np.ndarray:
        """Embed ``text`` as a query and keep its vector; ``generation``: that of a text
        embedded ahead, whose vector is not kept if :meth:`clear` came since."""
        try:
            vector = self._embed(text)
            with self._lock:
                if generation is None or generation == self._generation:
                    self._keep_locked([text], [vector])
            return vector
        finally:
            if generation is not None:
                with self._lock:
                    if generation == self._generation:
                        self._coming.pop(text, None)

    def _embed(self, text: str) -> np.ndarray:
        model = self.model
        if awaits_io(model):  # an API call: awaited on the event loop, not blocking it
            embedded = await_only(model.aget_query_embedding(text))
        else:
            embedded = model.get_query_embedding(text)
        return np.asarray(embedded, dtype=np.float32)

    def documents(self, texts: list[str]) -> list[np.ndarray]:
        """The document vectors of ``texts`` (float32), unknown ones embedded in one batch
        (a symmetric model's known query vectors reused)."""
        if not self._symmetric:
            return [np.asarray(v, dtype=np.float32) for v in self._batch(texts)]
        with self._lock:
            known = [self._queries.get(t) for t in texts]
        missing = [t for t, v in zip(texts, known) if v is None]
        fresh = iter([np.asarray(v, dtype=np.float32) for v in self._batch(missing)] if missing else [])
        vectors = [v if v is not None else next(fresh) for v in known]
        self._keep(texts, vectors)
        return vectors

    def _batch(self, texts: list[str]) -> list[Embedding]:
        model = self.model
        if awaits_io(model):
            return await_only(model.aget_text_embedding_batch(texts))
        return model.get_text_embedding_batch(texts)

    def fingerprint(self) -> np.ndarray:
        """The model's document vector of :data:`PROBE_TEXT` (float32), embedded once per
        model object."""
        vector = self._fingerprint
        if vector is None:
            vector = np.asarray(self.model.get_text_embedding(PROBE_TEXT), dtype=np.float32)
            self._fingerprint = vector
        return vector

    def clear(self) -> None:
        """Forget every vector kept (they are keyed by users' texts: a user who is
        forgotten must not stay here)."""
        with self._lock:
            self._queries.clear()
            self._coming.clear()
            self._generation += 1

    def _keep(self, texts: list[str], vectors: list[np.ndarray]) -> None:
        with self._lock:
            self._keep_locked(texts, vectors)

    def _keep_locked(self, texts: list[str], vectors: list[np.ndarray]) -> None:
        for text, vector in zip(texts[-self._size :], vectors[-self._size :]):
            self._queries[text] = vector
            self._queries.move_to_end(text)
        while len(self._queries) > self._size:
            self._queries.popitem(last=False)


_caches_lock = threading.Lock()
_caches: dict[int, VectorCache] = {}


def vector_cache(model: BaseEmbedding) -> VectorCache:
    """The :class:`VectorCache` of ``model`` (one per model object, made on first use,
    dropped with the model), so the sources of a memory share their vectors."""
    key = id(model)
    with _caches_lock:
        cache = _caches.get(key)
        if cache is None or cache._model() is not model:
            cache = _caches[key] = VectorCache(model)
            weakref.finalize(model, _forget_cache, key, cache)
        return cache


def _forget_cache(key: int, cache: VectorCache) -> None:
    with _caches_lock:
        if _caches.get(key) is cache:
            del _caches[key]


#: The same model must give its fingerprint a cosine of at least this with the recorded
#: one. Reruns of one model differ by far less (a remote model's nondeterminism, another
#: number of threads: cosines above 0.9999); another model's vector of the same text
#: shares no space with it (cosines near 0, rarely above 0.5 even for related models).
SAME_MODEL_COSINE = 0.99

#: The meta keys of each source's recorded model ("" for the vector source, "triples:").
IDENTITY_KEYS = ("embedding_dimension", "embedding_model", "embedding_fingerprint")
SOURCE_PREFIXES = ("", "triples:")


def model_label(model: BaseEmbedding) -> str:
    """A readable name for an embedding model, as recorded in the store."""
    return f"{model.class_name()}:{getattr(model, 'model_name', '') or ''}"


def forget_embedding_model(store: MetaStore, *, vector: bool, triples: bool) -> None:
    """Drop what the store recorded of the vector and/or triple source's model, so the
    next model to embed is recorded: the first step of re-embedding them."""
    prefixes = [p for p, chosen in zip(SOURCE_PREFIXES, (vector, triples)) if chosen]
    store.delete_meta([prefix + key for prefix in prefixes for key in IDENTITY_KEYS])


class DimensionGuard:
    """Records, in the store's meta table, the embedding model of a source's vectors and
    refuses another: by dimension (:meth:`check`, raising
    :class:`EmbeddingDimensionError`) and by fingerprint, the vector of
    :data:`PROBE_TEXT` (raising :class:`EmbeddingMismatchError`), at open when the store
    records a model (:meth:`check_at_open`), else before the first write
    (:meth:`check_model`).

    Args:
        store: where the dimension, the model's name and its fingerprint are recorded.
        embed_model: the model whose vectors are checked (named in the error).
        key_prefix: separates the records of sources that keep their own vectors.
    """

    def __init__(self, store: MetaStore, embed_model: BaseEmbedding, key_prefix: str = "") -> None:
        self.store = store
        self.embed_model = embed_model
        self.dim_key, self.model_key, self.fingerprint_key = (key_prefix + k for k in IDENTITY_KEYS)
        self._confirmed: int | None = None  # checked against the store once, then cached
        self._identity_confirmed = False

    def check(self, dim: int) -> None:
        """Accept ``dim`` if it is the recorded dimension (or the first one seen)."""
        if dim == self._confirmed:
            return
        stored = self.store.get_meta(self.dim_key)
        if stored is None:
            self.store.set_meta(self.dim_key, str(dim))
            self.store.set_meta(self.model_key, model_label(self.embed_model))
        elif int(stored) != dim:
            recorded = self.store.get_meta(self.model_key) or "unknown"
            raise EmbeddingDimensionError(int(stored), recorded, dim, model_label(self.embed_model))
        self._confirmed = dim

    def check_at_open(self, dim: int | None) -> None:
        """At a source's open: the dimension when the model declares it (``dim``), and,
        when the store records a model already, the model itself (:meth:`check_model`)."""
        recorded = self.store.get_meta(self.dim_key) is not None
        if dim is not None:
            self.check(dim)
        if recorded:
            self.check_model()

    def check_model(self) -> None:
        """Check the model against the store's, by its fingerprint (recording both when
        the store has none yet); once per guard, the fingerprint once per model object."""
        if not self._identity_confirmed:
            self.check_vectors(len(vector_cache(self.embed_model).fingerprint()))

    def documents(self, texts: list[str]) -> list[np.ndarray]:
        """``texts`` embedded as documents through the model's shared vector cache, checked
        (what a source's index sync embeds)."""
        vectors = vector_cache(self.embed_model).documents(texts)
        if vectors:
            self.check_vectors(len(vectors[0]))
        return vectors

    def query(self, text: str) -> np.ndarray:
        """``text`` embedded as a query through the shared vector cache (once per query
        for every source of this model), checked."""
        vector = vector_cache(self.embed_model).query(text)
        self.check_vectors(len(vector))
        return vector

    def check_vectors(self, dim: int) -> None:
        """Check the dimension of vectors just made, then (once) the model's identity."""
        self.check(dim)
        if not self._identity_confirmed:
            self._check_identity()
            self._identity_confirmed = True

    def _check_identity(self) -> None:
        label = model_label(self.embed_model)
        mine = vector_cache(self.embed_model).fingerprint()
        recorded = self.store.get_meta(self.fingerprint_key)
        if recorded is None:
            stored_label = self.store.get_meta(self.model_key)
            if stored_label is not None and stored_label != label:
                # A store from before fingerprints, with vectors of a model named otherwise:
                # nothing proves it is the same model, and mixing spaces is silent.
                raise EmbeddingMismatchError(stored_label, label, None)
            recorded = self.store.set_meta_once(self.fingerprint_key, _dump(label, mine))
        stored_label, vector = _load(recorded)
        similarity = _cosine(vector, mine)
        if similarity < SAME_MODEL_COSINE:
            raise EmbeddingMismatchError(stored_label, label, similarity)


def _dump(label: str, vector: np.ndarray) -> str:
    # The name goes with the vector: it is the model whose fingerprint this is.
    # Six decimals: far below SAME_MODEL_COSINE's tolerance, a third of the text.
    return json.dumps({"model": label, "vector": [round(float(x), 6) for x in vector]})


def _load(text: str) -> tuple[str, np.ndarray]:
    data = json.loads(text)
    return str(data["model"]), np.asarray(data["vector"], dtype=np.float32)


def _cosine(a: Sequence[float] | np.ndarray, b: np.ndarray) -> float:
    a = np.asarray(a, dtype=np.float32)
    if a.shape != b.shape:
        return -1.0
    norms = float(np.linalg.norm(a) * np.linalg.norm(b))
    return float(a @ b) / norms if norms else (1.0 if np.array_equal(a, b) else 0.0)
