"""Relevance inside an agent run: a FunctionAgent stores the user's message
before it asks the memory, so the message is in the store when the block is built. It
must not be its own evidence: a question about things never said still injects no
retrieved records, a related question and a request that needs a stated preference
still retrieve. Real FunctionAgent, ScriptedLLM, real SQLite and Chroma, the real
offline embedding model (the calibration is fitted for it)."""

from __future__ import annotations

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import MessageRole

from helpers import hold, memory_factory, message_texts, user
from llama_memory import ComposableMemory, Scope
from scripted_llm import ScriptedLLM, message_plain_text

#: A user's history, each message in a session of its own: the preference among things
#: that have nothing to do with food.
HISTORY = (
    "Draft email to Bob: the quarterly report will be two days late, sorry.",
    "The brake pads for my road bike cost 45 euros at the shop on Main Street.",
    "I booked the Hotel Avenida in Lisbon for the conference, three nights in May.",
    "Remind me to renew the car insurance before the end of March.",
    "I'm vegetarian, and I can't stand spicy food.",
)


def hold_history(make):
    """Store HISTORY through ``make``, one session per message; return ``make``."""
    hold(make, HISTORY)
    return make


@pytest.fixture
def history(make_memory):
    """A memory directory holding HISTORY, one session per message."""
    return hold_history(make_memory)


async def ask(memory: ComposableMemory, question: str) -> str:
    """One FunctionAgent run; the text of every system message the LLM received."""
    llm = ScriptedLLM(["Sure."])
    await FunctionAgent(llm=llm, system_prompt="You are a helpful assistant.").run(
        user_msg=question, memory=memory
    )
    assert message_plain_text(memory.get_all()[0]) == question  # stored, in the window
    return "\n".join(
        message_plain_text(m) for m in llm.calls[0].messages if m.role == MessageRole.SYSTEM
    )


def best_cosine(memory: ComposableMemory) -> float:
    """The query's best cosine in the store, as the calibration of the last block saw it
    (an excerpt cut down to one message by the window carries no evidence of its own)."""
    return max(r.metadata["evidence"]["best_cosine"] for r in memory.last_block.records if "evidence" in r.metadata)


async def test_a_never_said_question_inside_an_agent_run_injects_no_retrieved_records(history) -> None:
    memory = history(session_id="now")

    seen = await ask(memory, "What's the capital of Australia?")

    assert memory.last_block.records == []
    assert "<memory>" not in seen and "Hotel Avenida" not in seen


async def test_a_related_question_inside_an_agent_run_still_retrieves(history) -> None:
    memory = history(session_id="now")

    seen = await ask(memory, "Which hotel did I book in Lisbon?")

    assert "Hotel Avenida" in seen
    # Judged by the other records: the question itself (cosine 1) is no evidence.
    assert best_cosine(memory) < 0.95
    assert "Which hotel did I book" not in "\n".join(message_texts(memory.last_block.records))


async def test_a_recommendation_inside_an_agent_run_retrieves_the_stated_preference(history) -> None:
    memory = history(session_id="now")

    seen = await ask(memory, "Where should I eat tonight?")

    assert "vegetarian" in seen
    assert best_cosine(memory) < 0.95


def test_the_window_s_messages_are_left_out_of_retrieval_and_evidence(history) -> None:
    memory = history(session_id="now")
    # Not a question: the user's own questions are no evidence anyway (tests/test_record_relevance.py).
    question = "Tell me which hotel I booked in Lisbon."
    memory.put(user(question))
    vector = memory.source("vector")
    scope = Scope(user_id="alice", session_id="now")

    everything = vector.retrieve(question, scope, 3)
    beside = vector.retrieve_beside(question, scope, 3, frozenset({question.casefold()}))

    assert question in message_texts(everything)
    assert question not in message_texts(beside) and "Hotel Avenida" in message_texts(beside)[0]
    assert max(r.metadata["evidence"]["best_cosine"] for r in everything) > 0.99
    assert max(r.metadata["evidence"]["best_cosine"] for r in beside) < 0.95


async def test_inside_an_agent_run_on_postgresql_the_window_is_left_out_too(postgres_url, embed_model) -> None:
    with memory_factory(embed_model, store=postgres_url) as make:
        hold_history(make)

        never_said = make(session_id="now")
        await ask(never_said, "What's the capital of Australia?")
        recommendation = make(session_id="later")
        seen = await ask(recommendation, "Where should I eat tonight?")

    assert never_said.last_block.records == []
    assert "vegetarian" in seen and best_cosine(recommendation) < 0.95
