"""Expiry (time to live): expired records are never retrieved, reads can refresh them,
``purge_expired()`` deletes them from SQLite and Chroma, and old stores upgrade.

Time is an injected clock, so nothing sleeps.
"""

from __future__ import annotations

import sqlite3
from datetime import timedelta
from pathlib import Path

import pytest

from helpers import assistant, message_texts, user
from llama_memory import ComposableMemory, Scope
from llama_memory.core.types import Expiry
from llama_memory.memory.wiring import default_profile_source, default_triple_source
from llama_memory.sources import TripleSource
from llama_memory.storage.sqlite import DB_FILENAME, MIGRATIONS, SQLiteStore, sql_statements
from llama_memory.storage.sqlite.schema import PROFILE_MIGRATIONS, TRIPLE_MIGRATIONS

START = 1_800_000_000.0


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = START

    def __call__(self) -> float:
        return self.now

    def at(self, seconds_after_start: float) -> None:
        self.now = START + seconds_after_start


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def open_memory(tmp_path: Path, embed_model, clock: Clock):
    opened: list[ComposableMemory] = []

    def _open(**kwargs) -> ComposableMemory:
        kwargs.setdefault("user_id", "alice")
        memory = ComposableMemory.from_defaults(
            path=tmp_path, embed_model=embed_model, triples=True, clock=clock, **kwargs
        )
        opened.append(memory)
        return memory

    yield _open
    for memory in opened:
        memory.close()


def texts(records) -> list[str]:
    return message_texts(records)


def count(path: Path, sql: str) -> int:
    with sqlite3.connect(path / DB_FILENAME) as conn:
        return int(conn.execute(sql).fetchone()[0])


def test_expired_records_are_never_retrieved_and_purge_deletes_them(
    tmp_path: Path, open_memory, clock: Clock
) -> None:
    memory = open_memory(ttl=timedelta(minutes=1))
    memory.put_messages([user("My gym locker code is 4711"), assistant("I will remember 4711")])
    memory.add_triples([("alice", "likes", "bouldering")])
    memory.source("profile").set_field("city", "Porto", memory.scope)
    memory.reconcile()  # vectors on Chroma too
    clock.at(59)
    assert "My gym locker code is 4711" in texts(memory.search("locker code", k=5))
    assert any("bouldering" in t for t in texts(memory.search("what does alice like?", k=5)))
    assert memory.source("profile").get_profile(memory.scope) == {"city": "Porto"}
    [record] = [r for r in memory.search("locker code", k=5) if r.source == "vector"][:1]
    assert record.expires_at == START + 60

    clock.at(61)
    # Gone from every read, though still in the files until purged.
    assert memory.search("locker code", k=5) == []
    assert memory.search("what does alice like?", k=5) == []
    assert memory.source("profile").get_profile(memory.scope) == {}
    assert memory.triple_source.triples(memory.scope, include_history=True) == []
    memory.get(input="what is my locker code?")  # the window still shows this conversation,
    assert memory.last_block.records == []  # but the block recalls nothing expired
    assert count(tmp_path, "SELECT COUNT(*) FROM records") == 2

    # A new message is unaffected, and purging removes only the expired ones.
    memory.put(user("I switched to swimming"))
    assert memory.purge_expired() == 2 + 1 + 1  # two messages, one triple, one profile value
    assert count(tmp_path, "SELECT COUNT(*) FROM records") == 1
    assert count(tmp_path, "SELECT COUNT(*) FROM records_fts") == 1
    assert count(tmp_path, "SELECT COUNT(*) FROM triples") == 0
    assert count(tmp_path, "SELECT COUNT(*) FROM profile_fields") == 0
    assert memory.source("vector").index.count("default", "alice") == 0
    assert memory.triple_source.index.count("default", "alice") == 0
    assert texts(memory.search("swimming", k=5)) == ["I switched to swimming"]


