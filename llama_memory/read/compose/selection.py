"""What the block shows: each fact once and nothing the window shows already, then the
block fitted to its token budget (instructions first, records while they fit, a note on
what was left out)."""

from __future__ import annotations

import threading
import weakref
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Optional

from llama_index.core.base.llms.types import ChatMessage

from ...core.messages import message_text
from ...core.text import normalize_text
from ...core.types import MemoryRecord
from ...retrieval.excerpts import hit_of, without
from ..same_fact import MIN_SHARED, Relation, is_profile, relate, stated_at, statement
from .block import (
    CUT_TO_FIT,
    DUPLICATE,
    NO_ROOM,
    OVER_BUDGET,
    SUMMARISED,
    LeftOut,
    MemoryBlock,
    admission,
    is_summary,
    left_out_note,
    render_block,
    render_item,
)


def deduplicate(
    records: Iterable[MemoryRecord], already_shown: Iterable[str] = (), left_out: Optional[list[LeftOut]] = None
) -> tuple[list[MemoryRecord], int]:
    """Drop records whose normalised text is in ``already_shown`` or came earlier (an
    excerpt loses only the parts shown), then show each fact once across sources
    (:func:`merge_near_duplicates`). Returns the kept records and how many were dropped,
    appended to ``left_out`` when given."""
    window = {normalize_text(t) for t in already_shown}
    seen = set(window)
    kept: list[MemoryRecord] = []
    dropped = 0
    for record in records:
        left = without(record, lambda part: normalize_text(part.text) in seen)
        key = normalize_text(left.text) if left is not None else ""
        if left is None or key in seen:
            dropped += 1
            if left_out is not None:
                in_window = all(normalize_text(p.text) in window for p in record.parts or [record])
                where = "the conversation window shows it" if in_window else "repeats an earlier record"
                left_out.append(LeftOut(record, DUPLICATE, detail=f"already shown: {where}"))
            continue
        seen.add(key)
        seen.update(normalize_text(p.text) for p in left.parts)
        kept.append(left)
    merged, near = merge_near_duplicates(kept, left_out)
    return merged, dropped + near


def merge_near_duplicates(
    records: Sequence[MemoryRecord], left_out: Optional[list[LeftOut]] = None
) -> tuple[list[MemoryRecord], int]:
    """Show each fact once across sources, and no fact less
    (:func:`~llama_memory.read.same_fact.relate`, an excerpt message by message): one is
    left out only when the other states all it does, never a profile field, its
    provenance kept in the keeper's ``metadata["also_in"]``. Conflicts are both shown,
    the newer first, each marked (``metadata["conflicts_with"]``). Records of one source
    are not compared. Returns the records and how many were left out (appended to
    ``left_out`` as :data:`DUPLICATE` when given)."""
    units = [(i, part) for i, r in enumerate(records) for part in (r.parts or [r])]
    if len({r.source for r in records}) < 2:
        return list(records), 0
    found = [statement(part) for _, part in units]
    gone: set[int] = set()  # indexes into units
    keeper_of: dict[int, list[MemoryRecord]] = {}
    duplicate_of: dict[int, int] = {}  # unit left out -> the unit that states it all
    conflicts: list[tuple[int, int]] = []
    for a in range(len(units)):
        if a in gone or len(found[a].words) < MIN_SHARED:
            continue
        for b in range(a + 1, len(units)):
            if b in gone or units[a][1].source == units[b][1].source:
                continue
            relation = relate(found[a], found[b])
            if relation is Relation.CONFLICT:
                conflicts.append((a, b))
                continue
            drop = _left_out_of(units[a][1], units[b][1], relation)
            if drop is None:
                continue
            keep, drop = (b, a) if drop == 0 else (a, b)
            gone.add(drop)
            duplicate_of[drop] = keep
            keeper_of.setdefault(keep, []).append(units[drop][1])
            if drop == a:
                break
    conflicts = [(a, b) for a, b in conflicts if a not in gone and b not in gone]
    if not gone and not conflicts:
        return list(records), 0
    dropped_parts = {id(units[u][1]): units[duplicate_of[u]][1] for u in gone}
    marks = _conflict_marks(units, conflicts)
    out: list[MemoryRecord] = []
    position: dict[int, int] = {}  # index in records -> index in out
    count = 0
    for i, record in enumerate(records):
        left = without(record, lambda part: id(part) in dropped_parts)
        if left is None:
            count += 1
            if left_out is not None:
                left_out.append(LeftOut(record, DUPLICATE, other=dropped_parts[id(record)]))
            continue
        for part in record.parts:
            if id(part) in dropped_parts:
                count += 1
                if left_out is not None:
                    left_out.append(LeftOut(part, DUPLICATE, other=dropped_parts[id(part)]))
        for u, others in keeper_of.items():
            if units[u][0] == i and u not in gone:
                also = left.metadata.setdefault("also_in", [])
                also.extend(_provenance(o) for o in others)
        if i in marks:
            left = replace(left, metadata={**left.metadata, "conflicts_with": marks[i]})
        position[i] = len(out)
        out.append(left)
    return _newer_first(out, position, units, conflicts), count


