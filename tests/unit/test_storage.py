"""The SQLite system of record and the Chroma index, on real files."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from helpers import assistant, user
from llama_memory import Scope, ScopeError, StorageError
from llama_memory.storage import DenseIndex, SQLiteStore, ephemeral_client, persistent_client
from llama_memory.storage.sqlite import DB_FILENAME, MIGRATIONS, NewRecord

ALICE = Scope(user_id="alice", session_id="s1")
BOB = Scope(user_id="bob", session_id="s1")


def record(text: str, scope: Scope = ALICE, mid: str = "m1", role: str = "user") -> NewRecord:
    return NewRecord(
        source="vector", scope=scope, text=text, message_ids=(mid,), event_time=1.0, role=role
    )


def test_store_creates_wal_file_with_current_schema(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path / "m")
    assert (tmp_path / "m" / DB_FILENAME).exists()
    assert store.schema_version == len(MIGRATIONS)
    mode = sqlite3.connect(tmp_path / "m" / DB_FILENAME).execute("PRAGMA journal_mode").fetchone()
    assert mode[0] == "wal"


def test_chat_history_round_trips_losslessly(tmp_path: Path) -> None:
    tool_call = {"id": "call_1", "type": "function",
                 "function": {"name": "weather", "arguments": '{"city": "Oslo"}'}}
    messages = [
        user("hello", timestamp="2023-05-08T13:56:00"),
        assistant("", tool_calls=[tool_call]),
        user("sunny", tool_call_id="call_1"),
    ]
    store = SQLiteStore(tmp_path)
    store.append_chat(ALICE, messages)
    store.close()
    reopened = SQLiteStore(tmp_path)
    assert reopened.load_chat(ALICE) == messages
    assert reopened.load_chat(BOB) == []
    reopened.replace_chat(ALICE, messages[:1])
    assert reopened.load_chat(ALICE) == messages[:1]
    assert reopened.sessions(ALICE) == ["s1"]


def test_identical_record_is_stored_once_and_provenance_grows() -> None:
    store = SQLiteStore()
    first = store.add_records([record("I love pizza", mid="m1")])
    again = store.add_records([record("  i LOVE   pizza ", mid="m2")])
    assert first == again
    assert store.count_records("vector", ALICE) == 1
    [stored] = store.get_records(first, ALICE, "vector").values()
    assert stored.message_ids == ["m1", "m2"]
    assert stored.text == "I love pizza"  # the original text is kept


def test_records_are_scoped_per_user() -> None:
    store = SQLiteStore()
    [alice_id] = store.add_records([record("secret of alice")])
    [bob_id] = store.add_records([record("secret of alice", scope=BOB)])
    assert alice_id != bob_id
    assert set(store.get_records([alice_id, bob_id], ALICE, "vector")) == {alice_id}
    assert set(store.get_records([alice_id, bob_id], BOB, "vector")) == {bob_id}


def test_records_need_a_user() -> None:
    with pytest.raises(ScopeError, match="user_id"):
        SQLiteStore().add_records([record("x", scope=Scope(user_id=None))])


def test_pending_records_track_the_index() -> None:
    store = SQLiteStore()
    ids = store.add_records([record(f"fact {i}", mid=str(i)) for i in range(5)])
    pending = store.pending_records("vector", 10)
    assert [p.id for p in pending] == ids
    assert (pending[0].text, pending[0].tenant_id, pending[0].user_id) == ("fact 0", "default", "alice")
    store.mark_indexed(ids[:3])
    assert [p.id for p in store.pending_records("vector", 10)] == ids[3:]
    assert store.mark_all_unindexed("vector") == 5


def test_delete_user_leaves_others() -> None:
    store = SQLiteStore()
    store.add_records([record("a"), record("b", scope=BOB)])
    store.append_chat(ALICE, [user("hi")])
    deleted = store.delete_user(ALICE)
    assert len(deleted) == 1
    assert store.count_records("vector", ALICE) == 0
    assert store.count_records("vector", BOB) == 1
    assert store.load_chat(ALICE) == []


def test_path_that_is_a_file_is_a_clear_error(tmp_path: Path) -> None:
    target = tmp_path / "not-a-dir"
    target.write_text("x")
    with pytest.raises(StorageError, match="not a directory"):
        SQLiteStore(target)


def test_corrupted_database_raises_storage_error(tmp_path: Path) -> None:
    (tmp_path / DB_FILENAME).write_bytes(b"this is not a database" * 100)
    with pytest.raises(StorageError, match=DB_FILENAME):
        SQLiteStore(tmp_path)


def test_newer_schema_is_refused(tmp_path: Path) -> None:
    SQLiteStore(tmp_path).close()
    conn = sqlite3.connect(tmp_path / DB_FILENAME)
    conn.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")
    conn.close()
    with pytest.raises(StorageError, match="upgrade llama-memory"):
        SQLiteStore(tmp_path)


def test_closed_store_raises_instead_of_returning_nothing() -> None:
    store = SQLiteStore()
    store.close()
    with pytest.raises(StorageError):
        store.load_chat(ALICE)


def test_dense_index_keeps_one_collection_per_user(tmp_path: Path) -> None:
    index = DenseIndex(persistent_client(tmp_path), "test_index")
    index.upsert("t", "alice", ["a"], [[1.0, 0.0, 0.0]])
    index.upsert("t", "bob", ["b"], [[0.9, 0.1, 0.0]])
    hits = index.query("t", "bob", [1.0, 0.0, 0.0], 5)
    assert [h[0] for h in hits] == ["b"]
    assert 0.9 < hits[0][1] <= 1.0
    assert index.query("other-tenant", "bob", [1.0, 0.0, 0.0], 5) == []
    assert index.collection_name("t", "alice") != index.collection_name("t", "bob")
    index.drop("t", "bob")
    assert index.count("t", "bob") == 0
    assert index.count("t", "alice") == 1
    # A new client on the same directory sees the same vectors (persistence).
    reopened = DenseIndex(persistent_client(tmp_path), "test_index")
    assert reopened.count("t", "alice") == 1
    index.clear()
    assert reopened.count("t", "alice") == 0


def test_unique_prefixes_keep_ephemeral_indexes_apart() -> None:
    client = ephemeral_client()
    first = DenseIndex(client, DenseIndex.unique_prefix("x"))
    second = DenseIndex(client, DenseIndex.unique_prefix("x"))
    first.upsert("t", "u", ["a"], [[1.0, 0.0]])
    assert second.count("t", "u") == 0
    assert first.count("t", "u") == 1


def test_components_own_their_schema_migrations(tmp_path: Path) -> None:
    steps = ("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)",
             "ALTER TABLE notes ADD COLUMN author TEXT")
    store = SQLiteStore(tmp_path)
    store.ensure_schema("notes", steps[:1])
    with store.transaction("add note") as conn:
        conn.execute("INSERT INTO notes (body) VALUES ('kept')")
    store.close()
    upgraded = SQLiteStore(tmp_path)
    upgraded.ensure_schema("notes", steps)  # an upgrade runs only the new step
    upgraded.ensure_schema("notes", steps)  # and running it again changes nothing
    assert [tuple(r) for r in upgraded.query("read", "SELECT body, author FROM notes")] == [("kept", None)]
    assert upgraded.get_meta("schema:notes") == "2"
    with pytest.raises(StorageError, match="newer than this release"):
        upgraded.ensure_schema("notes", steps[:1])


def test_store_written_by_schema_version_1_is_migrated_and_searchable(tmp_path: Path) -> None:
    from llama_memory.storage.sqlite import sql_statements

    conn = sqlite3.connect(tmp_path / DB_FILENAME)
    for statement in sql_statements(MIGRATIONS[0]):
        conn.execute(statement)
    conn.execute(
        "INSERT INTO records (id, source, tenant_id, user_id, session_id, role, text, content_hash,"
        " message_ids, event_time, ingested_at) VALUES ('r1', 'vector', 'default', 'alice', 's1',"
        " 'user', 'I keep bees on the roof', 'h', '[\"m1\"]', 1683504000.0, 1.0)"
    )
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    store = SQLiteStore(tmp_path)
    assert store.schema_version == len(MIGRATIONS)
    assert [i for i, _ in store.search_text("bees", ALICE, "vector", 5)] == ["r1"]
    assert [i for i, _ in store.search_text("May 2023", ALICE, "vector", 5)] == ["r1"]


def test_lexical_search_is_scoped_and_reads_no_syntax_from_the_query() -> None:
    from llama_memory.storage.sqlite import fts_query

    store = SQLiteStore()
    store.add_records([record("Alice keeps bees"), record("Bob keeps bees", scope=BOB)])
    assert len(store.search_text("bees", ALICE, "vector", 5)) == 1
    assert store.search_text('" OR NEAR(bees* -- )', ALICE, "vector", 5)  # no FTS5 syntax error
    assert fts_query("What is the name of the cat?") == '"name" OR "cat"'
    assert fts_query("the of and") == ""
    store.delete_user(ALICE)
    assert store.search_text("bees", ALICE, "vector", 5) == []
    assert len(store.search_text("bees", BOB, "vector", 5)) == 1


def test_words_in_most_records_are_left_out_of_lexical_search_in_a_large_store() -> None:
    from llama_memory.storage.sqlite import PRUNE_FROM_RECORDS

    store = SQLiteStore()
    rows = [record(f"really nice note {i}", mid=str(i)) for i in range(PRUNE_FROM_RECORDS)]
    rows.append(record("the zeppelin flew over", mid="z"))
    store.add_records(rows)
    assert store._selective_words(["really", "zeppelin"]) == ["zeppelin"]
    assert store._selective_words(["really", "nice"]) == ["really"]  # all common: the rarest
    [(top, _)] = store.search_text("really zeppelin", ALICE, "vector", 1)
    assert store.get_records([top], ALICE, "vector")[top].text == "the zeppelin flew over"
    small = SQLiteStore()
    small.add_records(rows[:10])
    assert small._selective_words(["really", "zeppelin"]) == ["really", "zeppelin"]


def test_lexical_search_finds_a_users_records_behind_many_better_matches_of_others() -> None:
    # Bob's records match the query better and fill the index's top results: Alice's
    # must still come back, best first (the search then joins every match to its owner).
    store = SQLiteStore()
    store.add_records([record(f"bees bees bees hive {i}", scope=BOB, mid=str(i)) for i in range(30)])
    store.add_records([record("one bee in the garden", mid="a1"), record("no insects here", mid="a2"),
                       record("bees and a hive by the garden", mid="a3")])
    found = store.search_text("bees hive", ALICE, "vector", 5)
    texts = [store.get_records([i], ALICE, "vector")[i].text for i, _ in found]
    assert texts == ["bees and a hive by the garden", "one bee in the garden"]
    assert [s for _, s in found] == sorted((s for _, s in found), reverse=True)
    assert len(store.search_text("bees hive", BOB, "vector", 5)) == 5


def test_lexical_search_of_a_large_store_scores_the_rarest_words_within_a_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from llama_memory.storage.sqlite import store as sqlite_module  # where the budget is read

    monkeypatch.setattr(sqlite_module, "LEXICAL_POSTINGS_BUDGET", 50)
    store = SQLiteStore()
    n = sqlite_module.PRUNE_FROM_RECORDS
    # "apple" in a fifth of the records (under the common-word share), "pear" in 20,
    # "quince" in 3: apple's matches would blow the budget, so it is not scored.
    rows = [
        record(f"note {i} " + ("apple " if i % 5 == 0 else "") + ("pear " if i % (n // 20) == 1 else "")
               + ("quince" if i in (7, 8, 9) else ""), mid=str(i))
        for i in range(n)
    ]
    store.add_records(rows)
    assert store._selective_words(["apple", "pear", "quince"]) == ["quince", "pear"]
    store.add_records([record("apple pear quince", mid="all")])
    [(top, _)] = store.search_text("apple pear quince", ALICE, "vector", 1)
    assert store.get_records([top], ALICE, "vector")[top].text == "apple pear quince"


def test_vector_copies_follow_their_records() -> None:
    store = SQLiteStore()
    ids = store.add_records([record(f"fact {i}", mid=str(i)) for i in range(4)])
    blobs = [bytes([i]) * 8 for i in range(4)]
    with pytest.raises(ValueError, match="4 record ids but 3 vectors"):
        store.mark_indexed(ids, vectors=blobs[:3])
    assert store.stored_vectors(ids) == {}  # the refused call wrote nothing
    store.mark_indexed(ids, vectors=blobs)
    assert store.stored_vectors(ids) == dict(zip(ids, blobs))
    store.mark_indexed(ids[:1], False)  # out of the index: its copy goes too
    assert set(store.stored_vectors(ids)) == set(ids[1:])
    store.delete_expired("vector", float("inf"))  # nothing expires: records have no ttl
    assert set(store.stored_vectors(ids)) == set(ids[1:])
    store.delete_user(ALICE)  # deleting a record deletes its copy
    assert store.stored_vectors(ids) == {}
    store.mark_indexed(ids, vectors=blobs)  # records gone: no copy is kept for them
    assert store.stored_vectors(ids) == {}


def test_reindexing_drops_the_vector_copies() -> None:
    store = SQLiteStore()
    ids = store.add_records([record("a"), record("b", mid="m2")])
    store.mark_indexed(ids, vectors=[b"\x00\x01", b"\x02\x03"])
    assert store.mark_all_unindexed("vector") == 2
    assert store.stored_vectors(ids) == {}
