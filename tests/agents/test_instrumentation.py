"""The memory's spans and events reach handlers registered on LlamaIndex's root
dispatcher, inside the agent run that caused them (a real FunctionAgent, a scripted
LLM, a real store and the offline model)."""

from __future__ import annotations

import inspect
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.span import SimpleSpan
from llama_index.core.instrumentation.span_handlers import SimpleSpanHandler

from helpers import user
from llama_memory import ComposableMemory, OfflineEmbedding
from llama_memory.core.instrumentation import (
    MemoryBlockEvent,
    MemoryExtractionEvent,
    MemoryPutEvent,
    MemoryRetrievalEvent,
)
from llama_memory.testing import ScriptedLLM, pass_answer


class Recorder(BaseEventHandler):
    """Keeps every event it sees."""

    events: list[BaseEvent] = []

    @classmethod
    def class_name(cls) -> str:
        return "Recorder"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        with _lock:
            self.events.append(event)

    def of(self, kind: type) -> list[Any]:
        return [e for e in self.events if isinstance(e, kind)]


_lock = threading.Lock()


class SpanRecorder(SimpleSpanHandler):
    """SimpleSpanHandler that also remembers which method each span was."""

    def new_span(self, id_: str, bound_args: inspect.BoundArguments, instance: Optional[Any] = None,
                 parent_span_id: Optional[str] = None, tags: Optional[dict] = None,
                 **kwargs: Any) -> SimpleSpan:
        return SimpleSpan(id_=id_, parent_id=parent_span_id, tags=tags or {})


@pytest.fixture
def handlers() -> Iterator[tuple[Recorder, SpanRecorder]]:
    root = get_dispatcher()
    events, spans = Recorder(events=[]), SpanRecorder()
    root.add_event_handler(events)
    root.add_span_handler(spans)
    try:
        yield events, spans
    finally:
        root.event_handlers.remove(events)
        root.span_handlers.remove(spans)


def _chain(span_id: Optional[str], spans: dict[str, SimpleSpan]) -> list[str]:
    """The names of a span and its ancestors, innermost first."""
    names: list[str] = []
    while span_id is not None:
        names.append(span_id.rsplit("-", 5)[0])
        parent = spans.get(span_id)
        span_id = parent.parent_id if parent is not None else None
    return names


async def test_an_agent_run_shows_the_memorys_spans_and_events(
    tmp_path: Path, embed_model: OfflineEmbedding, handlers: tuple[Recorder, SpanRecorder]
) -> None:
    events, span_handler = handlers
    memory = ComposableMemory.from_defaults(
        user_id="alice", session_id="monday", path=tmp_path, embed_model=embed_model
    )
    memory.put_messages([user("I'm allergic to penicillin."), user("I live in Lisbon.")])
    memory.close()
    events.events.clear()

    memory = ComposableMemory.from_defaults(
        user_id="alice", session_id="friday", path=tmp_path, embed_model=embed_model
    )
    try:
        agent = FunctionAgent(llm=ScriptedLLM(["Noted."]), system_prompt="Be brief.")
        await agent.run(user_msg="Which antibiotics should I avoid?", memory=memory)
    finally:
        memory.close()

    puts = events.of(MemoryPutEvent)
    assert [p.roles for p in puts] == [["user"], ["assistant"]]
    assert all(p.user_id == "alice" and p.session_id == "friday" for p in puts)

    # The agent calls get() before its LLM call, and again after the run for its output.
    block, after = events.of(MemoryBlockEvent)
    assert (block.window_messages, after.window_messages) == (1, 2)
    assert block.query == "Which antibiotics should I avoid?"
    assert block.record_ids and block.token_count > 0 and block.token_limit == 1500
    shown = dict(zip(block.record_ids, block.sources))
    retrievals = events.of(MemoryRetrievalEvent)
    assert {r.source for r in retrievals} == {"vector", "profile"}
    vector = next(r for r in retrievals if r.source == "vector")
    assert vector.query == block.query and len(vector.scores) == len(vector.record_ids)
    # What was injected is what the sources returned, minus what was dropped.
    assert set(shown) <= {i for r in retrievals for i in r.record_ids}
    assert [r.id for r in memory.last_block.records] == after.record_ids

    # The memory's spans sit inside the agent's: a handler sees get() under the run.
    spans = {s.id_: s for s in span_handler.completed_spans}
    # Agents call aget(): its span holds the block's event and each source's retrieval.
    gets = sorted((s for s in spans.values() if s.id_.startswith("ComposableMemory.aget-")),
                  key=lambda s: s.start_time)
    assert len(gets) == 2
    chain = _chain(gets[0].id_, spans)
    assert any(name.startswith("FunctionAgent.") or "Workflow" in name for name in chain[1:]), chain
    assert block.span_id == gets[0].id_
    assert all(
        _chain(r.span_id, spans)[:2] == ["ComposableMemory.retrieve_from", "ComposableMemory.aget"]
        for r in retrievals
    )


def test_extraction_emits_an_event_per_source_with_its_error(
    tmp_path: Path, embed_model: OfflineEmbedding, handlers: tuple[Recorder, SpanRecorder]
) -> None:
    events, _ = handlers
    triples = [{"subject": "User", "predicate": "lives in", "object": "Lisbon"}]
    memory = ComposableMemory.from_defaults(
        user_id="alice", path=tmp_path, embed_model=embed_model, triples=True,
        secondary_memory_sources=[],
    )
    try:
        memory.put(user("I live in Lisbon."))
        memory.extract(llm=ScriptedLLM([pass_answer(triples={"new": triples, "retracted": []})]))
        memory.put(user("I moved to Porto."))
        with pytest.raises(AssertionError):
            memory.extract(llm=ScriptedLLM([]))  # nothing scripted: the pass fails
    finally:
        memory.close()
    done, failed = events.of(MemoryExtractionEvent)
    assert (done.source, done.messages, done.error) == ("pass:triples+instructions", 1, None)
    assert failed.source == "pass:triples+instructions" and failed.messages == 1
    assert failed.error and "script is empty" in failed.error
