"""Composition: merge what the sources retrieved, drop duplicates, fit the token
budget, and render the memory block that goes into the prompt.

The block is delimited by ``<memory>`` and ``</memory>``. Each item is one line
whose text is a JSON string with ``<`` and every line-breaking character escaped,
so stored text can neither close the block nor start a line that poses as a role
or as instructions.

Two modules: :mod:`.selection` chooses what the block shows (the deduplicate and fit
steps of the ``get()`` pipeline, :mod:`llama_memory.read.pipeline`), and :mod:`.block`
is the block itself: what a block is (:class:`MemoryBlock`, :class:`LeftOut`), its
text, and its insertion into the messages. Every name is importable from here.
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
    "ADMITTED_BY",
    "BLOCK_CLOSE",
    "BLOCK_INTRO",
    "BLOCK_OPEN",
    "CUT_TO_FIT",
    "DUPLICATE",
    "INSTRUCTIONS_INTRO",
    "IRRELEVANT",
    "OVER_BUDGET",
    "SUMMARISED",
    "THIS_CONVERSATION",
    "LeftOut",
    "MemoryBlock",
    "Tokenizer",
    "admission",
    "block_from_records",
    "conflict_note",
    "covered_by_summaries",
    "deduplicate",
    "fit_block",
    "insert_block",
    "is_summary",
    "left_out_note",
    "merge_near_duplicates",
    "relevance_text",
    "remove_block",
    "render_block",
    "render_instructions",
    "render_item",
    "strip_block",
    "window_texts",
]
