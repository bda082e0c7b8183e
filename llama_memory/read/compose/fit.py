"""Fitting the block to its token budget: the user's instructions first, then the
records in order while they fit (an excerpt cut to its best message, a session summary
standing in for the excerpts it covers), and a note on what was left out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from functools import lru_cache
from typing import Optional

from llama_index.core.base.llms.types import ChatMessage

from ...core.types import MemoryRecord
from ...retrieval.excerpts import hit_of
from .duplicates import deduplicate, window_texts
from .model import CUT_TO_FIT, NO_ROOM, OVER_BUDGET, SUMMARISED, LeftOut, MemoryBlock, admission
from .render import is_summary, left_out_note, render_block, render_item

Tokenizer = Callable[[str], Sequence]


def covered_by_summaries(records: Sequence[MemoryRecord]) -> list[MemoryRecord]:
    """The records (turns: excerpts or messages) whose every message a session summary
    among ``records`` covers (its ``message_ids``)."""
    covered = {m for r in records if is_summary(r) for m in r.message_ids}
    if not covered:
        return []
    return [
        r for r in records
        if r.is_turn and not is_summary(r) and r.message_ids and set(r.message_ids) <= covered
    ]


def block_from_records(
    records: Sequence[MemoryRecord],
    *,
    window: Sequence[ChatMessage],
    token_limit: int,
    tokenizer: Tokenizer,
    session_id: Optional[str] = None,
) -> MemoryBlock:
    """Build the memory block from ranked records within ``token_limit`` tokens.

    Records whose text is already in ``window`` (the primary memory's messages)
    or repeats an earlier record are dropped; the rest are added in order while
    they fit. The returned block never exceeds ``token_limit`` tokens. Records of
    the conversation ``session_id`` are labelled as such (see :func:`render_item`).
    """
    left_out: list[LeftOut] = []
    kept, duplicates = deduplicate(records, window_texts(window), left_out)
    return fit_block(
        kept,
        token_limit=token_limit,
        tokenizer=tokenizer,
        duplicates=duplicates,
        session_id=session_id,
        left_out=left_out,
    )


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
    """The block of already deduplicated records (:func:`deduplicate`), in order,
    within ``token_limit`` tokens; ``duplicates`` is reported as dropped for that,
    and ``left_out`` (what deduplication dropped) starts the block's ``left_out``.
    Records of the conversation ``session_id`` (stored since ``since``, when the
    conversation was reset then) are labelled as such.

    ``instructions`` (the user's standing instructions) come first and are never cut:
    the records get what of the budget they leave. Instructions longer than the
    whole budget are still shown, whole, with no record."""
    result = MemoryBlock(
        dropped_duplicates=duplicates, left_out=list(left_out), instructions=list(instructions)
    )
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
    # Lines after the first leave room for the note saying what was left out, so that
    # adding it seldom forces a line out again (each try counts the whole block). The
    # first line need not: a record is worth more than the note.
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
    """A record with its rendered ``line``, then, for an excerpt too long for what is
    left of the budget, the message that made it (rendered only if asked for)."""
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
