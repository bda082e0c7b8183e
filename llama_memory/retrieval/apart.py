"""Which candidates of one retrieval are set apart from the ranking of statements.

Two kinds of stored message are no answer to a question, yet match it best:

- the conversation's own messages, which the window shows: an agent stores the user's
  message before it asks for the block, so it is the best candidate of its own query
  (cosine 1, every word shared); it is left out;
- the user's own earlier questions (:func:`~llama_memory.retrieval.relevance.asks_only`): they
  state nothing, and a question close to this one matches it better than the statement
  that answers it; they rank after every statement.

Set apart, neither takes a place among a retriever's candidates, scales the others'
scores or seeds the second hop (:meth:`~llama_memory.retrieval.hybrid.HybridSearch.search_apart`,
docs/benchmarks.md, "The agent flow and earlier questions in retrieval").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ..core.text import normalize_text
from .reads import RecordReads

Ranking = list[tuple[str, float]]

#: How many times a search is asked, at most, for more hits when those set apart leave
#: it short.
MAX_ASKS = 3


class SetApart:
    """Picks the candidates to set apart among ids, reading their texts through ``reads``;
    remembers which were the window's own messages (:attr:`own`).

    Args:
        reads: the retrieval's record reads.
        shown: the normalised texts of the window's messages.
    """

    def __init__(self, reads: RecordReads, shown: frozenset[str]) -> None:
        self.reads = reads
        self.shown = shown
        self.own: set[str] = set()
        self._apart: dict[str, bool] = {}  # by id, as decided (the searches overlap)

    def __call__(self, ids: Sequence[str]) -> set[str]:
        """The ids of ``ids`` that are the window's own messages or only the user's own
        questions."""
        decided = self._apart
        new = [i for i in ids if i not in decided]
        if new:
            for i, (_, text, only_asks) in self.reads.lines(new).items():
                if self.shown and normalize_text(text) in self.shown:
                    self.own.add(i)
                    decided[i] = True
                else:
                    decided[i] = only_asks
            for i in new:  # not found: no record to set apart
                decided.setdefault(i, False)
        return {i for i in ids if decided[i]}


def search_beside(search: Callable[[int], Ranking], apart: SetApart, count: int, spare: int = 0) -> Ranking:
    """The best ``count`` hits of a search (``search(n)`` gives its best ``n``) that are
    not set apart: it is asked for ``spare`` more to begin with, and again for as many
    more as were set apart while it may hold more."""
    extra = max(spare, 0)
    for _ in range(MAX_ASKS):
        hits = search(count + extra)
        aside = apart([i for i, _ in hits])
        if len(hits) < count + extra or len(aside) <= extra:
            break
        extra = len(aside)
    return [(i, s) for i, s in hits if i not in aside][:count]
