"""ComposableMemory driven by LlamaIndex's real agents (FunctionAgent, ReActAgent,
AgentWorkflow) with a scripted LLM, real SQLite, real Chroma and the real
offline embedding model. Nothing here talks to a network.

What is checked is what the LLM actually receives (the scripted LLM records
every list of messages) and what the memory stores.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import pytest
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent, ReActAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.workflow import Context

from helpers import message_texts
from llama_memory import ComposableMemory, LlamaMemoryError
from llama_memory.embeddings.offline import default_embedding
from scripted_llm import LLMCall, ScriptedLLM, ToolCallReply, message_plain_text

SYSTEM_PROMPT = "You are Chef Bot, a cooking assistant."
FACT = "My favourite food is sushi and I live in Lisbon."
QUESTION = "What should I eat tonight?"


# --------------------------------------------------------------------------- fixtures


@pytest.fixture(scope="module", autouse=True)
def _warm_embedding() -> None:
    """Load the offline model once, before the first timed agent run."""
    default_embedding().get_query_embedding("warm up")


@pytest.fixture
def open_memory(tmp_path: Path):
    """Factory for memories on one directory; closes them all at teardown."""
    opened: list[ComposableMemory] = []

    def _open(user_id: str = "alice", session_id: str = "s1", **kwargs: Any) -> ComposableMemory:
        memory = ComposableMemory.from_defaults(
            user_id=user_id, session_id=session_id, path=tmp_path, **kwargs
        )
        opened.append(memory)
        return memory

    _open.opened = opened  # type: ignore[attr-defined]
    yield _open
    for memory in opened:
        memory.close()


async def tell(memory: ComposableMemory, text: str, reply: str = "Noted.") -> ScriptedLLM:
    """One FunctionAgent run in which the user says ``text`` and the agent replies."""
    llm = ScriptedLLM([reply])
    agent = FunctionAgent(llm=llm, system_prompt=SYSTEM_PROMPT)
    await agent.run(user_msg=text, memory=memory)
    assert llm.remaining == 0
    return llm


def texts(messages: list[ChatMessage]) -> list[str]:
    return [message_plain_text(m) for m in messages]


def system_messages(call: LLMCall) -> list[ChatMessage]:
    return [m for m in call.messages if m.role == MessageRole.SYSTEM]


def last_user(call: LLMCall) -> ChatMessage:
    return [m for m in call.messages if m.role == MessageRole.USER][-1]


def get_weather(city: str) -> str:
    """Today's weather in a city."""
    return f"Sunny and 24C in {city}."


def react_header_keeps_system_prompt() -> bool:
    """Whether the installed LlamaIndex puts a ``ReActAgent``'s ``system_prompt`` into its
    ReAct header (llama-index-core 0.14.16 on). Before, the header has no place for it, so
    the LLM never sees it, with any memory or none."""
    agent = ReActAgent(llm=ScriptedLLM([], function_calling=False), tools=[], system_prompt=SYSTEM_PROMPT)
    return SYSTEM_PROMPT in agent.formatter.system_header or "{context}" in agent.formatter.system_header


# --------------------------------------------------------------------------- FunctionAgent


async def test_function_agent_recalls_previous_session_on_first_llm_call(open_memory) -> None:
    await tell(open_memory(session_id="s1"), FACT, "Noted: sushi, Lisbon.")

    memory = open_memory(session_id="s2")
    assert memory.get_all() == []  # a new conversation: nothing of session 1 in the window
    llm = ScriptedLLM(["Sushi, of course."])
    agent = FunctionAgent(llm=llm, system_prompt=SYSTEM_PROMPT)
    response = await agent.run(user_msg=QUESTION, memory=memory)

    assert "Sushi" in str(response)
    assert len(llm.calls) == 1
    first = llm.calls[0]
    # The agent's own system prompt comes first, untouched.
    assert first.messages[0].role == MessageRole.SYSTEM
    assert message_plain_text(first.messages[0]) == SYSTEM_PROMPT
    # The recalled fact is in a system message (the memory block), not in the window.
    assert any("sushi" in t for t in map(message_plain_text, system_messages(first)))
    assert "sushi" not in message_plain_text(last_user(first))
    assert message_plain_text(first.messages[-1]) == QUESTION
    # Session 1's messages are not replayed as chat turns.
    assert [m for m in first.messages if m.role != MessageRole.SYSTEM] == [
        ChatMessage(role=MessageRole.USER, content=QUESTION)
    ]
    # The run was stored in session 2 only.
    assert texts(memory.get_all()) == [QUESTION, "Sushi, of course."]


