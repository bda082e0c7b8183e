"""The PostgreSQL store's change token: it moves when another store object commits a
write, not when this one does (as SQLite's ``PRAGMA data_version``), so caches of derived
data (the vector source's vectors) reload only for others' writes.

It is read from ``pg_current_snapshot()``: a transaction id that was running and has
ended is a commit, unless it is one of this store's own, noted before they commit. What
cannot be told apart (a rollback, another database's writes, autovacuum's ANALYZE)
counts as another's write.
"""

from __future__ import annotations

import threading
from typing import Any, Optional

#: Own transaction ids kept at most (the oldest go first): enough for the writes of the
#: time between two reads of the token, which is one get() apart.
MAX_OWN = 10_000


class Snapshot:
    """``pg_current_snapshot()`` parsed: every id below ``xmax`` not in ``running`` has
    ended (committed or rolled back)."""

    def __init__(self, text: str) -> None:
        xmin, xmax, running = text.split(":")
        self.xmin, self.xmax = int(xmin), int(xmax)
        self.running = frozenset(int(x) for x in running.split(",") if x)

    def ended_since(self, earlier: "Snapshot") -> Optional[set[int]]:
        """The ids that had not ended in ``earlier`` and have now; None when too many."""
        if self.xmax - earlier.xmax > MAX_OWN:
            return None
        # Running then and not now; or started since (from earlier.xmax on) and done.
        ended = {x for x in earlier.running if x < self.xmax and x not in self.running}
        ended.update(x for x in range(earlier.xmax, self.xmax) if x not in self.running)
        return ended


class ChangeWatch:
    """Turns successive snapshots into a token that moves on others' commits only."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._own: dict[int, None] = {}  # insertion-ordered: the oldest are dropped first
        self._last: Optional[Snapshot] = None
        self._epoch = 0

    def note_own(self, xid: Any) -> None:
        """Record the id of one of this store's write transactions before it commits."""
        if xid is None:
            return
        with self._lock:
            self._own[int(str(xid))] = None
            while len(self._own) > MAX_OWN:
                del self._own[next(iter(self._own))]

    def token(self, snapshot_text: str) -> int:
        """The token for a snapshot just read: how many times another's commit was seen."""
        current = Snapshot(snapshot_text)
        with self._lock:
            last, self._last = self._last, current
            if last is None:
                self._epoch += 1
            elif current.xmax < last.xmax:
                self._epoch += 1  # another server (a failover): everything may differ
            else:
                ended = current.ended_since(last)
                if ended is None or ended - self._own.keys():
                    self._epoch += 1
            return self._epoch


def read_snapshot(conn: Any) -> str:
    """The server's current snapshot (``xmin:xmax:running``), for the change token."""
    row = conn.execute("SELECT pg_current_snapshot()::text AS s").fetchone()
    assert row is not None
    return str(row["s"])

