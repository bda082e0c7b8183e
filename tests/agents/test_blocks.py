"""llama-memory's LlamaIndex memory blocks (``llama_memory.blocks``) inside LlamaIndex's own
``Memory``, driven by real ``FunctionAgent`` runs with the scripted LLM: a fact told in one
session is recalled in another, users stay apart, the blocks follow the composition rules
of ``ComposableMemory.get`` (relevance, dedup against the short-term queue, budget), they
survive a workflow ``Context`` saved and restored, and what ``Memory`` receives when it
truncates them for its ``token_limit``.

``Memory`` hands messages to its blocks only when its short-term queue outgrows
``token_limit * chat_history_token_ratio``: the tests set that share small so that the
previous turn is flushed at once.
"""

from __future__ import annotations

import asyncio
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Optional

import pytest
from llama_index.core.agent.workflow import FunctionAgent, ReActAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.memory import Memory
from llama_index.core.memory.memory import BaseMemoryBlock
from llama_index.core.workflow import Context
from workflows.context.serializers import PickleSerializer

from llama_memory import (
    ComposableMemory,
    LlamaMemoryError,
    MemoryClosedError,
    ScopeError,
    StorageError,
)
from llama_memory.blocks import (
    OPEN_SESSIONS,
    InstructionsMemoryBlock,
    LongTermMemoryBlock,
    MemoryBlocks,
    ProfileMemoryBlock,
)
from llama_memory.read.compose import INSTRUCTIONS_INTRO
from scripted_llm import ScriptedLLM, message_plain_text

SYSTEM_PROMPT = "Be brief."
FACT = "I'm vegetarian and I live in Lisbon."
QUESTION = "Where should I eat tonight in Lisbon?"


@pytest.fixture
def opened() -> Iterator[list[MemoryBlocks]]:
    """Block factories to close at the end of a test."""
    factories: list[MemoryBlocks] = []
    yield factories
    for blocks in factories:
        blocks.close()


def open_blocks(opened: list[MemoryBlocks], user_id: str, **where: Any) -> MemoryBlocks:
    blocks = MemoryBlocks.open(user_id, **where)
    opened.append(blocks)
    return blocks


class OtherOrderMemory(Memory):
    """LlamaIndex's ``Memory`` truncating distinct priorities the other way round from the
    installed llama-index-core: 0.14.25 truncates priority 1 first, LlamaIndex's repository
    now the higher number first. The installed code does the truncating, on the blocks with
    their nonzero priorities mirrored (p -> top - p), so that the blocks meet both orders."""

    async def _truncate_memory_blocks(self, *args: Any, **kwargs: Any) -> Any:
        blocks = self.memory_blocks
        top = max((b.priority for b in blocks), default=0) + 1
        self.memory_blocks = [b if b.priority == 0 else b.model_copy(update={"priority": top - b.priority}) for b in blocks]
        try:
            return await super()._truncate_memory_blocks(*args, **kwargs)
        finally:
            self.memory_blocks = blocks


#: Both truncation orders of LlamaIndex's Memory: the installed one and the other.
BOTH_ORDERS = pytest.mark.parametrize("memory_class", [Memory, OtherOrderMemory], ids=["installed", "other-order"])


def short_term(session_id: str, blocks: list[Any], token_limit: int = 4000, memory_class: type[Memory] = Memory) -> Memory:
    """A LlamaIndex Memory whose queue keeps about one message: the turn before the
    current one is flushed to the blocks."""
    return memory_class.from_defaults(
        session_id=session_id,
        memory_blocks=blocks,
        token_limit=token_limit,
        chat_history_token_ratio=12 / token_limit,
        token_flush_size=10,
    )


def memory_text(messages: list[ChatMessage]) -> str:
    """The text of the system messages that hold Memory's ``<memory>`` section."""
    return "\n".join(
        message_plain_text(m) for m in messages if m.role == MessageRole.SYSTEM and "<memory>" in message_plain_text(m)
    )


def section(text: str, name: str) -> list[str]:
    """The lines of one block (``<name>`` ... ``</name>``) in Memory's section, [] if absent."""
    lines = text.splitlines()
    if f"<{name}>" not in lines:
        return []
    start = lines.index(f"<{name}>")
    return lines[start + 1 : lines.index(f"</{name}>", start)]