async def test_function_agent_tool_round_is_stored_losslessly(open_memory) -> None:
    await tell(open_memory(session_id="s1"), FACT)

    memory = open_memory(session_id="s2")
    call = ToolCallReply("get_weather", {"city": "Lisbon"}, tool_call_id="call_weather_1")
    llm = ScriptedLLM([call, "It is sunny in Lisbon: have sushi on a terrace."])
    agent = FunctionAgent(llm=llm, tools=[get_weather], system_prompt=SYSTEM_PROMPT)
    response = await agent.run(user_msg=QUESTION, memory=memory)
    assert "terrace" in str(response)

    # Both LLM calls see the memory block, exactly once (no stacking after the tool round).
    assert len(llm.calls) == 2
    for c in llm.calls:
        assert c.tool_names == ["get_weather"]
        block_texts = [t for t in map(message_plain_text, system_messages(c)) if "sushi" in t]
        assert len(block_texts) == 1, c.text()
        assert c.text().count("sushi") == 1
    # The second call carries the tool call and its result.
    second = llm.calls[1]
    tool_msgs = [m for m in second.messages if m.role == MessageRole.TOOL]
    assert len(tool_msgs) == 1
    assert tool_msgs[0].additional_kwargs["tool_call_id"] == "call_weather_1"
    assert "Sunny and 24C in Lisbon." in message_plain_text(tool_msgs[0])

    def check(history: list[ChatMessage]) -> None:
        assert [m.role for m in history] == [
            MessageRole.USER,
            MessageRole.ASSISTANT,
            MessageRole.TOOL,
            MessageRole.ASSISTANT,
        ]
        user, assistant_call, tool_result, answer = history
        assert message_plain_text(user) == QUESTION
        blocks = [b for b in assistant_call.blocks if isinstance(b, ToolCallBlock)]
        assert len(blocks) == 1
        assert blocks[0].tool_call_id == "call_weather_1"
        assert blocks[0].tool_name == "get_weather"
        assert blocks[0].tool_kwargs == {"city": "Lisbon"}
        legacy = assistant_call.additional_kwargs["tool_calls"]
        assert legacy[0]["id"] == "call_weather_1"
        assert legacy[0]["function"]["name"] == "get_weather"
        assert json.loads(legacy[0]["function"]["arguments"]) == {"city": "Lisbon"}
        assert tool_result.additional_kwargs["tool_call_id"] == "call_weather_1"
        assert message_plain_text(tool_result) == "Sunny and 24C in Lisbon."
        assert message_plain_text(answer) == "It is sunny in Lisbon: have sushi on a terrace."

    live = memory.get_all()
    check(live)
    # Reopening the session reads the conversation back from SQLite: same messages.
    reopened = open_memory(session_id="s2")
    check(reopened.get_all())
    assert [m.model_dump(mode="json") for m in reopened.get_all()] == [
        m.model_dump(mode="json") for m in live
    ]


async def test_non_streaming_function_agent_also_recalls(open_memory) -> None:
    """``streaming=False`` goes through ``achat`` instead of ``astream_chat``."""
    await tell(open_memory(session_id="s1"), FACT)
    llm = ScriptedLLM(["Sushi."])
    agent = FunctionAgent(llm=llm, system_prompt=SYSTEM_PROMPT, streaming=False)
    await agent.run(user_msg=QUESTION, memory=open_memory(session_id="s2"))
    assert [c.method for c in llm.calls] == ["achat"]
    assert "sushi" in llm.calls[0].text()


# --------------------------------------------------------------------------- ReActAgent


