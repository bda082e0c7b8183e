"""The embedding model a store's vectors were built with: its dimension, its name and its
fingerprint (the vector of a fixed probe text), checked against every model that opens it."""

from __future__ import annotations

import json
from collections.abc import Sequence

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding

from ..core.errors import EmbeddingDimensionError, EmbeddingMismatchError
from ..embeddings.offline import vector_cache
from ..storage.ports import MetaStore

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
    """Drop what the store recorded of the embedding model of the default vector source
    and/or the triple source, so that the next model to embed is recorded as theirs: the
    first step of re-embedding them. (A source not re-embedded keeps its record, and
    still refuses the new model.)"""
    prefixes = [p for p, chosen in zip(SOURCE_PREFIXES, (vector, triples)) if chosen]
    store.delete_meta([prefix + key for prefix in prefixes for key in IDENTITY_KEYS])


class DimensionGuard:
    """Records, in the store's meta table, the embedding model of the vectors a source
    keeps, and refuses another model.

    Two checks: the dimension (:meth:`check`, free: at open for a model that declares
    it), raising :class:`EmbeddingDimensionError` naming both numbers; and the model's
    identity, by its fingerprint, the vector of
    :data:`~llama_memory.embeddings.offline.PROBE_TEXT`, raising
    :class:`EmbeddingMismatchError` naming both models. A source checks both at open
    when the store records a model already (:meth:`check_at_open`), else before its
    first write (:meth:`check_model`): another model is refused before anything is
    written, never found out later. The fingerprint is embedded once per model object
    and process, not once per open.

    Args:
        store: where the dimension, the model's name and its fingerprint are recorded.
        embed_model: the model whose vectors are checked (named in the error).
        key_prefix: separates the records of sources that keep their own vectors.
    """

    def __init__(self, store: MetaStore, embed_model: BaseEmbedding, key_prefix: str = "") -> None:
        self.store = store
        self.embed_model = embed_model
        self.dim_key = f"{key_prefix}embedding_dimension"
        self.model_key = f"{key_prefix}embedding_model"
        self.fingerprint_key = f"{key_prefix}embedding_fingerprint"
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
            raise EmbeddingDimensionError(
                int(stored),
                self.store.get_meta(self.model_key) or "unknown",
                dim,
                model_label(self.embed_model),
            )
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
