"""``llama-memory mcp``: the MCP server, driven by the MCP Python SDK's own client.

Each server is a real subprocess (``python -m llama_memory mcp``, this checkout's
code) on a real SQLite store with the offline embedding model, spoken to over stdio (and
once over streamable HTTP on loopback), as an MCP client such as a desktop assistant
would. A server start costs a few seconds (LlamaIndex, the SDK, the model), so each test
starts one server and asks it everything its point needs.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from bench.chroma_server import free_port
from helpers import user
from llama_memory import ComposableMemory, MemoryAdmin
from llama_memory.admin.cli import main

ROOT = Path(__file__).resolve().parents[2]
READ_TOOLS = {"search_memory", "add_memory", "read_profile", "read_triples", "recent_memories"}
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
        assert miso["id"] in added["record_ids"]
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

        message = await refused(client, "delete_memory", record_id=miso["id"])
        assert "delete_memory" in message
        assert "k must be a whole number from 1 to 50, got 0" in await refused(
            client, "search_memory", query="cat", k=0
        )
        assert "non-empty" in await refused(client, "add_memory", text="   ")
        assert any("Miso" in r["text"] for r in await call(client, "recent_memories"))

    app.close()
    # What the server added stays in the store, in its session.
    with MemoryAdmin(store) as admin:
        assert [s.session_id for s in admin.sessions("alice")] == ["s1", "mcp"]
        assert any("Miso" in r.text for r in admin.search("alice", "what is my cat called?", 3))


async def test_allow_list_and_delete(store: Path) -> None:
    async with server(store, "--users", "alice,bob", "--allow-delete") as client:
        tools = (await client.list_tools()).tools
        assert {t.name for t in tools} == READ_TOOLS | DELETE_TOOLS
        assert all("user_id" in t.input_schema["required"] for t in tools)

        assert "does not serve user 'carol'" in await refused(client, "search_memory", user_id="carol", query="x")
        assert "does not serve user 'carol'" in await refused(client, "add_memory", user_id="carol", text="hi")
        assert "user_id" in await refused(client, "read_profile")

        bob = await call(client, "search_memory", user_id="bob", query="who goes sailing every weekend?")
        assert any("sailing" in r["text"] for r in bob)
        alice = await call(client, "search_memory", user_id="alice", query="who goes sailing every weekend?")
        assert not [r for r in alice if "sailing" in r["text"]]

        [moved] = [r for r in await call(client, "recent_memories", user_id="alice") if "Lisbon" in r["text"]]
        assert "has no record or triple with id" in await refused(
            client, "delete_memory", user_id="bob", record_id=moved["id"]
        )  # an id of Alice's, asked as Bob's
        deleted = await call(client, "delete_memory", user_id="alice", record_id=moved["id"])
        assert deleted == {"user_id": "alice", "deleted": moved["id"], "source": "vector"}
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
        assert [r["id"] for r in found if "Miso" in r["text"]] == added["record_ids"]
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


def test_without_the_sdk_the_error_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    for name in [m for m in sys.modules if m == "mcp" or m.startswith("mcp.")]:
        monkeypatch.setitem(sys.modules, name, None)  # an import of it fails, as when not installed
    monkeypatch.setitem(sys.modules, "mcp", None)
    assert main(["mcp", "--store", str(tmp_path), "--user", "alice"]) == 1
    assert 'pip install "llama-memory[mcp]"' in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ([], "needs the user whose memory it serves: --user ID"),
        (["--users", " , "], "needs the user whose memory it serves"),
        (["--user", "  "], "a user id must be a non-empty, non-blank string"),
        (["--user", "alice", "--store-is-missing"], "let the server create it: --create"),
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


def test_help_lists_the_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["mcp", "--help"])
    text = capsys.readouterr().out
    for option in ("--user", "--users", "--allow-delete", "--http", "--port", "--session", "--create"):
        assert option in text
    assert "127.0.0.1" in text
