"""Word match counts (what an idf needs) stay cheap in a large store: remembered until
the index grows by a tenth, and on PostgreSQL the table's size is the planner's estimate
once it is large, never a count of a million rows per get() (issue 15, point 9)."""

from __future__ import annotations

import pytest

from llama_memory.storage.ports import NewRecord
from llama_memory.storage.postgres import PostgresStore
from llama_memory.storage.postgres import records as pg_records
from llama_memory.storage.word_counts import WordCountCache
from llama_memory.types import Scope

ALICE = Scope(user_id="alice", session_id="s1")


def notes(texts: list[str], scope: Scope = ALICE) -> list[NewRecord]:
    return [NewRecord(source="vector", scope=scope, text=t, message_ids=(f"m{i}",), event_time=1.0)
            for i, t in enumerate(texts)]  # fmt: skip


def test_a_count_is_remembered_until_the_index_grows_by_a_tenth() -> None:
    cache = WordCountCache()
    cache.put("bees", 5, total=100)
    assert cache.get("bees", total=110) == 5
    assert cache.get("bees", total=111) is None  # grown by more than a tenth: count again
    assert cache.get("wasps", total=100) is None


def test_the_least_recently_used_count_is_dropped_beyond_the_size() -> None:
    cache = WordCountCache(size=2)
    cache.put("a", 1, 10)
    cache.put("b", 2, 10)
    assert cache.get("a", 10) == 1  # now "b" is the least recently used
    cache.put("c", 3, 10)
    assert (cache.get("a", 10), cache.get("b", 10), cache.get("c", 10)) == (1, None, 3)
    with pytest.raises(ValueError, match="size must be at least 1, got 0"):
        WordCountCache(size=0)


def test_postgres_remembers_a_words_count_until_the_table_grows_by_a_tenth(postgres_url: str) -> None:
    store, other = PostgresStore(postgres_url), PostgresStore(postgres_url)
    bob = Scope(user_id="bob", session_id="s1")
    try:
        store.add_records(notes([f"bees in hive {i}" for i in range(20)]))
        assert store.word_counts(["bees"], ALICE) == (20, {"bees": 20})
        other.add_records(notes(["bees by the door"], bob))  # 21 rows: grown by 5%
        assert store.word_counts(["bees"], ALICE) == (21, {"bees": 20})  # remembered
        other.add_records(notes(["bees on the roof", "bees in the shed"], bob))  # 23: by 15%
        assert store.word_counts(["bees"], ALICE) == (23, {"bees": 23})
        store.delete_user(ALICE)  # forgetting drops every remembered count
        assert store.word_counts(["bees", "hive"], ALICE) == (3, {"bees": 3, "hive": 0})
    finally:
        store.close()
        other.close()


def test_postgres_sizes_a_large_table_by_the_planners_estimate(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg_records, "ESTIMATE_SIZE_FROM", 3)
    store = PostgresStore(postgres_url)
    try:
        store.add_records(notes([f"note number {i} about bees" for i in range(4)]))
        assert store.word_counts(["bees"], ALICE)[0] == 4  # no estimate yet: counted
        store.query("analyze", "ANALYZE records")
        store.add_records(notes(["two more notes", "and another one"], Scope(user_id="bob", session_id="s1")))
        # 6 rows now, but the estimate (4, from ANALYZE) is what a large table gives.
        assert store.word_counts(["bees"], ALICE) == (4, {"bees": 4})
    finally:
        store.close()


def test_postgres_finds_unseen_words_of_the_users_triples_in_one_statement(postgres_url: str) -> None:
    store = PostgresStore(postgres_url)
    try:
        store.add_records(notes(["bees on the roof"]))
        with store.transaction("profile") as conn:
            conn.execute(
                "INSERT INTO profile_fields (tenant_id, user_id, path, value_json, op, created_at) "
                "VALUES ('default', 'alice', 'pet.name', '\"Zorblax\"', 'set', 1.0)"
            )
        _, counts = store.word_counts(["zorblax", "quux", "bees"], ALICE)
        assert counts == {"zorblax": 1, "quux": 0, "bees": 1}
        assert store.word_counts(["zorblax"], Scope(user_id="bob"))[1] == {"zorblax": 0}
    finally:
        store.close()


def test_postgres_estimates_a_common_words_count_from_the_statistics_of_a_large_table(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg_records, "ESTIMATE_SIZE_FROM", 3)
    store = PostgresStore(postgres_url)
    try:
        store.add_records(notes([f"bees in hive {i}" for i in range(10)]))
        store.query("analyze", "ANALYZE records")
        store.add_records(notes(["bees by the door", "bees on the roof"], Scope(user_id="bob", session_id="s1")))
        fresh = PostgresStore(postgres_url)  # nothing remembered
        try:
            # "bees" is in every analysed row: 1.0 x the estimated 10 rows (12 are there);
            # "roof", in no analysed row, is counted; so is a word that is no lexeme.
            assert fresh.word_counts(["bees", "roof", "the"], ALICE) == (10, {"bees": 10, "roof": 1, "the": 0})
        finally:
            fresh.close()
    finally:
        store.close()
