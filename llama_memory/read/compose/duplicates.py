"""Deduplicating what the sources retrieved: each fact shown once, nothing the
conversation window already shows."""

from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Optional

from llama_index.core.base.llms.types import ChatMessage

from ...core.messages import message_text
from ...core.text import normalize_text
from ...core.types import MemoryRecord
from ...retrieval.excerpts import without
from ..same_fact import MIN_SHARED, Relation, is_profile, relate, stated_at, statement
from .model import DUPLICATE, LeftOut


def deduplicate(
    records: Iterable[MemoryRecord],
    already_shown: Iterable[str] = (),
    left_out: Optional[list[LeftOut]] = None,
) -> tuple[list[MemoryRecord], int]:
    """Drop records whose normalised text is in ``already_shown`` or came earlier, then
    show each fact once across sources (:func:`merge_near_duplicates`).

    An excerpt (a record with ``parts``) loses only the parts already shown, and is
    dropped when none is left. Returns the kept records and how many were dropped;
    the dropped records are appended to ``left_out`` when one is given.
    """
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
    """Show each fact once across sources, and no fact less: when a profile field, a
    triple or a past message (an excerpt's messages one by one) state the same thing
    (:func:`~llama_memory.read.same_fact.relate`), one is left out only when the other states
    everything it does (every content word, number, name and date, stemmed; the same
    polarity). The one kept is the one that says more (the earlier of two that say the
    same), except that a profile field is never the one left out. The provenance of what
    was left out is kept on the record that stands for it, in ``metadata["also_in"]``
    (source, id, text, message ids).

    Two records about the same thing that differ are both shown; when the thing holds
    one value at a time (a profile field, a functional triple) or one negates the other,
    as a conflict: the newer first, each marked (``metadata["conflicts_with"]``,
    rendered by :func:`~llama_memory.read.compose.render.render_item`) so the LLM can ask the
    user which holds. Records of one source are not compared with each other (exact
    duplicates are gone already). Returns the
    records and how many were left out; what was left out (a record, or an excerpt's
    message) is appended to ``left_out`` as a :data:`DUPLICATE` when one is given."""
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
    """Which of two records (0: ``first``, 1: ``second``) is left out for the other, or
    None: only one that the other states whole, and never a profile field."""
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
    """For each record (its index) in a conflict: what it conflicts with (source, id,
    text, and whether this record is the newer: True, False or None when not known)."""
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
    out: list[MemoryRecord],
    position: dict[int, int],
    units: Sequence[tuple[int, MemoryRecord]],
    conflicts: Sequence[tuple[int, int]],
) -> list[MemoryRecord]:
    """``out`` with the newer of each conflicting pair moved just before the older when
    it came after it (the block reads the newer value first)."""
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


#: Texts of recent window messages by id(message), with a weak reference to the message
#: (a dead one's id may be reused) and the id of its blocks list (a message whose content
#: was set anew no longer matches); nothing here keeps a message or its blocks alive. The
#: same window comes back on every get(), and reading the text of each of its messages
#: again cost more than the rest of composing the block.
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
