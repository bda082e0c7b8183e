"""The default triple source: on SQLite, with a Chroma index beside it.

The one module of the package that names storage backends (construction, not
behaviour); it belongs with the rest of the construction in ``llama_memory.config``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Union

from llama_index.core.base.embeddings.base import BaseEmbedding

from ...storage.chroma import open_index
from ...storage.sqlite import SQLiteStore
from ...storage.sqlite.triples import SQLiteTripleTimeline
from .model import TRIPLE_COLLECTION
from .source import TripleSource

__all__ = ["default_triple_source"]


def default_triple_source(
    store: SQLiteStore,
    path: Optional[Union[str, Path]],
    embed_model: BaseEmbedding,
    chroma_client: Any = None,
    **kwargs: Any,
) -> TripleSource:
    """A :class:`TripleSource` on ``store`` with a Chroma index beside it: the given
    client (a server's; collections named after the store's id), else the persistent
    one under ``path``, else (in memory) collections of its own in the process-wide
    ephemeral client. ``kwargs`` go to the source."""
    namespace = store.store_id if chroma_client is not None else None
    index = open_index(TRIPLE_COLLECTION, path, chroma_client, namespace)
    return TripleSource(SQLiteTripleTimeline(store), index, embed_model, **kwargs)
