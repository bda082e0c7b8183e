"""The records one retrieval reads, each read from the store once.

A retrieval of the vector source needs the records of its candidates several times: the
second hop reads its seeds' texts and the texts of what its search found, the check for
the window's own messages reads the whole candidate pool, and the excerpts read their
members (mostly the same records). Each was a read of the store (a query, whole records
built); :class:`RecordReads` reads each record once per retrieval and answers the later
asks from what it holds (docs/benchmarks.md, "The second hop's cost, third round").

Most of those asks need no whole record: the candidates set apart and the calibration's
check of them need a record's role and text, the hop its text. Those are read light
(:meth:`~llama_memory.storage.ports.RecordStore.get_texts`: two columns, no metadata
decoded), and whether a record is only the user's own questions is remembered across
retrievals by id (:class:`AsksOnlyCache`): a retrieval checks a few hundred candidates,
most of them the same from one turn to the next.

It lives for one retrieval only: a record deleted or changed meanwhile is seen by the
next retrieval, as before. Expiry is applied here, with the rule storage applies
(:func:`~llama_memory.storage.expiry.is_alive`), so one read serves the asks with and
without ``alive_at``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from ..relevance import is_question
from ..storage.expiry import is_alive
from ..storage.ports import RecordStore
from ..types import MemoryRecord, Scope


#: How many records :class:`AsksOnlyCache` remembers (a few retrievals' candidates).
ASKS_ONLY_HELD = 8192


class AsksOnlyCache:
    """Whether a record is only the user's own questions
    (:func:`~llama_memory.relevance.asks_only` of a single message), by id, for the
    last :data:`ASKS_ONLY_HELD` records asked about.

    A record's id is its content's hash, so its role and text do not change while it is
    stored; a record deleted and written again may come back under the same id with its
    text spaced or cased otherwise, so each answer is kept with the hash of the text it
    was found for and used for that text only. No text is held (forgetting a record
    leaves none of it here)."""

    def __init__(self, held: int = ASKS_ONLY_HELD) -> None:
        self.held = held
        self._known: dict[str, tuple[Optional[str], int, bool]] = {}

    def __call__(self, record_id: str, role: Optional[str], text: str) -> bool:
        """Whether the record ``record_id`` (of ``role`` and ``text``) only asks."""
        digest = hash(text)
        known = self._known.get(record_id)
        if known is not None and known[0] == role and known[1] == digest:
            return known[2]
        answer = role == "user" and is_question(text)
        if len(self._known) >= self.held:
            # The oldest first (dicts keep insertion order); another thread may have
            # taken it meanwhile.
            self._known.pop(next(iter(self._known), ""), None)
        self._known[record_id] = (role, digest, answer)
        return answer


class RecordReads:
    """Records of one user and source by id, read from ``store`` at most once each.

    Args:
        store: the system of record.
        scope: whose records (the store checks the user, as on every read).
        source: the source's name.
        asks_only: remembers which records only ask (the source keeps one across its
            retrievals); a new one when not given.
    """

    def __init__(
        self, store: RecordStore, scope: Scope, source: str, asks_only: Optional[AsksOnlyCache] = None
    ) -> None:
        self.store = store
        self.scope = scope
        self.source = source
        self.asks_only = asks_only if asks_only is not None else AsksOnlyCache()
        self._rows: dict[str, MemoryRecord] = {}
        self._lines: dict[str, tuple[Optional[str], str]] = {}  # (role, text) read light
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

    def lines(self, ids: Sequence[str]) -> dict[str, tuple[Optional[str], str]]:
        """The (role, text) of each record of ``ids`` that exists (expired or not, as
        :meth:`get` without ``alive_at``), in the order of ``ids``; the ids not read
        before are read light."""
        unread = [
            i for i in dict.fromkeys(ids) if i not in self._rows and i not in self._lines and i not in self._missing
        ]
        if unread:
            rows = self.store.get_texts(unread, self.scope, self.source)
            self._lines.update(rows)
            self._missing.update(i for i in unread if i not in rows)
        found: dict[str, tuple[Optional[str], str]] = {}
        for i in ids:
            if i in self._lines:
                found[i] = self._lines[i]
            elif i in self._rows:
                found[i] = (self._rows[i].role, self._rows[i].text)
        return found

    def texts(self, ids: Sequence[str]) -> dict[str, str]:
        """The text of each record of ``ids`` that exists (read as :meth:`lines` reads)."""
        return {i: text for i, (_, text) in self.lines(ids).items()}

    def questions(self, ids: Sequence[str]) -> dict[str, tuple[str, bool]]:
        """The text of each record of ``ids`` that exists (read as :meth:`lines` reads),
        and whether it is only the user's own questions
        (:func:`~llama_memory.relevance.asks_only`)."""
        return {i: (text, self.asks_only(i, role, text)) for i, (role, text) in self.lines(ids).items()}
