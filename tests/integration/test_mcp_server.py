"""``llama-memory mcp``: the MCP server, driven by the MCP Python SDK's own client.

Each server is a real subprocess (``python -m llama_memory mcp``, this checkout's
code) on a real SQLite store with the offline embedding model, spoken to over stdio (and
once over streamable HTTP on loopback), as an MCP client such as a desktop assistant
would. A server start costs a few seconds (LlamaIndex, the SDK, the model), so each test
starts one server and asks it everything its point needs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from bench.chroma_server import free_port
from helpers import assistant, hold, user
from llama_memory import ComposableMemory, MemoryAdmin
from llama_memory.admin.cli import main
from llama_memory.admin.mcp_results import MAX_TEXT_CHARS

ROOT = Path(__file__).resolve().parents[2]
READ_TOOLS = {"search_memory", "read_memory", "add_memory", "read_profile", "read_triples", "recent_memories"}
DELETE_TOOLS = {"delete_memory", "forget_user"}
START_TIMEOUT = 120.0


def server(store: Path | str, *args: str) -> Client:
    """A client of ``llama-memory mcp --store STORE ARGS`` started over stdio."""
    return Client(
        StdioServerParameters(
            command=sys.executable,
            args=["-m", "llama_memory", "mcp", "--store", str(store), *args],
            env={"PYTHONPATH": str(ROOT)},  # this checkout's code, whatever is installed
            cwd=str(ROOT),
        ),
        read_timeout_seconds=START_TIMEOUT,
    )


async def call(client: Client, tool: str, **arguments: Any) -> Any:
    """A tool's structured result (lists come as ``{"result": [...]}``); fails on a tool error."""
    result = await client.call_tool(tool, arguments)
    assert not result.is_error, f"{tool}{arguments}: {result.content}"
    data = result.structured_content
    assert data is not None
    return data["result"] if set(data) == {"result"} else data


async def refused(client: Client, tool: str, **arguments: Any) -> str:
    """The message of a tool error (fails when the call succeeds)."""
    result = await client.call_tool(tool, arguments)
    assert result.is_error, f"{tool}{arguments} was not refused: {result.structured_content}"
    return " ".join(getattr(c, "text", "") for c in result.content)


@pytest.fixture
def store(tmp_path: Path, embed_model: Any) -> Path:
    """Alice (a past conversation, a profile, a triple superseded by another) and Bob."""
    path = tmp_path / "memory"
    memory = ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", path=path, triples=True, embed_model=embed_model
    )
    memory.put_messages([user("I moved to Lisbon last spring.", timestamp="2024-04-02T10:00:00")])
    memory.profile.set_field("diet", "vegan", memory.scope)
    memory.add_triples([("Alice", "lives in", "Porto")], event_time="2020-01-01")
    memory.add_triples([("Alice", "lives in", "Lisbon")], event_time="2024-04-02")
    memory.close()
    memory = ComposableMemory.from_defaults(user_id="bob", session_id="s2", path=path, embed_model=embed_model)
    memory.put_messages([user("I go sailing every weekend.")])
    memory.close()
    return path


async def test_memories_added_are_found_and_deleted_one_by_one(tmp_path: Path, embed_model: Any) -> None:
    """Four statements added through the server (one session, "mcp") are four memories,
    each with its own id: a search shows the one asked for alone, and deleting its ids
    leaves the other three."""
    path = tmp_path / "memory"
    ComposableMemory.from_defaults(user_id="alice", path=path, embed_model=embed_model).close()
    statements = [
        "My cat is called Miso.", "I work as a nurse in Porto.",
        "I prefer dark mode in every editor.", "My sister lives in Berlin.",
    ]  # fmt: skip
    async with server(path, "--user", "alice", "--allow-delete") as client:
        added = {text: (await call(client, "add_memory", text=text))["record_ids"] for text in statements}
        assert all(len(ids) == 1 for ids in added.values())
        found = await call(client, "search_memory", query="dark mode")
        [dark] = [r for r in found if "dark mode" in r["text"]]
        assert dark["text"] == "I prefer dark mode in every editor."
        assert dark["record_ids"] == added[dark["text"]]
        assert all(len(r["record_ids"]) == 1 for r in found)
        await call(client, "delete_memory", record_ids=dark["record_ids"])
        left = [r["text"] for r in await call(client, "recent_memories")]
        assert sorted(left) == sorted(t for t in statements if "dark mode" not in t)