async def tell(agent_llm: ScriptedLLM, memory: Memory, *turns: str) -> None:
    agent = FunctionAgent(llm=agent_llm, system_prompt=SYSTEM_PROMPT)
    for turn in turns:
        await agent.run(user_msg=turn, memory=memory)


async def ask(memory: Memory, question: str = QUESTION) -> str:
    """One run; the memory section of the LLM's first call."""
    llm = ScriptedLLM(["Try the vegetarian tasca."])
    await FunctionAgent(llm=llm, system_prompt=SYSTEM_PROMPT).run(user_msg=question, memory=memory)
    return memory_text(llm.calls[0].messages)


# --------------------------------------------------------------------------- recall


async def test_a_fact_told_in_one_session_is_recalled_in_another(tmp_path: Path, opened, embed_model) -> None:
    blocks = open_blocks(opened, "alice", path=tmp_path, session_id="s1", embed_model=embed_model)
    first = short_term("s1", blocks.all())
    await tell(ScriptedLLM(["Noted: vegetarian, in Lisbon.", "You're welcome."]), first, FACT, "Thanks!")

    # What Memory flushed is stored once (three blocks receive it), as session s1's messages.
    stored = [message_plain_text(m) for m in blocks.memory_for("s1").get_all()]
    assert stored.count(FACT) == 1, stored
    found = [r for r in blocks.memory.search("vegetarian Lisbon", k=5) if FACT in r.text]
    assert found and found[0].session_id == "s1"

    # Another conversation, another MemoryBlocks (as in a new request or process).
    again = open_blocks(opened, "alice", path=tmp_path, embed_model=embed_model)
    text = await ask(short_term("s2", again.all()))
    long_term = section(text, "long_term_memory")
    assert any(FACT in line for line in long_term), text
    assert not any("earlier in this conversation" in line for line in long_term)  # it was s1


async def test_with_memorys_default_limits_a_short_conversation_never_reaches_the_store(
    tmp_path: Path, opened, embed_model
) -> None:
    """What docs/howto/llamaindex-memory-blocks.md warns of: ``Memory`` hands its blocks
    only what it flushes, and with its defaults ten short exchanges are never flushed."""
    blocks = open_blocks(opened, "alice", path=tmp_path, embed_model=embed_model)
    memory = Memory.from_defaults(session_id="chat-1", memory_blocks=blocks.all())
    await tell(ScriptedLLM(["Noted."] * 10), memory, *[f"I like thing number {i}." for i in range(10)])
    assert blocks.memory.search("what things do I like?", k=5) == []
    flushed = short_term("chat-2", blocks.all())  # the doc's remedy: a small share flushes at once
    await tell(ScriptedLLM(["Noted.", "Sure."]), flushed, FACT, "Thanks!")
    assert any("Lisbon" in r.text for r in blocks.memory.search("where do I live?", k=5))


async def test_users_on_one_store_stay_apart(tmp_path: Path, opened, embed_model) -> None:
    alice = open_blocks(opened, "alice", path=tmp_path, embed_model=embed_model)
    await tell(ScriptedLLM(["Noted.", "Sure."]), short_term("a1", alice.all()), FACT, "Thanks!")
    bob = open_blocks(opened, "bob", path=tmp_path, embed_model=embed_model)
    await tell(ScriptedLLM(["Noted.", "Sure."]), short_term("b1", bob.all()), "I live in Porto and I love fish.", "Thanks!")

    bob_text = await ask(short_term("b2", bob.all()), "Where do I live?")
    alice_text = await ask(short_term("a2", alice.all()), "Where do I live?")
    assert "Porto" in bob_text and "Lisbon" not in bob_text
    assert "Lisbon" in alice_text and "Porto" not in alice_text


async def test_one_session_per_memory_and_the_store_opened_once_for_the_first(tmp_path: Path, opened, embed_model) -> None:
    blocks = open_blocks(opened, "alice", path=tmp_path, session_id="s1", embed_model=embed_model)
    first = blocks.memory
    await tell(ScriptedLLM(["Noted.", "Sure."]), short_term("s1", blocks.all()), FACT, "Thanks!")
    assert blocks.memory_for("s1") is first  # the Memory's session is the one opened
    # The same blocks serve a second Memory session: its messages are stored under it.
    await tell(ScriptedLLM(["Noted.", "Sure."]), short_term("s2", blocks.all()), "I play the cello.", "Bye!")
    assert "I play the cello." in [message_plain_text(m) for m in blocks.memory_for("s2").get_all()]
    assert "I play the cello." not in [message_plain_text(m) for m in first.get_all()]


