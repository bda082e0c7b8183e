"""The right to be forgotten: ``memory.forget(user_id)`` removes a user's records from
every source and every index, in embedded and in server mode; no one else is touched.

Checked three ways: by searching afterwards, by reading the SQLite tables, and by
listing the Chroma collections with Chroma's own client.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import chromadb
import pytest

from helpers import assistant, user
from llama_memory import ComposableMemory, ScopeError, TripleSource
from llama_memory.storage.sqlite import DB_FILENAME

SECRET = "my passport number is X1234567"


@pytest.fixture(params=["embedded", "server"])
def mode(request: pytest.FixtureRequest) -> dict[str, Any]:
    """from_defaults arguments of each mode (server mode starts the shared Chroma server)."""
    if request.param == "embedded":
        return {}
    return {"chroma_url": request.getfixturevalue("chroma_server").url}


@pytest.fixture
def open_memory(tmp_path: Path, embed_model, mode: dict[str, Any]):
    opened: list[ComposableMemory] = []

    def _open(user_id: str, session_id: str = "s1", tenant_id: str = "default") -> ComposableMemory:
        memory = ComposableMemory.from_defaults(
            user_id=user_id, session_id=session_id, tenant_id=tenant_id, path=tmp_path,
            embed_model=embed_model, triples=True, **mode,
        )  # fmt: skip
        opened.append(memory)
        return memory

    yield _open
    for memory in opened:
        memory.close()


def remember(memory: ComposableMemory, name: str) -> None:
    """Give a user something in every source: two sessions' messages, a profile field,
    triples, all indexed."""
    memory.put_messages([user(f"{name} says {SECRET}"), assistant(f"Noted, {name}.")])
    memory.source("profile").set_field("name", name, memory.scope)
    memory.add_triples([(name, "lives in", "Lisbon"), (name, "has friend", "Zed")])
    memory.reconcile()  # every vector on Chroma, so forgetting must reach it


def rows(path: Path, sql: str, *params: Any) -> int:
    with sqlite3.connect(path / DB_FILENAME) as conn:
        return int(conn.execute(sql, params).fetchone()[0])


def per_user(path: Path, table: str, tenant: str, user_id: str) -> int:
    return rows(path, f"SELECT COUNT(*) FROM {table} WHERE tenant_id = ? AND user_id = ?", tenant, user_id)


def chroma_counts(memory: ComposableMemory, tenant: str, user_id: str) -> dict[str, int]:
    """The user's collections and their sizes, read with a fresh Chroma client."""
    client = memory.source("vector").index.client
    if memory.to_dict().get("chroma_url"):
        port = int(memory.to_dict()["chroma_url"].rsplit(":", 1)[1])
        client = chromadb.HttpClient(host="127.0.0.1", port=port)
    names = {
        source: memory.source(source).index.collection_name(tenant, user_id)
        for source in ("vector", "triples")
    }
    existing = {c.name: c for c in client.list_collections()}
    return {s: existing[n].count() for s, n in names.items() if n in existing}


def test_forget_removes_a_user_from_every_source_and_index(tmp_path: Path, open_memory) -> None:
    alice = open_memory("alice")
    remember(alice, "alice")
    alice_later = open_memory("alice", session_id="s2")  # a second conversation of hers
    alice_later.put(user("second session: I am allergic to peanuts"))
    bob = open_memory("bob")
    remember(bob, "bob")
    alice_elsewhere = open_memory("alice", tenant_id="other-app")  # same name, other tenant
    remember(alice_elsewhere, "alice")
    # (her second session's message was indexed by the reconcile after bob's writes)
    assert chroma_counts(alice, "default", "alice") == {"vector": 3, "triples": 2}
    assert len(alice.search("passport number", k=5)) >= 1

    alice.forget()

    # Searching: nothing of alice, through any source or the memory block.
    for query in ("passport number", "where does alice live?", "peanuts allergy", "alice"):
        assert alice.search(query, k=10) == []
    assert alice.get(input="what is my passport number?") == []  # no window, no block
    assert alice.source("profile").get_profile(alice.scope) == {}
    assert alice.triple_source.triples(alice.scope, include_history=True) == []
    assert alice.get_all() == []
    # SQLite, table by table: records (and their lexical index), chat sessions, profile,
    # triples and their provenance and lexical index.
    for table in ("records", "chat_messages", "profile_fields", "triples"):
        assert per_user(tmp_path, table, "default", "alice") == 0, table
    assert rows(tmp_path, "SELECT COUNT(*) FROM records_fts") == rows(tmp_path, "SELECT COUNT(*) FROM records")
    assert rows(tmp_path, "SELECT COUNT(*) FROM triples_fts") == rows(tmp_path, "SELECT COUNT(*) FROM triples")
    assert rows(
        tmp_path, "SELECT COUNT(*) FROM triple_mentions WHERE triple_seq NOT IN (SELECT seq FROM triples)"
    ) == 0
    assert rows(tmp_path, "SELECT COUNT(*) FROM records_fts WHERE records_fts MATCH 'passport'") == 2
    # Chroma: her collections are gone.
    assert chroma_counts(alice, "default", "alice") == {}

    # Everyone else is untouched: bob, and the alice of another tenant.
    found = bob.search("passport number", k=5)
    assert any(SECRET in r.text for r in found) and {r.user_id for r in found} == {"bob"}
    assert bob.source("profile").get_profile(bob.scope) == {"name": "bob"}
    assert chroma_counts(bob, "default", "bob") == {"vector": 2, "triples": 2}
    assert any(SECRET in r.text for r in alice_elsewhere.search("passport number", k=5))
    assert chroma_counts(alice_elsewhere, "other-app", "alice") == {"vector": 2, "triples": 2}
    assert per_user(tmp_path, "chat_messages", "other-app", "alice") == 2

    # Forgetting someone else, from alice's memory: bob goes, alice's new memories stay.
    alice.put(user("I started learning the cello"))
    alice.forget("bob")
    assert bob.search("passport number") == []
    assert per_user(tmp_path, "records", "default", "bob") == 0
    assert chroma_counts(bob, "default", "bob") == {}
    assert [r.text for r in alice.search("cello", k=1)] == ["I started learning the cello"]
    assert alice.get_all() != []  # her own conversation is left alone when bob is forgotten