async def test_one_user_over_stdio(store: Path, embed_model: Any) -> None:
    # The application keeps its memory of Alice open while another agent uses the server.
    app = ComposableMemory.from_defaults(user_id="alice", path=store, triples=True, embed_model=embed_model)
    async with server(store, "--user", "alice") as client:
        tools = (await client.list_tools()).tools
        assert {t.name for t in tools} == READ_TOOLS  # no delete, no forget without the flag
        assert all("user_id" not in t.input_schema.get("properties", {}) for t in tools)

        added = await call(client, "add_memory", text="My cat is called Miso.")
        assert added["user_id"] == "alice" and added["session_id"] == "mcp" and added["record_ids"]

        found = await call(client, "search_memory", query="what is my cat called?", k=3)
        [miso] = [r for r in found if "Miso" in r["text"]]
        assert miso["source"] == "vector" and miso["session_id"] == "mcp"
        assert 0.5 <= miso["relevance"] <= 1
        assert datetime.fromisoformat(miso["date"]).year >= 2025
        assert miso["record_ids"] == added["record_ids"] and miso["role"] == "user"
        assert any("Miso" in r.text for r in app.search("what is my cat called?", 3))
        # Bob's memory is out of reach: the tools have no user argument to ask for it.
        sailing = await call(client, "search_memory", query="who goes sailing every weekend?")
        assert not [r for r in sailing if "sailing" in r["text"]]

        assert await call(client, "read_profile") == {"user_id": "alice", "profile": {"diet": "vegan"}}
        [now] = await call(client, "read_triples")
        assert (now["object"], now["current"], now["valid_to"]) == ("Lisbon", True, None)
        history = await call(client, "read_triples", include_history=True)
        porto = [t for t in history if t["object"] == "Porto"]
        assert len(history) == 2 and porto and not porto[0]["current"] and porto[0]["valid_to"]

        [latest] = await call(client, "recent_memories", limit=1)
        assert "Miso" in latest["text"]

        message = await refused(client, "delete_memory", record_ids=miso["record_ids"])
        assert "delete_memory" in message
        assert "k must be a whole number from 1 to 50, got 0." == await refused(
            client, "search_memory", query="cat", k=0
        )
        assert "non-empty" in await refused(client, "add_memory", text="   ")
        assert any("Miso" in r["text"] for r in await call(client, "recent_memories"))

    app.close()
    # What the server added stays in the store, in its session.
    with MemoryAdmin(store) as admin:
        assert [s.session_id for s in admin.sessions("alice")] == ["s1", "mcp"]
        assert any("Miso" in r.text for r in admin.search("alice", "what is my cat called?", 3))


#: What an agent's error must never carry: a validator's dump, or advice for another interface.
NOT_FOR_AGENTS = (
    "validation error", "pydantic", "Arguments", "Error executing tool", "Traceback",
    "replace(", "MemoryAdmin", "llama-memory search", "PostgreSQL", "encryption_key=",
)  # fmt: skip


def for_an_agent(message: str, *names: str) -> str:
    """``message`` when it reads as an error for an agent: one or two sentences, naming
    each of ``names``, with nothing of :data:`NOT_FOR_AGENTS`."""
    assert all(name in message for name in names), message
    assert not [bad for bad in NOT_FOR_AGENTS if bad in message], message
    assert "\n" not in message and 1 <= message.count(". ") + message.endswith(".") <= 2, message
    return message


