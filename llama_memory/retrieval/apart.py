"""The candidates of one retrieval: which are set apart from the ranking of statements,
and each record read from the store once (docs/architecture.md, "The path of one get()").

The conversation's own messages (an agent stores the user's message before it asks) are
left out by every search, by id (:class:`WindowIds`: a hash of text and role), so a
search's cost does not grow with the window; the user's earlier questions state nothing
and rank after every statement (:func:`take_beside`). :class:`RecordReads` reads each
record once per retrieval, the role and text alone where that is enough, applying expiry
itself (docs/benchmarks.md: "The agent flow and earlier questions in retrieval", "Speed
back", "The second hop's cost, third round").
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from functools import lru_cache
from itertools import islice
from typing import Optional

from ..core.text import normalize_text
from ..core.types import MemoryRecord, Scope, is_alive
from ..storage.sql.records import RecordStore
from .relevance import content_stems, content_words, is_users_question, stem

Ranking = list[tuple[str, float]]

#: How many window texts :class:`WindowIds` holds the ids of (a few windows' worth).
IDS_HELD = 4096


class SetApart:
    """Picks the candidates to set apart among ids, reading their texts through ``reads``;
    remembers which were the window's own messages (:attr:`own`), those whose normalised
    text is in ``shown``. ``window_ids``: the ids of the window's records by text
    (:class:`WindowIds`), which every search leaves out itself (:attr:`excluded`).
    """

    def __init__(
        self, reads: RecordReads, shown: frozenset[str], window_ids: Optional[Mapping[str, tuple[str, ...]]] = None,
        share: float = 0.0
    ) -> None:
        self.reads = reads
        self.shown = shown
        self.window_ids = window_ids or {}
        self.excluded = frozenset(i for ids in self.window_ids.values() for i in ids)
        #: The share of a search's hits expected to be set apart (the last retrieval's),
        #: read further to begin with (:meth:`spare`): it changes how often a ranking is
        #: read, never what it gives.
        self.share = share
        self.own: set[str] = set()
        self._decided: set[str] = set()  # every id decided (the searches overlap)
        self._apart: set[str] = set()  # those set apart

    def __call__(self, ids: Sequence[str]) -> set[str]:
        """The ids of ``ids`` that are the window's own messages or only the user's own
        questions."""
        decided, picked = self._decided, self._apart
        new = [i for i in ids if i not in decided]
        if new:
            shown = self.shown
            for i, (_, text, only_asks) in self.reads.lines(new).items():
                if shown and normalised(text) in shown:
                    self.own.add(i)
                    picked.add(i)
                elif only_asks:
                    picked.add(i)
            decided.update(new)  # those not found too: no record to set apart
        # Most calls ask again about hits decided already (a ranking read further).
        return picked.intersection(ids)

    def spare(self, count: int) -> int:
        """How many more than ``count`` hits to read of a ranking to begin with, at the
        :attr:`share` expected to be set apart (at most three times ``count``)."""
        if self.share <= 0:
            return 0
        return min(math.ceil(count * self.share / max(1.0 - self.share, 0.25)), 3 * count)

    def note(self, pool: int, aside: int) -> float:
        """Set :attr:`share` from a search of ``pool`` others that set ``aside`` apart
        (before its ``pool``-th other); return it."""
        self.share = aside / (aside + pool) if pool > 0 else 0.0
        return self.share

    def own_texts(self, query: str) -> list[str]:
        """The stored texts of the window's records that hold a content word of ``query``,
        in a stable order: those the store's word counts must not count for it."""
        wanted = {stem(w) for w in content_words(query)}
        if not wanted:
            return []
        # Only the records of a window text that holds such a word are read.
        ids = {i for text, held in self.window_ids.items() if wanted & content_stems(text) for i in held}
        texts = self.reads.texts(sorted(ids | self.own)).values()
        return [t for t in texts if wanted & content_stems(t)]


class WindowIds:
    """The ids of the records a window's texts are, or would be, stored as by ``source``
    (one per role it stores), held by text for the last :data:`IDS_HELD` texts: the window
    changes by a message or two from one ``get()`` to the next."""

    def __init__(self, store: RecordStore, source: str, roles: Iterable[Optional[str]]) -> None:
        self.store = store
        self.source = source
        self.roles = sorted(roles, key=lambda role: role or "")
        self._held: OrderedDict[tuple[str, str, str], tuple[str, ...]] = OrderedDict()

    def __call__(self, shown: Collection[str], scope: Scope) -> dict[str, tuple[str, ...]]:
        """The ids of the records of each normalised text of ``shown``, for the scope's user."""
        owner = (scope.tenant_id, scope.require_user(f"the {self.source!r} memory source"))
        held = self._held
        ids: dict[str, tuple[str, ...]] = {}
        missing: list[str] = []
        for text in shown:
            known = held.get((*owner, text))
            if known is None:
                missing.append(text)
            else:
                ids[text] = known
        if missing:
            made = self.store.record_ids(missing, self.roles, scope, self.source)
            width = len(self.roles)
            for n, text in enumerate(missing):
                ids[text] = held[(*owner, text)] = tuple(made[n * width : (n + 1) * width])
            while len(held) > IDS_HELD:
                held.popitem(last=False)  # the oldest first
        return ids

    def clear(self) -> None:
        """Hold nothing (records were forgotten: no text of theirs stays held here)."""
        self._held.clear()


