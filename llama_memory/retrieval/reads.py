"""The records one retrieval reads, each read from the store once.

A retrieval of the vector source needs the records of its candidates several times: the
second hop reads its seeds' texts and the texts of what its search found, the check for
the window's own messages reads the whole candidate pool, and the excerpts read their
members (mostly the same records). Each was a read of the store (a query, whole records
built); :class:`RecordReads` reads each record once per retrieval and answers the later
asks from what it holds (docs/benchmarks.md, "The second hop's cost, third round").

Most of those asks need no whole record: the candidates set apart and the calibration's
check of them need a record's role and text, the hop its text. Those are read light
(:meth:`~llama_memory.storage.sql.records.RecordStore.get_texts`: two columns, no metadata
decoded), and whether a record is only the user's own questions is remembered across
retrievals, with the line, by id (:class:`KnownLines`): a retrieval checks a few hundred
candidates, most of them the same from one turn to the next.

It lives for one retrieval only: a record deleted or changed meanwhile is seen by the
next retrieval, as before. Expiry is applied here, with the rule storage applies
(:func:`~llama_memory.core.types.is_alive`), so one read serves the asks with and
without ``alive_at``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from ..core.types import MemoryRecord, Scope, is_alive
from ..storage.sql.records import RecordStore
from .relevance import is_users_question

#: How many records :class:`KnownLines` holds (a few retrievals' candidates).
LINES_HELD = 8192


#: A record's role, text, and whether it is only the user's own questions
#: (:func:`~llama_memory.retrieval.relevance.asks_only` of a single message).
Line = tuple[Optional[str], str, bool]


class KnownLines:
    """The :data:`Line` of records by id, kept across retrievals for the last
    :data:`LINES_HELD` records read.

    A record's id is its content's hash (with its source and user), so the role and text
    of an id do not change while it is stored: a retrieval checks a few hundred
    candidates, most of them the same from one turn to the next, and reads only the
    others. What it holds is not a proof that a record still exists: the reads that
    make a retrieval's results (:meth:`RecordReads.get`) still read the store. A source
    that forgets records calls :meth:`clear`, so no forgotten text stays held here."""

    def __init__(self, held: int = LINES_HELD) -> None:
        self.held = held
        self._known: dict[str, Line] = {}

    def get(self, ids: Sequence[str]) -> dict[str, Line]:
        """The line held of each of ``ids``."""
        known = self._known
        return {i: known[i] for i in ids if i in known}

    def line(self, record_id: str, role: Optional[str], text: str) -> Line:
        """The line of the record ``record_id`` of ``role`` and ``text``, held from now."""
        known = self._known.get(record_id)
        if known is not None and known[0] == role and known[1] == text:
            return known
        if len(self._known) >= self.held:
            # The oldest first (dicts keep insertion order); another thread may have
            # taken it meanwhile.
            self._known.pop(next(iter(self._known), ""), None)
        made = (role, text, is_users_question(role, text))
        self._known[record_id] = made
        return made

    def clear(self) -> None:
        """Hold nothing (records were forgotten)."""
        self._known.clear()


class RecordReads:
    """Records of one user and source by id, read from ``store`` at most once each.

    Args:
        store: the system of record.
        scope: whose records (the store checks the user, as on every read).
        source: the source's name.
        known: the lines read before (the source keeps them across its retrievals); new
            ones when not given.
    """

    def __init__(
        self, store: RecordStore, scope: Scope, source: str, known: Optional[KnownLines] = None
    ) -> None:
        self.store = store
        self.scope = scope
        self.source = source
        self.known = known if known is not None else KnownLines()
        self._rows: dict[str, MemoryRecord] = {}
        self._lines: dict[str, Line] = {}  # of every record read
        self._missing: set[str] = set()  # asked for and not found (gone, or another user's)

    def get(self, ids: Sequence[str], alive_at: Optional[float] = None) -> dict[str, MemoryRecord]:
        """The records of ``ids`` that exist (and are alive at ``alive_at`` when given),
        as :meth:`~llama_memory.storage.sql.records.RecordStore.get_records` gives them; only
        the ids not asked for before are read from the store."""
        unread = [i for i in dict.fromkeys(ids) if i not in self._rows and i not in self._missing]
        if unread:
            rows = self.store.get_records(unread, self.scope, self.source)
            self._rows.update(rows)
            line = self.known.line
            self._lines.update((i, line(i, r.role, r.text)) for i, r in rows.items())
            self._missing.update(i for i in unread if i not in rows)
        return {
            i: self._rows[i]
            for i in ids
            if i in self._rows and (alive_at is None or is_alive(self._rows[i].expires_at, alive_at))
        }

    def lines(self, ids: Sequence[str]) -> dict[str, Line]:
        """The :data:`Line` of each record of ``ids`` that exists (expired or not, as
        :meth:`get` without ``alive_at``; or held in :attr:`known`), in the order of
        ``ids``; the ids neither read before nor held are read light
        (:meth:`~llama_memory.storage.sql.records.RecordStore.get_texts`)."""
        lines, missing = self._lines, self._missing
        unread = [i for i in dict.fromkeys(ids) if i not in lines and i not in missing]
        if unread:
            held = self.known.get(unread)
            lines.update(held)
            rest = [i for i in unread if i not in held]
            if rest:
                rows = self.store.get_texts(rest, self.scope, self.source)
                line = self.known.line
                lines.update((i, line(i, role, text)) for i, (role, text) in rows.items())
                missing.update(i for i in rest if i not in rows)
        return {i: lines[i] for i in ids if i in lines}

    def texts(self, ids: Sequence[str]) -> dict[str, str]:
        """The text of each record of ``ids`` that exists (read as :meth:`lines` reads)."""
        return {i: line[1] for i, line in self.lines(ids).items()}

    def questions(self, ids: Sequence[str]) -> dict[str, tuple[str, bool]]:
        """The text of each record of ``ids`` that exists (read as :meth:`lines` reads),
        and whether it is only the user's own questions
        (:func:`~llama_memory.retrieval.relevance.asks_only`)."""
        return {i: (line[1], line[2]) for i, line in self.lines(ids).items()}
