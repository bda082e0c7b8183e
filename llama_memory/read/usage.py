"""When each record was last shown in a memory block (its ``last_used``), written in
batches: a ``get()`` only notes the ids in memory; the notes are written inside the next
``put()``'s transaction (no commit of their own), or on their own once
:data:`USAGE_BATCH` ids wait, and on ``flush()`` and ``close()``.

A note lost with the process only makes a record look a little less recently used: the
ranking's recency term (:mod:`llama_memory.retrieval.salience`) is a small one.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Optional, Protocol

from ..core.types import MemoryRecord

#: Ids noted before a ``get()`` writes them itself (one UPDATE batch, one commit).
USAGE_BATCH = 256


class UsageStore(Protocol):
    """The port the log writes through (any record store)."""

    def mark_used(self, ids: list[str], at: float) -> None:
        """Set ``last_used`` of these records to ``at`` (if later)."""
        ...


class UsageLog:
    """Ids shown in blocks and when, waiting to be written to the record store.

    Args:
        store: where records live (``None``: a memory without a store notes nothing).
        batch: how many ids wait before :meth:`note` writes them itself.
    """

    def __init__(self, store: Optional[UsageStore], batch: int = USAGE_BATCH) -> None:
        if batch <= 0:
            raise ValueError(f"batch must be positive, got {batch}")
        self.store = store
        self.batch = batch
        self._pending: dict[str, float] = {}
        self._lock = threading.Lock()

    def note(self, records: Iterable[MemoryRecord], at: float) -> None:
        """Note that these records (and their parts) were shown at ``at``; write the
        notes if a batch is full."""
        if self.store is None:
            return
        with self._lock:
            for record in records:
                for part in (record, *record.parts):
                    if part.id:
                        self._pending[part.id] = at
            full = len(self._pending) >= self.batch
        if full:
            self.write()

    @property
    def pending(self) -> int:
        """How many ids wait to be written."""
        return len(self._pending)

    def write(self) -> int:
        """Write the waiting notes (joining the store's open transaction, if any);
        return how many ids. On a storage failure they stay noted and it raises."""
        if self.store is None:
            return 0
        with self._lock:
            pending, self._pending = self._pending, {}
        by_time: dict[float, list[str]] = {}
        for record_id, at in pending.items():
            by_time.setdefault(at, []).append(record_id)
        try:
            for at, ids in by_time.items():
                self.store.mark_used(ids, at)
        except Exception:
            with self._lock:  # keep them for the next write, newer notes win
                self._pending = {**pending, **self._pending}
            raise
        return len(pending)
