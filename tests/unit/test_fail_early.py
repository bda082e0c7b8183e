"""Settings and input that used to fail late or not at all fail early and clearly: formation
settings no one would run, queries a store cannot hold, and instruction changes that
are already made. (An embedding model the store refuses: tests/unit/test_embedding_identity.py.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import assistant, user
from llama_memory import ComposableMemory, MemoryAdmin, RestoreWarning
from llama_memory.storage.sqlite import DB_FILENAME
from llama_memory.write.buffer import ChatBuffer
from scripted_llm import ScriptedLLM

# -- formation settings without an llm -------------------------------------------------------


@pytest.mark.parametrize("setting", [{"extract_every": 2}, {"extract_after_quiet": 30.0}])
def test_automatic_extraction_without_an_llm_is_refused_before_the_store_opens(
    tmp_path: Path, setting: dict
) -> None:
    name = next(iter(setting))
    with pytest.raises(ValueError, match=rf"{name}=.*no llm.*llm=.*extract_in='worker'"):
        ComposableMemory.from_defaults(user_id="alice", path=tmp_path / "memory", **setting)
    assert not (tmp_path / "memory" / DB_FILENAME).exists()  # nothing was opened for it
    with pytest.raises(ValueError, match=rf"{name}=.*no llm"):  # built by hand too
        ComposableMemory(primary_memory=ChatBuffer.from_defaults(), **setting)


def test_worker_mode_needs_no_llm_but_a_store_the_workers_can_open(tmp_path: Path, embed_model) -> None:
    memory = ComposableMemory.from_defaults(
        user_id="alice", path=tmp_path, embed_model=embed_model, extract_in="worker", extract_every=1
    )
    try:
        memory.put(user("I moved to Porto."))
        assert MemoryAdmin(tmp_path).stats().jobs["queued"] == 1  # waiting for a worker
    finally:
        memory.close()
    with pytest.raises(ValueError, match="in-memory store.*path="):
        ComposableMemory.from_defaults(user_id="alice", extract_in="worker", extract_every=1)


def test_a_memory_restored_without_its_llm_keeps_its_settings_idle_as_it_warns(tmp_path: Path, embed_model) -> None:
    saved = ComposableMemory.from_defaults(
        user_id="alice", path=tmp_path, embed_model=embed_model, llm=ScriptedLLM([]), extract_every=2
    )
    data = json.loads(json.dumps(saved.to_dict()))
    saved.close()
    with pytest.warns(RestoreWarning, match="extract_every=2 does nothing"):
        restored = ComposableMemory.from_dict(data)
    try:
        assert restored.llm is None and restored.to_dict()["extract_every"] == 2
        restored.put_messages([user("I like jazz."), assistant("Noted."), user("And Coltrane.")])
        assert MemoryAdmin(tmp_path).stats().jobs.get("queued", 0) == 0  # as the warning said
    finally:
        restored.close()


# -- queries a store cannot hold ---------------------------------------------------------------


@pytest.mark.parametrize("bad", ["cello \ud800", "trailing \udfff"])
def test_a_query_with_a_lone_surrogate_gets_the_error_put_gives(make_memory, bad: str) -> None:
    memory = make_memory()
    memory.put(user("I play the cello."))
    with pytest.raises(ValueError, match=r"message 0 \(user\).*not valid Unicode") as refused:
        memory.put(user(bad))
    said = str(refused.value).split(" holds ", 1)[1].split(";")[0]  # the one validation's words
    for query in (lambda: memory.get(bad), lambda: memory.search(bad)):
        with pytest.raises(ValueError) as caught:
            query()
        assert said in str(caught.value) and "nothing was retrieved" in str(caught.value)
    assert [r.text for r in memory.search("cello")] == ["I play the cello."]  # the memory is fine


async def test_the_async_queries_refuse_it_too(make_memory) -> None:
    memory = make_memory()
    with pytest.raises(ValueError, match=r"get\(\) input .*not valid Unicode"):
        await memory.aget("cello \ud800")
    with pytest.raises(ValueError, match=r"search\(\) query .*not valid Unicode"):
        await memory.asearch("cello \ud800")


# -- instructions already as asked -----------------------------------------------------------


def test_replace_with_the_current_instructions_writes_nothing(make_memory) -> None:
    memory = make_memory()
    memory.instructions.add("No bullet points.")
    memory.instructions.replace("no bullet points.", "No bullet points or tables.")
    rows = len(memory.instructions.history())
    again = memory.instructions.replace("no bullet points.", "No bullet points or tables.")
    assert again.text == "No bullet points or tables."
    assert len(memory.instructions.history()) == rows  # nothing written
    with pytest.raises(ValueError, match="no current instruction.*Typo"):  # neither is current
        memory.instructions.replace("Typo.", "Something else.")


def test_a_script_run_twice_keeps_one_instruction_not_two(make_memory) -> None:
    memory = make_memory()
    for _ in range(2):  # the docs' snippet, run again on the same store
        memory.instructions.add("Answer in French.")
        memory.instructions.add("No bullet points.")
        memory.instructions.replace("no bullet points.", "No bullet points or tables.")
    assert memory.instructions.texts() == ["Answer in French.", "No bullet points or tables."]
    block = memory.get("hello")[0].content or ""
    assert block.count("No bullet points or tables.") == 1
    history = [(i.op, i.text) for i in memory.instructions.history()]
    assert history[-2:] == [("add", "No bullet points."), ("remove", "")]  # said, then merged
