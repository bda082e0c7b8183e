"""The MCP server's checks of a call's arguments and the shape of its answers, on the
real input schemas the SDK builds from the tools (no server process: see
tests/integration/test_mcp_server.py for the tools driven through the SDK's client)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("mcp")

import asyncio  # noqa: E402
from pathlib import Path  # noqa: E402

from llama_memory import MemoryAdmin  # noqa: E402
from llama_memory.admin.mcp_arguments import argument_problem  # noqa: E402
from llama_memory.admin.mcp_results import CUT_MARKER, MAX_TEXT_CHARS, cut_text, record_result  # noqa: E402
from llama_memory.admin.mcp_server import build_server  # noqa: E402
from llama_memory.admin.mcp_tools import MemoryTools  # noqa: E402
from llama_memory.core.types import MemoryRecord  # noqa: E402


@pytest.fixture(scope="module")
def schemas(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """The input schemas a server of one user lists for its tools (deletes offered)."""
    path: Path = tmp_path_factory.mktemp("memory")
    with MemoryAdmin(path, create=True) as admin:
        server = build_server(MemoryTools(admin, ["alice"], allow_delete=True))
        return {tool.name: tool.input_schema for tool in asyncio.run(server.list_tools())}


@pytest.mark.parametrize(
    ("tool", "arguments", "problem"),
    [
        ("search_memory", {"query": "x", "k": True}, "k must be a whole number from 1 to 50, got true."),
        ("search_memory", {"query": "x", "k": "3"}, 'k must be a whole number from 1 to 50, got "3".'),
        ("search_memory", {"query": "x", "k": 2.0}, "k must be a whole number from 1 to 50, got 2.0."),
        ("search_memory", {"query": "x", "k": 51}, "k must be a whole number from 1 to 50, got 51."),
        ("search_memory", {"query": None}, "query must be a text, got null."),
        ("search_memory", {}, "search_memory needs query: what to look for, e.g. a question about the user."),
        ("search_memory", {"query": "x", "q": 1}, 'search_memory has no argument "q"; its arguments are query and k.'),
        (
            "search_memory", {"querry": "x"},
            'search_memory has no argument "querry" (did you mean "query"?); its arguments are query and k.',
        ),
        ("read_triples", {"history": True}, 'read_triples has no argument "history" (did you mean "include_history"?); '
         "its arguments are include_history."),
        ("read_profile", {"x": 1}, 'read_profile has no argument "x"; it takes none.'),
        ("read_triples", {"include_history": 1}, "include_history must be true or false, got 1."),
        ("delete_memory", {"record_ids": "abc"}, 'record_ids must be a list of texts (at least 1), got "abc".'),
        ("delete_memory", {"record_ids": []}, "record_ids must be a list of texts (at least 1), got []."),
        ("delete_memory", {"record_ids": ["a", 2]}, 'record_ids must be a list of texts (at least 1), got ["a", 2].'),
    ],
)
def test_a_wrong_argument_is_named_with_its_value_as_sent(
    schemas: dict[str, dict[str, Any]], tool: str, arguments: dict[str, Any], problem: str
) -> None:
    assert argument_problem(tool, schemas[tool], arguments) == problem


def test_right_arguments_pass_and_a_refused_one_says_why(schemas: dict[str, dict[str, Any]]) -> None:
    assert argument_problem("search_memory", schemas["search_memory"], {"query": "x", "k": 50}) is None
    assert argument_problem("delete_memory", schemas["delete_memory"], {"record_ids": ["a", "b"]}) is None
    why = {"user_id": "this server serves one user's memory, so its tools take no user_id."}
    given = {"query": "x", "user_id": "a"}
    assert argument_problem("search_memory", schemas["search_memory"], given, why) == why["user_id"]


def test_a_long_text_is_cut_to_the_maximum_with_its_marker() -> None:
    assert cut_text("a" * MAX_TEXT_CHARS) == ("a" * MAX_TEXT_CHARS, False)
    for length in (MAX_TEXT_CHARS + 1, 10_000, 1_000_000):
        text, cut = cut_text("a" * length)
        kept = text.index(" [")
        assert cut and len(text) == MAX_TEXT_CHARS
        assert text == "a" * kept + CUT_MARKER.format(n=length - kept)


def test_a_result_shows_the_search_text_and_every_record_it_shows() -> None:
    question = MemoryRecord(text="How long are you married?", role="user", id="q", source="vector")
    answer = MemoryRecord(text="5 years already!", role="assistant", id="a", source="vector")
    excerpt = MemoryRecord(
        text="user: How long are you married?\nassistant: 5 years already!",
        id="a", source="vector", parts=[question, answer], metadata={"hit": "a"},
    )  # fmt: skip
    shown = record_result(excerpt)
    assert (shown["text"], shown["record_ids"], shown["role"]) == (excerpt.text, ["q", "a"], None)
    one = record_result(question)
    assert (one["text"], one["record_ids"], one["role"], one["truncated"]) == (question.text, ["q"], "user", False)


def test_a_forked_child_opens_its_own_store(tmp_path: Path) -> None:
    """Admins share an open store within a process, never across a fork: the child's
    admin opens the store anew (a SQLite connection must not cross a fork)."""
    import os

    with MemoryAdmin(tmp_path, create=True) as parent:
        with MemoryAdmin(tmp_path) as beside:
            assert beside.store is parent.store
        child = os.fork()
        if child == 0:  # the child: exit status 0 when its admin has a store of its own
            try:
                with MemoryAdmin(tmp_path) as own:
                    os._exit(0 if own.store is not parent.store else 1)
            except BaseException:
                os._exit(2)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0


def test_each_added_memory_is_found_and_deleted_as_itself(tmp_path: Path) -> None:
    """Memories added through the server share one session, yet each is found alone with
    its own id (never an excerpt of its neighbours), so deleting what a search showed
    deletes that memory only; the tool's description says so."""
    from llama_memory.admin.mcp_tools import DELETE_TOOLS

    [(_, described, _)] = [t for t in DELETE_TOOLS if t[0] == "delete_memory"]
    assert "A memory added with add_memory is always shown alone, with its one id" in described
    statements = (
        "My cat is called Miso.", "I work as a nurse in Porto.",
        "I prefer dark mode in every editor.", "My sister lives in Berlin.",
    )  # fmt: skip
    with MemoryAdmin(tmp_path / "memory", create=True) as admin:
        tools = MemoryTools(admin, ["u"], allow_delete=True)
        added = {text: tools.add_memory("u", text)["record_ids"] for text in statements}
        found = tools.search_memory("u", "dark mode", 5)
        assert sorted(r["text"] for r in found) == sorted(statements)  # each one alone
        [shown] = [r for r in found if "dark mode" in r["text"]]
        assert shown["text"] == "I prefer dark mode in every editor."
        assert shown["record_ids"] == added[shown["text"]] and len(shown["record_ids"]) == 1
        tools.delete_memory("u", shown["record_ids"])
        assert sorted(r["text"] for r in tools.recent_memories("u", 10)) == sorted(
            t for t in statements if "dark mode" not in t
        )
        assert all("dark mode" not in r["text"] for r in tools.search_memory("u", "dark mode", 5))


