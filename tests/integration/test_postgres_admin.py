"""The ``llama-memory`` commands and :class:`MemoryAdmin` on a PostgreSQL store
(``--store postgresql://...``), with the real server. The commands run in
this process (``cli.main``): the claims are about what they read and write, not about
processes; tests/integration/test_cli.py runs them as subprocesses on SQLite."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from bench.postgres_server import PostgresServer
from helpers import assistant, memory_factory, user
from llama_memory import ComposableMemory, MemoryAdmin, OfflineEmbedding
from llama_memory.admin.cli import main
from llama_memory.admin.memory_admin import UnknownUserError
from llama_memory.testing import ScriptedLLM, pass_answer
from llama_memory.write.formation.worker_process import run_worker


@pytest.fixture
def pg_store(postgres_url: str, embed_model: OfflineEmbedding) -> Iterator[str]:
    """A PostgreSQL store with alice (two sessions, profile history, triples) and bob."""
    with memory_factory(embed_model, store=postgres_url, triples=True) as make:
        alice = make("alice", "s1")
        alice.put(user("I moved to Lisbon last spring."))
        alice.put(assistant("Lisbon it is."))
        alice.profile.set_field("city", "Porto", alice.scope)
        alice.profile.set_field("city", "Lisbon", alice.scope)
        alice.add_triples([("user", "lives in", "Lisbon")])
        make("alice", "s2").put(user("My cat is called Miso."))
        make("bob", "b1").put(user("Bob's vault code is 4711."))
    yield postgres_url


def run(capsys: Any, *args: str) -> Any:
    """``llama-memory ARGS --json``: the parsed output (exit status 0 asserted)."""
    status = main([*args, "--json"])
    out, err = capsys.readouterr()
    assert status == 0, err
    return json.loads(out)


def _rows(url: str, table: str, user_id: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(f"SELECT count(*) FROM {table} WHERE user_id = %s", (user_id,)).fetchone()
        assert row is not None
        return int(row[0])


def test_users_sessions_and_stats_on_postgres(pg_store: str, capsys: Any) -> None:
    users = run(capsys, "users", "--store", pg_store)
    assert [(u["user_id"], u["sessions"], u["messages"], u["triples"], u["profile_fields"]) for u in users] == [
        ("alice", 2, 3, 1, 1), ("bob", 1, 1, 0, 0),
    ]  # fmt: skip
    sessions = run(capsys, "sessions", "alice", "--store", pg_store)
    assert [(s["session_id"], s["messages"]) for s in sessions] == [("s1", 2), ("s2", 1)]
    stats = run(capsys, "stats", "--store", pg_store)
    counts = stats["counts"]
    assert (counts["users"], counts["sessions"], counts["messages"]) == (2, 3, 4)
    assert counts["records"] == {"vector": 4} and counts["triples_current"] == 1
    assert (counts["profile_rows"], counts["profile_fields"]) == (2, 1)
    assert stats["sizes"]["postgres"] > 0 and stats["schema_version"] >= 2
    assert "@" not in stats["location"] and stats["location"].startswith("127.0.0.1:")
    assert main(["stats", "--store", pg_store]) == 0
    assert "in the database:" in capsys.readouterr().out


def test_show_search_and_delete_on_postgres(pg_store: str, capsys: Any, embed_model: OfflineEmbedding) -> None:
    shown = run(capsys, "show", "alice", "--store", pg_store)
    assert shown["profile"] == {"city": "Lisbon"}
    assert [t["object"] for t in shown["triples"]] == ["Lisbon"]
    found = run(capsys, "search", "alice", "where do I live?", "--store", pg_store)
    assert found and "Lisbon" in found[0]["text"]
    assert all("4711" not in r["text"] for r in found)  # never another user's
    explained = run(capsys, "explain", "alice", "where do I live?", "--session", "s1", "--store", pg_store)
    assert "Lisbon" in json.dumps(explained) and "4711" not in json.dumps(explained)
    target = next(r for r in found if r["source"] == "vector")
    deleted = run(capsys, "delete", "alice", target["id"], "--store", pg_store)
    assert deleted == {"deleted": target["id"], "source": "vector"}
    with MemoryAdmin(pg_store, embed_model=embed_model) as admin:
        assert target["id"] not in [r.id for r in admin.records("alice")]
    with psycopg.connect(pg_store) as conn:
        left = conn.execute("SELECT count(*) FROM record_embeddings WHERE id = %s", (target["id"],)).fetchone()
    assert left is not None and left[0] == 0  # its vector went with it


def test_forget_on_postgres_removes_the_user_from_every_table(pg_store: str, capsys: Any) -> None:
    assert main(["forget", "bob", "--store", pg_store]) == 1  # asks for --yes first
    assert "--yes" in capsys.readouterr().err
    run(capsys, "forget", "bob", "--yes", "--store", pg_store)
    assert [u["user_id"] for u in run(capsys, "users", "--store", pg_store)] == ["alice"]
    for table in ("chat_messages", "records", "record_embeddings", "profile_fields", "triples"):
        assert _rows(pg_store, table, "bob") == 0, table
    assert _rows(pg_store, "records", "alice") == 3
    with pytest.raises(UnknownUserError, match="no user 'bob' in tenant 'default' of 127.0.0.1:"):
        MemoryAdmin(pg_store).user("bob")


def test_export_from_postgres_imports_into_sqlite_and_back_unchanged(
    pg_store: str, postgres_server: PostgresServer, tmp_path: Path, capsys: Any
) -> None:
    first, second, third = (tmp_path / f"{n}.jsonl" for n in ("pg", "sqlite", "pg2"))
    run(capsys, "export", "--all", "-o", str(first), "--store", pg_store)
    directory = tmp_path / "memory"
    imported = run(capsys, "import", str(first), "--store", str(directory))
    assert imported["added"] == {"message": 4, "record": 4, "profile": 2, "triple": 1}
    run(capsys, "export", "--all", "-o", str(second), "--store", str(directory))
    other = postgres_server.create_database("test_admin_roundtrip")
    run(capsys, "import", str(second), "--store", other)
    assert run(capsys, "import", str(second), "--store", other)["added"] == {}  # idempotent
    run(capsys, "export", "--all", "-o", str(third), "--store", other)
    assert first.read_text() == second.read_text() == third.read_text()
    assert len(first.read_text().splitlines()) == 1 + 4 + 4 + 2 + 1


def test_the_worker_runs_the_passes_queued_in_a_postgres_store(postgres_url: str, capsys: Any) -> None:
    memory = ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", store=postgres_url, secondary_memory_sources=[], profile=True,
        extract_in="worker", extract_every=1,
    )  # fmt: skip
    try:
        memory.put(user("I like jazz."))
        assert run(capsys, "stats", "--store", postgres_url)["jobs"]["queued"] == 1
        llm = ScriptedLLM([pass_answer(profile=[{"op": "append", "path": "likes", "value": "jazz"}])])
        assert run_worker(postgres_url, llm, once=True) == 1
        assert memory.profile.get_profile(memory.scope) == {"likes": ["jazz"]}
        assert run(capsys, "stats", "--store", postgres_url)["jobs"]["done"] == 1
    finally:
        memory.close()


def test_purge_expired_and_reconcile_on_postgres(postgres_url: str, capsys: Any, embed_model: OfflineEmbedding) -> None:
    clock = [1_000_000.0]
    with memory_factory(embed_model, store=postgres_url) as make:
        memory = make("alice", "s1", ttl=60, clock=lambda: clock[0])
        memory.put(user("A note that will not last."))
    assert run(capsys, "stats", "--store", postgres_url)["counts"]["expired"] == 1  # its clock is long past
    assert run(capsys, "purge-expired", "--store", postgres_url) == {"purged": 1}
    assert _rows(postgres_url, "records", "alice") == 0
    assert _rows(postgres_url, "record_embeddings", "alice") == 0
    assert "vector" in run(capsys, "reconcile", "--store", postgres_url)


def test_bad_arguments_on_postgres_say_what_was_wrong(postgres_url: str, tmp_path: Path, capsys: Any) -> None:
    with pytest.raises(ValueError, match="keeps its vectors in the same database"):
        MemoryAdmin(postgres_url, chroma_url="http://127.0.0.1:8000")
    assert main(["copy", "--from", str(tmp_path), "--to", str(tmp_path / "other")]) == 1
    assert "copy --to takes a PostgreSQL URL" in capsys.readouterr().err
    assert main(["copy", "--from", postgres_url, "--to", postgres_url]) == 1
    assert "copy --from takes a SQLite memory directory" in capsys.readouterr().err


def test_reindex_reembed_switches_a_postgres_store_to_another_model(
    pg_store: str, capsys: Any, embed_model: OfflineEmbedding
) -> None:
    from llama_index.core.embeddings import MockEmbedding

    small = MockEmbedding(embed_dim=8)
    with MemoryAdmin(pg_store, embed_model=small) as admin:
        assert admin.reindex(reembed=True) >= 4  # records and the triple, in 8 dimensions now
        assert "vault code" in admin.search("bob", "vault code")[0].text
    assert main(["search", "bob", "vault code", "--store", pg_store]) == 1  # the offline model is refused now
    assert "llama-memory reindex --reembed" in capsys.readouterr().err
    assert main(["reindex", "--reembed", "--store", pg_store]) == 1  # not switched without --embed-model
    assert "'MockEmbedding:unknown'" in capsys.readouterr().err
    offline = "llama_memory.embeddings.offline:default_embedding"
    assert run(capsys, "reindex", "--reembed", "--store", pg_store, "--embed-model", offline)["indexed"] >= 4  # and back
    assert "vault code" in run(capsys, "search", "bob", "what is the vault code?", "--store", pg_store)[0]["text"]