@pytest.mark.parametrize(
    ("system_prompt", "insert_method"),
    [(SYSTEM_PROMPT, "system"), (SYSTEM_PROMPT, "user"), (None, "user")],
)
async def test_react_agent_recalls_previous_session_on_first_llm_call(
    open_memory, system_prompt: Optional[str], insert_method: str
) -> None:
    await tell(open_memory(session_id="s1"), FACT)

    memory = open_memory(session_id="s2", insert_method=insert_method)
    llm = ScriptedLLM(
        ["Thought: The user likes sushi.\nAnswer: Have sushi tonight."], function_calling=False
    )
    agent = ReActAgent(llm=llm, tools=[get_weather], system_prompt=system_prompt)
    response = await agent.run(user_msg=QUESTION, memory=memory)

    assert str(response).strip() == "Have sushi tonight."
    assert len(llm.calls) == 1
    first = llm.calls[0]
    assert "sushi" in first.text()
    assert QUESTION in message_plain_text(last_user(first))
    # ReActAgent stores its reasoning as one assistant message.
    stored = memory.get_all()
    assert message_plain_text(stored[0]) == QUESTION
    assert stored[-1].role == MessageRole.ASSISTANT
    assert "Have sushi tonight." in message_plain_text(stored[-1])


@pytest.mark.parametrize("system_prompt", [SYSTEM_PROMPT, None])
@pytest.mark.parametrize("insert_method", ["system", "user"])
@pytest.mark.parametrize("kind", ["agent", "workflow"])
async def test_react_agent_receives_the_block_with_or_without_system_prompt(
    open_memory, system_prompt: Optional[str], insert_method: str, kind: str
) -> None:
    # ReActAgent.take_step drops its first message when that is a system message (its
    # system_prompt, already in its ReAct header): without a system_prompt that message
    # was the memory's, and the block never reached the LLM.
    await tell(open_memory(session_id="s1"), FACT)
    memory = open_memory(session_id="s2", insert_method=insert_method)
    llm = ScriptedLLM(
        [
            'Thought: I need the weather.\nAction: get_weather\nAction Input: {"city": "Lisbon"}',
            "Thought: I can answer.\nAnswer: Sushi.",
        ],
        function_calling=False,
    )
    agent = ReActAgent(
        name="chef", description="Cooks.", llm=llm, tools=[get_weather], system_prompt=system_prompt
    )
    runner = AgentWorkflow(agents=[agent], root_agent="chef") if kind == "workflow" else agent
    await runner.run(user_msg=QUESTION, memory=memory)

    assert len(llm.calls) == 2  # before and after the tool round
    for call in llm.calls:
        # Exactly one block, with the recalled fact, after the ReAct header.
        assert call.text().count("<memory>") == 1, call.text()
        [holder] = [m for m in call.messages if "<memory>" in message_plain_text(m)]
        assert "sushi" in message_plain_text(holder)
        assert call.messages.index(holder) > 0
        if insert_method == "system" and system_prompt is not None:
            assert holder.role == MessageRole.SYSTEM
        else:  # asked for, or the one place ReActAgent keeps without a system_prompt
            assert holder.role == MessageRole.USER and QUESTION in message_plain_text(holder)
        header = message_plain_text(call.messages[0])
        assert "get_weather" in header  # the ReAct header, listing the tools, stays first
        if system_prompt is not None and react_header_keeps_system_prompt():
            assert SYSTEM_PROMPT in header
    # The block is never stored in the conversation.
    assert all("<memory>" not in message_plain_text(m) for m in memory.get_all())


# --------------------------------------------------------------------------- AgentWorkflow


async def test_agent_workflow_single_root_recalls(open_memory) -> None:
    await tell(open_memory(session_id="s1"), FACT)
    llm = ScriptedLLM(["Sushi."])
    workflow = AgentWorkflow(
        agents=[FunctionAgent(name="chef", description="Cooks.", llm=llm, system_prompt=SYSTEM_PROMPT)],
        root_agent="chef",
    )
    await workflow.run(user_msg=QUESTION, memory=open_memory(session_id="s2"))
    assert len(llm.calls) == 1
    assert any("sushi" in message_plain_text(m) for m in system_messages(llm.calls[0]))


