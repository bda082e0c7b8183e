"""Word match counts (what an idf needs) are the user's own and stay cheap in a large
store: remembered until the user's records grow by a tenth; on PostgreSQL counted through
an index of each user's own words (on a sample of a large user's rows), never a walk of a
million rows per get()."""

from __future__ import annotations

import pytest

from llama_memory.core.types import Scope
from llama_memory.storage.ports import NewRecord
from llama_memory.storage.postgres import PostgresStore
from llama_memory.storage.postgres import records as pg_records
from llama_memory.storage.sql.records import WordCountCache

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


def test_postgres_remembers_a_users_word_count_until_their_records_grow_by_a_tenth(postgres_url: str) -> None:
    store, other = PostgresStore(postgres_url), PostgresStore(postgres_url)
    bob = Scope(user_id="bob", session_id="s1")
    try:
        store.add_records(notes([f"bees in hive {i}" for i in range(20)]))
        assert store.word_counts(["bees"], ALICE) == (20, {"bees": 20})
        other.add_records(notes([f"bees by door {i}" for i in range(30)], bob))
        assert store.word_counts(["bees"], ALICE) == (20, {"bees": 20})  # Bob's rows: not Alice's
        assert store.word_counts(["bees", "door"], bob) == (30, {"bees": 30, "door": 30})
        other.add_records(notes(["bees by the shed"], ALICE))  # Alice's 21 rows: grown by 5%
        assert store.word_counts(["bees"], ALICE) == (21, {"bees": 20})  # remembered
        other.add_records(notes(["bees on the roof", "bees in the garden"], ALICE))  # 23: by 15%
        assert store.word_counts(["bees", "roof"], ALICE) == (23, {"bees": 23, "roof": 1})
        store.delete_user(ALICE)  # forgetting drops every remembered count
        assert store.word_counts(["bees", "hive"], ALICE) == (0, {"bees": 0, "hive": 0})
    finally:
        store.close()
        other.close()


def test_postgres_counts_a_large_users_words_on_a_sample_and_a_rare_word_exactly(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pg_records, "SAMPLE_ROWS", 4)  # Alice's 10 rows make her a large user
    store = PostgresStore(postgres_url)
    try:
        store.add_records(notes([f"bees in hive {i}" for i in range(9)] + ["bees near the zeppelin"]))
        # 4 of Alice's 10 rows are read: "bees" is in all 4, scaled to 10; "zeppelin",
        # in none of them, is counted exactly; "the" (no lexeme) and "wasps" hold none.
        total, counts = store.word_counts(["bees", "zeppelin", "the", "wasps"], ALICE)
        assert total == 10
        assert counts == {"bees": 10, "zeppelin": 1, "the": 0, "wasps": 0}
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


def test_postgres_finds_a_stale_words_profile_mention_when_its_records_are_gone(postgres_url: str) -> None:
    """A remembered count turned stale is counted again; when it counts none now, the
    user's profile still holds the word: it counts as held by one, as a new word would."""
    store, other = PostgresStore(postgres_url), PostgresStore(postgres_url)
    try:
        [mine] = store.add_records(notes(["zorblax the cat sleeps"]))
        assert store.word_counts(["zorblax"], ALICE) == (1, {"zorblax": 1})  # remembered
        with other.transaction("profile") as conn:
            conn.execute(
                "INSERT INTO profile_fields (tenant_id, user_id, path, value_json, op, created_at) "
                "VALUES ('default', 'alice', 'pet.name', '\"Zorblax\"', 'set', 1.0)"
            )
        other.delete_records([mine], ALICE, "vector")  # another process: the count stays remembered
        other.add_records(notes([f"bees in hive {i}" for i in range(3)]))  # grown past a tenth: stale
        assert store.word_counts(["zorblax", "quux"], ALICE) == (3, {"zorblax": 1, "quux": 0})
    finally:
        store.close()
        other.close()


@pytest.mark.parametrize("sample_rows", [2, 5_000], ids=["on a sample of the users rows", "by the index"])
def test_postgres_counts_only_the_users_own_rows_either_way(
    postgres_url: str, monkeypatch: pytest.MonkeyPatch, sample_rows: int
) -> None:
    monkeypatch.setattr(pg_records, "SAMPLE_ROWS", sample_rows)
    store = PostgresStore(postgres_url)
    bob = Scope(user_id="bob", session_id="s1")
    try:
        store.add_records(notes(["bees on the roof", "bees in a red car", "bees in the quiet garden"]))
        store.add_records(notes([f"zeppelin and bees {i}" for i in range(5)], bob))
        # Bob's rows hold "bees" and "zeppelin" too: Alice's counts are of her 3 rows.
        # (On a sample of 2 rows each, every count here scales exactly; "zeppelin", in
        # none of Alice's, is counted through the index.)
        assert store.word_counts(["bees", "zeppelin", "the"], ALICE) == (3, {"bees": 3, "zeppelin": 0, "the": 0})
        assert store.word_counts(["bees", "zeppelin"], bob) == (5, {"bees": 5, "zeppelin": 5})
    finally:
        store.close()


def test_postgres_word_counts_take_one_round_trip(postgres_url: str) -> None:
    """The user's size, the counts of the words not remembered and the look-up of those
    that may count none in the user's triples and profile come from one statement, the
    first time and when every count is remembered (it took two before: the counts, or
    the size, then the look-up)."""
    store = PostgresStore(postgres_url)
    statements: list[str] = []
    query = store.query

    def counted(action: str, *args: object, **kwargs: object) -> object:
        statements.append(action)
        return query(action, *args, **kwargs)  # type: ignore[arg-type]

    try:
        store.add_records(notes(["bees on the roof", "bees in the garden"]))
        with store.transaction("profile") as conn:
            conn.execute(
                "INSERT INTO profile_fields (tenant_id, user_id, path, value_json, op, created_at) "
                "VALUES ('default', 'alice', 'pet.name', '\"Zorblax\"', 'set', 1.0)"
            )
        store.query = counted  # type: ignore[method-assign]
        first = store.word_counts(["bees", "zorblax", "quux", "the"], ALICE)
        assert first == (2, {"bees": 2, "zorblax": 1, "quux": 0, "the": 0})
        assert len(statements) == 1, statements
        statements.clear()
        assert store.word_counts(["zorblax", "bees", "quux"], ALICE) == (2, {"zorblax": 1, "bees": 2, "quux": 0})
        assert len(statements) == 1, statements  # every count remembered: the size and the look-up
    finally:
        store.close()
