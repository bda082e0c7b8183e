"""A pickled memory (multiprocessing, caches, workflow serialisers) reopens its store
from its configuration, as ``from_dict`` does, and stores what it is given where the
original and any later memory see it; a memory whose copy could not do that refuses to
be pickled, saying how to pass its live parts again with ``to_dict()``/``from_dict()``."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

import workers
from helpers import assistant, message_texts, user
from llama_memory import ComposableMemory, LlamaMemoryError, RestoreWarning
from llama_memory.core.errors import NotPicklableError
from llama_memory.sources.profile import ProfileSource
from llama_memory.storage.sqlite import SQLiteStore
from llama_memory.storage.sqlite.bundle import SQLiteProfileRows
from scripted_llm import ScriptedLLM


def test_a_copy_in_another_process_stores_where_the_original_sees_it(memory_dir: Path, embed_model) -> None:
    memory = ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", path=memory_dir, embed_model=embed_model
    )
    try:
        memory.put_messages([user("My sister Carla lives in Lisbon."), assistant("Noted.")])
        ctx = workers.forkserver()
        process, conn = workers.start(ctx, workers.pickled_writer, memory, "I keep bees on the roof in Porto.")
        told = workers.receive(conn)
        process.join(60)
        assert "error" not in told, told.get("error")
        assert told == {"sources": ["vector", "profile"], "history": 3}
        assert process.exitcode == 0
        # The original, still whole after being pickled, shares the session's window...
        assert [s.name for s in memory.sources] == ["vector", "profile"]
        assert memory.get_all()[-1].content == "I keep bees on the roof in Porto."
        memory.put(user("And I play the cello."))
    finally:
        memory.close()
    # ... and a new memory of the user finds the copy's message in the long-term record.
    later = ComposableMemory.from_defaults(user_id="alice", session_id="s2", path=memory_dir, embed_model=embed_model)
    try:
        assert "I keep bees on the roof in Porto." in message_texts(later.search("bees", k=3))
    finally:
        later.close()


def test_a_copy_keeps_the_configuration_and_the_live_parts_that_pickle(memory_dir: Path, embed_model) -> None:
    llm = ScriptedLLM([])
    memory = ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", path=memory_dir, embed_model=embed_model, llm=llm,
        extract_every=3, triples=True, top_k=4, tokenizer_fn=str.split, ttl=3600,
    )  # fmt: skip
    copy = pickle.loads(pickle.dumps(memory))
    try:
        assert copy is not memory and copy.runtime.store is not memory.runtime.store
        assert copy.to_dict() == memory.to_dict()
        assert isinstance(copy.llm, ScriptedLLM) and copy.tokenizer_fn("a b c") == ["a", "b", "c"]
        copy.add_triples([("Carla", "lives in", "Lisbon")])
        assert [t.object for t in memory.triple_source.triples(memory.scope)] == ["Lisbon"]
    finally:
        copy.close()
        memory.close()


class LocalLLM:
    """Stands for an LLM holding what cannot be pickled (a client, a lock)."""

    def __init__(self) -> None:
        self.lock = __import__("threading").Lock()


def test_what_a_copy_could_not_reopen_is_refused_naming_to_dict(memory_dir: Path, embed_model) -> None:
    in_memory = ComposableMemory.from_defaults(user_id="alice", embed_model=embed_model)
    store = SQLiteStore(memory_dir / "own")
    custom = ComposableMemory.from_defaults(
        user_id="alice", path=memory_dir, secondary_memory_sources=[ProfileSource(SQLiteProfileRows(store))]
    )
    unpicklable_llm = ComposableMemory.from_defaults(
        user_id="alice", session_id="s9", path=memory_dir, embed_model=embed_model, llm=LocalLLM()
    )
    saved = ComposableMemory.from_defaults(
        user_id="alice", session_id="s8", path=memory_dir, embed_model=embed_model, llm=ScriptedLLM([]),
        extract_every=2,
    )  # fmt: skip
    saved.close()
    with pytest.warns(RestoreWarning):
        restored = ComposableMemory.from_dict(saved.to_dict())  # its extraction idle
    cases = [
        (in_memory, "in-memory.*path=None"),
        (restored, "restored without its llm.*extract_every=2"),
        (custom, "custom secondary_memory_sources"),
        (unpicklable_llm, "its llm, LocalLLM, cannot be pickled"),
    ]
    try:
        for memory, why in cases:
            with pytest.raises(NotPicklableError, match=why) as refused:
                pickle.dumps(memory)
            assert "memory.to_dict()" in str(refused.value) and "from_dict(" in str(refused.value)
            assert isinstance(refused.value, TypeError) and isinstance(refused.value, LlamaMemoryError)
            # The memory itself is untouched: it still stores and finds.
            memory.put(user("Still here after the refused pickle."))
            assert memory.get_all()[-1].content == "Still here after the refused pickle."
    finally:
        for memory, _ in cases:
            memory.close()
        store.close()