async def test_errors_and_types_are_for_an_agent(store: Path, embed_model: Any) -> None:
    async with server(store, "--user", "alice") as client:
        # Strict types: nothing is coerced, and each error names the argument.
        for k in (True, "3", 3.0, 0, 51):
            for_an_agent(await refused(client, "search_memory", query="cat", k=k), "k", "from 1 to 50")
        assert 'got "3"' in await refused(client, "search_memory", query="cat", k="3")
        assert "got true" in await refused(client, "search_memory", query="cat", k=True)
        for_an_agent(await refused(client, "search_memory", query=3), "query", "a text")
        for_an_agent(await refused(client, "search_memory"), "query")
        for_an_agent(await refused(client, "search_memory", query="   "), "query")
        for_an_agent(await refused(client, "recent_memories", limit="10"), "limit")
        for_an_agent(await refused(client, "read_triples", include_history="yes"), "include_history")
        for_an_agent(await refused(client, "search_memory", query="cat", top_k=3), "top_k", "query")
        for_an_agent(await refused(client, "add_memory", text="a\x00b"), "text")
        for_an_agent(await refused(client, "read_memory", record_id="nope"), "nope", "search_memory")
        for_an_agent(await refused(client, "delete_memory", record_ids=["nope"]), "delete_memory", "--allow-delete")

        # Scope: a server of one user refuses a user_id, whoever it names.
        for who in ("bob", "alice"):
            for_an_agent(await refused(client, "search_memory", query="sailing", user_id=who), "user_id")
            for_an_agent(await refused(client, "add_memory", text="hi", user_id=who), "user_id")

        # Consistency: the text memory.search gives, the speaker apart.
        found = await call(client, "search_memory", query="where did I move last spring?")
        [moved] = [r for r in found if "Lisbon" in r["text"] and r["source"] == "vector"]
        assert (moved["text"], moved["role"], moved["truncated"]) == ("I moved to Lisbon last spring.", "user", False)
    with MemoryAdmin(store, embed_model=embed_model) as admin:
        texts = [r.text for r in admin.search("alice", "where did I move last spring?")]
    assert moved["text"] in texts
    assert {r["text"] for r in found} <= set(texts)
    with MemoryAdmin(store) as admin:  # the refused calls added nothing
        assert [s.session_id for s in admin.sessions("alice")] == ["s1"]


async def test_a_user_the_store_does_not_hold_is_logged_and_nothing_found_says_so(store: Path) -> None:
    """A mistyped ``--user`` is logged on stderr (an empty memory is served otherwise in
    silence), and an empty answer is the text ``[]``, not a result without any content
    that an agent reading the text would take for no answer."""
    started = subprocess.run(
        [sys.executable, "-m", "llama_memory", "mcp", "--store", str(store), "--users", "alice,alcie"],
        input="", capture_output=True, text=True, timeout=START_TIMEOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=str(ROOT),
    )  # fmt: skip
    [warning] = [line for line in started.stderr.splitlines() if "holds nothing of" in line]
    assert "WARNING" in warning and "holds nothing of 'alcie' in tenant 'default'" in warning
    assert "(its users: 'alice', 'bob')" in warning and "restart it with the id as the store has it" in warning
    async with server(store, "--user", "alcie") as client:
        for tool, arguments in (("search_memory", {"query": "where do I live?"}), ("recent_memories", {}),
                                ("read_triples", {})):  # fmt: skip
            result = await client.call_tool(tool, arguments)
            assert not result.is_error and result.structured_content == {"result": []}, tool
            assert [c.text for c in result.content] == ["[]"], tool  # type: ignore[union-attr]


async def test_delete_what_was_shown(tmp_path: Path, embed_model: Any) -> None:
    """An excerpt carries the ids of every message it shows, whatever the query; deleting
    them leaves nothing of it visible (the reply that repeats the name went too)."""
    path = tmp_path / "memory"
    memory = ComposableMemory.from_defaults(user_id="alice", session_id="old", path=path, embed_model=embed_model)
    memory.put(user("I moved to Lisbon last spring."))
    memory.close()
    memory = ComposableMemory.from_defaults(user_id="alice", session_id="pets", path=path, embed_model=embed_model)
    memory.put_messages([user("My dog is called Biscuit."), assistant("Biscuit is a lovely name for a dog!")])
    memory.close()
    async with server(path, "--user", "alice", "--allow-delete") as client:
        shown = []
        for query in ("what is my dog called?", "Biscuit is a lovely name", "what is my dog's name?"):
            [result] = [r for r in await call(client, "search_memory", query=query) if "Biscuit" in r["text"]]
            shown.append(result)
        ids = shown[0]["record_ids"]
        assert len(ids) == 2 and all(r["record_ids"] == ids for r in shown)
        assert [(await call(client, "read_memory", record_id=i))["text"] for i in ids] == [
            "My dog is called Biscuit.", "Biscuit is a lovely name for a dog!",
        ]  # fmt: skip

        # An id that is not the user's: nothing is deleted.
        for_an_agent(await refused(client, "delete_memory", record_ids=[*ids, "nope"]), "nope")
        assert len(await call(client, "recent_memories")) == 3

        deleted = await call(client, "delete_memory", record_ids=ids)
        assert deleted == {"user_id": "alice", "deleted": [{"id": i, "source": "vector"} for i in ids]}
        for query in ("what is my dog called?", "Biscuit", "lovely name for a dog"):
            assert not [r for r in await call(client, "search_memory", query=query) if "Biscuit" in r["text"]]
        assert [r["text"] for r in await call(client, "recent_memories")] == ["I moved to Lisbon last spring."]
        for_an_agent(await refused(client, "read_memory", record_id=ids[0]), ids[0])


