"""The hooks a source may offer: priority, tools, extraction, query-independent records."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.tools import FunctionTool

from helpers import assistant, user
from llama_memory import ComposableMemory, MemoryRecord, MemorySource, Scope, StoredMessage


class NotesSource(MemorySource):
    """A small real source: keeps notes per user, returns them whatever the query."""

    def __init__(self, name: str = "notes", priority: int = 0) -> None:
        self.name = name
        self.priority = priority
        self.notes: dict[str, list[str]] = {}
        self.extracted: list[tuple[list[str], Any, Scope]] = []

    def add(self, messages: Sequence[StoredMessage], scope: Scope) -> None:
        pass

    def retrieve(self, query: str, scope: Scope, k: int) -> list[MemoryRecord]:
        user_id = scope.require_user()
        return [MemoryRecord(text=t, source=self.name, user_id=user_id)
                for t in self.notes.get(user_id, [])][:k]

    def reset(self, scope: Scope) -> None:
        self.notes.pop(scope.require_user(), None)

    def tools(self, scope: Scope) -> list[Any]:
        def save_note(note: str) -> str:
            """Save a note about the user."""
            self.notes.setdefault(scope.require_user(), []).append(note)
            return "saved"

        return [FunctionTool.from_defaults(fn=save_note)]

    def extract(self, messages: Sequence[ChatMessage], llm: Any, scope: Scope) -> None:
        self.extracted.append(([m.content or "" for m in messages], llm, scope))


def test_query_independent_records_are_injected_even_without_a_user_message() -> None:
    notes = NotesSource()
    notes.notes["alice"] = ["prefers metric units"]
    memory = ComposableMemory.from_defaults(user_id="alice", secondary_memory_sources=[notes])
    assert "prefers metric units" in memory.get()[0].content


def test_higher_priority_sources_are_served_first_from_the_budget() -> None:
    low, high = NotesSource("low", priority=0), NotesSource("high", priority=5)
    low.notes["alice"] = [f"low note {i} " + "filler " * 10 for i in range(5)]
    high.notes["alice"] = [f"high note {i} " + "filler " * 10 for i in range(5)]
    memory = ComposableMemory.from_defaults(
        user_id="alice", secondary_memory_sources=[low, high], memory_token_limit=200
    )
    memory.get("anything")
    shown = [r.source for r in memory.last_block.records]
    assert shown[0] == "high"
    assert shown.count("high") > shown.count("low")
    assert memory.source("high") is high
    with pytest.raises(KeyError, match="high"):
        memory.source("missing")


def test_tools_are_bound_to_the_memory_user() -> None:
    notes = NotesSource()
    memory = ComposableMemory.from_defaults(user_id="bob", secondary_memory_sources=[notes])
    tool, instructions = memory.tools()  # the source's, then the user's instructions'
    assert (tool.metadata.name, instructions.metadata.name) == ("save_note", "update_instructions")
    tool.call(note="allergic to peanuts")
    assert notes.notes == {"bob": ["allergic to peanuts"]}


def test_extraction_runs_every_n_user_turns_on_new_messages_only() -> None:
    notes = NotesSource()
    llm = object()  # the source receives the memory's LLM as is
    memory = ComposableMemory.from_defaults(
        user_id="alice", secondary_memory_sources=[notes], llm=llm, extract_every=2
    )
    memory.put(user("one"))
    memory.put(assistant("ok"))
    assert notes.extracted == []
    memory.put(user("two"))
    memory.flush()  # the pass runs in the background; flush waits for it
    assert [texts for texts, _, _ in notes.extracted] == [["one", "ok", "two"]]
    assert notes.extracted[0][1] is llm and notes.extracted[0][2].user_id == "alice"
    memory.put_messages([user("three"), user("four")])
    memory.flush()
    assert [texts for texts, _, _ in notes.extracted][-1] == ["three", "four"]


def test_extract_on_demand_needs_an_llm() -> None:
    memory = ComposableMemory.from_defaults(user_id="alice", secondary_memory_sources=[NotesSource()])
    with pytest.raises(ValueError, match="needs an LLM"):
        memory.extract()


class FailingExtractor(NotesSource):
    """Extraction that rejects the LLM's answer, as a malformed structured output would."""

    def extract(self, messages: Sequence[ChatMessage], llm: Any, scope: Scope) -> None:
        from llama_memory import ExtractionError

        self.extracted.append(([m.content or "" for m in messages], llm, scope))
        raise ExtractionError("malformed output")


def test_failed_automatic_extraction_keeps_the_messages_and_retries_later() -> None:
    source = FailingExtractor()
    memory = ComposableMemory.from_defaults(
        user_id="alice", secondary_memory_sources=[source], llm=object(), extract_every=1
    )
    memory.put(user("first"))  # extraction fails; put does not
    memory.flush()
    memory.put(user("second"))  # the failed pass waits for its retry: nothing more queued
    memory.flush()  # does not wait for a retry's backoff
    assert [m.content for m in memory.get_all()] == ["first", "second"]
    assert [texts for texts, _, _ in source.extracted] == [["first"]]
    # The pass is queued again (retried with backoff), and its retry will read every
    # message after the cursor, "second" included.
    assert memory.runtime.store is not None and memory.runtime.store.counts("extract")["queued"] == 1
    with pytest.raises(Exception, match="malformed"):
        memory.extract()  # on demand, the error is the caller's


def test_search_ranks_only_query_dependent_sources() -> None:
    notes = NotesSource()
    notes.query_independent = True
    notes.notes["alice"] = ["always here"]
    memory = ComposableMemory.from_defaults(user_id="alice", secondary_memory_sources=[notes])
    assert memory.search("anything") == []
    assert "always here" in memory.get("anything")[0].content