async def test_agent_workflow_handoff_both_agents_see_memory(open_memory) -> None:
    await tell(open_memory(session_id="s1"), FACT)
    concierge_llm = ScriptedLLM(
        [ToolCallReply("handoff", {"to_agent": "chef", "reason": "a food question"})]
    )
    chef_llm = ScriptedLLM(["Sushi, since you love it."])
    workflow = AgentWorkflow(
        agents=[
            FunctionAgent(
                name="concierge",
                description="Routes requests.",
                llm=concierge_llm,
                system_prompt="You route requests.",
                can_handoff_to=["chef"],
            ),
            FunctionAgent(
                name="chef", description="Answers food questions.", llm=chef_llm,
                system_prompt=SYSTEM_PROMPT,
            ),
        ],
        root_agent="concierge",
    )
    memory = open_memory(session_id="s2")
    response = await workflow.run(user_msg=QUESTION, memory=memory)

    assert "Sushi" in str(response)
    assert len(concierge_llm.calls) == 1 and len(chef_llm.calls) == 1
    for c in (concierge_llm.calls[0], chef_llm.calls[0]):
        assert any("sushi" in message_plain_text(m) for m in system_messages(c)), c.text()
    assert "handoff" in concierge_llm.calls[0].tool_names
    # The chef sees the user's question after the handoff.
    assert QUESTION in chef_llm.calls[0].text()


# --------------------------------------------------------------------------- insert_method="user"


async def test_insert_method_user_puts_block_in_latest_user_message(open_memory) -> None:
    await tell(open_memory(session_id="s1"), FACT)
    memory = open_memory(session_id="s2", insert_method="user")
    # A first turn so that there is an earlier user message that must stay clean.
    await tell(memory, "Hello there.", "Hi!")

    llm = ScriptedLLM([ToolCallReply("get_weather", {"city": "Lisbon"}), "Sushi."])
    agent = FunctionAgent(llm=llm, tools=[get_weather], system_prompt=SYSTEM_PROMPT)
    await agent.run(user_msg=QUESTION, memory=memory)

    assert len(llm.calls) == 2
    for c in llm.calls:
        systems = system_messages(c)
        assert len(systems) == 1
        assert message_plain_text(systems[0]) == SYSTEM_PROMPT
        users = [m for m in c.messages if m.role == MessageRole.USER]
        assert [QUESTION in message_plain_text(u) for u in users] == [False, True]
        assert "sushi" in message_plain_text(users[-1])
        assert "sushi" not in message_plain_text(users[0])
        assert message_plain_text(users[0]) == "Hello there."
        assert c.text().count("sushi") == 1
    # The block is never written back into the stored conversation.
    stored = memory.get_all()
    assert [message_plain_text(m) for m in stored if m.role == MessageRole.USER] == [
        "Hello there.",
        QUESTION,
    ]


# --------------------------------------------------------------------------- chat_history=


def _raw_records(memory: ComposableMemory, query: str) -> list[str]:
    """Texts of every message the sources hold for ``query`` (no dedup applied; an
    excerpt's messages one by one)."""
    return message_texts(
        r for source in memory.sources for r in source.retrieve(query, memory.scope, 50)
    )


async def test_chat_history_is_not_duplicated_in_long_term_memory(open_memory) -> None:
    history = [
        ChatMessage(role=MessageRole.USER, content="I love ramen with extra egg."),
        ChatMessage(role=MessageRole.ASSISTANT, content="Ramen with extra egg, noted."),
    ]
    memory = open_memory(session_id="s1")
    llm = ScriptedLLM(["Ramen!", "Ramen again!"])
    agent = FunctionAgent(llm=llm, system_prompt=SYSTEM_PROMPT)

    await agent.run(user_msg="What should I eat?", chat_history=history, memory=memory)
    # The same history again, as fresh (equal) objects, as a stateless service would send it.
    again = [ChatMessage.model_validate(m.model_dump()) for m in history]
    await agent.run(user_msg="And tomorrow?", chat_history=again, memory=memory)

    # The LLM saw the chat history on both runs.
    for c in llm.calls:
        assert "I love ramen with extra egg." in c.text()
    raw = _raw_records(memory, "ramen with egg")
    assert raw.count("I love ramen with extra egg.") == 1, raw
    assert raw.count("Ramen with extra egg, noted.") == 1, raw
    found = message_texts(memory.search("ramen with egg", k=20))
    assert len(found) == len(set(found))
    assert "I love ramen with extra egg." in found


