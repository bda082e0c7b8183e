"""What one ``get()`` on PostgreSQL reads once, whatever the number of its retrievals: a
question of two parts retrieves for each part and for the whole question."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from helpers import hold, memory_factory
from llama_memory.core.types import Scope
from llama_memory.storage.ports import NewRecord
from llama_memory.storage.postgres import PostgresStore

ALICE = Scope(user_id="alice", session_id="s1")
TWO_PARTS = "Which tea do I like and which boat do I own?"
STORED = (
    "My favourite tea is a smoky lapsang souchong, brewed strong.",
    "My sailing boat is a 1978 wooden sloop called Marigold, moored in Cascais.",
)

NOTES = ("bees on the roof", "bees in the garden", "a quiet garden")


@contextmanager
def notes_store(url: str) -> Iterator[PostgresStore]:
    """A store of its own on ``url`` holding alice's :data:`NOTES`."""
    store = PostgresStore(url)
    try:
        store.add_records([NewRecord("vector", ALICE, t, (f"m{i}",), 1.0) for i, t in enumerate(NOTES)])
        yield store
    finally:
        store.close()


def test_a_two_part_question_reads_the_pending_rows_and_the_profile_once(
    postgres_url: str, embed_model: Any, postgres_statements: Counter[str]
) -> None:
    with stored_memory(embed_model, postgres_url) as memory:
        check_one_get(memory, postgres_statements)


@contextmanager
def stored_memory(embed_model: Any, url: str) -> Iterator[Any]:
    """A memory of a new session on ``url``, the user having said :data:`STORED` before."""
    with memory_factory(embed_model, store=url) as make:
        hold(make, STORED)
        yield make(session_id="now")


def check_one_get(memory: Any, statements: Counter[str]) -> None:
    memory.profile.set_field("city", "Lisbon", memory.scope)  # a profile to read
    memory.flush()  # nothing left to embed
    statements.clear()

    memory.get(TWO_PARTS)

    # Three before (one a retrieval), then one: the pool's check of the get()'s
    # connection now says that no record waits for the index.
    assert statements["read pending records"] == 0
    # The instructions' read brings the profile's rows too; the three retrievals'
    # reads of the profile take them from there (two statements before).
    assert statements["read instructions"] == 1 and statements["read profile"] == 0
    shown = " ".join(r.text for r in memory.last_block.records)
    assert "lapsang" in shown and "Marigold" in shown and "Lisbon" in shown


def test_within_a_get_a_write_makes_the_pending_rows_read_again(postgres_url: str) -> None:
    store = PostgresStore(postgres_url)
    try:
        with store.one_connection():
            assert store.pending_records("vector", 10) == []
            assert store.pending_records("vector", 10) == []  # remembered: no statement
            store.add_records([NewRecord("vector", ALICE, "a message put meanwhile", ("m1",), 1.0)])
            assert [r.text for r in store.pending_records("vector", 10)] == ["a message put meanwhile"]
        assert [r.text for r in store.pending_records("vector", 10)] == ["a message put meanwhile"]
    finally:
        store.close()


def test_a_write_as_the_first_statement_of_a_get_makes_its_pending_rows_read(postgres_url: str) -> None:
    store = PostgresStore(postgres_url)
    try:
        with store.one_connection():  # the pool's check found none pending, then this write
            store.add_records([NewRecord("vector", ALICE, "a message put first", ("m1",), 1.0)])
            assert [r.text for r in store.pending_records("vector", 10)] == ["a message put first"]
    finally:
        store.close()


def test_none_pending_is_remembered_within_one_get_only(postgres_url: str, postgres_statements: Counter[str]) -> None:
    store = PostgresStore(postgres_url)
    try:
        for _ in range(2):
            with store.one_connection():
                store.pending_records("vector", 10)
                store.pending_records("vector", 10)
        assert postgres_statements["read pending records"] == 2  # once a get(), not once a call
    finally:
        store.close()


