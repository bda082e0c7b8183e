"""PostgreSQL's full-text search at speed: the rank cap keeps a
large user's best rows, and the full-text indexes keep no pending list to scan."""

from __future__ import annotations

import re
import statistics
import time
from collections import Counter
from pathlib import Path

import psycopg

from bench import real_texts
from llama_memory.core.types import Scope
from llama_memory.storage.ports import NewRecord
from llama_memory.storage.postgres import PostgresStore
from llama_memory.storage.postgres.records import RANK_CANDIDATES, RecordTables

TINY = Path(__file__).resolve().parents[1] / "data" / "locomo_tiny.json"
ALICE = Scope(user_id="alice", session_id="s1")


def test_the_rank_cap_keeps_the_uncapped_best_rows_of_a_large_user_on_real_texts(postgres_url: str) -> None:
    store = PostgresStore(postgres_url)
    try:
        texts = real_texts.texts(400, path=TINY)
        store.add_records([NewRecord("vector", ALICE, t, (f"m{i}",), 1_700_000_000.0 + i) for i, t in enumerate(texts)])
        queries = real_texts.questions(8, path=TINY) + [" ".join(t.split()[:8]) for t in texts[::40]]
        assert RecordTables.rank_candidates == RANK_CANDIDATES >= 30
        capped_somewhere = 0
        for query in queries:
            store.rank_candidates = 10**6  # every matching row ranked by ts_rank_cd
            everything = store.search_text(query, ALICE, "vector", 1000)
            uncapped = store.search_text(query, ALICE, "vector", 10)
            store.rank_candidates = 30  # three times the rows asked
            capped = store.search_text(query, ALICE, "vector", 10)
            capped_somewhere += len(everything) > 30
            assert capped == uncapped, query
            # A limit above the cap still returns every row asked.
            assert len(store.search_text(query, ALICE, "vector", 60)) == min(60, len(everything))
        assert capped_somewhere >= len(queries) // 2  # the cap did cut most queries' matches
    finally:
        store.close()


def test_written_rows_leave_no_pending_list_in_the_full_text_indexes(postgres_url: str) -> None:
    store = PostgresStore(postgres_url)
    try:
        texts = real_texts.texts(300, path=TINY)
        for first in range(0, len(texts), 50):  # as a chat history is written: batch after batch
            store.add_records([NewRecord("vector", ALICE, t, (f"m{first + i}",), None)
                               for i, t in enumerate(texts[first:first + 50])])  # fmt: skip
    finally:
        store.close()
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        for index in ("records_user_words", "triples_tsv"):
            pending = conn.execute("SELECT pending_pages, pending_tuples FROM pgstatginindex(%s)", (index,)).fetchone()
            assert pending == (0, 0), index


def test_each_row_is_scored_with_its_own_words_of_the_query_as_with_the_whole_query(postgres_url: str) -> None:
    # search_text scores a row with the query cut to the row's own words (ts_rank_cd's
    # cost grows with every word of the query): the scores are those of the whole query,
    # also for words tsquery syntax must quote and for a word the parser splits (x_y).
    store = PostgresStore(postgres_url)
    bob = Scope(user_id="bob-words", session_id="s1")
    texts = [
        "O'Brien's cafe serves crème brûlée at 8 pm, O'Brien's brother says",
        "the path C:\\temp\\notes holds snake_case_names and a|b or c&d",
        "café au lait; naïve über façade; the 2nd of May; don't panic",
        "snake and case and names, and O'Brien again: a long long long story",
        "nothing here matches",
    ]
    try:
        store.add_records([NewRecord("vector", bob, t, (f"m{i}",), 1_700_000_000.0 + i) for i, t in enumerate(texts)])
        queries = [
            "O'Brien's crème brûlée", "snake_case_names long story", "C:\\temp a|b c&d",
            "café naïve façade May", "the long long story of snake and case", "2nd don't panic 8 pm",
        ]
        with psycopg.connect(postgres_url, autocommit=True) as conn:
            for query in queries:
                found = store.search_text(query, bob, "vector", 10)
                assert found, query
                for record_id, score in found:
                    row = conn.execute(
                        "SELECT ts_rank_cd(tsv, websearch_to_tsquery('english', %s)) AS s FROM records "
                        "WHERE id = %s", (" or ".join(re.findall(r"\w+", query.casefold())), record_id),
                    ).fetchone()  # fmt: skip
                    assert row is not None and score == row[0], (query, record_id)
    finally:
        store.close()


def test_words_no_row_holds_add_little_to_a_search(postgres_url: str) -> None:
    # Before each row was scored with its own words only, 42 words no row holds made
    # the search 15-19x as slow as the one word alone (ts_rank_cd on 100 candidates).
    store = PostgresStore(postgres_url)
    carol = Scope(user_id="carol-cost", session_id="s1")
    try:
        texts = real_texts.texts(400, path=TINY)
        store.add_records([NewRecord("vector", carol, t, (f"m{i}",), 1_700_000_000.0 + i) for i, t in enumerate(texts)])
        common = Counter(w for t in texts for w in set(re.findall(r"[a-z]{4,}", t.lower()))).most_common(1)[0][0]
        absent = " ".join(f"zq{a}{b}" for a in "abcdef" for b in "abcdefg")

        def median_ms(query: str) -> float:
            times = []
            for _ in range(7):
                start = time.perf_counter()
                assert store.search_text(query, carol, "vector", 10)
                times.append(time.perf_counter() - start)
            return statistics.median(times) * 1000

        median_ms(common)  # warm-up
        one, many = median_ms(common), median_ms(f"{common} {absent}")
        assert many < 8 * one, (one, many)
    finally:
        store.close()
