"""Adapters giving the triple timeline's rows to the one index sync and its words to the
one hybrid search (a triple is not a message record).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Optional

from ...core.types import Scope
from ...storage.ports import IndexFlags, PendingRecord
from ...storage.sql.triples import TripleTimeline
from .normalize import search_text


class TripleRows:
    """The triples' index flags for the index sync; triples keep no vector copies
    (``resident_limit=0``), so copy and change-token reads answer "none"."""

    def __init__(self, timeline: TripleTimeline) -> None:
        self.timeline = timeline

    def pending_records(self, source: str, limit: int) -> list[PendingRecord]:
        """Triples waiting for the dense index, with the text that is embedded."""
        return [
            PendingRecord(r.id, search_text(r.subject, r.predicate, r.object), r.tenant_id, r.user_id)
            for r in self.timeline.pending(limit)
        ]

    def mark_indexed(self, ids: Sequence[str], indexed: bool = True, vectors: Optional[Sequence[bytes]] = None) -> None:
        """Flag triples as in the dense index (``vectors``, the copies, are not kept)."""
        self.timeline.mark_indexed(ids, indexed)

    def mark_all_unindexed(self, source: str) -> int:
        """Flag every triple as waiting for the dense index; return how many there are."""
        total = sum(len(flags) for flags in self.timeline.index_flags().values())
        self.timeline.mark_all_unindexed()
        return total

    def index_flags(self, source: str, owner: Optional[tuple[str, str]] = None) -> IndexFlags:
        """Every triple id and whether the index holds it, per (tenant, user)."""
        scope = Scope(tenant_id=owner[0], user_id=owner[1]) if owner is not None else None
        return self.timeline.index_flags(scope)

    def stored_vectors(self, ids: Sequence[str]) -> dict[str, bytes]:
        """None kept: the hybrid search reads missing cosines from the dense index."""
        return {}

    def user_vectors(self, source: str, tenant_id: str, user_id: str, limit: int) -> Optional[dict[str, bytes]]:
        """None kept (see the class)."""
        return None

    def transaction(self, action: str) -> AbstractContextManager[Any]:
        """The timeline's transaction."""
        return self.timeline.transaction(action)

    def after_commit(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` once the store's open transaction commits."""
        self.timeline.store.after_commit(callback)

    def change_token(self) -> Hashable:
        """Constant: no vectors are held in memory, so nothing needs reloading."""
        return None


class TripleWords:
    """The triples' lexical index as a :class:`~llama_memory.storage.ports.LexicalIndex`,
    for current triples only or (``include_history``) superseded ones too."""

    def __init__(self, timeline: TripleTimeline, include_history: bool) -> None:
        self.timeline = timeline
        self.include_history = include_history

    def search_text(
        self, query: str, scope: Scope, source: str, limit: int, exclude: Collection[str] = ()
    ) -> list[tuple[str, float]]:
        """(triple id, score) best first for ``query``'s words; the ids of ``exclude``
        left out (no caller leaves triples out: they are filtered here)."""
        found = self.timeline.search_words(scope, query, limit + len(exclude), self.include_history)
        return [hit for hit in found if hit[0] not in exclude][:limit] if exclude else found

    def word_counts(self, words: Sequence[str], scope: Scope) -> tuple[int, dict[str, int]]:
        """What an idf needs (the store's lexical index answers: it counts triples and
        profile fields of the user too)."""
        counts: tuple[int, dict[str, int]] = self.timeline.store.word_counts(words, scope)
        return counts