def _left_out_of(first: MemoryRecord, second: MemoryRecord, relation: Relation) -> Optional[int]:
    """Which of two records (0 or 1) is left out for the other, or None."""
    if relation is Relation.SAME:
        if is_profile(first):
            return None if is_profile(second) else 1
        return 0 if is_profile(second) else 1
    if relation is Relation.FIRST_COVERS:
        return None if is_profile(second) else 1
    if relation is Relation.SECOND_COVERS:
        return None if is_profile(first) else 0
    return None


def _conflict_marks(
    units: Sequence[tuple[int, MemoryRecord]], conflicts: Sequence[tuple[int, int]]
) -> dict[int, list[dict[str, object]]]:
    """For each record (its index) in a conflict: what it conflicts with, and whether it
    is the newer (None when not known)."""
    marks: dict[int, list[dict[str, object]]] = {}
    for a, b in conflicts:
        first, second = units[a][1], units[b][1]
        when_a, when_b = stated_at(first), stated_at(second)
        newer = None if when_a is None or when_b is None or when_a == when_b else when_a > when_b
        marks.setdefault(units[a][0], []).append({**_provenance(second), "newer": newer})
        marks.setdefault(units[b][0], []).append(
            {**_provenance(first), "newer": None if newer is None else not newer}
        )
    return marks


def _newer_first(
    out: list[MemoryRecord], position: dict[int, int], units: Sequence[tuple[int, MemoryRecord]],
    conflicts: Sequence[tuple[int, int]]
) -> list[MemoryRecord]:
    """``out`` with the newer of each conflicting pair moved just before the older."""
    order = list(out)
    for a, b in conflicts:
        i, j = units[a][0], units[b][0]
        if i == j or i not in position or j not in position:
            continue
        when_a, when_b = stated_at(units[a][1]), stated_at(units[b][1])
        if when_a is None or when_b is None or when_b <= when_a:
            continue  # the earlier in order is the newer already (or no one knows)
        newer, older = out[position[j]], out[position[i]]
        at_newer = next(n for n, r in enumerate(order) if r is newer)
        at_older = next(n for n, r in enumerate(order) if r is older)
        if at_newer > at_older:
            order.insert(at_older, order.pop(at_newer))
    return order


def _provenance(record: MemoryRecord) -> dict[str, object]:
    """What is kept of a near-duplicate left out in favour of another record."""
    return {"source": record.source, "id": record.id, "text": record.text,
            "message_ids": list(record.message_ids)}


def window_texts(window: Sequence[ChatMessage]) -> list[str]:
    """The texts of the window's messages, as :func:`deduplicate` compares them."""
    return [_window_text(m) for m in window]


