"""Which model re-embeds a store when none is given (``reindex --reembed`` without
``--embed-model``): the one the store recorded, never a silent switch to the default."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.errors import LlamaMemoryError

if TYPE_CHECKING:
    from llama_index.core.base.embeddings.base import BaseEmbedding


def recorded_model(store: Any) -> BaseEmbedding:
    """The model the store's vectors (and triples') were made with, when it can be built
    here: ``Settings.embed_model`` or the offline default of the same name (a store that
    recorded none: the default). Else :class:`LlamaMemoryError` naming the recorded model
    and how to pass it."""
    from ..embeddings.offline import default_embedding
    from ..embeddings.store_model import SOURCE_PREFIXES, model_label
    from ..memory.wiring import resolve_embed_model

    recorded = {store.get_meta(f"{prefix}embedding_model") for prefix in SOURCE_PREFIXES} - {None}
    for model in (resolve_embed_model(None), default_embedding()):
        if recorded <= {model_label(model)}:
            return model
    raise LlamaMemoryError(
        f"reindex(reembed=True) without a model re-embeds with the one the store recorded, "
        f"{' and '.join(map(repr, sorted(recorded)))}, which is not the offline default: pass it as "
        "embed_model= (llama-memory: --embed-model MODULE:NAME) to re-embed with it, or another model to "
        "switch the store to (the offline default: llama_memory.embeddings.offline:default_embedding)"
    )