def test_within_a_get_words_counted_already_are_given_again_without_a_statement(
    postgres_url: str, postgres_statements: Counter[str]
) -> None:
    with notes_store(postgres_url) as store:
        with store.one_connection():
            first = store.word_counts(["bees", "garden", "quux"], ALICE)
            assert first == (3, {"bees": 2, "garden": 2, "quux": 0})
            assert store.word_counts(["garden", "bees"], ALICE) == (3, {"garden": 2, "bees": 2})
            assert postgres_statements["count word matches"] == 1  # two before: one a call
            store.word_counts(["roof", "bees"], ALICE)  # a word not counted yet: a statement
            assert postgres_statements["count word matches"] == 2
            store.add_records([NewRecord("vector", ALICE, "more bees", ("m9",), 1.0)])  # a write
            assert store.word_counts(["bees"], ALICE) == (4, {"bees": 3})  # read again
            assert postgres_statements["count word matches"] > 2
        before = postgres_statements["count word matches"]
        with store.one_connection():  # the next get() asks the store again
            assert store.word_counts(["bees"], ALICE) == (4, {"bees": 3})
            assert postgres_statements["count word matches"] == before + 1


def test_a_get_reads_no_records_nor_texts_a_read_of_it_brought_already(
    postgres_url: str, embed_model: Any, postgres_statements: Counter[str]
) -> None:
    with stored_memory(embed_model, postgres_url) as memory:
        memory.flush()
        postgres_statements.clear()

        memory.get("Which tea do I like?")

        assert "lapsang" in " ".join(r.text for r in memory.last_block.records)
        # The session neighbours' read brought the excerpts' records (one statement
        # each before), and the second hop's search the texts of what it found.
        assert postgres_statements["read session neighbours"] >= 1
        assert postgres_statements["read records"] == 0
        assert postgres_statements["read record texts"] <= 1  # two before


def test_within_a_get_the_records_and_texts_read_ahead_are_those_a_statement_reads(
    postgres_url: str, postgres_statements: Counter[str]
) -> None:
    store = PostgresStore(postgres_url)
    bob = Scope(user_id="bob", session_id="s1")
    try:
        store.add_records([NewRecord("vector", ALICE, t, (f"m{i}",), 1.0, expires_at=5.0 if i == 1 else None)
                           for i, t in enumerate(["bees on the roof", "bees in the garden", "a quiet garden"])])  # fmt: skip
        store.add_records([NewRecord("vector", bob, "bees of bob", ("b1",), 1.0)])
        ids = [i for i, _ in store.search_text("bees garden", ALICE, "vector", 10)]
        bobs = [i for i, _ in store.search_text("bees", bob, "vector", 10)]
        expected = store.get_records(ids, ALICE, "vector", alive_at=10.0), store.get_texts(ids, ALICE, "vector")
        postgres_statements.clear()
        with store.one_connection():
            store.search_text("bees garden", ALICE, "vector", 10)
            assert store.get_texts(ids, ALICE, "vector") == expected[1]
            assert postgres_statements["read record texts"] == 0
            assert store.get_texts(ids + bobs, ALICE, "vector") == expected[1]  # bob's: not alice's
            assert store.get_texts(ids, bob, "vector") == {}  # nor alice's bob's
            assert postgres_statements["read record texts"] == 2
            store.session_neighbours(ids, ALICE, "vector", 2)
            assert store.get_records(ids, ALICE, "vector", alive_at=10.0) == expected[0]  # one expired
            assert postgres_statements["read records"] == 0
            assert store.get_records(ids, ALICE, "other source") == {}  # not read ahead: read
            assert store.get_records(ids, bob, "vector") == {}
            assert postgres_statements["read records"] == 2
            store.add_records([NewRecord("vector", ALICE, "more bees", ("m9",), 1.0)])  # a write
            assert len(store.get_records(ids, ALICE, "vector")) == 3
            assert postgres_statements["read records"] == 3  # read again after the write
    finally:
        store.close()


def test_within_a_get_a_word_count_counts_the_searched_words_too(
    postgres_url: str, postgres_statements: Counter[str]
) -> None:
    with notes_store(postgres_url) as store, store.one_connection():
        store.search_text("Are the bees in my garden?", ALICE, "vector", 10)
        assert store.word_counts(["roof"], ALICE) == (3, {"roof": 1})  # only the words asked
        assert store.word_counts(["bees", "garden"], ALICE) == (3, {"bees": 2, "garden": 2})
        assert postgres_statements["count word matches"] == 1  # two before

