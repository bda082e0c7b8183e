"""Stored small talk: exchanges that state nothing are never shown.

A conversation holds greetings, thanks and acknowledgements ("hi", "got it", "thanks!")
and the assistant's replies to them ("Sure, I'm here whenever you need me."). Stored like
any message, they match a query of the same kind word for word and by meaning (a
cosine near 1 with "got it"), and an excerpt around such a match brings its neighbours
along: the block then shows facts that have nothing to do with the query, and spends
tokens on lines that say nothing.

An **empty exchange** is a user message that is small talk
(:func:`~llama_memory.read.query_plan.is_small_talk`) and the assistant's message right
after it in the same excerpt (its reply: whatever it says, it answers nothing the user
told). :func:`without_small_talk` takes them out of the records retrieved for a query:

- an excerpt loses those parts (the others stay, with a gap marker where some were left
  out between two kept ones);
- a record whose hit (the message that matched the query, which its relevance is that
  of) is such a part is left out whole: what stays of it was only its neighbour.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from ..core.text import normalize_text
from ..core.types import MemoryRecord
from ..retrieval.excerpts import hit_of, without
from .compose import IRRELEVANT, LeftOut
from .query_plan import is_small_talk

#: Why :func:`without_small_talk` left a record out (a :class:`LeftOut` rule).
SMALL_TALK_RULE = "the message that matched is small talk or the reply to it: it states nothing"
#: Why :func:`without_small_talk` left out a record that matched by repeating the query.
ECHO_RULE = "the message that matched says the same words as the query: it states nothing the query does not"


def empty_parts(record: MemoryRecord) -> set[int]:
    """The ``id()`` of each part of ``record`` (the record itself when it has none) that
    belongs to an empty exchange: a user message that is small talk, and the assistant's
    message right after it."""
    parts = record.parts or [record]
    empty: set[int] = set()
    after_small_talk = False
    for part in parts:
        if part.role == "user":
            after_small_talk = is_small_talk(part.text)
            if after_small_talk:
                empty.add(id(part))
        elif part.role == "assistant" and after_small_talk:
            empty.add(id(part))
            after_small_talk = False
        else:
            after_small_talk = False
    return empty


def without_small_talk(
    records: Sequence[MemoryRecord], query: str = ""
) -> tuple[list[MemoryRecord], list[LeftOut]]:
    """``records`` without the parts of empty exchanges (:func:`empty_parts`), and those
    whose hit is one of them (or which are nothing else) as left out,
    :data:`~llama_memory.read.compose.IRRELEVANT` (rule :data:`SMALL_TALK_RULE`).

    A record whose hit is an earlier message of the same words as ``query`` is left out
    too (rule :data:`ECHO_RULE`): it states nothing the query does not, whatever it is
    ("one sec", "bye for now!" said before: a phrase of small talk no word list knows
    matches itself best). An earlier question of the same words is the user's own
    question, which the relevance stage ranks after statements already."""
    echo = normalize_text(query) if query.strip() else None
    kept: list[MemoryRecord] = []
    dropped: list[LeftOut] = []
    for record in records:
        hit = hit_of(record)
        if echo is not None and normalize_text(hit.text) == echo:
            dropped.append(LeftOut(record, IRRELEVANT, detail=ECHO_RULE, rule=ECHO_RULE))
            continue
        empty = empty_parts(record)
        if not empty:
            kept.append(record)
            continue
        left = None if id(hit) in empty else without(record, lambda part: id(part) in empty)
        if left is None:
            dropped.append(LeftOut(record, IRRELEVANT, detail=SMALL_TALK_RULE, rule=SMALL_TALK_RULE))
        else:
            kept.append(_as_retrieved(left, record))
    return kept, dropped


def _as_retrieved(left: MemoryRecord, record: MemoryRecord) -> MemoryRecord:
    """``left`` (``record`` without some parts, its hit kept) with what retrieval gave
    ``record``: its relevance and metadata (the evidence), the excerpt's own keys
    (the hit, the gaps) as ``left`` has them."""
    own = {k: v for k, v in record.metadata.items() if k not in _EXCERPT_KEYS}
    return replace(left, relevance=record.relevance, importance=record.importance,
                   last_used=record.last_used, metadata={**own, **left.metadata})


#: The metadata keys an excerpt's text is made from (:func:`~llama_memory.retrieval.excerpts.join_parts`).
_EXCERPT_KEYS = ("hit", "omitted_before")