async def test_results_are_capped_and_read_whole(tmp_path: Path, embed_model: Any) -> None:
    """A 1 MB memory comes back cut to MAX_TEXT_CHARS, marked; read_memory gives it whole."""
    path = tmp_path / "memory"
    document = "My notes on the garden: " + "the roses need water every morning. " * 28_000
    hold(
        lambda **kw: ComposableMemory.from_defaults(user_id="alice", path=path, embed_model=embed_model, **kw),
        [document, "I planted the roses in May."],
    )
    async with server(path, "--user", "alice") as client:
        found = await call(client, "search_memory", query="what do the roses need?")
        recent = await call(client, "recent_memories")
        assert all(len(r["text"]) <= MAX_TEXT_CHARS for r in found + recent)
        [cut] = [r for r in found if "roses need water" in r["text"]]
        [listed] = [r for r in recent if r["text"].startswith("My notes")]
        for result in (cut, listed):
            assert result["truncated"] and len(result["text"]) == MAX_TEXT_CHARS, len(result["text"])
            assert result["text"].endswith("more characters: read_memory with an id of record_ids reads the whole record]")
        whole = await call(client, "read_memory", record_id=listed["record_ids"][0])
        assert whole["text"] == document and not whole["truncated"] and whole["role"] == "user"
        [short] = [r for r in recent if r["text"] == "I planted the roses in May."]
        assert short["truncated"] is False


