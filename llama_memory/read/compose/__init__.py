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
    insert_block,
    is_summary,
    relevance_text,
    remove_block,
    render_block,
    render_instructions,
    render_item,
)
from .selection import (
    Tokenizer,
    block_from_records,
    covered_by_summaries,
    deduplicate,
    fit_block,
    window_texts,
)

__all__ = [
    "ADMITTED_BY", "BLOCK_CLOSE", "BLOCK_INTRO", "BLOCK_OPEN", "CUT_TO_FIT", "DUPLICATE",
    "INSTRUCTIONS_INTRO", "IRRELEVANT", "OVER_BUDGET", "SUMMARISED", "THIS_CONVERSATION",
    "LeftOut", "MemoryBlock", "Tokenizer", "admission", "block_from_records",
    "covered_by_summaries", "deduplicate", "fit_block", "insert_block", "is_summary",
    "relevance_text", "remove_block", "render_block", "render_instructions", "render_item",
    "window_texts",
]
