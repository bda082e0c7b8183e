"""``memory.tools()`` act for the memory of the agent run that calls them: one agent
built once with Alice's tools serves Alice and Bob at the same time, each run writing
into its own user's memory. Real agents driven by a scripted
LLM, real SQLite and Chroma, the real offline embedding model.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any, Optional

import pytest
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.memory import ChatMemoryBuffer

# At module level: llama-index-workflows 2.18 (the lowest allowed) resolves a step's annotations
# (`ctx: Context`) in the module's globals only, not in a test's locals (2.26 reads both).
from llama_index.core.workflow import Context, StartEvent, StopEvent, Workflow, step

from llama_memory import ComposableMemory
from llama_memory.embeddings.offline import default_embedding
from scripted_llm import ScriptedLLM, ToolCallReply, message_plain_text

USERS = {"alice": ("Alice", "Lisbon"), "bob": ("Bob", "Paris")}


@pytest.fixture
def open_memory(tmp_path: Path):
    """Memories of several users on one store; closed at teardown."""
    opened: list[ComposableMemory] = []

    def _open(user_id: str, **kwargs: Any) -> ComposableMemory:
        kwargs.setdefault("embed_model", default_embedding())
        memory = ComposableMemory.from_defaults(
            user_id=user_id, session_id=f"{user_id}-s1", path=tmp_path, **kwargs
        )
        opened.append(memory)
        return memory

    yield _open
    for memory in opened:
        memory.close()


def introduce(messages: list[ChatMessage]) -> Any:
    """The scripted LLM of a run in which a user says who they are and where they live:
    it saves the name with update_profile, then the city with save_knowledge, then
    answers. Which step and which user come from what the run sent (the two runs share
    one LLM and interleave)."""
    said = next(message_plain_text(m) for m in reversed(messages) if m.role == MessageRole.USER)
    name, city = said.removeprefix("I am ").split(" and I live in ")
    rounds = sum(m.role == MessageRole.TOOL for m in messages)
    if rounds == 0:
        return ToolCallReply(
            "update_profile", {"operations": [{"op": "set", "path": "name", "value": name}]}
        )
    if rounds == 1:
        return ToolCallReply(
            "save_knowledge",
            {"triples": [{"subject": name, "predicate": "lives in", "object": city}]},
        )
    return f"Nice to meet you, {name}."


def build(kind: str, tools: list, llm: ScriptedLLM) -> Any:
    """A FunctionAgent, alone or as the root of an AgentWorkflow, built once."""
    agent = FunctionAgent(
        name="assistant", description="Remembers users.", llm=llm, tools=tools,
        system_prompt="You remember users.",
    )
    return AgentWorkflow(agents=[agent], root_agent="assistant") if kind == "workflow" else agent


def profile_of(memory: ComposableMemory) -> dict:
    return memory.source("profile").get_profile(memory.scope)


def facts_of(memory: ComposableMemory) -> list[str]:
    return [t.text() for t in memory.triple_source.triples(memory.scope)]


@pytest.mark.parametrize("kind", ["function", "workflow"])
async def test_one_agent_built_with_one_users_tools_serves_two_users_concurrently(
    open_memory, kind: str
) -> None:
    alice, bob = open_memory("alice", triples=True), open_memory("bob", triples=True)
    llm = ScriptedLLM([introduce] * 6)
    agent = build(kind, alice.tools(), llm)  # built once, with Alice's tools

    responses = await asyncio.gather(
        *(
            agent.run(user_msg=f"I am {name} and I live in {city}", memory=memory)
            for memory, (name, city) in ((alice, USERS["alice"]), (bob, USERS["bob"]))
        )
    )

    assert [str(r) for r in responses] == ["Nice to meet you, Alice.", "Nice to meet you, Bob."]
    assert llm.remaining == 0
    # Each user's data is in their own memory, and only there.
    assert profile_of(alice) == {"name": "Alice"}
    assert profile_of(bob) == {"name": "Bob"}
    assert len(facts_of(alice)) == 1 and "Lisbon" in facts_of(alice)[0]
    assert len(facts_of(bob)) == 1 and "Paris" in facts_of(bob)[0]
    # The tools' replies came from each run's own memory.
    for memory, (name, _) in ((alice, USERS["alice"]), (bob, USERS["bob"])):
        results = [message_plain_text(m) for m in memory.get_all() if m.role == MessageRole.TOOL]
        assert results[0] == f"Profile updated: name = {name}"
        assert "saved" in results[1] and name in results[1]

    # Outside a run, the same tools act for the memory they came from: Alice's.
    update, get, save, search, _instructions = alice.tools()  # fresh, as an app would call them
    update.call(operations=[{"op": "set", "path": "diet", "value": "vegetarian"}])
    await save.acall(triples=[{"subject": "Alice", "predicate": "works at", "object": "Acme"}])
    assert profile_of(alice) == {"name": "Alice", "diet": "vegetarian"}
    assert json.loads(str(get.call())) == profile_of(alice)
    assert "Acme" in str(await search.acall(query="where does Alice work"))
    assert profile_of(bob) == {"name": "Bob"} and len(facts_of(bob)) == 1
    # The agent's own tool objects too (no Context: the memory they came from).
    agent_tools = {t.metadata.name: t for t in (agent.agents["assistant"] if kind == "workflow" else agent).tools}
    assert json.loads(str(agent_tools["get_profile"].call())) == profile_of(alice)


def test_tools_show_the_llm_no_context_parameter(open_memory) -> None:
    memory = open_memory("alice", triples=True)
    for tool in memory.tools():
        assert tool.requires_context  # agents pass their Context...
        parameters = tool.metadata.get_parameters_dict()
        assert "ctx" not in parameters.get("properties", {})  # ...which the LLM never sees
        assert "ctx" not in parameters.get("required", [])
    update = next(t for t in memory.tools() if t.metadata.name == "update_profile")
    assert list(update.metadata.get_parameters_dict()["properties"]) == ["operations"]


@pytest.mark.parametrize("run_memory", ["agent default", "ChatMemoryBuffer", "buffer-only", "no profile"])
async def test_a_run_without_the_tools_source_gets_an_error_never_the_tools_memory(
    open_memory, run_memory: str
) -> None:
    alice = open_memory("alice")
    memory: Optional[Any] = {
        "agent default": None,  # the agent makes a ChatMemoryBuffer
        "ChatMemoryBuffer": ChatMemoryBuffer.from_defaults(),
        "buffer-only": open_memory("bob", secondary_memory_sources=[]),
        "no profile": open_memory("bob", profile=False),
    }[run_memory]
    llm = ScriptedLLM([
        ToolCallReply("update_profile", {"operations": [{"op": "set", "path": "name", "value": "Bob"}]}),
        "Sorry, I could not save that.",
    ])
    agent = FunctionAgent(llm=llm, tools=alice.tools(), system_prompt="You remember users.")

    await agent.run(user_msg="I am Bob", memory=memory)

    assert profile_of(alice) == {}  # nothing written into the memory the tools came from
    tool_result = message_plain_text(llm.calls[1].messages[-1])
    assert llm.calls[1].messages[-1].role == MessageRole.TOOL
    expected = "not a ComposableMemory" if run_memory in ("agent default", "ChatMemoryBuffer") else (
        "has no 'profile' source"
    )
    assert expected in tool_result and "update_profile" in tool_result


async def test_a_workflow_step_passing_its_context_acts_for_the_memory_it_keeps(open_memory) -> None:
    # An app's own workflow step may call the tools with its Context, sync or async: the
    # memory kept there, as agents keep theirs, is the one acted for; a Context keeping
    # none means no agent run, and the tool acts for the memory it came from.
    alice, bob = open_memory("alice"), open_memory("bob")
    update, *_ = alice.tools()

    class Step(Workflow):
        @step
        async def go(self, ctx: Context, ev: StartEvent) -> StopEvent:
            if ev.get("memory") is not None:
                await ctx.store.set("memory", ev.get("memory"))
            value = ev.get("value")
            update.call(ctx=ctx, operations=[{"op": "set", "path": "sync", "value": value}])
            await update.acall(ctx=ctx, operations=[{"op": "set", "path": "async", "value": value}])
            return StopEvent()

    await Step().run(memory=bob, value="bob's")
    await Step().run(value="alice's")
    assert profile_of(bob) == {"sync": "bob's", "async": "bob's"}
    assert profile_of(alice) == {"sync": "alice's", "async": "alice's"}


#: Each memory tool called with a wrong argument, and what the LLM must read back.
WRONG_CALLS = {
    "save_knowledge": (
        {"subject": "Alice", "predicate": "lives in", "object": "Lisbon"},
        'save_knowledge was not run: it has no argument "subject", "predicate" or "object"; triples is missing. '
        "Its arguments: triples (required): a list of objects, each with subject (text, required), "
        "predicate (text, required), object (text, required). Call it again with those arguments.",
    ),
    "search_knowledge": (
        {"query": 3},
        "search_knowledge was not run: query must be a text, got 3. Its arguments: query (required): text.",
    ),
    "update_profile": (
        {"operations": [{"op": "delete", "path": "diet"}]},
        "update_profile was not run: operations[0].op must be 'set', 'append' or 'remove', got \"delete\". "
        'Its arguments: operations (required): a list of objects, each with op (one of "set", "append", '
        '"remove", required), path (text, required), value (any value).',
    ),
    "get_profile": (
        {"user": "alice"},
        'get_profile was not run: it has no argument "user". It takes no arguments: call it again without any.',
    ),
    "update_instructions": (
        {"instruction": "Answer in French."},
        'update_instructions was not run: op is missing. Its arguments: op (required): one of "add", "remove", '
        '"replace"; text: text or null; instruction: text or null; reason: text or null.',
    ),
}


@pytest.mark.parametrize("tool", sorted(WRONG_CALLS))
async def test_a_tool_called_with_wrong_arguments_tells_the_llm_what_it_takes(open_memory, tool: str) -> None:
    """The tool's result the LLM reads names what was wrong and the tool's arguments with
    their types, in plain words: no Python internals (``<locals>``, ``got an unexpected
    keyword argument``); nothing is written, and the corrected call then works."""
    memory = open_memory("alice", triples=True)
    arguments, told = WRONG_CALLS[tool]
    script: list[Any] = [ToolCallReply(tool, arguments)]
    if tool == "save_knowledge":
        script.append(ToolCallReply(tool, {"triples": [{"subject": "Alice", "predicate": "lives in", "object": "Lisbon"}]}))
    llm = ScriptedLLM([*script, "Done."])
    agent = FunctionAgent(llm=llm, tools=memory.tools(), system_prompt="You remember users.")

    assert str(await agent.run(user_msg="I live in Lisbon.", memory=memory)) == "Done."

    seen = llm.calls[1].messages[-1]
    assert seen.role == MessageRole.TOOL
    result = message_plain_text(seen)
    assert told in result
    assert "<locals>" not in result and "unexpected keyword" not in result
    if tool == "save_knowledge":
        assert "Lisbon" in message_plain_text(llm.calls[2].messages[-1]) and len(facts_of(memory)) == 1
    else:
        assert facts_of(memory) == [] and profile_of(memory) == {}


@pytest.mark.parametrize(
    "wrong, fixed",
    [
        ({"op": "add"}, {"op": "add", "text": "Answer in French."}),
        ({"op": "remove", "text": "Answer in French."}, {"op": "remove", "instruction": "Answer in French."}),
    ],
    ids=["add-without-text", "remove-by-text"],
)
async def test_a_wrong_instruction_change_names_the_argument_each_operation_takes(
    open_memory, wrong: dict, fixed: dict
) -> None:
    """The schema cannot say which of text and instruction an operation needs: the tool's
    result says it in those names (not the Python API's), nothing is written, and the
    call the LLM makes from it works."""
    memory = open_memory("alice")
    if wrong["op"] == "remove":
        memory.instructions.add("Answer in French.")
    llm = ScriptedLLM([ToolCallReply("update_instructions", wrong), ToolCallReply("update_instructions", fixed), "Done."])
    agent = FunctionAgent(llm=llm, tools=memory.tools(), system_prompt="You remember users.")

    assert str(await agent.run(user_msg="Please answer in French from now on.", memory=memory)) == "Done."

    told = message_plain_text(llm.calls[1].messages[-1])
    assert told.startswith("update_instructions was not run: "), told
    assert f'"{wrong["op"]}" takes {"text" if wrong["op"] == "add" else "instruction"} (' in told
    assert "NoneType" not in told
    assert "Instructions updated" in message_plain_text(llm.calls[2].messages[-1])
    assert [i.text for i in memory.instructions.current()] == (["Answer in French."] if wrong["op"] == "add" else [])