async def test_chat_history_into_a_reopened_session_is_not_duplicated(open_memory) -> None:
    """A service that rebuilds the memory per request (same session) and sends the history."""
    history = [
        ChatMessage(role=MessageRole.USER, content="I love ramen with extra egg."),
        ChatMessage(role=MessageRole.ASSISTANT, content="Ramen with extra egg, noted."),
    ]
    for question in ("What should I eat?", "And tomorrow?"):
        memory = open_memory(session_id="s1")
        agent = FunctionAgent(llm=ScriptedLLM(["Ramen!"]), system_prompt=SYSTEM_PROMPT)
        await agent.run(user_msg=question, chat_history=list(history), memory=memory)
    raw = _raw_records(memory, "ramen with egg")
    assert raw.count("I love ramen with extra egg.") == 1, raw


# --------------------------------------------------------------------------- Context serialization


async def test_context_round_trip_restores_a_memory_that_recalls(open_memory, tmp_path) -> None:
    # Long-term fact from an earlier session.
    await tell(open_memory(session_id="s0"), FACT)

    memory = open_memory(session_id="s1")
    llm = ScriptedLLM(["Hello Alice!", "Sushi in Lisbon, then."])
    agent = FunctionAgent(llm=llm, system_prompt=SYSTEM_PROMPT)
    ctx = Context(agent)
    await agent.run(user_msg="Hi, it's me again.", memory=memory, ctx=ctx)

    data = json.loads(json.dumps(ctx.to_dict()))  # as if stored in a database
    restored_ctx = Context.from_dict(agent, data)
    restored = await restored_ctx.store.get("memory")
    open_memory.opened.append(restored)

    assert isinstance(restored, ComposableMemory)
    assert restored is not memory
    assert (restored.user_id, restored.session_id, restored.path) == ("alice", "s1", str(tmp_path))
    # The conversation comes back from SQLite ...
    assert texts(restored.get_all()) == ["Hi, it's me again.", "Hello Alice!"]
    # ... and the long-term source recalls.
    assert "My favourite food is sushi and I live in Lisbon." in message_texts(
        restored.search("favourite food", k=5)
    )

    # Running on with the restored context uses the restored memory.
    llm.reset_calls()
    await agent.run(user_msg=QUESTION, ctx=restored_ctx)
    assert len(llm.calls) == 1
    first = llm.calls[0]
    assert any("sushi" in message_plain_text(m) for m in system_messages(first))
    assert [message_plain_text(m) for m in first.messages if m.role != MessageRole.SYSTEM] == [
        "Hi, it's me again.",
        "Hello Alice!",
        QUESTION,
    ]
    # (The running workflow rebuilds its state from the serialized context, so the
    # memory to look at after the run is the one in the context now.)
    after = await restored_ctx.store.get("memory")
    open_memory.opened.append(after)
    assert isinstance(after, ComposableMemory)
    assert texts(after.get_all())[-2:] == [QUESTION, "Sushi in Lisbon, then."]
    # And it went to the same session on disk.
    assert texts(open_memory(session_id="s1").get_all()) == [
        "Hi, it's me again.",
        "Hello Alice!",
        QUESTION,
        "Sushi in Lisbon, then.",
    ]


async def _round_trip_context(agent: FunctionAgent, memory: ComposableMemory) -> Any:
    """Run one turn with ``memory`` in a fresh Context, serialize it, restore it, and
    return what the restored context holds under "memory"."""
    ctx = Context(agent)
    await agent.run(user_msg="I like green tea.", memory=memory, ctx=ctx)
    data = json.loads(json.dumps(ctx.to_dict()))
    return await Context.from_dict(agent, data).store.get("memory")


async def test_context_round_trip_of_custom_sources_asks_for_them_instead_of_guessing() -> None:
    from llama_index.core.memory import ChatMemoryBuffer, VectorMemory

    sources = [VectorMemory.from_defaults(vector_store=None, embed_model=default_embedding())]
    memory = ComposableMemory.from_defaults(
        primary_memory=ChatMemoryBuffer.from_defaults(), secondary_memory_sources=sources
    )
    agent = FunctionAgent(llm=ScriptedLLM(["Noted."]), system_prompt=SYSTEM_PROMPT)
    # Live objects cannot travel in a dict: restoring says what is missing rather than
    # silently building default sources the user never chose.
    with pytest.raises(ValueError, match="memory"):
        await _round_trip_context(agent, memory)
    data = memory.to_dict()
    # The ChatMemoryBuffer is data LlamaIndex can rebuild; the VectorMemory is not.
    assert data["primary"]["qualified_name"].endswith(":ChatMemoryBuffer")
    assert data["sources"] == "custom"
    with pytest.raises(LlamaMemoryError, match="custom secondary_memory_sources"):
        ComposableMemory.from_dict(data)
    restored = ComposableMemory.from_dict(data, secondary_memory_sources=sources)
    assert texts(restored.get_all()) == ["I like green tea.", "Noted."]