def test_forget_needs_a_user(tmp_path: Path, embed_model) -> None:
    memory = ComposableMemory.from_defaults(path=tmp_path, secondary_memory_sources=[])
    try:
        with pytest.raises(ScopeError, match="forget"):
            memory.forget()
    finally:
        memory.close()


def test_a_wrapped_llama_index_memory_is_cleared_only_for_its_user(tmp_path: Path) -> None:
    from llama_index.core.memory import ChatMemoryBuffer

    wrapped = ChatMemoryBuffer.from_defaults()
    memory = ComposableMemory.from_defaults(
        user_id="alice", path=tmp_path, secondary_memory_sources=[wrapped]
    )
    try:
        memory.put(user(f"alice says {SECRET}"))
        memory.forget("bob")  # it never held bob's messages
        assert [m.content for m in wrapped.get_all()] == [f"alice says {SECRET}"]
        memory.forget()
        assert wrapped.get_all() == []
        assert memory.search("passport") == []
    finally:
        memory.close()


def every_user_row(path: Path, tenant: str, user_id: str) -> dict[str, int]:
    """The user's rows in every table of the file that has per-user rows (those of any
    component, whether or not a memory opened it)."""
    with sqlite3.connect(path / DB_FILENAME) as conn:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        counts = {}
        for table in tables:
            columns = {c[1] for c in conn.execute(f'PRAGMA table_info("{table}")')}
            if {"tenant_id", "user_id"} <= columns:
                counts[table] = conn.execute(
                    f'SELECT COUNT(*) FROM "{table}" WHERE tenant_id = ? AND user_id = ?', (tenant, user_id)
                ).fetchone()[0]
    return counts


@pytest.mark.parametrize("forgetter", [{}, {"secondary_memory_sources": []}], ids=["default", "buffer-only"])
def test_forget_from_a_memory_without_triples_deletes_them_too(
    tmp_path: Path, embed_model, mode: dict[str, Any], forgetter: dict[str, Any]
) -> None:
    def open_all(user_id: str, session_id: str) -> ComposableMemory:
        return ComposableMemory.from_defaults(
            user_id=user_id, session_id=session_id, path=tmp_path, embed_model=embed_model,
            triples=True, profile=True, **mode,
        )  # fmt: skip

    for name in ("alice", "bob"):
        writer = open_all(name, "s1")
        remember(writer, name)
        writer.add_triples([(name, "lives in", "Porto")])  # Lisbon becomes history
        writer.source("profile").set_field("name", name.title(), writer.scope)  # and so does "alice"
        writer.reconcile()
        assert chroma_counts(writer, "default", name) == {"vector": 2, "triples": 3}
        writer.close()

    plain = ComposableMemory.from_defaults(
        user_id="alice", session_id="s2", path=tmp_path, embed_model=embed_model, **mode, **forgetter
    )
    assert not any(isinstance(s, TripleSource) for s in plain.sources)
    plain.forget()
    plain.close()

    everything = open_all("alice", "s3")
    try:
        assert set(every_user_row(tmp_path, "default", "alice")) >= {
            "records", "chat_messages", "profile_fields", "triples"
        }
        assert set(every_user_row(tmp_path, "default", "alice").values()) == {0}
        assert rows(tmp_path, "SELECT COUNT(*) FROM triples_fts") == rows(tmp_path, "SELECT COUNT(*) FROM triples")
        assert rows(
            tmp_path, "SELECT COUNT(*) FROM triple_mentions WHERE triple_seq NOT IN (SELECT seq FROM triples)"
        ) == 0
        for query in ("where does alice live?", "Lisbon", "Porto", "friend Zed", "passport number"):
            assert everything.search(query, k=10) == [], query
        assert everything.get(input="Where do I live, and who is my friend?") == []
        assert everything.triple_source.triples(everything.scope, include_history=True) == []
        assert everything.source("profile").get_profile(everything.scope) == {}
        assert everything.source("profile").history(None, everything.scope) == []
        assert chroma_counts(everything, "default", "alice") == {}

        bob = open_all("bob", "s3")
        try:
            assert {t.object for t in bob.triple_source.triples(bob.scope)} == {"Porto", "Zed"}
            assert bob.source("profile").get_profile(bob.scope) == {"name": "Bob"}
            assert any(SECRET in r.text for r in bob.search("passport number", k=5))
            assert chroma_counts(bob, "default", "bob") == {"vector": 2, "triples": 3}
        finally:
            bob.close()
    finally:
        everything.close()
