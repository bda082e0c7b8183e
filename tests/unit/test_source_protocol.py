"""The narrow source protocol: a source needs only a name, a priority, add and retrieve;
the memory calls the optional parts (reset/forget, reconcile, reindex, purge, tools,
extract, close) only where a source has them, and writes each batch in one transaction
of its store, saying so when a source cannot join it."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import pytest

from helpers import user
from llama_memory import ComposableMemory, MemoryRecord, Scope, StoredMessage
from llama_memory.sources.base import Forgettable, Reconcilable, Source
from llama_memory.storage.sqlite import SQLiteStore
from llama_memory.testing import ScriptedLLM


class Diary:
    """A source of the narrow protocol only: no base class, no optional method."""

    name = "diary"
    priority = 0

    def __init__(self) -> None:
        self.lines: dict[str, list[str]] = {}

    def add(self, messages: Sequence[StoredMessage], scope: Scope) -> None:
        self.lines.setdefault(scope.require_user(), []).extend(m.text for m in messages)

    def retrieve(self, query: str, scope: Scope, k: int) -> list[MemoryRecord]:
        user_id = scope.require_user()
        found = [t for t in self.lines.get(user_id, []) if query and query.split()[0] in t]
        return [MemoryRecord(text=t, source=self.name, user_id=user_id) for t in found][:k]


def test_a_source_of_the_narrow_protocol_serves_every_memory_call() -> None:
    diary = Diary()
    assert isinstance(diary, Source) and not isinstance(diary, (Forgettable, Reconcilable))
    memory = ComposableMemory.from_defaults(user_id="alice", secondary_memory_sources=[diary])
    memory.put(user("bees live on my roof"))
    memory.put(user("the weather is grey"))
    assert [r.text for r in memory.search("bees")] == ["bees live on my roof"]
    assert [t.metadata.name for t in memory.tools()] == ["update_instructions"]  # none of the source
    memory.extract(llm=ScriptedLLM())  # nothing to extract with: nothing happens
    assert memory.reconcile() == {} and memory.reindex() == 0 and memory.purge_expired() == 0
    memory.forget()  # the diary keeps no per-user data the memory could delete
    memory.close()


def test_something_that_is_not_a_source_is_refused_with_what_to_pass() -> None:
    class NoRetrieve:
        name, priority = "broken", 0

        def add(self, messages: Sequence[StoredMessage], scope: Scope) -> None:
            pass

    with pytest.raises(TypeError, match="name, priority, add, retrieve"):
        ComposableMemory.from_defaults(user_id="alice", secondary_memory_sources=[NoRetrieve()])


class StoredDiary(Diary):
    """A source writing to a store of its own (a second connection)."""

    def __init__(self, store: SQLiteStore) -> None:
        super().__init__()
        self.store = store


def test_a_source_on_another_store_is_said_to_make_batches_non_atomic(
    caplog: pytest.LogCaptureFixture,
) -> None:
    other = SQLiteStore()
    memory = ComposableMemory.from_defaults(user_id="alice", secondary_memory_sources=[StoredDiary(other)])
    with caplog.at_level(logging.WARNING, logger="llama_memory.memory.composable"):
        memory.put(user("one"))
        memory.put(user("two"))
    warnings = [r.getMessage() for r in caplog.records if "not atomic" in r.getMessage()]
    assert len(warnings) == 1 and "diary" in warnings[0]  # said once, naming the source
    memory.close()
    other.close()