def test_refresh_on_read_keeps_what_is_used_alive(open_memory, clock: Clock) -> None:
    refreshed = open_memory(ttl=60, refresh_on_read=True)
    plain = open_memory(user_id="bob", ttl=60)
    for memory in (refreshed, plain):
        memory.put(user("My bike is a green Brompton"))
        memory.add_triples([("I", "ride", "a Brompton bike")])
        memory.source("profile").set_field("bike", "Brompton", memory.scope)
    for step in (50, 100, 150):  # each read extends the records' life by 60 s
        clock.at(step)
        refreshed.get(input="what bike do I ride?")  # the message itself is in the window,
        shown = refreshed.last_block.records
        # The profile's "bike: Brompton" says less than the triple, but a profile field
        # is never the one left out, and the triple says more ("ride"): both are shown.
        also = {a["source"] for r in shown for a in r.metadata.get("also_in", [])}
        assert ({r.source for r in shown}, also) == ({"triples", "profile"}, set()), step
        assert "My bike is a green Brompton" in texts(refreshed.search("bike", k=5))  # so search
    plain.get(input="what bike do I ride?")
    assert plain.last_block.records == [] and plain.search("bike") == []  # expired at 60
    clock.at(211)
    refreshed.get(input="what bike do I ride?")
    assert refreshed.last_block.records == [] and refreshed.search("bike") == []  # unread since 150


def test_saying_it_again_renews_the_expiry(open_memory, clock: Clock) -> None:
    memory = open_memory(ttl=60)
    memory.put(user("I live on Rua Augusta"))
    memory.add_triples([("alice", "lives in", "Lisbon")])
    clock.at(50)
    memory.put(user("i live on rua augusta"))  # the same record (normalised text)
    memory.add_triples([("Alice", "lives in", "Lisbon")])  # the same triple
    clock.at(100)
    assert texts(memory.search("where do I live?", k=5))[:1] != []
    assert "I live on Rua Augusta" in texts(memory.search("Rua Augusta", k=5))
    assert [t.object for t in memory.triple_source.triples(memory.scope)] == ["Lisbon"]


def test_per_call_ttl_on_triples_and_profile(open_memory, clock: Clock) -> None:
    memory = open_memory()  # no default ttl: kept forever unless a call says otherwise
    scope = memory.scope
    [visit] = memory.add_triples([("alice", "is visiting", "Tokyo")], ttl=3600)
    assert visit.expires_at == START + 3600
    memory.add_triples([("alice", "likes", "ramen")])
    profile = memory.source("profile")
    profile.update_profile({"trip": "Tokyo in May"}, scope, ttl=timedelta(hours=1))
    profile.set_field("diet", "vegetarian", scope)
    clock.at(3601)
    assert [t.object for t in memory.triple_source.triples(scope)] == ["ramen"]
    assert profile.get_profile(scope) == {"diet": "vegetarian"}
    assert [c.path for c in profile.history(None, scope)] == ["diet"]
    # An expired value counts as absent: setting it again writes a new, live value.
    assert profile.set_field("trip", "Tokyo in May", scope) != []
    assert profile.get_profile(scope)["trip"] == "Tokyo in May"


def test_bad_ttl_is_refused(tmp_path: Path, embed_model) -> None:
    for bad in (0, -5, timedelta(0)):
        with pytest.raises(ValueError, match="ttl must be positive"):
            ComposableMemory.from_defaults(user_id="a", path=tmp_path, embed_model=embed_model, ttl=bad)
    with pytest.raises(TypeError, match="seconds or a timedelta"):
        Expiry(ttl="1 day")  # type: ignore[arg-type]


