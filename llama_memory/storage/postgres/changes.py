"""The PostgreSQL store's change token: it moves when another store object (another
process, another app server) commits a write, not when this one does, as SQLite's
``PRAGMA data_version`` does for its connection.

The token is read from ``pg_current_snapshot()`` (``xmin:xmax:xip,...``): a write
committed since the last read shows as a transaction id that was not visible then and
is now. The ids of this store's own write transactions are noted before they commit, so
that they do not count. Without that, the vector source's in-memory vectors (reloaded
whenever the token moves: 14 ms for 2,000 messages) were reloaded after every put()
of the app itself, and after every get() too (it records which records it showed).

Anything this cannot tell apart counts as another's write (the token moves, a reload
follows): a rolled-back transaction, a savepoint's own id, other databases' writes on
the same server (transaction ids are the server's), autovacuum's ANALYZE (it commits
its statistics in a transaction of its own).
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
        """The ids that had not ended in ``earlier`` and have in this one (the writes
        committed or rolled back between the two); None when too many to list."""
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
        """Record the id of one of this store's write transactions (before it commits;
        None: the transaction wrote nothing)."""
        if xid is None:
            return
        with self._lock:
            self._own[int(str(xid))] = None
            while len(self._own) > MAX_OWN:
                del self._own[next(iter(self._own))]

    def token(self, snapshot_text: str) -> int:
        """The token for a snapshot just read: the number of times another's commit was
        seen, so it moves when one has ended since the last read, and only then."""
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

