"""The ``llama-memory`` command line and :class:`MemoryAdmin` behind it, on real stores.

Every command runs in a process of its own on a real store built in a temporary
directory: ``main`` with the command's arguments, as ``python -m llama_memory`` runs it,
its output and exit status those of the process. A new interpreter pays seconds of
imports (LlamaIndex, Chroma) before the command, so the processes are forked from
the tests' preloaded server (``workers.command_line``); ``--version`` runs as
``python -m llama_memory`` itself, the entry point. The module's fixture starts all the
commands at once, a few at a time, each on its own copy of the store where it writes;
the tests then check what each run printed and what it left in the store.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage, MessageRole, ToolCallBlock
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.storage.chat_store import SimpleChatStore

import workers
from helpers import assistant, user
from llama_memory import ComposableMemory, LlamaMemoryError, MemoryAdmin
from llama_memory.admin.cli import main
from llama_memory.admin.memory_admin import EXPORT_FORMAT, StoreNotFoundError, UnknownUserError
from llama_memory.core.progress import Progress
from llama_memory.core.types import Scope
from llama_memory.memory.wiring import VECTOR_COLLECTION
from llama_memory.storage.chroma import open_index
from llama_memory.storage.sqlite import NewRecord, SQLiteStore

ROOT = Path(__file__).resolve().parents[2]
QUERY = "where do I live now?"
Run = subprocess.CompletedProcess


def entry_point(*args: Any) -> Run:
    """Run ``python -m llama_memory`` with ``args`` in a new interpreter (this checkout's code)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "llama_memory", *map(str, args)],
        capture_output=True, text=True, timeout=240, env=env, cwd=ROOT,
    )  # fmt: skip


def cli(ctx: Any, output: Path, *args: Any) -> Run:
    """Run ``llama-memory`` with ``args`` in a new process forked from the preloaded
    server ``ctx`` (this checkout's code), its output in files under ``output``."""
    argv = [str(a) for a in args]
    output.mkdir(parents=True)
    stdout, stderr = output / "stdout", output / "stderr"
    reader, writer_end = ctx.Pipe(duplex=False)
    process = ctx.Process(target=workers.command_line, args=(writer_end, argv, str(stdout), str(stderr), str(ROOT)))
    process.start()
    writer_end.close()
    reader.close()
    process.join(240)
    if process.exitcode is None:
        process.kill()
        pytest.fail(f"llama-memory {' '.join(argv)} did not finish in 240 s")
    status = output / "status"  # the child's own word (workers.command_line says why)
    code = int(status.read_text()) if status.exists() else process.exitcode
    return Run(argv, code, stdout.read_text(), stderr.read_text())


def build_store(path: Path, embed_model: Any) -> None:
    """Alice (two sessions, a tool call, a profile with history, triples with history)
    and Bob (one session)."""
    memory = ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", path=path, triples=True, embed_model=embed_model
    )
    memory.put_messages(
        [
            user("I moved to Lisbon last spring.", timestamp="2024-04-02T10:00:00"),
            ChatMessage(
                role=MessageRole.ASSISTANT,
                blocks=[ToolCallBlock(tool_call_id="c1", tool_name="weather", tool_kwargs={"city": "Lisbon"})],
            ),
            ChatMessage(role=MessageRole.TOOL, content="Sunny, 24 degrees.", additional_kwargs={"tool_call_id": "c1"}),
            assistant("Lisbon is lovely in spring, and sunny today."),
        ]
    )
    profile = memory.source("profile")
    profile.set_field("diet", "vegetarian", memory.scope, message_ids=["m1"])  # type: ignore[attr-defined]
    profile.set_field("diet", "vegan", memory.scope)  # type: ignore[attr-defined]
    memory.instructions.add("Answer in French.", reason="practising")
    memory.add_triples([("Alice", "lives in", "Porto")], event_time="2020-01-01")
    memory.add_triples([("Alice", "lives in", "Lisbon")], event_time="2024-04-02", message_ids=["m2"])
    memory.close()
    memory = ComposableMemory.from_defaults(
        user_id="alice", session_id="s2", path=path, triples=True, embed_model=embed_model
    )
    memory.put_messages([user("My favourite food is ramen.")])
    memory.close()
    memory = ComposableMemory.from_defaults(
        user_id="bob", session_id="s3", path=path, embed_model=embed_model
    )
    memory.put_messages([user("I play the cello every evening.")])
    memory.close()