async def test_context_round_trip_keeps_a_buffer_only_memory_buffer_only(open_memory) -> None:
    memory = open_memory(session_id="s1", secondary_memory_sources=[])
    assert memory.sources == []
    agent = FunctionAgent(llm=ScriptedLLM(["Noted."]), system_prompt=SYSTEM_PROMPT)
    restored = await _round_trip_context(agent, memory)
    open_memory.opened.append(restored)
    assert texts(restored.get_all()) == ["I like green tea.", "Noted."]
    assert restored.sources == []


async def note_item(ctx, item: str) -> str:  # noqa: ANN001 (annotated below)
    """Note an item in the run's state."""
    async with ctx.store.edit_state() as state:
        state["state"]["items"] = [*state["state"].get("items", []), item]
    return f"Noted {item}."


# The class itself: this module's annotations are strings, and a tool finds its context
# parameter by its annotation.
note_item.__annotations__["ctx"] = Context


@pytest.mark.parametrize("persistent", [False, True], ids=["in-memory", "path"])
async def test_a_tool_that_edits_the_runs_state_keeps_the_conversation(open_memory, persistent: bool) -> None:
    """llama-index-workflows copies the state for an ``edit_state`` block (a tool
    updating ``initial_state``), memory included, and the run went on with the copy,
    its own copy of the buffer as it was: the next run on the context (rebuilt from it)
    lost the tool round of an in-memory memory. A memory is a live handle: shared."""
    memory = open_memory(session_id="s1") if persistent else ComposableMemory.from_defaults(user_id="alice")
    llm = ScriptedLLM([ToolCallReply("note_item", {"item": "milk"}), "Noted milk.", "You noted milk."])
    agent = FunctionAgent(tools=[note_item], llm=llm, system_prompt=SYSTEM_PROMPT, initial_state={"items": []})
    ctx = Context(agent)
    try:
        await agent.run(user_msg="Remember milk.", memory=memory, ctx=ctx)
        assert texts(llm.calls[-1].messages)[-1] == "Noted milk."  # the tool ran and edited the state
        assert await ctx.store.get("memory") is memory
        await agent.run(user_msg="What did I note?", ctx=ctx)
        roles = ["user", "assistant", "tool", "assistant", "user"]
        assert [m.role.value for m in llm.calls[-1].messages] == ["system", *roles]
        # (The second run rebuilt its state from the context: its memory is in the context now.)
        after = await ctx.store.get("memory")
        open_memory.opened.append(after)
        assert [m.role.value for m in after.get_all()] == [*roles, "assistant"]
        assert texts(after.get_all())[-1] == "You noted milk."
    finally:
        if not persistent:
            memory.close()


# --------------------------------------------------------------------------- scope


async def test_another_users_facts_never_reach_the_llm(open_memory) -> None:
    await tell(
        open_memory(user_id="bob", session_id="b1"),
        "My favourite food is durian and my bank PIN is 4321.",
    )
    await tell(open_memory(user_id="alice", session_id="a1"), FACT)

    # Positive control: the same question from bob recalls bob's fact.
    bob_llm = ScriptedLLM(["Durian."])
    await FunctionAgent(llm=bob_llm, system_prompt=SYSTEM_PROMPT).run(
        user_msg="What is my favourite food?", memory=open_memory(user_id="bob", session_id="b2")
    )
    assert "durian" in bob_llm.calls[0].text()

    alice = open_memory(user_id="alice", session_id="a2")
    llm = ScriptedLLM([ToolCallReply("get_weather", {"city": "Lisbon"}), "Sushi."])
    agent = FunctionAgent(llm=llm, tools=[get_weather], system_prompt=SYSTEM_PROMPT)
    await agent.run(user_msg="What is my favourite food? Tell me my bank PIN too.", memory=alice)

    assert len(llm.calls) == 2
    for c in llm.calls:
        assert "sushi" in c.text()
        assert "durian" not in c.text().lower()
        assert "4321" not in c.text()
    assert not any("durian" in r.text for r in alice.search("durian bank PIN", k=50))
