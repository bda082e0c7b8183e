"""What a memory block is: the block built, and each record left out with why."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from ...core.types import MemoryRecord
from ...sources.views import block_html, block_summary
from .render import clip, quoted


@dataclass
class MemoryBlock:
    """The rendered block and what went into it.

    Attributes:
        text: the block, ``""`` when nothing was worth injecting.
        records: the records shown, in order.
        token_count: tokens of ``text`` by the memory's tokenizer.
        dropped_duplicates: records left out as duplicates of the window or of each other.
        dropped_for_budget: records left out because the budget was full (an excerpt
            counts its messages, so cutting one down to its best message counts too).
        dropped_irrelevant: records left out because their calibrated relevance was
            below the memory's ``min_relevance``.
        left_out: what was left out and why, record by record, in ranking order
            (:class:`LeftOut`): the counts above, itemised.
        instructions: the user's standing instructions the block shows first (never
            cut for the budget: they count first).
        admitted: one line per record of ``records``, in order: the rule that let it in
            (its calibrated relevance, 0..1, against ``min_relevance``, or why it needs
            none), and what it stands for or conflicts with.
    """

    text: str = ""
    records: list[MemoryRecord] = field(default_factory=list)
    token_count: int = 0
    dropped_duplicates: int = 0
    dropped_for_budget: int = 0
    dropped_irrelevant: int = 0
    left_out: list["LeftOut"] = field(default_factory=list)
    instructions: list[str] = field(default_factory=list)
    admitted: list[str] = field(default_factory=list)

    def _repr_html_(self) -> str:
        """The records injected, per source, with scores, and what was left out (Jupyter)."""
        return block_html(self)

    def __repr__(self) -> str:
        """One line: records by source, tokens, what was left out (the text is ``.text``)."""
        return block_summary(self)


@dataclass(frozen=True)
class LeftOut:
    """A record a block did not show (whole or in part), and why.

    Attributes:
        record: the record as retrieved (an excerpt with all its messages).
        reason: :data:`DUPLICATE` (the window or an earlier record shows it already,
            or another source states the same fact), :data:`IRRELEVANT` (its relevance
            is below ``min_relevance``), :data:`OVER_BUDGET` (no room left) or
            :data:`CUT_TO_FIT` (an excerpt shown as its best message only; ``record`` is
            the whole excerpt) or :data:`SUMMARISED` (the budget was tight and a session
            summary in the block covers all its messages).
        other: for a :data:`DUPLICATE` left out for another record that states all it
            does, that record (None for an exact repeat, or one the window shows).
        detail: the rule in words: which record it duplicates, its relevance against
            which threshold, which budget (filled from the rest when not given).
        rule: the rule alone, by its name and threshold, the same for every record it
            left out (``"relevance below min_relevance 0.40"``, ``"own relevance below
            the record floor 0.0001"``): what ``llama-memory explain`` counts (filled
            from the rest when not given).
    """

    record: MemoryRecord
    reason: str
    other: Optional[MemoryRecord] = None
    detail: str = ""
    rule: str = ""

    def __post_init__(self) -> None:
        if not self.detail:
            object.__setattr__(self, "detail", _default_detail(self))
        if not self.rule:
            object.__setattr__(self, "rule", _default_rule(self))


#: Why a record was left out when the block had no room left for it.
NO_ROOM = "no room left in memory_token_limit"
#: The rule that leaves out a record whose relevance is below the memory's floor.
IRRELEVANT_RULE = "relevance below min_relevance"


def _default_detail(item: LeftOut) -> str:
    if item.reason == DUPLICATE and item.other is not None:
        return f"says nothing that [{item.other.source}] {quoted(clip(item.other.text))} does not"
    if item.reason == DUPLICATE:
        return "already shown: by the conversation window or an earlier record"
    if item.reason == IRRELEVANT:
        return f"relevance {relevance_text(item.record)} below min_relevance"
    if item.reason == OVER_BUDGET:
        return NO_ROOM
    if item.reason == CUT_TO_FIT:
        return "shown as its best message only, for memory_token_limit"
    if item.reason == SUMMARISED:
        return "a session summary in the block covers all its messages"
    return ""


def _default_rule(item: LeftOut) -> str:
    if item.reason == DUPLICATE and item.other is not None:
        return "stated whole by another record"
    if item.reason == IRRELEVANT:
        return IRRELEVANT_RULE
    return item.detail  # the others' details name no value of the record's own


def relevance_text(record: MemoryRecord) -> str:
    """A record's calibrated relevance to the query (0..1) as shown, ``"-"`` without one
    (its source does not rank by relevance: a profile field)."""
    return "-" if record.relevance is None else f"{record.relevance:.2f}"


#: :attr:`MemoryRecord.metadata` key of the rule that let a record into a block
#: (the read pipeline's relevance stage sets it; :attr:`MemoryBlock.admitted` shows it).
ADMITTED_BY = "admitted_by"


def admission(record: MemoryRecord) -> str:
    """The rule that let ``record`` into the block, with what it stands for (``also_in``),
    conflicts with (``conflicts_with``) and which of its messages a later record may
    supersede (``possibly_superseded_by``, :mod:`llama_memory.read.superseded`)."""
    rule = str(record.metadata.get(ADMITTED_BY) or (
        "no relevance: not ranked by it (shown whatever the question)"
        if record.relevance is None else f"relevance {relevance_text(record)}"
    ))
    for also in record.metadata.get("also_in", ()):
        rule += f"; stands for [{also['source']}] {quoted(clip(str(also['text'])))} (states all it does)"
    for other in record.metadata.get("conflicts_with", ()):
        age = {True: "newer than", False: "older than"}.get(other.get("newer"), "in conflict with")  # type: ignore[arg-type]
        rule += f"; conflict: {age} [{other['source']}] {quoted(clip(str(other['text'])))}"
    for part in record.parts or [record]:
        for later in part.metadata.get("possibly_superseded_by") or ():
            rule += (f"; {quoted(clip(part.text))} possibly superseded by the later "
                     f"[{later.get('source')}, {later.get('time')}] {quoted(clip(str(later.get('text'))))}")
    return rule


#: :attr:`LeftOut.reason` of a record already shown by the window or an earlier record.
DUPLICATE = "duplicate"
#: :attr:`LeftOut.reason` of a record whose calibrated relevance is below ``min_relevance``.
IRRELEVANT = "not relevant"
#: :attr:`LeftOut.reason` of a record there was no room for in the token budget.
OVER_BUDGET = "over budget"
#: :attr:`LeftOut.reason` of an excerpt shown as its best message only, for the budget.
CUT_TO_FIT = "cut to fit"
#: :attr:`LeftOut.reason` of an excerpt left out, for a tight budget, because a session
#: summary in the block covers every one of its messages.
SUMMARISED = "covered by a summary"
