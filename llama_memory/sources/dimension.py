"""The embedding dimension a store's vectors were built with, checked on every new model."""

from __future__ import annotations

from llama_index.core.base.embeddings.base import BaseEmbedding

from ..errors import EmbeddingDimensionError
from ..storage.sqlite import SQLiteStore


def model_label(model: BaseEmbedding) -> str:
    """A readable name for an embedding model, as recorded in the store."""
    return f"{model.class_name()}:{getattr(model, 'model_name', '') or ''}"


class DimensionGuard:
    """Records, in the store's meta table, the dimension of the vectors a source keeps,
    and raises :class:`EmbeddingDimensionError` (naming both numbers) for another one.

    Args:
        store: where the dimension and the model's name are recorded.
        embed_model: the model whose vectors are checked (named in the error).
        key_prefix: separates the records of sources that keep their own vectors.
    """

    def __init__(self, store: SQLiteStore, embed_model: BaseEmbedding, key_prefix: str = "") -> None:
        self.store = store
        self.embed_model = embed_model
        self.dim_key = f"{key_prefix}embedding_dimension"
        self.model_key = f"{key_prefix}embedding_model"
        self._confirmed: int | None = None  # checked against the store once, then cached

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
