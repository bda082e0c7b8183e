"""Excerpts: the best-scored messages of a search grouped with their session neighbours
(the evidence is often split over a question and its reply), and how many a question
gets (docs/concepts.md, "Retrieval").

A question that asks for a set (:func:`asks_for_a_set`, by its words alone: true for 82
of LoCoMo's 142 dev multi-hop questions and 28 of 418 single-hop ones) gets
:data:`SET_SPREAD` times the records (:func:`records_for`): of the multi-hop evidence
turns the block missed, 31 of 184 ranked 10th to 29th. More but shorter excerpts lost
recall: the neighbouring turns are often the evidence (docs/benchmarks.md, "Multi-hop,
third round").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import NamedTuple, Optional

from ..core.types import MemoryRecord

#: A question that asks for a set gets this many times the records of another, chosen
#: leave-one-conversation-out on LoCoMo (three folds of five chose 1.3, two 1.5)
#: (``python -m bench.multihop --weights 0.5 --set-spreads 1,1.2,1.3,1.4,1.5,1.7``).
SET_SPREAD = 1.3

# Verbs that follow "what"/"which" and end like a plural ("what does", "what has").
_AUXILIARIES = frozenset(
    "does do did has have had is are was were will would can could should may might".split()
)
_KIND_OF = frozenset("kind kinds type types sort sorts".split())
# Phrases that ask for a set whatever follows.
_SET_PHRASES = re.compile(
    r"\bhow many\b|\bboth\b|\bin what ways\b|^what (?:has|have) \w+ (?:\w+ )?\w+ed\b"
)
_WORD = re.compile(r"[\w']+", re.UNICODE)


def _plural(word: str) -> bool:
    """Whether a word looks like a plural noun (not an auxiliary, not "-ss"/"-us"/"-is")."""
    return word not in _AUXILIARIES and (
        word.endswith("ies") or (word.endswith("s") and not word.endswith(("ss", "us", "is", "'s")))
    )


def asks_for_a_set(question: str) -> bool:
    """Whether ``question`` asks for several things gathered from the history ("What
    activities does Melanie partake in?", "how many", "both", "in what ways"), rather
    than for one ("What is Caroline's identity?")."""
    if not isinstance(question, str):
        raise TypeError(f"asks_for_a_set() takes the question as a str, not {type(question).__name__}")
    found = _WORD.findall(question.casefold())
    if _SET_PHRASES.search(" ".join(found)):
        return True
    if not found or found[0] not in ("what", "which"):
        return False
    rest = found[1:]
    if len(rest) >= 2 and rest[0] in _KIND_OF and rest[1] == "of":
        rest = rest[2:]
    if not rest or rest[0] in _AUXILIARIES:
        return False
    # "what outdoor activities has ...": the plural noun may follow an adjective when an
    # auxiliary comes next ("which activity helps Nate" is no set: "helps" is a verb).
    return _plural(rest[0]) or (len(rest) >= 3 and _plural(rest[1]) and rest[2] in _AUXILIARIES)


def records_for(question: str, k: int, spread: float = SET_SPREAD) -> int:
    """How many records to retrieve for ``question`` when the memory shows ``k`` per
    source: ``round(k * spread)`` for a question that asks for a set, ``k`` otherwise."""
    if not spread >= 1:
        raise ValueError(
            f"the set spread (a memory's set_spread) is 1 (no more records for a question that "
            f"asks for a set) or more, got {spread}"
        )
    if k <= 0 or spread == 1 or not asks_for_a_set(question):
        return k
    return max(k, round(k * spread))


#: Messages from an excerpt that a new hit may be and still join it (1: adjacent only).
JOIN_GAP = 2

#: At most this many characters of a neighbour are shown in the excerpt's text (about 250
#: tokens): a pasted document next to a hit would otherwise make a search result of
#: megabytes and an excerpt that never fits a block.
NEIGHBOUR_CHARS = 1000

#: What stands for the characters cut from a neighbour (``{n}``: how many).
CUT_MARKER = "[… {n:,} more characters …]"


class Positioned(NamedTuple):
    """A record id and its position in its session (any number that orders it)."""

    position: int
    record_id: str


Neighbourhood = Sequence[Positioned]
"""A hit's session neighbours in order, the hit included (at most ``gap`` on each side)."""

Neighbourhoods = Callable[[Sequence[str]], Mapping[str, Sequence[tuple[int, str]]]]
"""Gives, for record ids, each one's neighbourhood as (position, record id) pairs in
order; ids it leaves out are skipped."""


@dataclass
class Excerpt:
    """A run of consecutive messages of one session.

    Attributes:
        members: the messages' ids with their positions, in conversation order.
        hit: the id of the best-scored message, which started the excerpt.
        score: the fused score of ``hit``.
    """

    members: list[Positioned]
    hit: str
    score: float
    _ids: set[str] = field(default_factory=set, repr=False)

    def __post_init__(self) -> None:
        self._ids = {m.record_id for m in self.members}

    def __contains__(self, record_id: object) -> bool:
        return record_id in self._ids

    @property
    def record_ids(self) -> list[str]:
        """The messages' record ids, in conversation order."""
        return [m.record_id for m in self.members]

    def add(self, members: Sequence[Positioned]) -> int:
        """Add messages (contiguous with this excerpt); return how many were new."""
        new = [m for m in members if m.record_id not in self._ids]
        self.members = sorted([*self.members, *new], key=lambda m: m.position)
        self._ids.update(m.record_id for m in new)
        return len(new)

    def as_record(self, records: Mapping[str, MemoryRecord]) -> Optional[MemoryRecord]:
        """The excerpt as one record (:func:`join_parts`), from its messages' records
        by id; None when the hit's record is missing (deleted meanwhile)."""
        hit = records.get(self.hit)
        if hit is None:
            return None
        hit.score = self.score
        return join_parts([records[i] for i in self.record_ids if i in records], hit)


def join_parts(
    parts: Sequence[MemoryRecord], hit: MemoryRecord, omitted_before: Optional[Mapping[str, int]] = None
) -> MemoryRecord:
    """One record for consecutive message records (``hit`` itself when alone): one
    ``role: text`` line per part (neighbours cut by :func:`neighbour_text`), all their
    ``message_ids``, the parts whole in ``parts``, the hit's score, time, scope and id
    (``metadata["hit"]`` names it). ``omitted_before`` (part id -> messages left out just
    before it) adds :data:`GAP_MARKER` lines: two lines that did not follow each other
    never read as one turn answering the other.
    """
    if len(parts) <= 1:
        return hit
    gaps = {k: n for k, n in (omitted_before or {}).items() if n > 0}
    lines: list[str] = []
    seen_hit = False
    for position, part in enumerate(parts):
        if position and part.id in gaps:
            lines.append(gap_line(gaps[part.id]))
        if part is hit:
            seen_hit = True
            lines.append(part.transcript)
        else:
            text = neighbour_text(part.text, keep_end=not seen_hit)
            lines.append(f"{part.role}: {text}" if part.role else text)
    metadata: dict[str, object] = {"hit": hit.id}
    if gaps:
        metadata["omitted_before"] = gaps
    return MemoryRecord(
        text="\n".join(lines), score=hit.score, source=hit.source, user_id=hit.user_id,
        session_id=hit.session_id, message_ids=[m for r in parts for m in r.message_ids],
        event_time=hit.event_time, ingested_at=hit.ingested_at, role=None, id=hit.id,
        metadata=metadata, expires_at=hit.expires_at, parts=list(parts),
    )


def neighbour_text(text: str, keep_end: bool = False) -> str:
    """``text`` as an excerpt shows a neighbour: up to :data:`NEIGHBOUR_CHARS`
    characters, :data:`CUT_MARKER` for the rest; ``keep_end`` keeps the end (a neighbour
    before the hit is context for it by its end)."""
    if len(text) <= NEIGHBOUR_CHARS:
        return text
    marker = CUT_MARKER.format(n=len(text) - NEIGHBOUR_CHARS)
    if keep_end:
        return f"{marker} {text[-NEIGHBOUR_CHARS:]}"
    return f"{text[:NEIGHBOUR_CHARS]} {marker}"


#: The line that stands in an excerpt for messages left out of it (``{n}``: how many).
GAP_MARKER = "[… {n} {messages} left out here: already in this prompt …]"


def gap_line(n: int) -> str:
    """The :data:`GAP_MARKER` line for ``n`` left-out messages."""
    return GAP_MARKER.format(n=n, messages="message" if n == 1 else "messages")


def hit_of(record: MemoryRecord) -> MemoryRecord:
    """The part that made an excerpt (the record itself for a plain record)."""
    hit = record.metadata.get("hit")
    return next((p for p in record.parts if p.id == hit), record)


def without(record: MemoryRecord, unwanted: Callable[[MemoryRecord], bool]) -> Optional[MemoryRecord]:
    """An excerpt without the parts ``unwanted`` selects (None if nothing is left); a
    plain record is kept or dropped whole. A dropped hit's place goes to the best
    remaining part; parts left out between two kept ones leave a gap marker."""
    if not record.parts:
        return None if unwanted(record) else record
    kept = [p for p in record.parts if not unwanted(p)]
    if len(kept) == len(record.parts):
        return record
    if not kept:
        return None
    earlier: Mapping[str, int] = record.metadata.get("omitted_before", {})
    omitted_before: dict[str, int] = {}
    run = 0  # messages left out since the last kept part
    for part in record.parts:
        run += earlier.get(part.id or "", 0)
        if unwanted(part):
            run += 1
            continue
        if run and part is not kept[0]:
            omitted_before[part.id or ""] = run
        run = 0
    hit = hit_of(record)
    if hit not in kept:
        # The best remaining part stands in for the hit: it was a neighbour, and is
        # shown as one (cut as the excerpt's text showed it) wherever the hit is shown.
        stand_in = kept[0]
        before = _position(record.parts, stand_in) < _position(record.parts, hit)
        hit = replace(stand_in, text=neighbour_text(stand_in.text, keep_end=before))
        kept[0] = hit
    hit.score = record.score
    return join_parts(kept, hit, omitted_before)


def _position(parts: Sequence[MemoryRecord], part: MemoryRecord) -> int:
    """The index of ``part`` itself (not an equal record) in ``parts``; -1 if absent."""
    return next((i for i, p in enumerate(parts) if p is part), -1)


class WideNeighbourhoods:
    """:data:`Neighbourhoods` of radius ``gap`` for :func:`pack_excerpts` that ``read``
    (``session_neighbours`` of the record port) each hit's session ``2 * gap`` to each
    side, so that a hit near one read already needs no read of its own. The same answers
    as a read of ``gap`` (tests compare), in fewer statements (3.4 to 1.5 a get() at 1M
    records on PostgreSQL: docs/benchmarks.md, "PostgreSQL get() at 1M, fifth round").
    """

    def __init__(
        self, read: Callable[[Sequence[str], int], Mapping[str, Sequence[tuple[int, str]]]], gap: int = JOIN_GAP
    ) -> None:
        self._read = read
        self._gap = gap
        self._reach = 2 * gap
        # Each window read: its rows, and the hit's index in them.
        self._windows: list[tuple[Sequence[tuple[int, str]], int]] = []
        self._where: dict[str, tuple[int, int]] = {}  # record id -> (window, index in it)

    def __call__(self, ids: Sequence[str]) -> dict[str, Sequence[tuple[int, str]]]:
        found = {i: hood for i in ids if (hood := self._cut(i)) is not None}
        missing = [i for i in ids if i not in found]
        if missing:
            for hit, rows in self._read(missing, self._reach).items():
                rows = list(rows)
                at = next(j for j, (_, record_id) in enumerate(rows) if record_id == hit)
                self._windows.append((rows, at))
                window = len(self._windows) - 1
                # Each row is answered from the window it sits deepest in.
                for j, (_, record_id) in enumerate(rows):
                    held = self._where.get(record_id)
                    if held is None or _depth(len(rows), j) > _depth(len(self._windows[held[0]][0]), held[1]):
                        self._where[record_id] = (window, j)
                self._where[hit] = (window, at)
                found[hit] = self._cut(hit) or []
        return found

    def _cut(self, record_id: str) -> Optional[Sequence[tuple[int, str]]]:
        """``record_id``'s neighbourhood if a window read holds it all (or reaches its
        session's edge), else None."""
        place = self._where.get(record_id)
        if place is None:
            return None
        rows, hit = self._windows[place[0]]
        j, gap = place[1], self._gap
        # The read returned fewer rows than it asked for on a side: the session ends there.
        starts_session = hit < self._reach
        ends_session = len(rows) - 1 - hit < self._reach
        if (j - gap < 0 and not starts_session) or (j + gap >= len(rows) and not ends_session):
            return None
        return rows[max(0, j - gap) : j + gap + 1]


def _depth(length: int, index: int) -> int:
    """How many rows lie between ``index`` and the nearer end of a window of ``length``."""
    return min(index, length - 1 - index)


def pack_excerpts(
    ranked: Sequence[tuple[str, float]], neighbourhoods: Neighbourhoods, k: int, max_messages: int, *,
    gap: int = JOIN_GAP
) -> list[Excerpt]:
    """Group ``ranked`` (record id, fused score) into at most ``k`` excerpts, best first
    (in the order their first hit was ranked), walking down it: a message within ``gap``
    messages of an excerpt of its session joins it with the messages between, else starts
    a new one while there are fewer than ``k``; the walk stops at ``max_messages`` (at
    least ``k``), and what is left extends each excerpt, best first, by the message after,
    then before. ``neighbourhoods`` is called ``k`` ids at a time as far as the walk goes,
    then only for hits that could still join.
    """
    if k <= 0 or not ranked:
        return []
    budget = max(max_messages, k)
    hoods: dict[str, Neighbourhood] = {}
    fetched = 0
    excerpts: list[Excerpt] = []
    owner: dict[str, Excerpt] = {}  # which excerpt holds a record id
    near: set[str] = set()  # every id in a looked-up neighbourhood
    used = 0

    def look_up(ids: Sequence[str]) -> None:
        for i, pairs in neighbourhoods(ids).items():
            hoods[i] = [Positioned(*pair) for pair in pairs]
            near.update(p.record_id for p in hoods[i])

    for n, (record_id, score) in enumerate(ranked):
        if used >= budget:
            break
        if len(excerpts) >= k:
            # Only a hit within ``gap`` of an excerpt can still join it, and an excerpt's
            # edges are hits whose neighbourhoods were looked up: a hit in none of them
            # is skipped without a lookup (most of the walk's reads; the same result).
            if record_id not in near or record_id in owner:
                continue
            if record_id not in hoods:  # with those of the next few that could join
                look_up([
                    i for i, _ in ranked[n : n + k]
                    if i in near and i not in hoods and i not in owner
                ])
        elif n >= fetched:  # look the neighbours up a slice at a time: the walk often stops early
            chunk = [i for i, _ in ranked[n : n + k] if i not in hoods]
            look_up(chunk)
            fetched = n + k
        hood = hoods.get(record_id)
        if not hood or record_id in owner:  # gone, or shown already
            continue
        at = _index(hood, record_id)
        nearest = _nearest(owner, hood, at, gap)
        if nearest is not None:
            excerpt, other = nearest
            used += _add(excerpt, hood[min(at, other) : max(at, other) + 1], owner)
        elif len(excerpts) < k:
            excerpts.append(Excerpt([], record_id, score))
            used += _add(excerpts[-1], [hood[at]], owner)
    for after in (True, False):
        for excerpt in excerpts:
            if used >= budget:
                break
            used += _extend(excerpt, owner, hoods, after)
    return excerpts


def _add(excerpt: Excerpt, members: Sequence[Positioned], owner: dict[str, Excerpt]) -> int:
    """Add members to an excerpt and note it as their owner; return how many were new."""
    owner.update((m.record_id, excerpt) for m in members)
    return excerpt.add(members)


def _nearest(
    owner: Mapping[str, Excerpt], hood: Neighbourhood, at: int, gap: int
) -> Optional[tuple[Excerpt, int]]:
    """The excerpt with a member closest to ``hood[at]`` (within ``gap``), and that
    member's index in ``hood``; the earlier neighbour wins a tie."""
    for distance in range(1, gap + 1):
        for index in (at - distance, at + distance):
            if 0 <= index < len(hood) and hood[index].record_id in owner:
                return owner[hood[index].record_id], index
    return None


def _extend(excerpt: Excerpt, owner: dict[str, Excerpt], hoods: Mapping[str, Neighbourhood], after: bool) -> int:
    """Add the message right after (or before) the excerpt if no excerpt holds it."""
    edge = excerpt.members[-1 if after else 0].record_id
    hood = hoods.get(edge)
    if not hood:  # the edge joined as context: its own neighbours were not looked up
        return 0
    j = _index(hood, edge) + (1 if after else -1)
    if not 0 <= j < len(hood) or hood[j].record_id in owner:
        return 0
    return _add(excerpt, [hood[j]], owner)


def _index(hood: Neighbourhood, record_id: str) -> int:
    return next(i for i, m in enumerate(hood) if m.record_id == record_id)
