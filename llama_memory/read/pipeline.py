"""The read pipeline: what a ``get()`` does, top to bottom, on a memory's
:class:`~llama_memory.memory.runtime.Runtime`.

:func:`get` runs the stages in order; each is a function of this module:

1. **window**: the primary memory's messages (this conversation, token-limited);
2. **plan the query** (:func:`plan_query`): what to retrieve for, the given ``input``
   or the latest user message; small talk retrieves nothing query-dependent, a message
   that refers back in time asks for that time too
   (:func:`~llama_memory.read.query_plan.choose_query`);
3. **retrieve** (:func:`retrieve_for`): each source's records, higher priorities first,
   the rankings of one priority merged round-robin, the window's own messages left out;
4. **relevance** (:func:`relevant_records`): records below ``min_relevance`` go;
5. **deduplicate** (:func:`~llama_memory.read.compose.deduplicate`): against the window and
   across sources (asking once more when the window showed more than expected);
6. **fit the budget** (:func:`~llama_memory.read.compose.fit_block`): the user's standing
   instructions first, then as many records as ``memory_token_limit`` holds (fitted again
   with an older message marked as possibly superseded, :mod:`.superseded`, when the
   block still shows as much);
7. **insert** (:func:`~llama_memory.read.compose.insert_block`): the block goes into the
   system message (or the latest user message).

:mod:`llama_memory.read.compose` renders the block's parts. ``search()`` is stage 3 and 5
alone; the LlamaIndex memory blocks (:mod:`llama_memory.blocks`) run stages 2-6 beside
a window the memory does not hold (:func:`block_for_window`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import replace
from decimal import Decimal
from typing import Any, Optional

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from ..core.instrumentation import MemoryBlockEvent, MemoryRetrievalEvent, dispatcher
from ..core.messages import message_text
from ..core.text import check_text, normalize_text, short
from ..core.types import MemoryRecord, Scope, Stopwatch, now
from ..memory.runtime import Runtime
from ..retrieval.excerpts import records_for
from ..retrieval.relevance import (
    NAMED_MIN_COSINE,
    RECORD_FLOOR,
    REQUEST_MIN_COSINE,
    asks_only,
    own_relevance,
    serves_request,
    speaks_of_what_is_asked,
)
from ..sources.base import Embedded, EmbedsAhead, Recent, WindowAware
from ..sources.base import Source as SourceProtocol
from ..sources.views import RecordList
from ..storage.sql.dialect import one_connection
from .compose import (
    ADMITTED_BY,
    IRRELEVANT,
    LeftOut,
    MemoryBlock,
    deduplicate,
    fit_block,
    insert_block,
    relevance_text,
    window_texts,
)
from .query_plan import QueryPlan, choose_query, question_parts, without_small_talk
from .superseded import mark_superseded, marks_of_shown


def get(rt: Runtime, input: Optional[str], insert_method: str, **kwargs: Any) -> list[ChatMessage]:
    """The body of :meth:`ComposableMemory.get`: the primary memory's messages with the
    block for ``input`` (or the latest user message) inserted by ``insert_method``."""
    check_input(input)
    watch = Stopwatch()
    with rt.lock, one_connection(rt.store):
        rt.check_open()
        window = rt.primary.get(input=input, **kwargs)  # 1. window
        query = input if input else latest_user_text(rt, window)
        plan = plan_query(query, window)  # 2. plan the query
        block = compose_block(rt, plan, window)  # 3-6. retrieve, relevance, dedup, budget
        note_shown(rt, block)
        messages = insert_block(window, block.text, insert_method)  # 7. insert
    announce_block(rt, query, block, len(window), watch)
    return messages


def block_for_window(rt: Runtime, window: Sequence[ChatMessage]) -> MemoryBlock:
    """The block a ``get`` would inject for a window of messages the memory does not hold
    itself (a LlamaIndex ``Memory``'s short-term queue, :mod:`llama_memory.blocks`), for
    the window's latest user message: the same retrieval, relevance, deduplication against
    the window and budget as :func:`get`."""
    watch = Stopwatch()
    with rt.lock, one_connection(rt.store):
        rt.check_open()
        query = latest_user_text(rt, window)
        block = compose_block(rt, plan_query(query, window), window)
        note_shown(rt, block)
    announce_block(rt, query, block, len(window), watch)
    return block


def check_input(input: Optional[str]) -> None:
    """TypeError or ValueError for a ``get()`` input that is no text to retrieve for."""
    if input is not None and not isinstance(input, str):
        raise TypeError(
            f"get() input must be a str or None, not {type(input).__name__} {short(input)}: "
            "pass the text to retrieve for, e.g. the user's message"
        )
    if input is not None:
        check_text(input, "get() input", "nothing was retrieved")


def note_shown(rt: Runtime, block: MemoryBlock) -> None:
    """Note a block as shown: the memory's ``last_block``, its records' last use. The
    caller holds the memory's lock."""
    rt.last_block = block
    rt.usage_log().note(block.records, now())


def compose_block(rt: Runtime, plan: QueryPlan, window: Sequence[ChatMessage]) -> MemoryBlock:
    """Stages 3-6 for a plan: the user's instructions, then the relevant records the
    window does not show already, within the memory's token budget."""
    options = rt.settings
    if plan.kind != "time":  # a plan of a time retrieves for its text alone
        embed_later_parts(rt, plan.parts, plan.text)
    # The user's standing instructions: whatever the query, first, outside the budget.
    instructions = rt.instructions.texts() if rt.instructions is not None else []
    budget: dict[str, Any] = {
        "token_limit": options.memory_token_limit, "tokenizer": rt.facade.tokenizer_fn,
        "session_id": options.session_id, "instructions": instructions, "since": rt.conversation_since,
    }  # fmt: skip
    if not rt.sources:
        return fit_block([], **budget)
    top_k = options.top_k
    left_out: list[LeftOut] = []
    if plan.kind == "none":  # small talk: only what does not depend on the query
        records, duplicates = deduplicate(
            retrieve(rt, "", top_k, query_independent(rt)), window_texts(window), left_out
        )
        return fit_block(records, **budget, duplicates=duplicates, left_out=left_out)
    shown = window_texts(window)
    # A question that asks for a set ("what activities...") gathers its answer from many
    # sessions, one turn in each: it gets more records (llama_memory.retrieval.excerpts).
    top_k = records_for(plan.text, top_k, options.set_spread)
    # What the window already shows is dropped afterwards, so ask for more than top_k:
    # as many more as the window showed last time, and at most top_k more. The vector
    # source leaves the window's own messages out itself (the latest user message,
    # stored before get(), among them); a source that does not is asked once more below.
    most = top_k + min(len(window), top_k)
    fetch = min(most, top_k + max([0, *rt.window_overlaps]))
    # The window's own messages are stored too (an agent puts the user's message before
    # it calls get()): left out of retrieval and of the evidence of relevance, or the
    # query would match itself and every question would look like one about this user.
    own = frozenset(normalize_text(t) for t in shown)
    records = retrieve_for(rt, plan, fetch, own)  # 3. retrieve
    # Irrelevant records go first, so that one never stands for a fact in the
    # near-duplicate merge and then leaves the block with it.
    relevant, left_out = relevant_records(records, options.min_relevance, plan.text)  # 4. relevance
    kept, duplicates = deduplicate(relevant, shown, left_out)  # 5. deduplicate
    if duplicates and fetch < most and short_of(relevant, kept, fetch, top_k):
        # The window shows more of what was found than last time: ask once more,
        # for as many more as it showed.
        records = retrieve_for(rt, plan, min(most, fetch + duplicates), own)
        relevant, left_out = relevant_records(records, options.min_relevance, plan.text)
        kept, duplicates = deduplicate(relevant, shown, left_out)
    asked = sum(1 for r in relevant if is_question_record(r))
    if asked:
        # The user's own earlier questions state nothing: they must not take the places
        # of statements. Ask for as many more records, and keep the questions only
        # where the statements leave room among as many records as before.
        places = len(relevant)
        records = retrieve_for(rt, plan, fetch + asked, own)
        relevant, left_out = relevant_records(records, options.min_relevance, plan.text)
        relevant, no_place = within_places(relevant, places)
        kept, duplicates = deduplicate(relevant, shown, [*left_out, *no_place])
    rt.window_overlaps.append(duplicates)

    def fit(shown: Sequence[MemoryRecord]) -> MemoryBlock:  # 6. fit the budget
        return fit_block(shown, **budget, duplicates=duplicates, left_out=left_out)

    block = fit(kept)
    # An older message beside a later one on the same thing is marked as possibly
    # superseded (llama_memory.read.superseded); the marks cost tokens, and the block
    # keeps them only when it shows every message with them that it shows without.
    question = query_vector(rt, plan.text) if len(block.records) > 1 else None
    if question is not None:
        dimension = len(question)
        marked = mark_superseded(kept, question, lambda source, ids: record_vectors(rt, source, ids, dimension),
                                 lambda words: word_counts(rt, words))
        if any(m is not k for m, k in zip(marked, kept)):
            with_marks = fit(marked)
            # A mark whose later record the budget left out names nothing the LLM sees.
            unmarked = marks_of_shown(marked, shown_messages(with_marks))
            if any(u is not m for u, m in zip(unmarked, marked)):
                with_marks = fit(unmarked)
            if shown_messages(with_marks) >= shown_messages(block):
                block = with_marks
    block.dropped_irrelevant = len(records) - len(relevant)
    return block


def shown_messages(block: MemoryBlock) -> set[str]:
    """The stored records a block's lines show (an excerpt: its messages), by id (or
    text, for a record without one)."""
    return {p.id or p.text for r in block.records for p in (r.parts or [r])}


def announce_block(
    rt: Runtime, query: Optional[str], block: MemoryBlock, window_messages: int, watch: Stopwatch
) -> None:
    """The :class:`~llama_memory.core.instrumentation.MemoryBlockEvent` of a composed block."""
    dispatcher.event(MemoryBlockEvent(
        **rt.event_scope(), query=query or "", record_ids=[r.id for r in block.records],
        sources=[r.source for r in block.records], token_count=block.token_count,
        token_limit=block.token_limit, dropped_duplicates=block.dropped_duplicates,
        dropped_for_budget=block.dropped_for_budget, window_messages=window_messages,
        duration_ms=watch.elapsed_ms,
    ))  # fmt: skip


# -- stage 2: plan the query ------------------------------------------------------------


def latest_user_text(rt: Runtime, window: Sequence[ChatMessage]) -> Optional[str]:
    """The latest user message with text: in the window, else in the whole conversation."""
    for messages in (window, rt.primary.get_all()):
        for message in reversed(messages):
            if message.role == MessageRole.USER and message_text(message).strip():
                return message_text(message)
    return None


def plan_query(query: Optional[str], window: Sequence[ChatMessage]) -> QueryPlan:
    """What to retrieve for (:func:`~llama_memory.read.query_plan.choose_query`)."""
    # The two latest user messages are all it looks at (the latest is usually the query).
    latest = [m for m in reversed(window) if m.role == MessageRole.USER][:2]
    return choose_query(query, [message_text(m) for m in reversed(latest)])


# -- stage 3: retrieve ------------------------------------------------------------------


def embed_later_parts(rt: Runtime, parts: Sequence[str], whole: str) -> None:
    """For a question of several parts, start embedding the texts after the first (the
    other parts, then the whole question) in the background, in the sources that can
    (:class:`~llama_memory.sources.base.EmbedsAhead`): one after another they took most of
    a ``get()``. The first is embedded in this thread (a thread costs a loaded machine more)."""
    texts = [t for t in [*parts, whole][1:] if t.strip()] if parts else []
    if texts:
        for source in rt.sources:
            if isinstance(source, EmbedsAhead):
                source.embed_ahead(texts)


def retrieve_for(rt: Runtime, plan: QueryPlan, k: int, shown: frozenset[str] = frozenset()) -> list[MemoryRecord]:
    """The sources' records for a plan: by its text, and, for a message that refers
    back in time, first what each source holds of that time (:class:`Recent`).
    ``shown``: as for :func:`retrieve`."""
    if plan.kind != "time":
        return retrieve_parts(rt, plan.text, plan.parts, k, shown=shown)
    by_text = retrieve(rt, plan.text, k, shown=shown) if plan.text else retrieve(rt, "", k, query_independent(rt))
    scope, span = rt.scope, plan.span(now())
    by_time = [r for s in rt.sources if isinstance(s, Recent) for r in s.recent(scope, k, span)]
    return by_time + by_text


def retrieve_parts(
    rt: Runtime, query: str, parts: Sequence[str], k: int, sources: Optional[Sequence[SourceProtocol]] = None,
    shown: frozenset[str] = frozenset()
) -> list[MemoryRecord]:
    """:func:`retrieve` for ``query``, and, for a question of several ``parts``
    (:func:`~llama_memory.read.query_plan.question_parts`), for each part too: the
    rankings merged round-robin (each part's first, then the whole question's), each
    record once with its best relevance, as many as the longest ranking for each part."""
    if not parts:
        return retrieve(rt, query, k, sources, shown)
    rankings = [retrieve(rt, text, k, sources, shown) for text in (*parts, query)]
    # A record found by several searches keeps its first place and the best relevance
    # any of them gave it: a small store returns the boat for the tea part too, judged
    # against the tea.
    merged: dict[str, MemoryRecord] = {}
    for record in interleave(rankings):
        key = record.id or normalize_text(record.text)
        held = merged.get(key)
        if held is None or (record.relevance or 0.0) > (held.relevance or 0.0):
            merged[key] = record
    # Each part keeps the places a question of one part has: cut to as many records as
    # the longest ranking for each part, not for the question as a whole (which gave each
    # part a third of them, and a part's fact at its fourth place was never shown).
    return list(merged.values())[: max(len(r) for r in rankings) * len(parts)]


def retrieve(
    rt: Runtime, query: str, k: int, sources: Optional[Sequence[SourceProtocol]] = None,
    shown: frozenset[str] = frozenset()
) -> list[MemoryRecord]:
    """The sources' records for ``query`` (default every source): higher priorities
    first, the rankings of one priority merged round-robin. Records whose normalised
    text is in ``shown`` (the window's messages) are left out by the sources that can.
    Each source is asked through the memory's instrumented ``retrieve_from`` (a span of
    its own, under the ``get``'s)."""
    scope = rt.scope
    sources = rt.sources if sources is None else sources
    merged: list[MemoryRecord] = []
    for priority in sorted({s.priority for s in sources}, reverse=True):
        tier = [s for s in sources if s.priority == priority]
        merged.extend(interleave(rt.facade.retrieve_from(source, query, scope, k, shown) for source in tier))
    return merged


def interleave(ranked_lists: Iterable[Sequence[MemoryRecord]]) -> list[MemoryRecord]:
    """Merge per-source rankings round-robin, so every source gets a share of the
    budget (scores of different sources are not comparable)."""
    lists = [list(r) for r in ranked_lists]
    merged: list[MemoryRecord] = []
    for rank in range(max((len(r) for r in lists), default=0)):
        merged.extend(r[rank] for r in lists if rank < len(r))
    return merged


def retrieve_one(
    rt: Runtime, source: SourceProtocol, query: str, scope: Scope, k: int, shown: frozenset[str] = frozenset()
) -> list[MemoryRecord]:
    """The body of :meth:`ComposableMemory.retrieve_from`: one source's records, and its
    :class:`~llama_memory.core.instrumentation.MemoryRetrievalEvent`."""
    watch = Stopwatch()
    if shown and isinstance(source, WindowAware):
        records = source.retrieve_beside(query, scope, k, shown)
    else:
        records = source.retrieve(query, scope, k)
    dispatcher.event(MemoryRetrievalEvent(
        **rt.event_scope(), source=source.name, query=query, k=k,
        record_ids=[r.id for r in records], scores=[float(r.score) for r in records],
        duration_ms=watch.elapsed_ms,
    ))  # fmt: skip
    return records


def query_independent(rt: Runtime) -> list[SourceProtocol]:
    """The sources whose records do not depend on the query (a profile)."""
    return [s for s in rt.sources if getattr(s, "query_independent", False)]


# -- stage 4: relevance -----------------------------------------------------------------


def relevant_records(
    records: Sequence[MemoryRecord], min_relevance: float, query: str = ""
) -> tuple[list[MemoryRecord], list[LeftOut]]:
    """The records that enter (those without a relevance stay), statements before the
    user's own questions, and the others as left out, :data:`~llama_memory.read.compose.IRRELEVANT`.

    Stored small talk goes first (:func:`~llama_memory.read.query_plan.without_small_talk`).
    A record then needs ``relevance`` >= ``min_relevance`` and its own relevance
    (:func:`~llama_memory.retrieval.relevance.own_relevance`, its evidence alone) >=
    :data:`~llama_memory.retrieval.relevance.RECORD_FLOOR`: a low bar that only decides for
    a calibration that also weighs the query's best match among past messages, which can
    lift a record that has nothing to do with the question. A fact (a triple: a few words,
    a low cosine with any question) stays when some past statement makes the question one
    about this user; the user's own earlier questions never do, and come last. A record
    that serves a first-person request for advice, or holds a word a first-person question
    names, stays too (:func:`admitting_rule`)."""
    records, empty = without_small_talk(records, query)
    floor = RECORD_FLOOR if min_relevance > 0 else 0.0
    about_user = any(
        r.is_turn and not asks_only(r) and r.relevance is not None and r.relevance >= min_relevance
        and own_passes(r, floor)
        for r in records
    )
    kept: list[MemoryRecord] = []
    dropped: list[LeftOut] = list(empty)
    for r in records:
        rule = admitting_rule(r, min_relevance, about_user)
        if rule is not None:
            kept.append(replace(r, metadata={**r.metadata, ADMITTED_BY: rule}))
        else:
            detail, rule = irrelevance(r, min_relevance)
            dropped.append(LeftOut(r, IRRELEVANT, detail=detail, rule=rule))
    return statements_first(kept), dropped


def own_passes(record: MemoryRecord, floor: float) -> bool:
    """Whether a record's own relevance reaches ``floor`` (a record without one does)."""
    own = own_relevance(record)
    return own is None or own >= floor


def statements_first(records: Sequence[MemoryRecord]) -> list[MemoryRecord]:
    """``records`` with those that are only the user's own questions
    (:func:`~llama_memory.retrieval.relevance.asks_only`) moved after the others, each group in
    its order: a question carries no fact."""
    return [r for r in records if not is_question_record(r)] + [r for r in records if is_question_record(r)]


def is_question_record(record: MemoryRecord) -> bool:
    """Whether a retrieved turn is only the user's own questions."""
    return record.is_turn and asks_only(record)


def within_places(
    records: Sequence[MemoryRecord], places: int
) -> tuple[list[MemoryRecord], list[LeftOut]]:
    """At most ``places`` of ``records`` (statements first, :func:`statements_first`):
    the statements all stay, the user's own questions fill what places they leave; the
    questions beyond are left out, :data:`~llama_memory.read.compose.IRRELEVANT`."""
    statements = [r for r in records if not is_question_record(r)]
    questions = [r for r in records if is_question_record(r)]
    room = max(places - len(statements), 0)
    detail = "only the user's own earlier question (it states nothing): statements took its place"
    return statements + questions[:room], [LeftOut(r, IRRELEVANT, detail=detail, rule=detail) for r in questions[room:]]


def admitting_rule(record: MemoryRecord, min_relevance: float, about_user: bool) -> Optional[str]:
    """The rule of :func:`relevant_records` that lets ``record`` in, in words (None: it
    stays out)."""
    shown = relevance_text(record)
    if record.relevance is None:
        return "no relevance: not ranked by it (shown whatever the question)"
    floor = RECORD_FLOOR if min_relevance > 0 else 0.0
    own = own_relevance(record)
    own_shown = f", own relevance {share_text(own)} >= floor {share_text(floor)}" if own is not None else ""
    if min_relevance > 0 and serves_request(record):
        return (f"relevance {shown}, kept as it serves a request for advice in the first person "
                f"(cosine >= {REQUEST_MIN_COSINE:.2f})")
    if min_relevance > 0 and speaks_of_what_is_asked(record):
        return (f"relevance {shown}, kept as it holds a word of a first-person question "
                f"(cosine >= {NAMED_MIN_COSINE:.2f})")
    if not own_passes(record, floor):
        return None
    if record.relevance >= min_relevance:
        return f"relevance {shown} >= min_relevance {threshold_text(min_relevance)}{own_shown}"
    if about_user and not record.is_turn:
        return (f"relevance {shown}, a fact kept because a past statement makes the question "
                f"one about this user (relevance >= {threshold_text(min_relevance)}){own_shown}")
    return None


def irrelevance(record: MemoryRecord, min_relevance: float) -> tuple[str, str]:
    """Why :func:`admitting_rule` left a record out: in words with the record's values, and
    the rule alone (by its name and threshold: the same words for every record it left
    out). A record that reached ``min_relevance`` was left out by the record floor."""
    own = own_relevance(record)
    floor = RECORD_FLOOR if min_relevance > 0 else 0.0
    reached = record.relevance is not None and record.relevance >= min_relevance
    if own is not None and own < floor and reached:
        floor_text = share_text(RECORD_FLOOR)
        detail = (f"relevance {relevance_text(record)}, but its own relevance {share_text(own)} is "
                  f"below the record floor {floor_text}")
        return detail, f"own relevance below the record floor {floor_text}"
    threshold = threshold_text(min_relevance)
    return (f"relevance {relevance_text(record)} below min_relevance {threshold}",
            f"relevance below min_relevance {threshold}")


def threshold_text(value: float) -> str:
    """A threshold with two decimals, or as many more as it has (``0.40``, ``0.027``):
    the rule that names it must not round it to another value."""
    two = f"{value:.2f}"
    return two if abs(float(two) - value) < 1e-12 else format(Decimal(f"{value:.3g}"), "f")


def share_text(value: float) -> str:
    """A relevance (0..1) with two significant digits, written out (``0.000081``, not
    ``8.1e-05``): the record floor is that small."""
    return format(Decimal(f"{value:.2g}"), "f")


# -- stage 5: deduplicate (compose.deduplicate), asking once more when short ------------


def short_of(
    records: Sequence[MemoryRecord], kept: Sequence[MemoryRecord], fetch: int, top_k: int
) -> bool:
    """Whether a source gave all ``fetch`` records asked for (so it may have more) but
    fewer than ``top_k`` of them survived deduplication."""
    found = Counter(r.source for r in records)
    left = Counter(r.source for r in kept)
    return any(n >= fetch and left[source] < top_k for source, n in found.items())


# -- stage 6, again: mark what a later record may supersede (read/superseded.py) --------


def query_vector(rt: Runtime, text: str) -> Optional[Any]:
    """The question's vector, embedded by the first source with vectors (None: no such
    source, or no text)."""
    if not text.strip():
        return None
    source = next((s for s in rt.sources if isinstance(s, Embedded)), None)
    return source.query_vector(text) if source is not None else None


def record_vectors(rt: Runtime, source_name: str, ids: Sequence[str], dimension: int) -> dict[str, Any]:
    """The stored vectors (of ``dimension``) of some records of the source named
    ``source_name`` (none when it has no vectors)."""
    source = next((s for s in rt.sources if s.name == source_name and isinstance(s, Embedded)), None)
    if source is None or not ids:
        return {}
    return source.record_vectors(ids, rt.scope, dimension)


def word_counts(rt: Runtime, words: Sequence[str]) -> tuple[int, dict[str, int]]:
    """(records of the user, records holding each of ``words``) in the memory's store;
    nothing known of a memory without a store (built by hand)."""
    if rt.store is None:
        return 0, {}
    return rt.store.word_counts(words, rt.scope)


# -- search: retrieve and deduplicate, no block -----------------------------------------


def search(rt: Runtime, query: str, k: int) -> RecordList:
    """The body of :meth:`ComposableMemory.search`."""
    if not isinstance(query, str):
        raise TypeError(f"search() query must be a str, not {type(query).__name__} {short(query)}")
    check_text(query, "search() query", "nothing was retrieved")
    with rt.lock, one_connection(rt.store):
        rt.check_open()
        # A query-independent source (a profile) is not ranked by relevance.
        relevant = [s for s in rt.sources if not getattr(s, "query_independent", False)]
        parts = question_parts(query)
        embed_later_parts(rt, parts, query)
        records, _ = deduplicate(retrieve_parts(rt, query, parts, k, relevant))
        return RecordList(records[:k])
