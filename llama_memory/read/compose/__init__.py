"""Composition of the memory block: :mod:`.selection` chooses what it shows (deduplicated
and fitted to the token budget), :mod:`.block` is the block itself (:class:`MemoryBlock`,
:class:`LeftOut`, its text, its insertion). Each item's text is JSON-quoted with ``<``
and line breaks escaped, so stored text can neither close the block nor pose as a role.
"""

from __future__ import annotations

from .block import (
    ADMITTED_BY,
    BLOCK_CLOSE,
    BLOCK_INTRO,
    BLOCK_OPEN,
    CUT_TO_FIT,
    DUPLICATE,
    INSTRUCTIONS_INTRO,
    IRRELEVANT,
    OVER_BUDGET,
    SUMMARISED,
    THIS_CONVERSATION,
    LeftOut,
    MemoryBlock,
    admission,
    conflict_note,
    insert_block,
    is_summary,
    left_out_note,
    relevance_text,
    remove_block,
    render_block,
    render_instructions,
    render_item,
    strip_block,
)
from .selection import (
    Tokenizer,
    block_from_records,
    covered_by_summaries,
    deduplicate,
    fit_block,
    merge_near_duplicates,
    window_texts,
)

__all__ = [
    "ADMITTED_BY", "BLOCK_CLOSE", "BLOCK_INTRO", "BLOCK_OPEN", "CUT_TO_FIT", "DUPLICATE",
    "INSTRUCTIONS_INTRO", "IRRELEVANT", "OVER_BUDGET", "SUMMARISED", "THIS_CONVERSATION",
    "LeftOut", "MemoryBlock", "Tokenizer", "admission", "block_from_records", "conflict_note",
    "covered_by_summaries", "deduplicate", "fit_block", "insert_block", "is_summary",
    "left_out_note", "merge_near_duplicates", "relevance_text", "remove_block", "render_block",
    "render_instructions", "render_item", "strip_block", "window_texts",
]
