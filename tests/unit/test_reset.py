"""``reset()`` is "new chat": this conversation goes, long-term memory stays.

Chat engines call ``memory.reset()`` when the user starts a new chat. Like LlamaIndex's
own ``Memory.reset()``, it clears this session's messages (in the buffer and on disk)
and keeps the user's records, profile and triples, of this session and every other.
Deleting long-term memory is explicit: a source's ``reset(scope)``, or ``forget()``. The
chat engine test runs on SQLite and on PostgreSQL, with a second memory object on the
session standing for another app process.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.chat_engine import SimpleChatEngine

from helpers import assistant, message_texts, user
from llama_memory import ComposableMemory, MemoryRecord, MemorySource, Scope, StoredMessage
from llama_memory.read.compose import THIS_CONVERSATION
from llama_memory.testing import ScriptedLLM

ALLERGY = "I'm allergic to penicillin."


def open_memory(path: Path, embed_model: Any, session_id: str, **kwargs: Any) -> ComposableMemory:
    return ComposableMemory.from_defaults(
        user_id="alice", session_id=session_id, path=path, embed_model=embed_model,
        triples=True, **kwargs,
    )  # fmt: skip


def test_reset_keeps_the_users_long_term_memory_for_a_later_memory(tmp_path: Path, embed_model) -> None:
    earlier = open_memory(tmp_path, embed_model, "monday-morning")
    earlier.put(user("I walk my dog every morning."))
    earlier.close()
    memory = open_memory(tmp_path, embed_model, "monday")
    memory.put_messages([user(ALLERGY), assistant("Noted: no penicillin.")])
    memory.source("profile").set_field("allergies", ["penicillin"], memory.scope)
    memory.add_triples([("user", "is allergic to", "penicillin")])

    memory.reset()

    assert memory.get_all() == []
    # Across sources the allergy is shown once: the triple states it, so search() leaves
    # out the message that says nothing more. The vector source still holds the message.
    assert any(r.text.startswith("user — is allergic to — penicillin") for r in memory.search("penicillin allergy", k=3))
    assert ALLERGY in message_texts(memory.source("vector").retrieve("penicillin allergy", memory.scope, 3))
    memory.close()
    # The session's stored messages are gone: reopening it starts an empty conversation.
    same_session = open_memory(tmp_path, embed_model, "monday")
    assert same_session.get_all() == []
    same_session.close()
    # On Friday, a new memory object on the same path still knows, from every source.
    friday = open_memory(tmp_path, embed_model, "friday")
    try:
        assert any(r.text.startswith("user — is allergic to — penicillin") for r in friday.search("penicillin allergy", k=3))
        assert ALLERGY in message_texts(friday.source("vector").retrieve("penicillin allergy", friday.scope, 3))
        assert friday.source("profile").get_profile(friday.scope) == {"allergies": ["penicillin"]}
        assert [t.object for t in friday.triple_source.triples(friday.scope)] == ["penicillin"]
        block = friday.get(input="Can I take penicillin?")[0].content or ""
        assert "is allergic to — penicillin" in block  # shown once, as the triple that states it
        # Another session's conversation was never touched.
        other = open_memory(tmp_path, embed_model, "monday-morning")
        assert [m.content for m in other.get_all()] == ["I walk my dog every morning."]
        other.close()
    finally:
        friday.close()


async def test_areset_keeps_long_term_memory_too(make_memory) -> None:
    memory = make_memory()
    await memory.aput(user(ALLERGY))
    await memory.areset()
    assert await memory.aget_all() == []
    assert message_texts(await memory.asearch("penicillin", k=1)) == [ALLERGY]


@pytest.fixture(params=["sqlite", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """The store of the test's memories: a SQLite directory, or a PostgreSQL database on
    the test server."""
    if request.param == "postgres":
        return {"store": request.getfixturevalue("postgres_url")}
    return {"path": tmp_path}


def open_on(where: dict[str, Any], embed_model: Any, session_id: str) -> ComposableMemory:
    return ComposableMemory.from_defaults(
        user_id="alice", session_id=session_id, embed_model=embed_model, triples=True, **where
    )


def test_a_chat_engines_new_chat_keeps_long_term_memory(where: dict[str, Any], embed_model) -> None:
    memory = open_on(where, embed_model, "chat-1")
    other_worker = open_on(where, embed_model, "chat-1")  # another app process on the session
    llm = ScriptedLLM(["Noted: no penicillin.", "Amoxicillin is a penicillin: avoid it."])
    engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory)
    engine.chat(ALLERGY)
    # One window for every process on the session (SQLite's file, PostgreSQL's table).
    assert [m.content for m in other_worker.get_all()] == [ALLERGY, "Noted: no penicillin."]

    engine.reset()  # "new chat"

    assert memory.get_all() == []
    assert other_worker.get_all() == []  # the new chat is new for every worker
    other_worker.close()
    engine.chat("Can I take amoxicillin?")
    # The LLM of the new chat saw the fact from the earlier chat in the memory block ...
    assert ALLERGY in llm.calls[-1].text()
    # ... and only the new chat's message in the conversation.
    assert llm.calls[-1].user_texts()[-1] == "Can I take amoxicillin?"
    assert ALLERGY not in llm.calls[-1].user_texts()
    memory.close()
    later = open_on(where, embed_model, "chat-2")
    try:
        assert ALLERGY in message_texts(later.search("penicillin", k=3))
    finally:
        later.close()


def test_deleting_long_term_memory_is_an_explicit_source_reset(make_memory) -> None:
    memory = make_memory(triples=True)
    memory.put(user(ALLERGY))
    memory.add_triples([("user", "is allergic to", "penicillin")])
    memory.profile.set_field("allergies", ["penicillin"], memory.scope)
    for name in ("vector", "triples", "profile"):
        memory.source(name).reset(memory.scope)
    assert memory.search("penicillin") == []
    assert memory.triple_source.triples(memory.scope, include_history=True) == []
    assert memory.profile.get_profile(memory.scope) == {}
    assert [m.content for m in memory.get_all()] == [ALLERGY]  # the conversation stays


class RecordingSource(MemorySource):
    """A source that only records what extraction hands it."""

    name = "recording"

    def __init__(self) -> None:
        self.extracted: list[list[str]] = []

    def add(self, messages: Sequence[StoredMessage], scope: Scope) -> None:
        pass

    def retrieve(self, query: str, scope: Scope, k: int) -> list[MemoryRecord]:
        return []

    def reset(self, scope: Scope) -> None:
        pass

    def extract(self, messages: Sequence[ChatMessage], llm: Any, scope: Scope) -> None:
        self.extracted.append([m.content or "" for m in messages])


def test_after_reset_extraction_starts_from_the_new_conversation() -> None:
    source = RecordingSource()
    memory = ComposableMemory.from_defaults(
        user_id="alice", secondary_memory_sources=[source], llm=ScriptedLLM(), extract_every=2
    )
    memory.put_messages([user("one"), assistant("1"), user("two"), assistant("2")])
    memory.flush()  # extraction runs in the background
    assert source.extracted == [["one", "1", "two", "2"]]
    memory.put(user("three"))  # one user turn pending ...
    memory.reset()  # ... in the conversation that is gone
    memory.put(user("four"))
    assert len(source.extracted) == 1  # one turn of the new conversation: not yet
    memory.put_messages([assistant("4"), user("five")])
    memory.flush()
    # Everything of the new conversation, from its first message.
    assert source.extracted[-1] == ["four", "4", "five"]


def test_after_reset_another_process_restoring_the_memory_holds_the_new_conversation(
    tmp_path: Path, embed_model
) -> None:
    # No session id given: the memory chose one, and a reset starts a new session.
    memory = ComposableMemory.from_defaults(user_id="alice", path=tmp_path, embed_model=embed_model)
    memory.put_messages([user(ALLERGY), assistant("Noted: no penicillin.")])
    memory.reset()  # "new chat"
    memory.put(user("My bike is a red Brompton."))
    data = memory.to_dict()
    memory.close()
    script = textwrap.dedent(
        """
        import json, sys
        from llama_memory import ComposableMemory
        memory = ComposableMemory.from_dict(json.loads(sys.argv[1]))
        messages = memory.get("Can I take penicillin?")
        print(json.dumps({"window": [m.content for m in messages[1:]], "block": messages[0].content}))
        memory.close()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, json.dumps(data)], capture_output=True, text=True, timeout=120, check=True
    )
    seen = json.loads(done.stdout.strip().splitlines()[-1])

    assert seen["window"] == ["My bike is a red Brompton."]
    [line] = [line for line in seen["block"].splitlines() if ALLERGY in line]
    assert THIS_CONVERSATION not in line, line