def test_a_store_from_before_expiry_opens_and_upgrades(tmp_path: Path, embed_model) -> None:
    # Schema as the previous release wrote it: records v2, triples v1, profile v1.
    conn = sqlite3.connect(tmp_path / DB_FILENAME)
    for statement in [s for m in MIGRATIONS[:2] for s in sql_statements(m)]:
        conn.execute(statement)
    conn.execute("PRAGMA user_version = 2")
    conn.execute(
        "INSERT INTO records (id, source, tenant_id, user_id, session_id, role, text, content_hash,"
        " message_ids, event_time, ingested_at) VALUES ('r1', 'vector', 'default', 'alice', 's1',"
        " 'user', 'I keep bees on the roof', 'h', '[\"m1\"]', 1683504000.0, 1.0)"
    )
    conn.commit()
    conn.close()
    old = SQLiteStore(tmp_path)  # records migrate to v3 here
    old.ensure_schema("triples", TRIPLE_MIGRATIONS[:1])
    old.ensure_schema("profile", PROFILE_MIGRATIONS[:1])
    with old.transaction("old rows") as conn:
        conn.execute(
            "INSERT INTO triples (id, tenant_id, user_id, subject, predicate, object, subject_key,"
            " predicate_key, object_key, valid_from, ingested_at) VALUES ('t1', 'default',"
            " 'alice', 'alice', 'likes', 'honey', 'alice', 'lik', 'honey', 1.0, 1.0)"
        )
        conn.execute(
            "INSERT INTO profile_fields (tenant_id, user_id, path, value_json, op, created_at)"
            " VALUES ('default', 'alice', 'name', '\"Alice\"', 'set', 1.0)"
        )
    old.close()

    memory = ComposableMemory.from_defaults(
        user_id="alice", path=tmp_path, embed_model=embed_model, triples=True, ttl=60
    )
    try:
        store = memory.source("vector").store
        assert store.schema_version == len(MIGRATIONS)
        assert store.get_meta("schema:triples") == str(len(TRIPLE_MIGRATIONS))
        assert store.get_meta("schema:profile") == str(len(PROFILE_MIGRATIONS))
        # Old rows have no expiry: they are kept, whatever the new default ttl.
        assert "I keep bees on the roof" in texts(memory.search("bees", k=5))
        assert [t.object for t in memory.triple_source.triples(Scope(user_id="alice"))] == ["honey"]
        assert memory.source("profile").get_profile(memory.scope) == {"name": "Alice"}
        assert memory.purge_expired() == 0
    finally:
        memory.close()


def test_sources_take_an_expiry_of_their_own(tmp_path: Path, embed_model, clock: Clock) -> None:
    store = SQLiteStore(tmp_path)
    expiry = Expiry(ttl=10, clock=clock)
    profile = default_profile_source(store, expiry=expiry)
    triples = default_triple_source(store, tmp_path, embed_model, expiry=expiry)
    assert isinstance(triples, TripleSource)
    scope = Scope(user_id="zoe")
    profile.set_field("mood", "sleepy", scope)
    triples.add_triples([("zoe", "owns", "a kayak")], scope)
    clock.at(11)
    assert profile.retrieve("", scope, 5) == []
    assert triples.search("kayak", scope) == []
    triples.close()
    store.close()


def test_expiry_settings_survive_to_dict(open_memory, embed_model, clock: Clock) -> None:
    memory = open_memory(ttl=timedelta(hours=2), refresh_on_read=True)
    data = memory.to_dict()
    assert (data["ttl"], data["refresh_on_read"]) == (7200.0, True)
    again = ComposableMemory.from_dict(data, embed_model=embed_model, clock=clock)
    try:
        assert again.source("vector").expiry == Expiry(ttl=7200, refresh_on_read=True)
        assert again.triple_source.expiry.ttl == again.source("profile").expiry.ttl == 7200
    finally:
        again.close()


def test_live_records_come_back_when_expired_ones_rank_first(open_memory, clock: Clock) -> None:
    memory = open_memory(ttl=60, profile=False)
    memory.put_messages([user(f"pizza night number {i} with pizza and more pizza") for i in range(12)])
    clock.at(50)
    memory.put(user("a quiet pizza"))
    clock.at(70)  # the twelve loud ones (best for "pizza") have expired, the quiet one not
    assert texts(memory.search("pizza pizza", k=3)) == ["a quiet pizza"]
