"""How a :class:`~llama_memory.memory.ComposableMemory` builds the memory block of a
``get``: what to retrieve for (:func:`~llama_memory.relevance.choose_query`), from which
sources and how many records, which of them are relevant enough, and the block that
fits the token budget (:mod:`llama_memory.compose` holds the block's parts).

Functions of one memory (its sources, limits and the state it keeps between ``get``
calls); the memory's ``get``, ``aget`` and ``search`` call them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Optional

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from .arguments import short
from .compose import (
    IRRELEVANT,
    LeftOut,
    MemoryBlock,
    deduplicate,
    fit_block,
    insert_block,
    interleave,
    window_texts,
)
from .instrumentation import MemoryBlockEvent, Stopwatch, dispatcher
from .messages import check_text, message_text
from .relevance import QueryPlan, choose_query, serves_personal_request
from .set_questions import records_for
from .sources.base import Recent
from .sources.base import Source as SourceProtocol
from .storage.ports import one_connection
from .text import normalize_text
from .types import MemoryRecord, now
from .usage import UsageLog
from .views import RecordList

if TYPE_CHECKING:
    from .memory import ComposableMemory, InsertMethod


def get_messages(
    memory: ComposableMemory, input: Optional[str], insert_method: InsertMethod, **kwargs: Any
) -> list[ChatMessage]:
    """The body of :meth:`ComposableMemory.get`: the primary memory's messages with the
    block for ``input`` (or the latest user message) inserted by ``insert_method``."""
    if input is not None and not isinstance(input, str):
        raise TypeError(
            f"get() input must be a str or None, not {type(input).__name__} {short(input)}: "
            "pass the text to retrieve for, e.g. the user's message"
        )
    if input is not None:
        check_text(input, "get() input", "nothing was retrieved")
    watch = Stopwatch()
    with memory._lock, one_connection(memory._store):
        memory._check_open()
        window = memory.primary_memory.get(input=input, **kwargs)
        query = input if input else latest_user_text(memory, window)
        block = shown_block(memory, query, window)
        messages = insert_block(window, block.text, insert_method)
    announce_block(memory, query, block, len(window), watch)
    return messages


def block_for_window(memory: ComposableMemory, window: Sequence[ChatMessage]) -> MemoryBlock:
    """The block a ``get`` would inject for a window of messages the memory does not hold
    itself (a LlamaIndex ``Memory``'s short-term queue, :mod:`llama_memory.blocks`), for
    the window's latest user message: the same retrieval, relevance, deduplication against
    the window and budget as :func:`get_messages`."""
    watch = Stopwatch()
    with memory._lock, one_connection(memory._store):
        memory._check_open()
        query = latest_user_text(memory, window)
        block = shown_block(memory, query, window)
    announce_block(memory, query, block, len(window), watch)
    return block


def shown_block(memory: ComposableMemory, query: Optional[str], window: Sequence[ChatMessage]) -> MemoryBlock:
    """Compose the block for ``query`` beside ``window`` and note it as shown (the
    memory's ``last_block``, the records' last use). The caller holds the memory's lock."""
    block = compose_block(memory, plan_query(query, window), window)
    memory._last_block = block
    usage_log(memory).note(block.records, now())
    return block


def announce_block(
    memory: ComposableMemory, query: Optional[str], block: MemoryBlock, window_messages: int, watch: Stopwatch
) -> None:
    """The :class:`~llama_memory.instrumentation.MemoryBlockEvent` of a composed block."""
    dispatcher.event(
        MemoryBlockEvent(
            **memory._event_scope(),
            query=query or "",
            record_ids=[r.id for r in block.records],
            sources=[r.source for r in block.records],
            token_count=block.token_count,
            token_limit=memory.memory_token_limit,
            dropped_duplicates=block.dropped_duplicates,
            dropped_for_budget=block.dropped_for_budget,
            window_messages=window_messages,
            duration_ms=watch.elapsed_ms,
        )
    )


def usage_log(memory: ComposableMemory) -> UsageLog:
    """The memory's log of records shown in blocks (made on first use, on its store)."""
    if memory._usage is None:
        memory._usage = UsageLog(memory._store)
    return memory._usage


def search_records(memory: ComposableMemory, query: str, k: int) -> RecordList:
    """The body of :meth:`ComposableMemory.search`."""
    if not isinstance(query, str):
        raise TypeError(f"search() query must be a str, not {type(query).__name__} {short(query)}")
    check_text(query, "search() query", "nothing was retrieved")
    with memory._lock, one_connection(memory._store):
        memory._check_open()
        # A query-independent source (a profile) is not ranked by relevance.
        relevant = [s for s in memory._sources if not getattr(s, "query_independent", False)]
        records, _ = deduplicate(retrieve(memory, query, k, relevant))
        return RecordList(records[:k])


def retrieve(
    memory: ComposableMemory,
    query: str,
    k: int,
    sources: Optional[Sequence[SourceProtocol]] = None,
    shown: frozenset[str] = frozenset(),
) -> list[MemoryRecord]:
    """The sources' records for ``query`` (default every source): higher priorities
    first, the rankings of one priority merged round-robin. Records whose normalised
    text is in ``shown`` (the window's messages) are left out by the sources that can."""
    scope = memory.scope
    sources = memory._sources if sources is None else sources
    merged: list[MemoryRecord] = []
    for priority in sorted({s.priority for s in sources}, reverse=True):
        tier = [s for s in sources if s.priority == priority]
        merged.extend(interleave(memory.retrieve_from(source, query, scope, k, shown) for source in tier))
    return merged


def plan_query(query: Optional[str], window: Sequence[ChatMessage]) -> QueryPlan:
    """What to retrieve for (:func:`~llama_memory.relevance.choose_query`)."""
    # The two latest user messages are all it looks at (the latest is usually the query).
    latest = [m for m in reversed(window) if m.role == MessageRole.USER][:2]
    return choose_query(query, [message_text(m) for m in reversed(latest)])


def compose_block(memory: ComposableMemory, plan: QueryPlan, window: Sequence[ChatMessage]) -> MemoryBlock:
    """The memory block for a plan: the user's instructions, then the relevant records
    the window does not show already, within the memory's token budget."""
    # The user's standing instructions: whatever the query, first, outside the budget.
    instructions = memory._instructions.texts() if memory._instructions is not None else []
    if not memory._sources:
        return fit_block(
            [], token_limit=memory.memory_token_limit, tokenizer=memory.tokenizer_fn,
            instructions=instructions,
        )
    top_k = memory.top_k
    left_out: list[LeftOut] = []
    if plan.kind == "none":  # small talk: only what does not depend on the query
        sources = [s for s in memory._sources if getattr(s, "query_independent", False)]
        records, duplicates = deduplicate(
            retrieve(memory, "", top_k, sources), window_texts(window), left_out
        )
        return fit_block(
            records, token_limit=memory.memory_token_limit, tokenizer=memory.tokenizer_fn,
            duplicates=duplicates, session_id=memory.session_id, left_out=left_out,
            instructions=instructions,
        )
    shown = window_texts(window)
    # A question that asks for a set ("what activities...") gathers its answer from many
    # sessions, one turn in each: it gets more records (llama_memory.set_questions).
    top_k = records_for(plan.text, top_k, memory.set_spread)
    # What the window already shows is dropped afterwards, so ask for more than top_k:
    # as many more as the window showed last time, and at most top_k more. The vector
    # source leaves the window's own messages out itself (the latest user message,
    # stored before get(), among them); a source that does not is asked once more below.
    most = top_k + min(len(window), top_k)
    fetch = min(most, top_k + max([0, *memory._window_overlaps]))
    # Irrelevant records go first, so that one never stands for a fact in the
    # near-duplicate merge and then leaves the block with it.
    # The window's own messages are stored too (an agent puts the user's message before
    # it calls get()): left out of retrieval and of the evidence of relevance, or the
    # query would match itself and every question would look like one about this user.
    own = frozenset(normalize_text(t) for t in shown)
    records = retrieve_for(memory, plan, fetch, own)
    relevant, left_out = relevant_records(records, memory.min_relevance)
    kept, duplicates = deduplicate(relevant, shown, left_out)
    if duplicates and fetch < most and short_of(relevant, kept, fetch, top_k):
        # The window shows more of what was found than last time: ask once more,
        # for as many more as it showed.
        records = retrieve_for(memory, plan, min(most, fetch + duplicates), own)
        relevant, left_out = relevant_records(records, memory.min_relevance)
        kept, duplicates = deduplicate(relevant, shown, left_out)
    memory._window_overlaps.append(duplicates)
    block = fit_block(
        kept,
        token_limit=memory.memory_token_limit,
        tokenizer=memory.tokenizer_fn,
        duplicates=duplicates,
        session_id=memory.session_id,
        left_out=left_out,
        instructions=instructions,
    )
    block.dropped_irrelevant = len(records) - len(relevant)
    return block


def relevant_records(
    records: Sequence[MemoryRecord], min_relevance: float
) -> tuple[list[MemoryRecord], list[LeftOut]]:
    """The records at or above ``min_relevance`` (those without a relevance stay),
    and the others as left out, :data:`~llama_memory.compose.IRRELEVANT`.

    The calibration judges a question mostly by its best match among past messages
    (is it about this user's history at all?). A fact (a record that is no turn of a
    conversation: a triple) is a few words, with a low cosine with any question, so its
    own score says little: when some past message of the query is relevant, the
    question is about this user, and their facts found for it stay too (ranked by their
    source, within the block's budget). A record that serves a request in the first
    person by its own cosine stays too (:func:`~llama_memory.relevance.serves_personal_request`)."""
    about_user = any(
        r.is_turn and r.relevance is not None and r.relevance >= min_relevance for r in records
    )
    kept: list[MemoryRecord] = []
    dropped: list[LeftOut] = []
    for r in records:
        if (
            r.relevance is None
            or r.relevance >= min_relevance
            or (about_user and not r.is_turn)
            or (min_relevance > 0 and serves_personal_request(r))
        ):
            kept.append(r)
        else:
            dropped.append(LeftOut(r, IRRELEVANT))
    return kept, dropped


def retrieve_for(
    memory: ComposableMemory, plan: QueryPlan, k: int, shown: frozenset[str] = frozenset()
) -> list[MemoryRecord]:
    """The sources' records for a plan: by its text, and, for a message that refers
    back in time, first what each source holds of that time (:class:`Recent`).
    ``shown``: as for :func:`retrieve`."""
    if plan.kind != "time":
        return retrieve(memory, plan.text, k, shown=shown)
    by_text = retrieve(memory, plan.text, k, shown=shown) if plan.text else retrieve(memory, "", k, [
        s for s in memory._sources if getattr(s, "query_independent", False)
    ])
    scope, span = memory.scope, plan.span(now())
    by_time = [r for s in memory._sources if isinstance(s, Recent) for r in s.recent(scope, k, span)]
    return by_time + by_text


def latest_user_text(memory: ComposableMemory, window: Sequence[ChatMessage]) -> Optional[str]:
    """The latest user message with text: in the window, else in the whole conversation."""
    for messages in (window, memory.primary_memory.get_all()):
        for message in reversed(messages):
            if message.role == MessageRole.USER and message_text(message).strip():
                return message_text(message)
    return None


def short_of(
    records: Sequence[MemoryRecord], kept: Sequence[MemoryRecord], fetch: int, top_k: int
) -> bool:
    """Whether a source gave all ``fetch`` records asked for (so it may have more) but
    fewer than ``top_k`` of them survived deduplication."""
    found = Counter(r.source for r in records)
    left = Counter(r.source for r in kept)
    return any(n >= fetch and left[source] < top_k for source, n in found.items())
