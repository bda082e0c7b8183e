"""The remembered match counts of words in a lexical index, shared by the backends:
counting a word walks its posting list or a user's rows, and an idf needs only a rough
count. A key is a word, or (tenant, user, word) for a count among one user's records."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable
from typing import Optional

#: How many words' counts are remembered by default.
CACHED_WORDS = 4096
#: A count is counted again once the index has grown by this share since.
STALE_GROWTH = 0.1


class WordCountCache:
    """Counts of words (how many records of the index, or of a user, hold each) with the
    size of what was counted then; a count is given back until that has grown by
    :data:`STALE_GROWTH` since, the least recently used dropped beyond ``size`` words.
    Thread-safe.

    Args:
        size: how many words to remember (at least 1).
    """

    def __init__(self, size: int = CACHED_WORDS) -> None:
        if size < 1:
            raise ValueError(f"size must be at least 1, got {size}")
        self.size = size
        self._counts: OrderedDict[Hashable, tuple[int, int]] = OrderedDict()
        self._lock = threading.Lock()

    def holds(self, word: Hashable) -> bool:
        """Whether a count of ``word`` is remembered, fresh or not."""
        with self._lock:
            return word in self._counts

    def get(self, word: Hashable, total: int) -> Optional[int]:
        """The remembered count of ``word`` if still fresh for an index of ``total``
        records, else None (count it and :meth:`put` it)."""
        with self._lock:
            cached = self._counts.get(word)
            if cached is None or total > cached[1] * (1 + STALE_GROWTH):
                return None
            self._counts.move_to_end(word)
            return cached[0]

    def put(self, word: Hashable, count: int, total: int) -> None:
        """Remember that ``count`` records of an index of ``total`` hold ``word``."""
        with self._lock:
            self._counts[word] = (count, total)
            self._counts.move_to_end(word)
            while len(self._counts) > self.size:
                self._counts.popitem(last=False)

    def clear(self) -> None:
        """Forget every count."""
        with self._lock:
            self._counts.clear()
