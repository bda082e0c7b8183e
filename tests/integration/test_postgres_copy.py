"""``llama-memory copy``: a SQLite memory directory moved into PostgreSQL.
Real SQLite + Chroma on one side, the real server (``postgres_url``) on the other."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

from helpers import assistant, memory_factory, user
from llama_memory import ComposableMemory, MemoryAdmin, OfflineEmbedding
from llama_memory.admin.cli import main
from llama_memory.admin.copying import CopyRefusedError, copy_store
from llama_memory.write.formation import cursor_key

QUERIES = ("where does Carla live?", "what does Bob sail?")


def _fill(path: Path, embed_model: OfflineEmbedding) -> None:
    """Two users with chat logs in two sessions, records (some expiring), profile
    history, instructions with history, triples with history, and a queued extraction job."""
    with memory_factory(embed_model, path=path, triples=True) as make:
        alice = make("alice", "s1", ttl=3600 * 24 * 30, extract_every=1, extract_in="worker")
        alice.put(user("My sister Carla lives in Lisbon and teaches the cello."))
        alice.put(assistant("Noted: Carla, Lisbon, cello."))
        alice.profile.set_field("city", "Porto", alice.scope)
        alice.profile.set_field("city", "Lisbon", alice.scope)  # history: Porto superseded
        alice.add_triples([("Carla", "lives in", "Lisbon"), ("user", "plays", "piano")])
        alice.instructions.add("Answer in French.")
        alice.instructions.replace("Answer in French.", "Answer in Portuguese.")  # history: French replaced
        make("alice", "s2").put(user("I started learning the violin."))
        bob = make("bob", "b1")
        bob.put(user("Bob sails a small boat called Wren on weekends."))
        bob.put(assistant("A sailing boat named Wren, nice."))
        bob.profile.set_field("hobby", "sailing", bob.scope)
        bob.add_triples([("Bob", "owns", "Wren")])
        # Where alice's session s1 was extracted up to (as a pass leaves it).
        alice.runtime.store.set_meta(cursor_key(alice.scope), json.dumps({"upto": 1, "last": "x"}))  # type: ignore[union-attr]


def _view(memory: ComposableMemory, admin: MemoryAdmin) -> dict[str, Any]:
    """What a user sees through a memory and the admin, without store-specific ids."""
    return {
        "window": [(m.role, m.content) for m in memory.get_all()],
        "search": {q: [(r.source, r.text, r.id) for r in memory.search(q, 5)] for q in QUERIES},
        "block": memory.get(QUERIES[0])[0].content,
        "profile": memory.profile.get_profile(memory.scope),
        "history": [(c.path, c.value, c.superseded_at is None) for c in memory.profile.history(None, memory.scope)],
        "instructions": [(i.id, i.text, i.op, i.superseded_at is None) for i in memory.instructions.history()],
        "triples": [
            (t.subject, t.predicate, t.object, t.valid_to, t.id)
            for t in admin.triples(memory.user_id or "", include_history=True)
        ],
        "records": [(r.id, r.text, r.expires_at, r.message_ids) for r in admin.records(memory.user_id or "")],
        "sessions": [(s.session_id, s.messages, s.records) for s in admin.sessions(memory.user_id or "")],
    }


def test_copy_moves_every_user_and_a_memory_on_postgres_sees_the_same(
    tmp_path: Path, postgres_url: str, embed_model: OfflineEmbedding
) -> None:
    directory = tmp_path / "memory"
    _fill(directory, embed_model)

    report = copy_store(directory, postgres_url, embed_model=embed_model)

    assert report.users == {"default": ["alice", "bob"]}
    assert report.rows["message"] == 5 and report.rows["triple"] == 3 and report.rows["job"] >= 1
    assert report.embedded == report.rows["record"] + report.rows["triple"]
    # The copy leaves the planner statistics (a new database would be planned blind
    # until autovacuum's first ANALYZE): the table's row estimate is its rows.
    with psycopg.connect(postgres_url) as conn:
        estimate, rows = conn.execute(
            "SELECT reltuples, (SELECT count(*) FROM records) FROM pg_class WHERE relname = 'records'"
        ).fetchone()
    assert estimate == rows == report.rows["record"] > 0
    with MemoryAdmin(directory, embed_model=embed_model) as old, MemoryAdmin(postgres_url, embed_model=embed_model) as new:
        before, after = old.stats(), new.stats()
        assert after.counts.records == before.counts.records
        assert (after.counts.triples, after.counts.profile_rows) == (before.counts.triples, before.counts.profile_rows)
        assert after.counts.pending == {"vector": 0, "triples": 0}
        assert after.jobs["queued"] == before.jobs["queued"] + before.jobs["running"] >= 1
        for user_id, session in (("alice", "s1"), ("bob", "b1")):
            with memory_factory(embed_model, triples=True) as make:
                on_sqlite = make(user_id, session, path=directory)
                on_postgres = make(user_id, session, store=postgres_url)
                assert _view(on_postgres, new) == _view(on_sqlite, old)
        # Per-session state (the extraction cursor) and store-wide meta came along.
        assert new.rows.user_meta("default", "alice") == old.rows.user_meta("default", "alice") != {}
        assert new.rows.store_meta() == old.rows.store_meta()


def test_a_second_copy_refuses_before_writing_and_skip_existing_resumes(
    tmp_path: Path, postgres_url: str, embed_model: OfflineEmbedding
) -> None:
    directory = tmp_path / "memory"
    _fill(directory, embed_model)
    with memory_factory(embed_model, store=postgres_url) as make:
        make("bob", "b1").put(user("Bob was here first."))

    with pytest.raises(CopyRefusedError, match="already holds 1 of the users to copy: 'bob'"):
        copy_store(directory, postgres_url, embed_model=embed_model)
    with MemoryAdmin(postgres_url) as admin:
        assert [u.user_id for u in admin.users()] == ["bob"]  # nothing of alice was written

    report = copy_store(directory, postgres_url, embed_model=embed_model, skip_existing=True)
    assert report.users == {"default": ["alice"]} and report.skipped == {"default": ["bob"]}
    with MemoryAdmin(postgres_url) as admin:
        assert [(u.user_id, u.messages) for u in admin.users()] == [("alice", 3), ("bob", 1)]


def test_a_user_whose_copy_fails_is_left_out_whole(
    tmp_path: Path, postgres_url: str, embed_model: OfflineEmbedding
) -> None:
    """One transaction per user: bob's triple id is taken in the target by another
    user, so his copy fails after his messages and records were written: none stay."""
    directory = tmp_path / "memory"
    _fill(directory, embed_model)
    with MemoryAdmin(directory) as old:
        bob_triple = old.triples("bob")[0]
    with memory_factory(embed_model, store=postgres_url, triples=True) as make:
        carol = make("carol", "c1")
        carol.put(user("Carla is my friend."))
    with MemoryAdmin(postgres_url) as admin:
        rows = [{"kind": "triple", "user": "carol", "id": bob_triple.id, "subject": "x", "predicate": "is",
                 "object": "y", "subject_key": "x", "predicate_key": "is", "object_key": "y",
                 "valid_from": 0.0, "valid_to": None, "superseded_by": None, "ingested_at": 0.0,
                 "ttl": None, "expires_at": None, "mentions": []}]  # fmt: skip
        admin.rows.import_rows("default", rows, ["x is y"])

    with pytest.raises(ValueError, match=f"triple {bob_triple.id} already belongs to user 'carol'"):
        copy_store(directory, postgres_url, embed_model=embed_model)
    with MemoryAdmin(postgres_url) as admin:
        users = {u.user_id: u for u in admin.users()}
        assert "bob" not in users and users["alice"].messages == 3  # alice (first) is whole


def test_a_directory_that_never_queued_a_job_or_held_a_triple_copies(
    tmp_path: Path, postgres_url: str, embed_model: OfflineEmbedding
) -> None:
    directory = tmp_path / "memory"
    with memory_factory(embed_model, path=directory) as make:
        make("dana", "d1").put(user("Dana keeps bees on the roof."))
    report = copy_store(directory, postgres_url, embed_model=embed_model)
    assert report.users == {"default": ["dana"]} and report.rows["job"] == 0 and report.embedded == 1
    with memory_factory(embed_model, store=postgres_url) as make:
        assert "bees" in make("dana", "d1").search("what does Dana keep?", 1)[0].text


def test_the_copy_command(tmp_path: Path, postgres_url: str, embed_model: OfflineEmbedding, capsys: Any) -> None:
    directory = tmp_path / "memory"
    _fill(directory, embed_model)
    assert main(["copy", "--from", str(directory), "--to", postgres_url, "--json"]) == 0
    assert '"alice"' in capsys.readouterr().out
    assert main(["copy", "--from", str(directory), "--to", postgres_url]) == 1
    assert "already holds 2 of the users" in capsys.readouterr().err
    assert main(["copy", "--from", str(tmp_path / "nothing"), "--to", postgres_url]) == 1
    assert "no memory store at" in capsys.readouterr().err
