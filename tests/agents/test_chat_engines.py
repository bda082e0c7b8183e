"""LlamaIndex's chat engines over the memory, as their users run them: a real retriever
over a small index built with the offline embedding model, a scripted LLM, several
turns, and "new chat" (``engine.reset()``).

What users of these engines expect: one LLM call per turn (``ContextChatEngine``), one
more for the condense step from the second turn of a chat on
(``CondensePlusContextChatEngine``), never one caused by the memory block; the block
on every turn, so the LLM knows what the user said in an earlier chat; each message of
the conversation once.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from llama_index.core import Document, VectorStoreIndex
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.chat_engine import ContextChatEngine
from llama_index.core.chat_engine.types import BaseChatEngine

from helpers import assistant, user
from llama_memory import ComposableMemory, OfflineEmbedding
from llama_memory.chat_engines import CondensePlusContextChatEngine
from llama_memory.read.compose import (
    BLOCK_OPEN,
    THIS_CONVERSATION,
    insert_block,
    remove_block,
    render_block,
)
from llama_memory.testing import LLMCall, ScriptedLLM, ScriptExhausted, ToolCallReply

CLINIC = [
    "The clinic opens at 9am on weekdays and at 10am on Saturdays.",
    "Parking at the clinic is free for patients.",
    "Amoxicillin is an antibiotic of the penicillin family.",
]
ALLERGY = "I'm allergic to penicillin."
CAT = "My cat Luna is twelve years old."


@pytest.fixture
def retriever(embed_model: OfflineEmbedding) -> Any:
    """A real retriever over a three-document index, embedded offline."""
    index = VectorStoreIndex.from_documents([Document(text=t) for t in CLINIC], embed_model=embed_model)
    return index.as_retriever(similarity_top_k=1)


def condense_then_answer(calls: list[LLMCall]) -> Callable[[list[Any]], str]:
    """A scripted reply that repeats the follow-up as its standalone question when
    condensing, and answers a chat otherwise."""

    def reply(messages: list[Any]) -> str:
        text = messages[-1].content or ""
        if "Follow Up Input:" in text:  # the condense prompt
            return text.split("Follow Up Input:")[1].split("\n")[0].strip()
        return f"answer {len(calls)}"

    return reply


def run_turn(engine: BaseChatEngine, llm: ScriptedLLM, message: str, how: str = "chat") -> list[LLMCall]:
    """One turn through the engine (``chat`` or ``stream_chat``); the LLM calls it made."""
    before = len(llm.calls)
    if how == "stream_chat":
        # Reading the stream to its end waits until the reply is written to memory.
        assert "".join(engine.stream_chat(message).response_gen).startswith("answer")
    else:
        engine.chat(message)
    return llm.calls[before:]


ENGINES = {
    "context": lambda llm, memory, retriever: ContextChatEngine.from_defaults(
        retriever=retriever, llm=llm, memory=memory, system_prompt="You are the clinic's assistant."
    ),
    "condense_plus_context": lambda llm, memory, retriever: CondensePlusContextChatEngine.from_defaults(
        retriever=retriever, llm=llm, memory=memory, system_prompt="You are the clinic's assistant."
    ),
}


@pytest.mark.parametrize("kind", list(ENGINES))
def test_a_chat_engine_gets_the_block_every_turn_and_no_extra_call(
    kind: str, tmp_path: Path, embed_model: OfflineEmbedding, retriever: Any
) -> None:
    condenses = kind == "condense_plus_context"
    memory = ComposableMemory.from_defaults(
        user_id="alice", session_id="chat-1", path=tmp_path / "memory", embed_model=embed_model
    )
    llm = ScriptedLLM()
    llm.add_script(*[condense_then_answer(llm.calls) for _ in range(20)])
    engine = ENGINES[kind](llm, memory, retriever)
    try:
        # The first chat: nothing remembered yet, one LLM call a turn (two from the
        # second turn on for the engine that condenses).
        assert len(run_turn(engine, llm, ALLERGY)) == 1
        assert len(run_turn(engine, llm, CAT, "stream_chat")) == (2 if condenses else 1)
        assert [m.content for m in engine.chat_history] == [ALLERGY, "answer 1", CAT, f"answer {len(llm.calls)}"]

        engine.reset()  # "new chat"
        assert engine.chat_history == []

        turns = [
            ("Can I take amoxicillin?", ALLERGY),
            ("How old is Luna now?", CAT),
            ("So is a penicillin shot a bad idea for me?", ALLERGY),
        ]
        conversation: list[str] = []
        for n, (question, recalled) in enumerate(turns):
            calls = run_turn(engine, llm, question)
            # No condense call on the first turn of the new chat, although the memory
            # has a block to show: the engine condenses the conversation, not the block.
            assert [c.method for c in calls] == (["complete", "chat"] if condenses and n else ["chat"])
            if condenses and n:
                assert BLOCK_OPEN not in calls[0].text() and conversation[-1] in calls[0].text()
            answer = calls[-1]
            # The block on every turn, with what the user said in the earlier chat.
            [block] = [t for t in answer.system_texts() if BLOCK_OPEN in t]
            assert recalled in block
            # The document the retriever found for the question is there too.
            assert any(doc in answer.text() for doc in CLINIC)
            # Each message of this chat once, in order, and none in the block as well.
            assert answer.user_texts() == [*conversation[::2], question]
            assert not any(m in block for m in conversation)
            conversation += [question, f"answer {len(llm.calls)}"]
        assert [m.content for m in engine.chat_history] == conversation
        assert [m.content for m in memory.get_all()] == conversation
    finally:
        memory.close()


async def test_condense_plus_context_async_skips_the_condense_on_a_first_turn(
    tmp_path: Path, embed_model: OfflineEmbedding, retriever: Any
) -> None:
    memory = ComposableMemory.from_defaults(
        user_id="alice", session_id="monday", path=tmp_path / "memory", embed_model=embed_model
    )
    memory.put_messages([user(ALLERGY)])
    memory.close()
    memory = ComposableMemory.from_defaults(
        user_id="alice", session_id="friday", path=tmp_path / "memory", embed_model=embed_model
    )
    llm = ScriptedLLM()
    llm.add_script(*[condense_then_answer(llm.calls) for _ in range(4)])
    engine = CondensePlusContextChatEngine.from_defaults(retriever=retriever, llm=llm, memory=memory)
    try:
        await engine.achat("Can I take amoxicillin?")
        assert [c.method for c in llm.calls] == ["achat"]
        assert ALLERGY in llm.calls[0].text()
        await engine.achat("And a penicillin shot?")
        assert [c.method for c in llm.calls] == ["achat", "acomplete", "achat"]
        assert BLOCK_OPEN not in llm.calls[1].text() and ALLERGY in llm.calls[2].text()
    finally:
        memory.close()


@pytest.mark.parametrize("insert_method", ["system", "user"])
def test_remove_block_gives_back_the_conversation(insert_method: str) -> None:
    block = render_block(['- [vector] user: "I\'m allergic to penicillin."'])
    for conversation in (
        [],
        [user("Can I take amoxicillin?"), assistant("Better not.")],
        [ChatMessage(role=MessageRole.SYSTEM, content="Be brief."), user("Hi <memory>, I'm Al.")],
    ):
        with_block = insert_block(conversation, block, insert_method)
        assert with_block != conversation
        assert remove_block(with_block) == conversation


async def test_the_scripted_llm_completes_in_every_form() -> None:
    llm = ScriptedLLM(["one", lambda messages: f"echo {messages[0].content}", "three", "four"])
    assert llm.complete("first").text == "one"
    assert (await llm.acomplete("second")).text == "echo second"
    assert [r.delta for r in llm.stream_complete("third")] == ["three"]
    assert [r.text async for r in await llm.astream_complete("fourth")] == ["four"]
    assert [c.method for c in llm.calls] == ["complete", "acomplete", "stream_complete", "astream_complete"]
    assert llm.calls[0].user_texts() == ["first"]
    with pytest.raises(ScriptExhausted):
        llm.complete("fifth")
    llm.add_script(ToolCallReply("save"))
    with pytest.raises(TypeError, match="completion.*script a str"):
        llm.complete("sixth")


def _block_lines(call: LLMCall) -> list[str]:
    [block] = [t for t in call.system_texts() if BLOCK_OPEN in t]
    return [line for line in block.splitlines() if line.startswith("- [")]


@pytest.mark.parametrize("session_id", [None, "chat-1"], ids=["id-chosen-by-the-memory", "id-given"])
def test_after_a_new_chat_the_earlier_chat_is_not_this_conversation(
    session_id: Any, tmp_path: Path, embed_model: OfflineEmbedding, retriever: Any
) -> None:
    memory = ComposableMemory.from_defaults(
        user_id="alice", session_id=session_id, path=tmp_path / "memory", embed_model=embed_model,
        token_limit=60,
    )  # fmt: skip
    llm = ScriptedLLM()
    llm.add_script(*[condense_then_answer(llm.calls) for _ in range(20)])
    engine = CondensePlusContextChatEngine.from_defaults(retriever=retriever, llm=llm, memory=memory)
    try:
        run_turn(engine, llm, ALLERGY)
        run_turn(engine, llm, CAT)
        first = memory.session_id

        engine.reset()  # "new chat"
        bike = "My bike is a red Brompton with a brown leather saddle."
        far = ("The clinic is far from my flat: I will ride there on Saturday morning if the "
               "weather permits, along the river path, past the old market and the station, "
               "then up the long hill to the hospital quarter where the clinic is.")
        for message in (bike, far):
            run_turn(engine, llm, message)
        answer = run_turn(engine, llm, "Can I take amoxicillin, and should I ride my bike there?")[-1]

        # What the user said before the new chat is still remembered, but as an earlier
        # record, not as something said in this conversation ...
        [allergy] = [line for line in _block_lines(answer) if ALLERGY in line]
        assert THIS_CONVERSATION not in allergy, allergy
        # ... while a message of this chat that left the window still is.
        [said] = [line for line in _block_lines(answer) if "red Brompton" in line]
        assert THIS_CONVERSATION in said, said
        # An id the memory chose is replaced; one the application gave stays.
        assert (memory.session_id == first) == (session_id is not None)
    finally:
        memory.close()