#: Texts of recent window messages by id(message), with a weak reference (a dead one's id
#: may be reused) and the id of its blocks list (content set anew no longer matches). The
#: same window comes back on every get(), and reading its texts again cost more than the
#: rest of composing the block.
_WINDOW_TEXTS: OrderedDict[int, tuple[weakref.ref, int, str]] = OrderedDict()
_WINDOW_TEXTS_KEPT = 4096
_window_lock = threading.Lock()


def _window_text(message: ChatMessage) -> str:
    key = id(message)
    with _window_lock:
        cached = _WINDOW_TEXTS.get(key)
        if cached is not None and cached[0]() is message and cached[1] == id(message.blocks):
            return cached[2]
    text = message_text(message)
    with _window_lock:
        _WINDOW_TEXTS[key] = (weakref.ref(message), id(message.blocks), text)
        _WINDOW_TEXTS.move_to_end(key)
        while len(_WINDOW_TEXTS) > _WINDOW_TEXTS_KEPT:
            _WINDOW_TEXTS.popitem(last=False)
    return text


Tokenizer = Callable[[str], Sequence]


def covered_by_summaries(records: Sequence[MemoryRecord]) -> list[MemoryRecord]:
    """The turns whose every message a session summary among ``records`` covers."""
    covered = {m for r in records if is_summary(r) for m in r.message_ids}
    if not covered:
        return []
    return [
        r for r in records
        if r.is_turn and not is_summary(r) and r.message_ids and set(r.message_ids) <= covered
    ]


def block_from_records(
    records: Sequence[MemoryRecord], *, window: Sequence[ChatMessage], token_limit: int, tokenizer: Tokenizer,
    session_id: Optional[str] = None
) -> MemoryBlock:
    """Build the memory block from ranked records within ``token_limit`` tokens: those
    the ``window`` shows or that repeat an earlier record dropped, the rest added in
    order while they fit; records of the conversation ``session_id`` labelled so."""
    left_out: list[LeftOut] = []
    kept, duplicates = deduplicate(records, window_texts(window), left_out)
    return fit_block(
        kept, token_limit=token_limit, tokenizer=tokenizer, duplicates=duplicates,
        session_id=session_id, left_out=left_out,
    )  # fmt: skip