async def test_one_open_per_process(store: Path, embed_model: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server opens the store once and one memory per user for its life, and the
    admins of one process open at the same time on one store share one opening."""
    from llama_memory.admin.mcp_server import build_server
    from llama_memory.admin.mcp_tools import MemoryTools
    from llama_memory.storage.sqlite.connection import SQLiteConnection

    opened: Counter[str] = Counter()

    def counting(what: str, original: Any) -> Any:
        def opening(*args: Any, **kwargs: Any) -> Any:
            opened[what] += 1
            return original(*args, **kwargs)

        return opening

    monkeypatch.setattr(SQLiteConnection, "__init__", counting("store", SQLiteConnection.__init__))
    monkeypatch.setattr(MemoryAdmin, "memory", counting("memory", MemoryAdmin.memory))
    admin = MemoryAdmin(store, embed_model=embed_model)
    maintenance = MemoryAdmin(store, embed_model=embed_model)  # another tool of the process, at once
    assert maintenance.store is admin.store
    async with Client(build_server(MemoryTools(admin, ["alice", "bob"]))) as client:
        for n in range(3):
            await call(client, "search_memory", user_id="alice", query="where do I live?")
            await call(client, "search_memory", user_id="bob", query="what do I do at weekends?")
            await call(client, "add_memory", user_id="alice", text=f"Note {n}: water the roses.")
            await call(client, "recent_memories", user_id="alice")
            await call(client, "read_profile", user_id="bob")
            assert [u.user_id for u in maintenance.users()] == ["alice", "bob"]
    assert opened == {"store": 1, "memory": 3}  # Alice's reader and writer, Bob's reader
    maintenance.close()
    assert admin.users()  # still open for the server
    admin.close()
    with MemoryAdmin(store, embed_model=embed_model) as again:  # the last one closed it: opened anew
        assert again.store is not admin.store
    assert opened["store"] == 2


async def test_allow_list_and_delete(store: Path) -> None:
    async with server(store, "--users", "alice,bob", "--allow-delete") as client:
        tools = (await client.list_tools()).tools
        assert {t.name for t in tools} == READ_TOOLS | DELETE_TOOLS
        assert all("user_id" in t.input_schema["required"] for t in tools)

        assert 'does not serve user "carol"' in await refused(client, "search_memory", user_id="carol", query="x")
        assert 'does not serve user "carol"' in await refused(client, "add_memory", user_id="carol", text="hi")
        assert "user_id" in await refused(client, "read_profile")

        bob = await call(client, "search_memory", user_id="bob", query="who goes sailing every weekend?")
        assert any("sailing" in r["text"] for r in bob)
        alice = await call(client, "search_memory", user_id="alice", query="who goes sailing every weekend?")
        assert not [r for r in alice if "sailing" in r["text"]]

        [moved] = [r for r in await call(client, "recent_memories", user_id="alice") if "Lisbon" in r["text"]]
        assert "no memory of this user has the id" in await refused(
            client, "delete_memory", user_id="bob", record_ids=moved["record_ids"]
        )  # an id of Alice's, asked as Bob's
        deleted = await call(client, "delete_memory", user_id="alice", record_ids=moved["record_ids"])
        assert deleted == {"user_id": "alice", "deleted": [{"id": moved["record_ids"][0], "source": "vector"}]}
        assert await call(client, "recent_memories", user_id="alice") == []

        assert await call(client, "forget_user", user_id="bob") == {"forgotten": "bob"}
        assert await call(client, "recent_memories", user_id="bob") == []

    with MemoryAdmin(store) as admin:
        assert [u.user_id for u in admin.users()] == ["alice"]
        assert admin.profile("alice") == {"diet": "vegan"}  # the rest of Alice stays


async def test_a_postgres_store(postgres_url: str, embed_model: Any) -> None:
    memory = ComposableMemory.from_defaults(user_id="alice", store=postgres_url, embed_model=embed_model)
    memory.put(user("I moved to Lisbon last spring."))
    memory.close()
    async with server(postgres_url, "--user", "alice") as client:
        added = await call(client, "add_memory", text="My cat is called Miso.")
        found = await call(client, "search_memory", query="what is my cat called?", k=3)
        assert [r["record_ids"] for r in found if "Miso" in r["text"]] == [added["record_ids"]]
        assert len(await call(client, "recent_memories")) == 2


async def test_streamable_http_on_loopback(store: Path) -> None:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "llama_memory", "mcp", "--store", str(store), "--user", "alice",
         "--http", "--port", str(port)],
        env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=ROOT,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            assert process.poll() is None, process.communicate()
            try:
                async with Client(f"http://127.0.0.1:{port}/mcp") as client:
                    assert {t.name for t in (await client.list_tools()).tools} == READ_TOOLS
                    found = await call(client, "search_memory", query="where did I move last spring?")
                    assert any("Lisbon" in r["text"] and r["source"] == "vector" for r in found)
                    assert "got 0" in await refused(client, "search_memory", query="where?", k=0)
                break
            except Exception:  # not listening yet
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        # A web page that rebinds its own name to 127.0.0.1 is refused by its Host header.
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/mcp", data=b"{}", method="POST",
            headers={"Host": "attacker.example", "Content-Type": "application/json"},
        )  # fmt: skip
        with pytest.raises(urllib.error.HTTPError) as refused_host:
            urllib.request.urlopen(request, timeout=30)
        assert refused_host.value.code == 421
    finally:
        process.terminate()
        out, err = process.communicate(timeout=60)
    assert process.returncode == 0, err
    assert f"http://127.0.0.1:{port}/mcp" in err
    # Quiet by default: neither the calls nor the refused one are logged.
    assert "search_memory" not in err and "INFO" not in err, err


def test_without_the_sdk_the_error_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [m for m in sys.modules if m == "mcp" or m.startswith("mcp.")]:
        monkeypatch.setitem(sys.modules, name, None)  # an import of it fails, as when not installed
    monkeypatch.setitem(sys.modules, "mcp", None)
    assert main(["mcp", "--store", str(tmp_path), "--user", "alice"]) == 1
    assert "pip install 'llama-index-memory-composable[mcp]'" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ([], "needs the user whose memory it serves: --user ID"),
        (["--users", " , "], "needs the user whose memory it serves"),
        (["--user", "  "], "a user id must be a non-empty, non-blank string"),
        (["--user", "alice", "--store-is-missing"], "let the server create it: --create"),
        # Without --http the server would speak stdio and sit waiting on the terminal.
        (["--user", "alice", "--port", "8123"], "--port 8123 goes with --http"),
    ],
)
def test_bad_starts_are_refused_with_a_message(
    tmp_path: Path, args: list[str], error: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "missing" if "--store-is-missing" in args else tmp_path
    args = [a for a in args if a != "--store-is-missing"]
    assert main(["mcp", "--store", str(store), *args]) == 1
    assert error in capsys.readouterr().err
    assert not (tmp_path / "missing").exists()  # nothing created


def test_on_a_terminal_the_stdio_server_says_what_it_waits_for_and_how_to_stop(store: Path) -> None:
    """Run by hand, a stdio server prints nothing and waits: it says so on stderr, and
    Ctrl-D (end of input), as it says, stops it."""
    import pty

    terminal, its_end = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "llama_memory", "mcp", "--store", str(store), "--user", "alice"],
        stdin=its_end, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=str(ROOT),
    )  # fmt: skip
    os.close(its_end)
    try:
        said = process.stderr.readline()  # type: ignore[union-attr]
        assert said.startswith("llama-memory: serving 1 user(s) of ") and "over MCP on stdin and stdout" in said
        assert "on a terminal it waits for the client's messages. Ctrl-D (end of input) stops it" in said
        os.write(terminal, b"\x04")
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
        os.close(terminal)


@pytest.mark.parametrize(("signum", "status", "said"), [(signal.SIGINT, 130, "Ctrl-C (SIGINT)"), (signal.SIGTERM, 0, "SIGTERM")],
                         ids=["SIGINT", "SIGTERM"])  # fmt: skip
def test_a_signal_stops_the_stdio_server_at_once_in_one_line_with_the_store_closed(
    store: Path, embed_model: Any, signum: int, status: int, said: str
) -> None:
    """Ctrl-C while the client keeps stdin open: the server waited for a next line that
    never came (the SDK's stdin reader cannot be cancelled). It stops at once now, says
    so in one line, and what was added is in the store."""
    process = subprocess.Popen(
        [sys.executable, "-m", "llama_memory", "mcp", "--store", str(store), "--user", "alice"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, cwd=str(ROOT),
    )  # fmt: skip
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None

    def ask(number: int, method: str, **params: Any) -> dict[str, Any]:
        process.stdin.write(json.dumps({"jsonrpc": "2.0", "id": number, "method": method, "params": params}) + "\n")
        process.stdin.flush()
        return json.loads(process.stdout.readline())

    try:
        client = {"name": "test", "version": "1"}
        ask(1, "initialize", protocolVersion="2025-06-18", capabilities={}, clientInfo=client)
        process.stdin.write(json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}) + "\n")
        added = ask(2, "tools/call", name="add_memory", arguments={"text": "My tortoise is called Basil."})
        assert not added["result"]["isError"], added
        process.send_signal(signum)  # stdin stays open, as a client that signals first keeps it
        assert process.wait(timeout=30) == status
        assert process.stderr.read() == f"llama-memory mcp: stopped by {said}; the store is closed\n"
    finally:
        if process.poll() is None:
            process.kill()
        process.communicate()
    memory = ComposableMemory.from_defaults(user_id="alice", path=store, embed_model=embed_model)
    assert any("Basil" in r.text for r in memory.search("what is my tortoise called?", k=3))
    memory.close()


def test_help_lists_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["mcp", "--help"])
    text = capsys.readouterr().out
    for option in ("--user", "--users", "--allow-delete", "--http", "--port", "--session", "--create", "--log-level"):
        assert option in text
    assert "127.0.0.1" in text
