"""The one hybrid search: rows found by words (the lexical index port) and by meaning
(the dense index, the overlay and the vectors held in memory of :class:`~.sync.IndexSync`),
fused by :func:`~.fusion.fuse_scores` (measured better than reciprocal-rank fusion on
LoCoMo, docs/benchmarks.md)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Optional

import numpy as np

from ..storage.ports import LexicalIndex
from ..types import Scope
from .fusion import fuse_scores
from .sync import IndexSync
from .vectors import add_cosines


class HybridSearch:
    """Lexical + dense search over one indexed collection, one fusion.

    Args:
        sync: the collection's index sync (dense side: index, overlay, held vectors).
        lexical: the lexical index port.
        query_vector: a query's vector (embedded once per query, cached by the caller).
    """

    def __init__(
        self, sync: IndexSync, lexical: LexicalIndex, query_vector: Callable[[str], np.ndarray]
    ) -> None:
        self.sync = sync
        self.lexical = lexical
        self.query_vector = query_vector

    def search(
        self,
        query: str,
        scope: Scope,
        pool: int,
        *,
        dense_weight: float = 1.0,
        lexical_weight: float = 1.0,
        cosines: Optional[dict[str, float]] = None,
    ) -> list[tuple[str, float]]:
        """Every candidate of the two retrievers (``pool`` each) of the scope's user, by
        fused score (:func:`~.fusion.fuse_scores`), best first. Given ``cosines``, the
        candidates' cosines with the query are put in it (fused scores are rescaled per
        query; a cosine is absolute evidence, :mod:`llama_memory.relevance`)."""
        lexical, dense = self.candidates(
            query, scope, pool, dense_weight=dense_weight, lexical_weight=lexical_weight
        )
        if cosines is not None:
            cosines.update(dense)
        return fuse_scores(lexical, dense, lexical_weight=lexical_weight, dense_weight=dense_weight)

    def candidates(
        self,
        query: str,
        scope: Scope,
        pool: int,
        *,
        dense_weight: float = 1.0,
        lexical_weight: float = 1.0,
    ) -> tuple[list[tuple[str, float]], dict[str, float]]:
        """The two rankings before fusion: lexical (id, score) best first, and the cosine
        by id of the dense candidates and, where it can be had, of the lexical ones. A
        caller with more signals (the triple source's entity links) fuses them itself."""
        sync = self.sync
        owner = (scope.tenant_id, scope.require_user(f"the {sync.collection!r} memory source"))
        with sync.lock:
            sync.embed_pending()
            vector = self.query_vector(query)
            waiting = sync.waiting(owner)
            # Held vectors serve only the dense side: none are loaded when it is off.
            resident = sync.resident(owner, len(vector)) if dense_weight > 0 else None
            dense: dict[str, float] = {}
            if resident is not None:
                dense = dict(resident.search(vector, pool))
        if dense_weight > 0:
            if resident is None:
                dense = dict(sync.index.query(*owner, vector, pool))
            if waiting:
                add_cosines(dense, waiting, vector)
            dense = dict(sorted(dense.items(), key=lambda item: item[1], reverse=True)[:pool])
        lexical = (
            self.lexical.search_text(query, scope, sync.collection, pool) if lexical_weight > 0 else []
        )
        if dense and lexical:
            # A lexical candidate outside the dense pool still gets its cosine, so that
            # fusion compares like with like (a missing score would count as the worst).
            missing = [i for i, _ in lexical if i not in dense]
            vectors: dict[str, Any] = {i: waiting[i] for i in missing if i in waiting}
            rest = [i for i in missing if i not in vectors]
            if resident is not None:
                with sync.lock:
                    vectors.update(resident.vectors(rest))
                rest = [i for i in rest if i not in vectors]
            vectors.update(sync.vector_copies(rest, len(vector)))
            rest = [i for i in rest if i not in vectors]
            if resident is None:  # rows indexed before copies were kept
                vectors.update(sync.index_vectors(owner, rest))
            # else: what is left was written by another process after this search began
            # and is not embedded yet; it competes on words alone until the next search.
            add_cosines(dense, vectors, vector)
        return lexical, dense