def test_a_restored_copy_resets_as_the_original_would(tmp_path: Path, embed_model) -> None:
    """to_dict carries whether the memory chose its session id, and when its conversation
    was reset: a copy (from_dict, or a pickle) moves to a new session on reset() as the
    original does, and labels what the original labelled."""
    import pickle

    chose = ComposableMemory.from_defaults(user_id="alice", path=tmp_path / "a", embed_model=embed_model)
    copy = ComposableMemory.from_dict(chose.to_dict(), embed_model=embed_model)
    pickled = pickle.loads(pickle.dumps(chose))
    for memory in (copy, pickled):
        before = memory.session_id
        memory.reset()
        assert memory.session_id != before
        memory.close()
    chose.close()

    given = ComposableMemory.from_defaults(user_id="bob", session_id="chat-1", path=tmp_path / "b", embed_model=embed_model)
    given.put_messages([user(ALLERGY), assistant("Noted: no penicillin.")])
    given.reset()  # the id is kept; what was said before is no longer this conversation's
    restored = ComposableMemory.from_dict(given.to_dict(), embed_model=embed_model)
    given.close()
    block = restored.get("Can I take penicillin?")[0].content
    [line] = [line for line in block.splitlines() if ALLERGY in line]
    assert THIS_CONVERSATION not in line, line
    restored.reset()
    assert restored.session_id == "chat-1"
    restored.close()