def test_forgetting_a_served_user_the_store_holds_nothing_of_names_no_other_user(tmp_path: Path) -> None:
    """``forget_user`` for a user with nothing stored answered with the admin's error,
    which lists the store's other users: the agent serving one user read the others'."""
    with MemoryAdmin(tmp_path / "memory", create=True) as admin:
        MemoryTools(admin, ["alice"]).add_memory("alice", "My cat is called Miso.")
        tools = MemoryTools(admin, ["carol"], allow_delete=True)
        assert tools.forget_user("carol") == {"forgotten": "carol"}  # nothing left of carol: done
        assert [u.user_id for u in admin.users()] == ["alice"]  # and nobody else touched


def test_a_tool_the_server_does_not_have_is_named_with_the_closest_and_every_one(tmp_path: Path) -> None:
    """An agent's guess at a name got the SDK's "Unknown tool: search_memories"."""
    from mcp.server.mcpserver.exceptions import ToolError

    with MemoryAdmin(tmp_path / "memory", create=True) as admin:
        server = build_server(MemoryTools(admin, ["alice"]))
        with pytest.raises(ToolError) as guessed:
            asyncio.run(server.call_tool("search_memories", {"query": "cats"}))
        assert str(guessed.value) == (
            'there is no tool "search_memories"; did you mean "search_memory"? The tools are search_memory, '
            "read_memory, add_memory, read_profile, read_triples and recent_memories."
        )
        with pytest.raises(ToolError, match=r'^there is no tool "x"\. The tools are search_memory, '):
            asyncio.run(server.call_tool("x", {}))
        with pytest.raises(ToolError, match="turned off: this server was started without --allow-delete"):
            asyncio.run(server.call_tool("forget_user", {}))


def test_search_answers_most_relevant_first(tmp_path: Path, embed_model: Any) -> None:
    """The sources' priorities put a triple of relevance 0.01 before the message that
    answers (0.98): an agent took the first result for the answer."""
    from llama_memory import ComposableMemory

    memory = ComposableMemory.from_defaults(user_id="alice", path=tmp_path, triples=True, embed_model=embed_model)
    memory.add_triples([("Alice", "lives in", "Lisbon")])
    memory.close()
    with MemoryAdmin(tmp_path, embed_model=embed_model) as admin:
        tools = MemoryTools(admin, ["alice"])
        tools.add_memory("alice", "My cat is called Miso.")
        raw = tools._memory(tools._readers, "alice").search("what is my cat called?", 5)
        assert raw[0].source == "triples" and raw[0].relevance is not None and raw[0].relevance < 0.03  # the trap
        found = tools.search_memory("alice", "what is my cat called?", 5)
        assert found[0]["text"] == "My cat is called Miso." and found[0]["relevance"] > 0.5
        assert [r["relevance"] for r in found] == sorted((r["relevance"] for r in found), reverse=True)
        assert tools.search_memory("alice", "where does Alice live?", 5)[0]["source"] == "triples"