def fit_block(
    kept: Sequence[MemoryRecord],
    *,
    token_limit: int,
    tokenizer: Tokenizer,
    duplicates: int = 0,
    session_id: Optional[str] = None,
    left_out: Sequence[LeftOut] = (),
    instructions: Sequence[str] = (),
    since: Optional[float] = None,
) -> MemoryBlock:
    """The block of deduplicated records, in order, within ``token_limit`` tokens;
    ``duplicates`` and ``left_out`` report what deduplication dropped. Records of the
    conversation ``session_id`` (stored since ``since``) are labelled so.
    ``instructions`` come first and are never cut, even past the whole budget."""
    result = MemoryBlock(
        token_limit=token_limit, dropped_duplicates=duplicates, left_out=list(left_out),
        instructions=list(instructions),
    )  # fmt: skip
    no_room = f"{NO_ROOM} ({token_limit} tokens)"
    if not kept or token_limit <= 0:
        result.left_out.extend(LeftOut(record, OVER_BUDGET, detail=no_room) for record in kept)
        return _instructions_only(result, tokenizer)
    every_line = [render_item(record, session_id, since) for record in kept]
    text = render_block(every_line, instructions)
    # When everything fits, one count of the whole block is all it costs. A block far
    # longer than the budget is not counted whole: the lines are counted anyway below.
    if len(text) <= _CHARS_PER_TOKEN_OVER * token_limit:
        count = len(tokenizer(text))
        if count <= token_limit:
            result.text, result.token_count, result.records = text, count, list(kept)
            result.admitted = [admission(r) for r in kept]
            return result
    # Tight: a session summary stands in for the excerpts it covers (fewer tokens for
    # the same session), before anything is cut for the budget.
    standing_in = covered_by_summaries(kept)
    if standing_in:
        gone = {id(r) for r in standing_in}
        result.left_out.extend(LeftOut(r, SUMMARISED) for r in standing_in)
        pairs = [(r, line) for r, line in zip(kept, every_line) if id(r) not in gone]
        kept, every_line = [r for r, _ in pairs], [line for _, line in pairs]
        text = render_block(every_line, instructions)
        count = len(tokenizer(text))
        if count <= token_limit:
            result.text, result.token_count, result.records = text, count, list(kept)
            result.admitted = [admission(r) for r in kept]
            return result
    # The block's frame, instructions included (the records' intro too, hence [""]).
    frame = render_block([""], instructions) if instructions else render_block([])
    budget = token_limit - _line_tokens(tokenizer, frame)
    # Lines after the first leave room for the note on what was left out, so that adding
    # it seldom forces a line out again (each try counts the whole block).
    note = left_out_note(Counter({record.source: 999 for record in kept}))
    note_room = _line_tokens(tokenizer, note[0]) + 1
    lines: list[str] = []
    dropped: Counter = Counter()  # by source, for the note that says what was left out
    shown_from: list[MemoryRecord] = []  # the retrieved record behind each line
    for record, whole in zip(kept, every_line):
        for candidate, line in _renderings(record, whole, session_id, since):
            cost = _line_tokens(tokenizer, line) + 1  # +1 for the joining newline
            if cost <= budget - (note_room if lines else 0):
                lines.append(line)
                result.records.append(candidate)
                shown_from.append(record)
                budget -= cost
                # The messages cut from an excerpt are left out too, and said so.
                dropped[record.source] += _size(record) - _size(candidate)
                break
        else:
            dropped[record.source] += _size(record)
            result.left_out.append(LeftOut(record, OVER_BUDGET, detail=no_room))
    # Token counts of parts need not add up to the count of the whole, and the note
    # needs room: check the whole, note included, and drop from the end until it fits.
    while lines:
        text = render_block(lines + left_out_note(dropped), instructions)
        count = len(tokenizer(text))
        if count > token_limit and len(lines) == 1:
            # The last record that fits is worth more than the note.
            text = render_block(lines, instructions)
            count = len(tokenizer(text))
        if count <= token_limit:
            result.text, result.token_count = text, count
            break
        lines.pop()
        last = result.records.pop()
        dropped[last.source] += _size(last)
        result.left_out.append(LeftOut(shown_from.pop(), OVER_BUDGET, detail=no_room))
    result.left_out.extend(
        LeftOut(record, CUT_TO_FIT) for record, shown in zip(shown_from, result.records) if shown is not record
    )
    result.dropped_for_budget = sum(dropped.values())
    result.admitted = [
        admission(record) + ("" if shown is record else "; cut to its best message for the budget")
        for record, shown in zip(shown_from, result.records)
    ]
    return result if lines else _instructions_only(result, tokenizer)


def _instructions_only(result: MemoryBlock, tokenizer: Tokenizer) -> MemoryBlock:
    """``result`` (a block without records) showing its instructions, if any."""
    if result.instructions:
        result.text = render_block([], result.instructions)
        result.token_count = len(tokenizer(result.text))
    return result


#: Above this many characters per token of the budget a block is taken to be over it
#: (English runs about 4 characters per token in cl100k); a wrong guess costs one count.
_CHARS_PER_TOKEN_OVER = 4.5


def _renderings(
    record: MemoryRecord, line: str, session_id: Optional[str], since: Optional[float] = None
) -> Iterator[tuple[MemoryRecord, str]]:
    """A record with its rendered ``line``, then for an excerpt its hit (rendered only
    if asked for)."""
    yield record, line
    if record.parts:
        hit = hit_of(record)
        yield hit, render_item(hit, session_id, since)


def _size(record: MemoryRecord) -> int:
    """How many stored records a block item stands for (an excerpt: its messages)."""
    return len(record.parts) or 1


@lru_cache(maxsize=4096)
def _line_tokens(tokenizer: Tokenizer, line: str) -> int:
    # The same records come back turn after turn: count each rendered line once.
    return len(tokenizer(line))
