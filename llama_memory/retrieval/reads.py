"""The records one retrieval reads, each read from the store once.

A retrieval of the vector source needs the records of its candidates several times: the
second hop reads its seeds' texts and the texts of what its search found, the check for
the window's own messages reads the whole candidate pool, and the excerpts read their
members (mostly the same records). Each was a read of the store (a query, whole records
built); :class:`RecordReads` reads each record once per retrieval and answers the later
asks from what it holds (docs/benchmarks.md, "The second hop's cost, third round").

It lives for one retrieval only: a record deleted or changed meanwhile is seen by the
next retrieval, as before. Expiry is applied here, with the rule storage applies
(:func:`~llama_memory.storage.expiry.is_alive`), so one read serves the asks with and
without ``alive_at``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from ..storage.expiry import is_alive
from ..storage.ports import RecordStore
from ..types import MemoryRecord, Scope


class RecordReads:
    """Records of one user and source by id, read from ``store`` at most once each.

    Args:
        store: the system of record.
        scope: whose records (the store checks the user, as on every read).
        source: the source's name.
    """

    def __init__(self, store: RecordStore, scope: Scope, source: str) -> None:
        self.store = store
        self.scope = scope
        self.source = source
        self._rows: dict[str, MemoryRecord] = {}
        self._missing: set[str] = set()  # asked for and not found (gone, or another user's)

    def get(self, ids: Sequence[str], alive_at: Optional[float] = None) -> dict[str, MemoryRecord]:
        """The records of ``ids`` that exist (and are alive at ``alive_at`` when given),
        as :meth:`~llama_memory.storage.ports.RecordStore.get_records` gives them; only
        the ids not asked for before are read from the store."""
        unread = [i for i in dict.fromkeys(ids) if i not in self._rows and i not in self._missing]
        if unread:
            rows = self.store.get_records(unread, self.scope, self.source)
            self._rows.update(rows)
            self._missing.update(i for i in unread if i not in rows)
        return {
            i: self._rows[i]
            for i in ids
            if i in self._rows and (alive_at is None or is_alive(self._rows[i].expires_at, alive_at))
        }

    def texts(self, ids: Sequence[str]) -> dict[str, str]:
        """The text of each record of ``ids`` that exists (read as :meth:`get` reads)."""
        return {i: record.text for i, record in self.get(ids).items()}
