"""PostgreSQL's full-text search at speed (issue 15, point 9): the rank cap keeps a
large user's best rows, and the full-text indexes keep no pending list to scan."""

from __future__ import annotations

from pathlib import Path

import psycopg

from bench import real_texts
from llama_memory.storage.ports import NewRecord
from llama_memory.storage.postgres import PostgresStore
from llama_memory.storage.postgres.records import RANK_CANDIDATES, RecordTables
from llama_memory.types import Scope

TINY = Path(__file__).parent / "data" / "locomo_tiny.json"
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
        for index in ("records_tsv", "triples_tsv"):
            pending = conn.execute("SELECT pending_pages, pending_tuples FROM pgstatginindex(%s)", (index,)).fetchone()
            assert pending == (0, 0), index