def chat_store_file(path: Path) -> Path:
    """A LlamaIndex SimpleChatStore file as ``SimpleChatStore.persist()`` writes it
    (written by hand: persist() itself fails under pydantic 2.14, a LlamaIndex bug)."""
    conversations = {
        "carol": [user("My dog Pixel is a border collie."), assistant("Pixel sounds energetic!")],
        "dave": [user("I am allergic to peanuts.")],
    }
    data = {
        "store": {key: [m.model_dump(mode="json") for m in ms] for key, ms in conversations.items()},
        "class_name": "SimpleChatStore",
    }
    path.write_text(json.dumps(data))
    assert SimpleChatStore.from_persist_path(str(path)).get_keys() == ["carol", "dave"]
    return path


class Runs:
    """Every command of the module, started at once a few at a time; ``[name]`` waits
    for one job (a list of commands run one after the other) and gives its runs."""

    def __init__(self, output: Path, at_once: int = 4) -> None:
        self._ctx = workers.forkserver()
        self._output = output
        self._pool = ThreadPoolExecutor(at_once)
        self._jobs: dict[str, Future[list[Run]]] = {}

    def start(self, name: str, *commands: tuple[Any, ...]) -> None:
        self._jobs[name] = self._pool.submit(
            lambda: [cli(self._ctx, self._output / f"{name}-{i}", *c) for i, c in enumerate(commands)]
        )

    def start_entry_point(self, name: str, *args: Any) -> None:
        self._jobs[name] = self._pool.submit(lambda: [entry_point(*args)])

    def __getitem__(self, name: str) -> list[Run]:
        return self._jobs[name].result()

    def close(self) -> None:
        self._pool.shutdown(wait=True)


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory, embed_model: Any) -> dict[str, Path]:
    """The shared store, and copies of it for the commands that write."""
    base = tmp_path_factory.mktemp("cli")
    shared = base / "store"
    build_store(shared, embed_model)
    paths = {"shared": shared, "base": base}
    for name in ("delete", "forget", "reindex", "reconcile", "purge", "reimport"):
        paths[name] = base / name
        shutil.copytree(shared, paths[name])
    return paths


@pytest.fixture(scope="module")
def setup(stores: dict[str, Path], embed_model: Any) -> dict[str, Any]:
    """What the writing commands act on: ids taken before, a vector removed from
    Chroma, an expired record."""
    with MemoryAdmin(stores["delete"]) as admin:
        [moved] = [r for r in admin.records("alice") if "Lisbon last spring" in r.text]
    index = open_index(VECTOR_COLLECTION, stores["reconcile"])
    with MemoryAdmin(stores["reconcile"]) as admin:
        [ramen] = [r for r in admin.records("alice") if "ramen" in r.text]
    index.delete("default", "alice", [ramen.id])
    expiring = ComposableMemory.from_defaults(
        user_id="alice", session_id="s9", path=stores["purge"], embed_model=embed_model,
        ttl=60, clock=lambda: 1000.0,  # expired since 1970
    )  # fmt: skip
    expiring.put_messages([user("This note should have expired long ago.")])
    expiring.close()
    return {"moved": moved.id, "ramen": ramen.id, "chat_store": chat_store_file(stores["base"] / "chats.json")}


@pytest.fixture(scope="module")
def runs(stores: dict[str, Path], setup: dict[str, Any]) -> Any:
    shared, base = stores["shared"], stores["base"]
    export_a, export_b = base / "a.jsonl", base / "b.jsonl"
    new_store, chats = base / "imported", base / "from-chat-store"
    runs = Runs(base / "output")
    # The longest chains first, so they are not left for the end.
    runs.start(
        "round_trip",
        ("export", "--all", "-o", export_a, "--store", shared),
        ("import", export_a, "--store", new_store, "--json"),
        ("import", export_a, "--store", new_store, "--json"),
        ("export", "--all", "-o", export_b, "--store", new_store),
    )
    runs.start(
        "chat_store",
        ("import", setup["chat_store"], "--store", chats, "--json"),
        ("import", setup["chat_store"], "--store", chats, "--json"),
    )
    runs.start("explain", ("explain", "alice", QUERY, "--store", shared, "--json"))
    runs.start("search", ("search", "alice", QUERY, "--store", shared, "--json"))
    runs.start("delete", ("delete", "alice", setup["moved"], "--store", stores["delete"], "--json"))
    runs.start("reindex", ("reindex", "--store", stores["reindex"], "--json"))
    runs.start("reconcile", ("reconcile", "--store", stores["reconcile"], "--json"))
    runs.start("forget", ("forget", "bob", "--yes", "--store", stores["forget"]))
    runs.start("purge", ("purge-expired", "--store", stores["purge"], "--json"))
    runs.start("users", ("users", "--store", shared, "--json"))
    runs.start("sessions", ("sessions", "alice", "--store", shared, "--json"))
    runs.start("show", ("show", "alice", "--store", shared, "--json"))
    runs.start("records", ("records", "alice", "--session", "s2", "--store", shared, "--json"))
    runs.start("stats", ("stats", "--store", shared, "--json"))
    runs.start_entry_point("version", "--version")
    yield runs
    runs.close()