#: A search of a retrieval: its best ``n`` hits, the ids of ``exclude`` left out.
Search = Callable[[int, Collection[str]], Ranking]
#: A retriever's hits, best first, read as far as needed.
Hits = Iterator[tuple[str, float]]


def grown(search: Search, exclude: Collection[str], first: int) -> Hits:
    """The hits of a search that can only be asked for a count, as a stream: ``first``,
    then four times as many each time the reader gets past them (each hit given once: an
    approximate index may reorder them a little)."""
    count, given = max(first, 1), set()
    while True:
        hits = search(count, exclude)
        for i, score in hits:
            if i not in given:
                given.add(i)
                yield i, score
        if len(hits) < count:
            return
        count *= 4


def more_needed(count: int, read: int, aside: int) -> int:
    """How many more hits to read when ``read`` hits held ``aside`` set apart and fewer
    than ``count`` others: as many as that share says (at most four times ``read``: a
    share measured on a few hits is rough)."""
    others = read - aside
    wanted = 4 * read if others <= 0 else min(math.ceil(count * read / others), 4 * read)
    return max(wanted, count + aside) - read


def take_beside(hits: Hits, apart: Callable[[Sequence[str]], set[str]], count: int, first: int) -> tuple[Ranking, set[str]]:
    """The head of ``hits`` up to its ``count``-th hit that ``apart`` does not set apart,
    and the ids set apart in it; read ``first`` at a time, then as :func:`more_needed`
    says. The head is the same however far the hits were read."""
    kept: Ranking = []
    aside: set[str] = set()
    others = read = 0
    want = max(first, count, 1)
    while others < count:
        batch = list(islice(hits, want))
        if not batch:
            break
        marked = apart([i for i, _ in batch])
        read += len(batch)
        for item in batch:
            if others >= count:
                break
            kept.append(item)
            if item[0] in marked:
                aside.add(item[0])
            else:
                others += 1
        if len(batch) < want:
            break
        want = more_needed(count, read, len(aside))
    return kept, aside


def search_beside(hits: Hits, apart: SetApart, count: int, first: int) -> Ranking:
    """The best ``count`` of ``hits`` not set apart, read as far as needed."""
    kept, aside = take_beside(hits, apart, count, first)
    return [(i, s) for i, s in kept if i not in aside]


#: How many records :class:`KnownLines` holds (a few retrievals' candidates).
LINES_HELD = 8192


@lru_cache(maxsize=LINES_HELD)
def normalised(text: str) -> str:
    """:func:`~llama_memory.core.text.normalize_text`, held for the last :data:`LINES_HELD`
    texts: the same candidates are checked against the window in each retrieval."""
    return normalize_text(text)


#: A record's role, text, and whether it is only the user's own questions
#: (:func:`~llama_memory.retrieval.relevance.asks_only` of a single message).
Line = tuple[Optional[str], str, bool]


class KnownLines:
    """The :data:`Line` of records by id, kept across retrievals for the last
    :data:`LINES_HELD` records read: an id is its content's hash, so its line never
    changes. It is no proof a record exists (:meth:`RecordReads.get` still reads the
    store); a source that forgets records calls :meth:`clear`."""

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
        """Hold nothing (records were forgotten), nor their normalised texts."""
        self._known.clear()
        normalised.cache_clear()


class RecordReads:
    """Records of one user and source by id, read from ``store`` at most once each;
    ``known``: the lines read before, kept by the source across retrievals."""

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
        """The records of ``ids`` that exist (and are alive at ``alive_at`` when given);
        only the ids not asked for before are read from the store."""
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
        """The :data:`Line` of each record of ``ids`` that exists (expired or not), in
        order; the ids neither read nor held are read light (role and text only)."""
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
        """The text of each record of ``ids`` that exists, and whether it is only the
        user's own questions."""
        return {i: (line[1], line[2]) for i, line in self.lines(ids).items()}