async def test_a_react_agent_without_a_system_prompt_is_warned_that_it_drops_the_blocks(
    tmp_path: Path, opened, embed_model
) -> None:
    """That agent drops a leading system message, where Memory puts the blocks by default:
    the LLM would run without them, unsaid. The warning says what to do, and it works."""
    blocks = open_blocks(opened, "alice", path=tmp_path, session_id="s1", embed_model=embed_model)
    blocks.memory.put_messages([ChatMessage(role=MessageRole.USER, content=FACT)])

    async def react_sees(memory: Memory, **agent: Any) -> str:
        llm = ScriptedLLM(["Thought: I can answer.\nAnswer: Try the tasca."])
        await ReActAgent(llm=llm, **agent).run(user_msg=QUESTION, memory=memory)
        return "\n".join(message_plain_text(m) for m in llm.calls[0].messages)

    with pytest.warns(UserWarning, match="ReActAgent without a system_prompt.*insert_method='user'"):
        assert FACT not in await react_sees(short_term("s2", blocks.all()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert FACT in await react_sees(short_term("s3", blocks.all()), system_prompt=SYSTEM_PROMPT)
        as_user = Memory.from_defaults(session_id="s4", memory_blocks=blocks.all(), insert_method="user")
        assert FACT in await react_sees(as_user)
    assert not [w for w in caught if "ReActAgent" in str(w.message)]


@pytest.mark.parametrize("call", ["flush", "get"])
async def test_a_sessions_memory_in_use_is_not_closed_for_room_by_other_sessions(
    call: str, tmp_path: Path, opened, embed_model
) -> None:
    """The blocks keep OPEN_SESSIONS memories open and close the least recently used one
    when another session opens: never while a block's call runs on it, or the flushed
    turn would be lost (MemoryClosedError) when many conversations run at once."""
    blocks = open_blocks(opened, "alice", path=tmp_path, session_id="s0", embed_model=embed_model)
    busy = blocks.memory_for("s0")
    block = blocks.long_term()
    with busy.runtime.lock:  # another call of this memory runs: the block's call waits for it
        if call == "flush":
            task = asyncio.create_task(block.aput(
                [ChatMessage(role=MessageRole.USER, content=FACT)], from_short_term_memory=True, session_id="s0",
            ))  # fmt: skip
        else:
            task = asyncio.create_task(block.aget([ChatMessage(role=MessageRole.USER, content=QUESTION)], session_id="s0"))
        await asyncio.sleep(0)  # the call has its memory and waits for the lock
        for i in range(OPEN_SESSIONS):  # meanwhile other conversations open theirs
            blocks.memory_for(f"other{i}")
    await task
    if call == "flush":
        assert FACT in [message_plain_text(m) for m in blocks.memory_for("s0").get_all()]
    with pytest.raises(MemoryClosedError):  # closed once its call ended
        busy.search("Lisbon")


# --------------------------------------------------------------------------- composition rules


async def test_the_blocks_follow_composable_memory_relevance_dedup_and_budget(tmp_path: Path, opened, embed_model) -> None:
    blocks = open_blocks(opened, "alice", path=tmp_path, embed_model=embed_model)
    blocks.memory.put_messages([
        ChatMessage(role="user", content=FACT),
        ChatMessage(role="assistant", content="Noted."),
        ChatMessage(role="user", content="My sister Ana lives in Porto and works as a nurse."),
        ChatMessage(role="assistant", content="Nice."),
    ])
    blocks.memory.profile.set_field("name", "Alice", blocks.memory.scope)
    blocks.memory.instructions.add("Answer in French.")

    # Small talk retrieves nothing: no long-term block, while the profile and the
    # instructions (query-independent) are there.
    text = await ask(short_term("s2", blocks.all()), "hi")
    assert section(text, "long_term_memory") == []
    assert any('"name: Alice"' in line for line in section(text, "user_profile")), text
    assert section(text, "user_instructions") == [INSTRUCTIONS_INTRO, "- Answer in French."]

    # A relevant question gets the record, quoted, labelled with its source.
    text = await ask(short_term("s3", blocks.all()), "Where does my sister live?")
    lines = section(text, "long_term_memory")
    assert any("Ana lives in Porto" in line and line.startswith("- [vector") for line in lines), text

    # What the short-term queue shows is not repeated in the block.
    memory = short_term("s4", blocks.all(), token_limit=100_000)  # nothing flushed
    await memory.aput(ChatMessage(role="user", content="My sister Ana lives in Porto and works as a nurse."))
    text = memory_text(await memory.aget(input="Where does my sister live?"))
    assert not any("Ana lives in Porto" in line for line in section(text, "long_term_memory")), text

    # The memory_token_limit budget holds, as for ComposableMemory.get.
    tight = open_blocks(opened, "alice", path=tmp_path, embed_model=embed_model, memory_token_limit=60)
    text = await ask(short_term("s5", tight.all()), "Where do my sister and I live?")
    shown = [line for name in ("user_instructions", "user_profile", "long_term_memory") for line in section(text, name)]
    assert len(tight.memory.tokenizer_fn("\n".join(shown))) <= 60 + 10  # intros differ by a few tokens
    assert tight.memory_for("s5").last_block.dropped_for_budget > 0


# --------------------------------------------------------------------------- Context save/restore


async def test_blocks_on_an_encrypted_store_open_every_session_with_the_key_and_never_save_it(
    tmp_path: Path, opened, embed_model, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The key given to ``open`` reaches each ``Memory`` session's memory (the first
    session the blocks had not opened failed with "its key is never written"), and stays
    out of a pickle, whose copy reads it from the environment again."""
    pytest.importorskip("sqlcipher3", reason="the encrypted extra: make test installs it, the lowest venv does not")
    key = "correct horse battery staple"
    blocks = open_blocks(opened, "alice", path=tmp_path, embed_model=embed_model, encryption_key=key)
    await tell(ScriptedLLM(["Noted: vegetarian, in Lisbon.", "You're welcome."]), short_term("s1", blocks.all()), FACT, "Thanks!")
    assert [message_plain_text(m) for m in blocks.memory_for("s1").get_all()].count(FACT) == 1
    assert not any(b"Lisbon" in f.read_bytes() for f in tmp_path.glob("memory.sqlite3*"))

    saved = pickle.dumps(blocks)
    assert key.encode() not in saved
    copy = pickle.loads(saved)
    with pytest.raises(LlamaMemoryError, match="is encrypted, and its key is never written"):
        copy.memory_for("s2")
    monkeypatch.setenv("LLAMA_MEMORY_ENCRYPTION_KEY", key)
    opened.append(copy)
    assert any(FACT in line for line in section(await ask(short_term("s2", copy.all())), "long_term_memory"))


async def test_the_blocks_survive_a_workflow_context_saved_and_restored(tmp_path: Path, opened, embed_model) -> None:
    blocks = open_blocks(opened, "alice", path=tmp_path, session_id="s1", embed_model=embed_model)
    memory = short_term("s1", blocks.all())
    llm = ScriptedLLM(["Noted.", "Sure.", "Try the vegetarian tasca."])
    agent = FunctionAgent(llm=llm, system_prompt=SYSTEM_PROMPT)
    ctx = Context(agent)
    await agent.run(user_msg=FACT, memory=memory, ctx=ctx)
    # (A run on an existing Context passes memory= again: the workflow re-saves its
    # state as JSON between runs, which LlamaIndex's Memory does not survive.)
    await agent.run(user_msg="Thanks!", memory=memory, ctx=ctx)
    # LlamaIndex's Memory is saved in a Context with the pickle serializer (its JSON
    # form fails on its own insert_method); as stored in a database:
    data = json.loads(json.dumps(ctx.to_dict(serializer=PickleSerializer())))
    blocks.close()  # another process, as far as the blocks know: nothing open

    restored = Context.from_dict(agent, data, serializer=PickleSerializer())
    again = await restored.store.get("memory")
    assert [type(b) for b in again.memory_blocks] == [InstructionsMemoryBlock, LongTermMemoryBlock, ProfileMemoryBlock]
    shared = again.memory_blocks[0].blocks
    assert all(b.blocks is shared for b in again.memory_blocks)  # still one store for the three
    assert shared.config["path"] == str(tmp_path)

    llm.reset_calls()
    await agent.run(user_msg=QUESTION, ctx=restored)
    long_term = section(memory_text(llm.calls[0].messages), "long_term_memory")
    assert any(FACT in line and "earlier in this conversation" in line for line in long_term)
    opened.append(shared)


async def test_a_block_dumped_as_json_reopens_its_store_and_a_store_that_is_gone_is_not_replaced(
    tmp_path: Path, opened, embed_model
) -> None:
    store = tmp_path / "memory"
    blocks = open_blocks(opened, "alice", path=store, embed_model=embed_model)
    blocks.memory.put_messages([ChatMessage(role="user", content=FACT)])
    block = blocks.long_term()
    data = json.loads(json.dumps(block.model_dump(mode="json")))
    copy = LongTermMemoryBlock.model_validate(data)
    opened.append(copy.blocks)
    window = [ChatMessage(role="user", content=QUESTION)]
    assert FACT in await copy.aget(window, session_id="s2")
    assert await copy.aget(window, session_id="s2") == await block.aget(window, session_id="s2")

    # The pickled copy of a store that was deleted since raises on use: restoring never
    # opens a new, empty memory in its place.
    gone = pickle.loads(pickle.dumps(blocks.long_term()))
    blocks.close()
    shutil.rmtree(store)
    with pytest.raises(StorageError, match="does not exist"):
        await gone.aget(window, session_id="s3")
    assert not store.exists()


#: Restores the Context saved in the file argv[1] in a process with no network (every
#: socket connection refused): argv[2] "as-is", or "get_tokenizer" (the docs' step for a
#: Memory without llama-memory's blocks first); prints what the LLM was sent.
RESTORE_OFFLINE = """
import asyncio, json, socket, sys

def refuse(*args, **kwargs):
    raise OSError("no network in this process")

socket.socket.connect = refuse
if sys.argv[2] == "get_tokenizer":
    from llama_index.core.utils import get_tokenizer

    get_tokenizer()
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.workflow import Context
from workflows.context.serializers import PickleSerializer
from scripted_llm import ScriptedLLM, message_plain_text

async def main():
    llm = ScriptedLLM(["Try the tasca."])
    agent = FunctionAgent(llm=llm, system_prompt="Be brief.")
    saved = json.loads(open(sys.argv[1]).read())
    restored = Context.from_dict(agent, saved, serializer=PickleSerializer())
    await agent.run("Where should I eat tonight in Lisbon?", ctx=restored)
    print(json.dumps([message_plain_text(m) for m in llm.calls[0].messages]))

asyncio.run(main())
"""


def restore_offline(tmp_path: Path, saved: Path, how: str) -> subprocess.CompletedProcess:
    """Run RESTORE_OFFLINE in a fresh process: no network, a temporary directory of its
    own (no tiktoken cache there) and no TIKTOKEN_CACHE_DIR."""
    root = Path(__file__).resolve().parents[2]
    temporary = Path(tempfile.mkdtemp(prefix=f"tmp-{how}-", dir=tmp_path))
    env = {k: v for k, v in os.environ.items() if k not in ("TIKTOKEN_CACHE_DIR", "DATA_GYM_CACHE_DIR")}
    env.update(TMPDIR=str(temporary), PYTHONPATH=os.pathsep.join([str(root), str(root / "tests")]))
    return subprocess.run(
        [sys.executable, "-c", RESTORE_OFFLINE, str(saved), how],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip


async def test_a_pickled_memory_restores_offline_in_a_fresh_process(tmp_path: Path, opened) -> None:
    """LlamaIndex's Memory pickles its tokenizer by name, and tiktoken downloads it in a
    process that has not loaded it: a Memory holding the blocks restores with no network
    (they load it from LlamaIndex's own copy first); one without them needs the docs'
    step (get_tokenizer() before restoring), and fails without it."""
    blocks = open_blocks(opened, "alice", path=tmp_path / "memory", session_id="s1")
    agent = FunctionAgent(llm=ScriptedLLM(["Noted.", "Sure.", "Noted."]), system_prompt=SYSTEM_PROMPT)
    ctx = Context(agent)
    memory = short_term("s1", blocks.all())
    for turn in (FACT, "Thanks!"):
        await agent.run(user_msg=turn, memory=memory, ctx=ctx)
    with_blocks = tmp_path / "with-blocks.json"
    with_blocks.write_text(json.dumps(ctx.to_dict(serializer=PickleSerializer())))
    blocks.close()

    plain_ctx = Context(agent)
    await agent.run(user_msg=FACT, memory=Memory.from_defaults(session_id="p1", token_limit=4000), ctx=plain_ctx)
    without = tmp_path / "without-blocks.json"
    without.write_text(json.dumps(plain_ctx.to_dict(serializer=PickleSerializer())))

    restored = restore_offline(tmp_path, with_blocks, "as-is")
    assert restored.returncode == 0, restored.stderr[-3000:]
    sent = "\n".join(json.loads(restored.stdout.strip().splitlines()[-1]))
    assert FACT in sent  # the blocks reopened the store and showed the fact

    refused = restore_offline(tmp_path, without, "as-is")
    # (The serializer hides the download's error behind its JSON fallback's.)
    assert refused.returncode != 0, refused.stdout
    assert "Failed to deserialize state value for key memory" in refused.stderr, refused.stderr[-3000:]
    documented = restore_offline(tmp_path, without, "get_tokenizer")
    assert documented.returncode == 0, documented.stderr[-3000:]


# --------------------------------------------------------------------------- truncation


class _Recording(BaseMemoryBlock[str]):
    """A block that only records when Memory asks it to truncate."""

    async def _aget(self, messages: Any = None, **block_kwargs: Any) -> str:
        return "word " * 50

    async def _aput(self, messages: list[ChatMessage]) -> None:
        pass

    async def atruncate(self, content: str, tokens_to_truncate: int) -> Optional[str]:
        TRUNCATED.append(self.name)
        return None


TRUNCATED: list[str] = []


@pytest.mark.parametrize("priorities", [(1, 2), (1, 1)], ids=["distinct", "equal"])
async def test_the_two_memory_classes_truncate_distinct_priorities_in_opposite_orders(priorities) -> None:
    # What the blocks' tests below stand on: OtherOrderMemory really is the other order,
    # and equal priorities are truncated in list order by both.
    orders = []
    for memory_class in (Memory, OtherOrderMemory):
        TRUNCATED.clear()
        blocks = [_Recording(name="one", priority=priorities[0]), _Recording(name="two", priority=priorities[1])]
        await short_term("s", blocks, token_limit=20, memory_class=memory_class).aget()
        orders.append(list(TRUNCATED))
    if priorities[0] != priorities[1]:
        assert orders[0] == orders[1][::-1] and sorted(orders[0]) == ["one", "two"]
    else:
        assert orders[0] == orders[1] == ["one", "two"]


@BOTH_ORDERS
async def test_memory_truncates_the_least_relevant_records_then_the_profile_never_the_instructions(
    tmp_path: Path, opened, embed_model, memory_class: type[Memory]
) -> None:
    # The same on every llama-index-core, whichever way it orders distinct priorities.
    blocks = open_blocks(opened, "alice", path=tmp_path, embed_model=embed_model, min_relevance=0.0)
    facts = [
        "I live in Lisbon, near the river.",
        "I'm vegetarian since 2019.",
        "My favourite restaurant in Lisbon is a small tasca.",
        "I cook lentil soup on Sundays.",
    ]
    for i, fact in enumerate(facts):  # one session each: four records, not one excerpt
        blocks.memory_for(f"old{i}").put_messages([ChatMessage(role="user", content=fact)])
    blocks.memory.profile.set_field("name", "Alice", blocks.memory.scope)
    blocks.memory.profile.set_field("diet", "vegetarian, no fish, no eggs", blocks.memory.scope)
    blocks.memory.instructions.add("Answer in French.")

    async def shown(token_limit: int) -> str:
        memory = short_term("s2", blocks.all(), token_limit=token_limit, memory_class=memory_class)
        await memory.aput(ChatMessage(role="user", content=QUESTION))
        return memory_text(await memory.aget())

    whole = await shown(100_000)
    records = section(whole, "long_term_memory")[1:]
    profile = section(whole, "user_profile")
    assert len(records) >= 3 and len(profile) == 3  # the intro and two fields

    def tokens(lines: list[str]) -> int:
        return sum(len(blocks.memory.tokenizer_fn(line)) for line in lines)

    # A token_limit that leaves room for about half the records: the most relevant stay,
    # in order; the profile and the instructions are whole.
    total = len(blocks.memory.tokenizer_fn(whole))
    text = await shown(total - tokens(records[len(records) // 2 :]) + 30)
    kept = section(text, "long_term_memory")[1:]
    assert 0 < len(kept) < len(records), (kept, records)
    assert kept == records[: len(kept)]
    assert section(text, "user_profile") == profile
    assert section(text, "user_instructions") == section(whole, "user_instructions")

    # One token less than the queue and the blocks without the long-term block (as Memory
    # counts them: each block's text, the queue's message): no record is left, and the
    # profile's last field goes.
    names = ("user_instructions", "long_term_memory", "user_profile")
    counted = sum(tokens(["\n".join(section(whole, name))]) for name in names) + tokens([QUESTION])
    text = await shown(counted - tokens(["\n".join(section(whole, "long_term_memory"))]) - 1)
    assert section(text, "long_term_memory") == []
    assert section(text, "user_profile") == profile[:-1], text
    assert section(text, "user_instructions") == section(whole, "user_instructions")

    # With no room at all, the instructions (priority 0) are still there, whole.
    text = await shown(40)
    assert section(text, "long_term_memory") == [] and section(text, "user_profile") == []
    assert section(text, "user_instructions") == [INSTRUCTIONS_INTRO, "- Answer in French."]


# --------------------------------------------------------------------------- bad input


def test_bad_arguments_say_what_to_pass(tmp_path: Path, opened) -> None:
    with pytest.raises(ValueError, match="path='./memory'"):
        MemoryBlocks.open("alice")
    with pytest.raises(TypeError, match="token_limit"):
        MemoryBlocks.open("alice", path=tmp_path, token_limit=100)
    with pytest.raises(TypeError, match="memory_token_limit"):
        MemoryBlocks.open("alice", path=tmp_path, memory_token_limt=100)
    # The store by position, as a newcomer writes it: the call to make, and nothing created.
    with pytest.raises(TypeError, match=rf"takes the store by name.*MemoryBlocks\.open\('alice', path={str(tmp_path / 'm')!r}\)$"):
        MemoryBlocks.open("alice", str(tmp_path / "m"))
    with pytest.raises(TypeError, match=r"MemoryBlocks\.open\('alice', store='postgresql://app@db/memory'\)$"):
        MemoryBlocks.open("alice", "postgresql://app@db/memory")
    # No long-term source: what Memory flushes would be kept nowhere, in silence.
    with pytest.raises(ValueError, match=r"secondary_memory_sources=\[\] has no long-term memory"):
        MemoryBlocks.open("alice", path=tmp_path / "m", secondary_memory_sources=[])
    assert not (tmp_path / "m").exists()
    blocks = open_blocks(opened, "alice", path=tmp_path)
    with pytest.raises(ValueError, match="priority 0"):
        blocks.instructions(priority=2)


@pytest.mark.parametrize("user_id", ["", "   ", None])
def test_a_missing_user_is_refused_before_anything_is_created(tmp_path: Path, user_id: Any) -> None:
    """No user: refused before the store is made (no file at the path), with advice for
    the call that was made: a MemoryBlocks caller is shown MemoryBlocks.open."""
    where = tmp_path / "memory"
    with pytest.raises(ScopeError, match=r"MemoryBlocks\.open\(\) needs a user_id") as refused:
        MemoryBlocks.open(user_id=user_id, path=where)
    assert "from_defaults" not in str(refused.value)
    assert "MemoryBlocks.open(user_id='alice'" in str(refused.value)
    assert not where.exists()
    with pytest.raises(ScopeError, match="needs a user_id"):
        ComposableMemory.from_defaults(user_id=user_id, path=where)
    assert not where.exists()
    with pytest.raises(TypeError, match="user_id as a string, not int"):
        MemoryBlocks.open(user_id=42, path=where)  # type: ignore[arg-type]
    assert not where.exists()


def test_the_saved_configuration_holds_none_of_the_memorys_arguments(tmp_path: Path, opened) -> None:
    """token_limit and insert_method are the Memory's (open() refuses them): the blocks'
    configuration, pickled with a Context, does not carry them either."""
    blocks = open_blocks(opened, "alice", path=tmp_path)
    for saved in (blocks.config, pickle.loads(pickle.dumps(blocks)).config, blocks.long_term().model_dump()["blocks"]["config"]):
        assert not set(saved) & {"token_limit", "insert_method", "chat_history", "primary_memory"}, sorted(saved)
    copy = pickle.loads(pickle.dumps(blocks.long_term()))
    opened.append(copy.blocks)
    assert copy.blocks.memory.user_id == "alice"  # and it still reopens the store


# --------------------------------------------------------------------------- PostgreSQL


async def test_blocks_on_postgresql_from_a_url_and_from_an_application_pool(postgres_url: str, opened, embed_model) -> None:
    from psycopg_pool import ConnectionPool

    blocks = open_blocks(opened, "alice", store=postgres_url, embed_model=embed_model)
    await tell(ScriptedLLM(["Noted.", "Sure."]), short_term("s1", blocks.all()), FACT, "Thanks!")
    with ConnectionPool(postgres_url, min_size=1, max_size=2, open=True) as pool:
        pooled = open_blocks(opened, "alice", store=pool, embed_model=embed_model)
        text = await ask(short_term("s2", pooled.all()))
        assert any(FACT in line for line in section(text, "long_term_memory")), text
        # A pool is a live object: a pickled block asks for it again instead of guessing.
        copy = pickle.loads(pickle.dumps(pooled.long_term()))
        with pytest.raises(LlamaMemoryError, match="store=pool"):
            await copy.aget([ChatMessage(role="user", content=QUESTION)], session_id="s3")
        pooled.close()
        assert not pool.closed  # the application's pool is the application's to close


# --------------------------------------------------------------------------- tools


async def test_memory_tools_in_a_memory_run_act_for_the_blocks_user(tmp_path: Path, opened, embed_model) -> None:
    """An agent built once with one user's tools, run with another user's LlamaIndex
    ``Memory`` of llama-memory blocks: the tools act for the run's user (as they do for a
    run's ``ComposableMemory``), never for the user they were built from."""
    from scripted_llm import ToolCallReply

    alice = open_blocks(opened, "alice", path=tmp_path, embed_model=embed_model)
    bob = open_blocks(opened, "bob", path=tmp_path, embed_model=embed_model)
    llm = ScriptedLLM(
        [
            ToolCallReply("update_profile", {"operations": [{"op": "set", "path": "name", "value": "Bob"}]}),
            "Nice to meet you, Bob.",
        ]
    )
    agent = FunctionAgent(llm=llm, tools=alice.memory.tools(), system_prompt=SYSTEM_PROMPT)
    await agent.run(user_msg="I am Bob.", memory=short_term("b1", bob.all()))

    result = message_plain_text(llm.calls[1].messages[-1])
    assert llm.calls[1].messages[-1].role == MessageRole.TOOL and "rror" not in result, result
    assert bob.memory.profile.get_profile(bob.memory.scope) == {"name": "Bob"}
    assert alice.memory.profile.get_profile(alice.memory.scope) == {}


def test_a_reset_of_the_blocks_memory_keeps_the_session_the_blocks_name(tmp_path: Path, opened) -> None:
    """The blocks name each session by its Memory's session_id: a "new chat" on the
    memory behind them clears the conversation but keeps that session id, so the blocks
    still find the memory of their session (with or without a session id given)."""
    for given in (None, "chat-1"):
        blocks = open_blocks(opened, f"u-{given}", path=tmp_path / str(given), session_id=given)
        session = blocks.session_id
        blocks.memory.put(ChatMessage(role=MessageRole.USER, content=FACT))
        blocks.memory.reset()
        assert blocks.memory_for(session).session_id == session
        assert blocks.memory.get_all() == []


async def test_with_and_async_with_close_every_sessions_memory_on_leaving(tmp_path: Path, embed_model) -> None:
    with pytest.raises(RuntimeError, match="the app failed"):
        with MemoryBlocks.open("alice", path=tmp_path, embed_model=embed_model) as blocks:
            first, second = blocks.memory, blocks.memory_for("other")
            raise RuntimeError("the app failed")
    for memory in (first, second):
        with pytest.raises(MemoryClosedError):
            memory.search("anything")
    async with MemoryBlocks.open("alice", path=tmp_path, embed_model=embed_model) as blocks:
        memory = blocks.memory
        await memory.aput_messages([ChatMessage(role=MessageRole.USER, content=FACT)])
    with pytest.raises(MemoryClosedError):
        await memory.asearch("Lisbon")
    with blocks:  # used again: reopened on the same store, closed again on leaving
        assert "Lisbon" in blocks.memory.search("where do I live?")[0].text
