"""Composition: merge what the sources retrieved, drop duplicates, fit the token
budget, and render the memory block that goes into the prompt.

The block is delimited by ``<memory>`` and ``</memory>``. Each item is one line
whose text is a JSON string with ``<`` and every line-breaking character escaped,
so stored text can neither close the block nor start a line that poses as a role
or as instructions.

One module per step of the ``get()`` pipeline (:mod:`llama_memory.read.pipeline`) that builds the
block: :mod:`.duplicates` (deduplicate), :mod:`.fit` (fit the budget), :mod:`.insert`
(insert the block); :mod:`.render` writes its text, and :mod:`.model` says what a block
is (:class:`MemoryBlock`, :class:`LeftOut`). Every name is importable from here.
"""

from __future__ import annotations

from .duplicates import deduplicate, merge_near_duplicates, window_texts
from .fit import Tokenizer, block_from_records, covered_by_summaries, fit_block
from .insert import insert_block, remove_block, strip_block
from .model import (
    ADMITTED_BY,
    CUT_TO_FIT,
    DUPLICATE,
    IRRELEVANT,
    OVER_BUDGET,
    SUMMARISED,
    LeftOut,
    MemoryBlock,
    admission,
    relevance_text,
)
from .render import (
    BLOCK_CLOSE,
    BLOCK_INTRO,
    BLOCK_OPEN,
    INSTRUCTIONS_INTRO,
    THIS_CONVERSATION,
    conflict_note,
    is_summary,
    left_out_note,
    render_block,
    render_instructions,
    render_item,
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