def ok(run: Run) -> Run:
    assert run.returncode == 0, f"exit {run.returncode}\nstdout:\n{run.stdout}\nstderr:\n{run.stderr}"
    return run


def as_json(run: Run) -> Any:
    return json.loads(ok(run).stdout)


# --------------------------------------------------------------------------- reading


def test_help_renders_the_description_and_every_command_and_version_prints(
    runs: Runs, capsys: pytest.CaptureFixture[str]
) -> None:
    assert ok(runs["version"][0]).stdout.strip() == "llama-memory 0.1.0"
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    text = capsys.readouterr().out
    assert exit_info.value.code == 0
    assert "See and manage what a llama-memory store remembers." in text
    for command in ("users", "sessions", "show", "search", "explain", "export", "import",
                    "forget", "reindex", "reconcile", "purge-expired", "stats", "delete", "records"):  # fmt: skip
        assert command in text


def test_users_lists_every_user_with_counts(
    runs: Runs, stores: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    users = {u["user_id"]: u for u in as_json(runs["users"][0])}
    assert set(users) == {"alice", "bob"}
    assert users["alice"]["sessions"] == 2 and users["alice"]["messages"] == 5
    assert users["alice"]["records"] == 3  # the tool call and its result are not records
    assert users["alice"]["triples"] == 1 and users["alice"]["profile_fields"] == 1
    assert users["bob"]["records"] == 1
    assert main(["users", "--store", str(stores["shared"])]) == 0
    table = capsys.readouterr().out
    assert table.startswith("USER ") and "\nalice " in table and "\nbob " in table


def test_sessions_lists_a_users_conversations_in_order(runs: Runs) -> None:
    [run] = runs["sessions"]
    sessions = as_json(run)
    assert [(s["session_id"], s["messages"], s["records"]) for s in sessions] == [
        ("s1", 4, 2),
        ("s2", 1, 1),
    ]


def test_show_gives_profile_current_triples_recent_records_and_counts(
    runs: Runs, stores: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    shown = as_json(runs["show"][0])
    assert shown["profile"] == {"diet": "vegan"}
    assert [(t["subject"], t["object"]) for t in shown["triples"]] == [("Alice", "Lisbon")]
    assert [r["text"] for r in shown["recent"]][0] == "My favourite food is ramen."
    assert shown["summary"]["messages"] == 5
    assert [(i["text"], i["reason"]) for i in shown["instructions"]] == [("Answer in French.", "practising")]
    assert main(["show", "alice", "--store", str(stores["shared"])]) == 0
    text = capsys.readouterr().out
    assert '"diet": "vegan"' in text and "Alice — lives in — Lisbon (since 2024-04-02)" in text
    assert "instructions:\n  Answer in French.  [i" in text


def test_records_filters_by_session(runs: Runs) -> None:
    [run] = runs["records"]
    records = as_json(run)
    assert [(r["text"], r["session_id"]) for r in records] == [("My favourite food is ramen.", "s2")]


def test_search_gives_scores_sources_and_provenance(runs: Runs) -> None:
    [run] = runs["search"]
    found = as_json(run)
    assert {r["source"] for r in found} == {"vector", "triples"}
    lisbon = next(r for r in found if r["source"] == "vector" and "Lisbon" in r["text"])
    assert lisbon["score"] > 0 and lisbon["session_id"] == "s1" and lisbon["message_ids"]
    triple = next(r for r in found if r["source"] == "triples")
    assert "Lisbon" in triple["text"] and "m2" in triple["message_ids"]


def test_explain_prints_exactly_the_block_get_injects(
    runs: Runs, stores: dict[str, Path], embed_model: Any
) -> None:
    [run] = runs["explain"]
    explained = as_json(run)
    memory = ComposableMemory.from_defaults(
        user_id="alice", path=stores["shared"], triples=True, embed_model=embed_model
    )
    try:
        memory.get(QUERY)
        block = memory.last_block
    finally:
        memory.close()
    assert explained["text"] == block.text and "diet: vegan" in block.text
    assert [r["id"] for r in explained["records"]] == [r.id for r in block.records]
    assert explained["token_count"] == block.token_count <= explained["token_limit"] == 1500
    assert explained["dropped_duplicates"] == 0 and explained["dropped_for_budget"] == 0
    # Records below min_relevance are the only ones left out, and explain
    # lists the same ones, with the same reason.
    assert [(i["reason"], i["record"]["id"]) for i in explained["left_out"]] == [
        (i.reason, i.record.id) for i in block.left_out
    ]
    assert {i.reason for i in block.left_out} <= {"not relevant"}
    assert explained["dropped_irrelevant"] == block.dropped_irrelevant == len(block.left_out)


def test_stats_counts_sizes_and_pending_work(runs: Runs) -> None:
    [run] = runs["stats"]
    stats = as_json(run)
    counts = stats["counts"]
    assert (counts["users"], counts["sessions"], counts["messages"]) == (2, 3, 6)
    assert counts["records"] == {"vector": 4}
    assert (counts["triples"], counts["triples_current"]) == (2, 1)
    assert (counts["profile_rows"], counts["profile_fields"]) == (2, 1)
    assert counts["pending"] == {"vector": 0, "triples": 0}
    assert stats["sizes"]["sqlite"] > 0 and stats["sizes"]["chroma"] > 0
    assert stats["sizes"]["total"] == stats["sizes"]["sqlite"] + stats["sizes"]["chroma"]


# --------------------------------------------------------------------------- export, import


def test_export_import_export_gives_the_same_file_and_import_is_idempotent(
    runs: Runs, stores: dict[str, Path], embed_model: Any
) -> None:
    export_a, first, second, export_b = runs["round_trip"]
    ok(export_a)
    a = (stores["base"] / "a.jsonl").read_text()
    rows = [json.loads(line) for line in a.splitlines()]
    assert rows[0] == {"format": EXPORT_FORMAT, "version": 2, "tenant": "default", "users": ["alice", "bob"]}
    kinds = [r["kind"] for r in rows[1:]]
    assert kinds.count("message") == 6 and kinds.count("record") == 4
    assert kinds.count("profile") == 2 and kinds.count("triple") == 2  # histories included
    [instruction] = [r for r in rows[1:] if r["kind"] == "instruction"]
    assert instruction["value"]["text"] == "Answer in French." and instruction["op"] == "add"
    call = next(r for r in rows[1:] if r["kind"] == "message" and r["message"]["role"] == "assistant")
    assert call["message"]["blocks"][0]["tool_call_id"] == "c1"
    assert as_json(first)["added"] == {"message": 6, "record": 4, "profile": 2, "instruction": 1, "triple": 2}
    assert as_json(second)["added"] == {}
    ok(export_b)
    assert (stores["base"] / "b.jsonl").read_text() == a
    assert export_a.stderr == first.stderr == ""  # no progress bar when not a terminal
    # Into the store it came from: everything is there already.
    with MemoryAdmin(stores["reimport"], embed_model=embed_model) as admin:
        assert admin.import_file(stores["base"] / "a.jsonl") == {}


def test_imported_store_is_searchable(runs: Runs, stores: dict[str, Path], embed_model: Any) -> None:
    ok(runs["round_trip"][1])
    with MemoryAdmin(stores["base"] / "imported", embed_model=embed_model) as admin:
        found = admin.search("alice", "favourite food")
        assert admin.stats().counts.pending == {"vector": 0, "triples": 0}
    assert any("ramen" in r.text for r in found)


def test_import_of_a_simple_chat_store_makes_its_messages_searchable(
    runs: Runs, stores: dict[str, Path], embed_model: Any
) -> None:
    first, again = runs["chat_store"]
    assert as_json(first)["added"] == {"message": 3, "session": 2}
    assert as_json(again)["added"] == {}
    with MemoryAdmin(stores["base"] / "from-chat-store", embed_model=embed_model) as admin:
        assert [s.session_id for s in admin.sessions("carol")] == ["carol"]
        [found, *_] = admin.search("carol", "what breed is my dog?")
        assert [m.role for m in admin.memory("carol", "carol").get_all()] == ["user", "assistant"]
    assert "border collie" in found.text and found.session_id == "carol"


# --------------------------------------------------------------------------- writing


def test_delete_removes_a_record_from_every_index(
    runs: Runs, stores: dict[str, Path], setup: dict[str, Any]
) -> None:
    [run] = runs["delete"]
    assert as_json(run) == {"deleted": setup["moved"], "source": "vector"}
    record_id, scope = setup["moved"], Scope(user_id="alice")
    store = SQLiteStore(stores["delete"])
    try:
        assert not store.query("t", "SELECT 1 FROM records WHERE id = ?", (record_id,))
        assert store.stored_vectors([record_id]) == {}
        assert record_id not in dict(store.search_text("moved Lisbon spring", scope, "vector", 10))
    finally:
        store.close()
    assert record_id not in open_index(VECTOR_COLLECTION, stores["delete"]).ids("default", "alice")


def test_forget_asks_for_yes_then_removes_the_user(
    runs: Runs, stores: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ok(runs["forget"][0])
    with MemoryAdmin(stores["forget"]) as admin:
        assert [u.user_id for u in admin.users()] == ["alice"]
    assert open_index(VECTOR_COLLECTION, stores["forget"]).ids("default", "bob") == set()
    assert main(["forget", "alice", "--store", str(stores["forget"])]) == 1
    assert "pass --yes to confirm" in capsys.readouterr().err


def test_reindex_rebuilds_the_dense_indexes(runs: Runs, stores: dict[str, Path]) -> None:
    [run] = runs["reindex"]
    assert as_json(run) == {"indexed": 6}  # 4 records, 2 triples
    assert len(open_index(VECTOR_COLLECTION, stores["reindex"]).ids("default", "alice")) == 3


def test_reconcile_writes_back_a_vector_missing_from_chroma(
    runs: Runs, stores: dict[str, Path], setup: dict[str, Any]
) -> None:
    [run] = runs["reconcile"]
    reports = as_json(run)
    assert reports["vector"]["missing"] == 1 and reports["vector"]["indexed"] == 1
    assert setup["ramen"] in open_index(VECTOR_COLLECTION, stores["reconcile"]).ids("default", "alice")


def test_purge_expired_deletes_expired_records(runs: Runs, stores: dict[str, Path]) -> None:
    [run] = runs["purge"]
    assert as_json(run) == {"purged": 1}
    with MemoryAdmin(stores["purge"]) as admin:
        assert not [r for r in admin.records("alice") if "expired" in r.text]
        assert len(admin.records("alice")) == 3


# --------------------------------------------------------------------------- bad input


def test_a_mistyped_store_is_an_error_and_creates_nothing(
    stores: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["users", "--store", str(stores["base"] / "no-such-store")]) == 1
    err = capsys.readouterr().err
    assert "no memory store at" in err and "no-such-store" in err
    assert not (stores["base"] / "no-such-store").exists()


def test_bad_input_exits_non_zero_with_what_to_do(
    runs: Runs, stores: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    ok(runs["users"][0])  # the shared store is built (and read by the other processes)
    shared, base = str(stores["shared"]), stores["base"]
    cases: list[tuple[list[str], str]] = [
        (["show", "zoe", "--store", shared], "no user 'zoe' in tenant 'default'"),
        (["export", "--store", shared], "export needs a USER, or --all"),
        (["search", "alice", " ", "--store", shared], "query must be a non-empty string"),
        (["users", "--store", shared, "--tenant", "acme"], ""),  # an empty tenant is no error
    ]
    bad = base / "bad.jsonl"
    bad.write_text('{"format": "llama-memory-export", "version": 99}\n')
    cases.append((["import", str(bad), "--store", str(base / "never")], "version 99 is not supported"))
    for argv, message in cases:
        status = main(argv)
        err = capsys.readouterr().err
        assert (status == 1) == bool(message), argv
        assert message in err, (argv, err)
    assert not (base / "never").exists()  # a failed import leaves no store behind
    with pytest.raises(SystemExit) as exit_info:
        main(["search", "alice", "q", "-k", "0", "--store", shared])
    assert exit_info.value.code == 2 and "positive" in capsys.readouterr().err


# --------------------------------------------------------------------------- the Python API


def test_admin_records_filter_by_source_and_time_and_export_to_dicts(
    runs: Runs, stores: dict[str, Path]
) -> None:
    ok(runs["users"][0])
    with MemoryAdmin(stores["shared"]) as admin:
        early = admin.records("alice", until="2025-01-01")
        assert [r.text for r in early] == ["I moved to Lisbon last spring."]
        assert [r.text for r in admin.records("alice", since="2025-01-01", source="vector")] == [
            "Lisbon is lovely in spring, and sunny today.",
            "My favourite food is ramen.",
        ]
        assert admin.records("alice", source="nothing") == []
        rows = list(admin.export_rows(["bob"]))
        with pytest.raises(UnknownUserError, match="its users are 'alice', 'bob'"):
            admin.records("zoe")
        with pytest.raises(ValueError, match="limit"):
            admin.records("alice", limit=-1)
    assert rows[0]["users"] == ["bob"] and {r["kind"] for r in rows[1:]} == {"message", "record"}
    with pytest.raises(StoreNotFoundError, match="does not exist"):
        MemoryAdmin(stores["base"] / "missing")


def test_admin_imports_dicts_into_an_empty_store(tmp_path: Path, embed_model: Any) -> None:
    rows = [
        {"format": EXPORT_FORMAT, "version": 1, "tenant": "default", "users": ["eve"]},
        {"kind": "message", "user": "eve", "session": "e1", "created_at": 1.0,
         "message": user("I keep bees on my roof.").model_dump(mode="json")},
        {"kind": "record", "user": "eve", "source": "vector", "session": "e1", "role": "user",
         "text": "I keep bees on my roof.", "message_ids": ["x1"], "event_time": 1.0,
         "ingested_at": 2.0, "metadata": {}, "ttl": None, "expires_at": None},
    ]  # fmt: skip
    with MemoryAdmin(tmp_path / "new", "acme", create=True, embed_model=embed_model) as admin:
        assert admin.import_rows(rows) == {"message": 1, "record": 1}
        assert admin.import_rows(rows) == {}
        assert "bees" in admin.search("eve", "what animals do I keep?")[0].text
        assert list(admin.export_rows())[1:] == rows[1:]
        with pytest.raises(ValueError, match="unknown kind 'note'"):
            admin.import_rows([rows[0], {"kind": "note", "user": "eve"}])
        admin.export(tmp_path / "acme.jsonl")
    # The command line imports into the tenant the export came from, unless told otherwise.
    assert main(["import", str(tmp_path / "acme.jsonl"), "--store", str(tmp_path / "other")]) == 0
    with MemoryAdmin(tmp_path / "other", "acme") as other:
        assert [u.user_id for u in other.users()] == ["eve"]
    with MemoryAdmin(tmp_path / "other") as other:
        assert other.users() == []


def test_progress_bar_draws_on_a_terminal_only() -> None:
    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    terminal, pipe = Terminal(), io.StringIO()
    for stream in (terminal, pipe):
        with Progress("importing", total=4, stream=stream) as bar:
            bar.advance(4)
    assert "importing [" in terminal.getvalue() and "4/4" in terminal.getvalue()
    assert pipe.getvalue() == ""



def test_stats_counts_records_waiting_for_the_dense_index(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path)
    scope = Scope(user_id="fay", session_id="f1")
    store.add_records([NewRecord("vector", scope, "Written, not embedded yet.", ("m1",), 5.0)])
    store.close()
    with MemoryAdmin(tmp_path) as admin:
        counts = admin.stats().counts
    assert counts.records == {"vector": 1} and counts.pending == {"vector": 1}


def test_a_server_mode_store_needs_the_servers_address(
    tmp_path: Path, chroma_server: Any, embed_model: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = ComposableMemory.from_defaults(
        user_id="gil", path=tmp_path, chroma_url=chroma_server.url, embed_model=embed_model
    )
    memory.put_messages([user("I sail on weekends."), user("I dislike olives.")])
    memory.close()
    with MemoryAdmin(tmp_path, embed_model=embed_model) as admin:
        assert [u.user_id for u in admin.users()] == ["gil"]  # no vectors needed
        assert admin.show("gil").summary.records == 2
        with pytest.raises(LlamaMemoryError, match="--chroma-url"):
            admin.search("gil", "hobby")
    assert not (tmp_path / "chroma").exists()  # no embedded index made up on the side
    argv = ["search", "gil", "what do I do on weekends?", "--store", str(tmp_path), "--json"]
    assert main([*argv, "--chroma-url", chroma_server.url]) == 0
    assert "sail" in json.loads(capsys.readouterr().out)[0]["text"]
    with MemoryAdmin(tmp_path, embed_model=embed_model, chroma_url=chroma_server.url) as admin:
        olives = next(r for r in admin.records("gil") if "olives" in r.text)
        admin.delete_record("gil", olives.id)
        assert olives.id not in admin.vector_source.index.ids("default", "gil")


def small_embedding() -> Any:
    """The model of the store below, for ``--embed-model test_cli:small_embedding``."""
    return MockEmbedding(embed_dim=8)


def test_a_store_of_another_embedding_model_is_opened_with_embed_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    memory = ComposableMemory.from_defaults(
        user_id="hal", path=tmp_path, embed_model=small_embedding()
    )
    memory.put_messages([user("My bike is a green fixie.")])
    memory.close()
    argv = ["search", "hal", "which bike do I ride?", "--store", str(tmp_path), "--json"]
    assert main(argv) == 1
    assert "--embed-model" in capsys.readouterr().err
    assert main([*argv, "--embed-model", "test_cli:small_embedding"]) == 0
    assert "fixie" in json.loads(capsys.readouterr().out)[0]["text"]
    assert main([*argv, "--embed-model", "test_cli"]) == 1
    assert "takes module:name" in capsys.readouterr().err


def test_reindex_reembed_switches_a_store_to_another_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], embed_model
) -> None:
    memory = ComposableMemory.from_defaults(user_id="hal", path=tmp_path, embed_model=embed_model)
    memory.put_messages([user("My bike is a green fixie.")])
    memory.close()
    small = ["--store", str(tmp_path), "--embed-model", "test_cli:small_embedding"]
    search = ["search", "hal", "which bike do I ride?", "--json"]
    assert main(["reindex", *small]) == 1  # the store's model is not the one given
    refused = capsys.readouterr().err
    assert "--embed-model gave test_cli:small_embedding: pass the store's model instead" in refused
    assert "llama-memory reindex --reembed" in refused
    assert main(["reindex", "--reembed", *small]) == 0
    assert "reindexed 1 record" in capsys.readouterr().out
    assert main([*search, *small]) == 0
    assert "fixie" in json.loads(capsys.readouterr().out)[0]["text"]
    assert main([*search, "--store", str(tmp_path)]) == 1  # the offline model is refused now
    assert "pass the store's model with --embed-model MODULE:NAME" in capsys.readouterr().err
    with MemoryAdmin(tmp_path, embed_model=embed_model) as admin:  # and back, in Python
        assert admin.reindex(reembed=True) == 1
        assert "fixie" in admin.search("hal", "which bike do I ride?")[0].text
        with pytest.raises(LlamaMemoryError, match=r"first use of the embedding model"):
            admin.reindex(reembed=True)


def test_reindex_reembed_without_a_model_keeps_the_stores_model(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], embed_model
) -> None:
    mine = ComposableMemory.from_defaults(user_id="hal", path=tmp_path / "small", embed_model=small_embedding())
    mine.put_messages([user("My bike is a green fixie.")])
    mine.close()
    small = ["--store", str(tmp_path / "small")]
    assert main(["reindex", "--reembed", *small]) == 1  # not switched to the offline model
    refused = capsys.readouterr().err
    assert "'MockEmbedding:unknown'" in refused and "--embed-model MODULE:NAME" in refused
    with MemoryAdmin(tmp_path / "small") as admin:
        with pytest.raises(LlamaMemoryError, match="'MockEmbedding:unknown'.*embed_model="):
            admin.reindex(reembed=True)
        assert admin.store.get_meta("embedding_dimension") == "8"  # the record of the model stays
    assert main(["search", "hal", "which bike?", "--json", *small, "--embed-model", "test_cli:small_embedding"]) == 0
    assert "fixie" in json.loads(capsys.readouterr().out)[0]["text"]
    offline = ComposableMemory.from_defaults(user_id="hal", path=tmp_path / "offline", embed_model=embed_model)
    offline.put_messages([user("My bike is a green fixie.")])
    offline.close()
    assert main(["reindex", "--reembed", "--store", str(tmp_path / "offline")]) == 0  # its own model, again
    assert "reindexed 1 record" in capsys.readouterr().out
