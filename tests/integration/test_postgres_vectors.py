"""Per-user vector search on PostgreSQL: users above the threshold
are searched through the HNSW index with iterative scan, re-sorted, and return as many
rows as asked, with recall >= 0.95 against exact search, and only their own rows.
Real server (``postgres_url``); the threshold is forced low so a few thousand rows do."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import psycopg
import pytest

from bench.pg_recall import clustered_vectors, queries_near, recall_at
from helpers import ServerTrace
from llama_memory.storage.postgres import PgVectorIndex, PostgresStore

K = 10
#: Small vectors keep the incremental HNSW build of the test to a few seconds.
DIMENSION = 64


def _hnsw_scans(url: str) -> int:
    """How many times the HNSW index was scanned (call it after closing the store: a
    server process reports its statistics when its connection ends)."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT coalesce(sum(idx_scan), 0) FROM pg_stat_user_indexes WHERE indexrelname = %s",
            (PgVectorIndex.hnsw_index_name(DIMENSION),),
        ).fetchone()
    assert row is not None
    return int(row[0])


@pytest.fixture
def store(postgres_url: str):
    store = PostgresStore(postgres_url)
    yield store
    store.close()


def test_large_users_are_searched_through_hnsw_with_full_rows_recall_and_isolation(
    store: PostgresStore, postgres_url: str
) -> None:
    rng = np.random.default_rng(3)
    approximate = PgVectorIndex(store, "v", hnsw_threshold=200)
    exact = PgVectorIndex(store, "v", hnsw_threshold=10**9)
    # "big" holds 10% of the rows; "other" the rest, on the same topics.
    big, other = clustered_vectors(250, rng, dimension=DIMENSION), clustered_vectors(2250, rng, dimension=DIMENSION)
    for user, vectors in (("big", big), ("other", other)):
        ids = [f"{user}-{i}" for i in range(len(vectors))]
        for start in range(0, len(ids), 500):
            approximate.upsert("t", user, ids[start:start + 500], vectors[start:start + 500].tolist())
    assert approximate.count("t", "big") == 250 and approximate.count("t", "other") == 2250

    recalls = []
    # Queries near big's rows, and near other's (where big's rows are few and far).
    for q in np.concatenate([queries_near(big, 15, rng), queries_near(other, 5, rng)]):
        found = approximate.query("t", "big", q.tolist(), K)
        truth = exact.query("t", "big", q.tolist(), K)
        assert len(found) == K
        assert all(i.startswith("big-") for i, _ in found)
        similarities = [s for _, s in found]
        assert similarities == sorted(similarities, reverse=True)  # re-sorted by exact distance
        recalls.append(recall_at([i for i, _ in found], [i for i, _ in truth]))
    assert np.mean(recalls) >= 0.95, recalls

    # A walk cut short (max_scan_tuples=1) near other's rows still returns k of big's rows.
    starved = PgVectorIndex(store, "v", hnsw_threshold=200, ef_search=10, max_scan_tuples=1)
    for q in queries_near(other, 3, rng):
        found = starved.query("t", "big", q.tolist(), K)
        assert len(found) == K and all(i.startswith("big-") for i, _ in found)
    store.close()
    assert _hnsw_scans(postgres_url) > 0  # the HNSW path ran, not the exact one


def test_small_users_and_small_k_are_exact_and_counts_follow_writes(store: PostgresStore) -> None:
    rng = np.random.default_rng(4)
    index = PgVectorIndex(store, "v", hnsw_threshold=50)
    vectors = clustered_vectors(60, rng, dimension=DIMENSION)
    index.upsert("t", "u", [f"a{i}" for i in range(60)], vectors.tolist())
    index.upsert("t", "u", ["a0", "a1"], vectors[:2].tolist())  # replaced, not counted twice
    assert index.count("t", "u") == 60
    index.delete("t", "u", ["a0", "a1", "missing"])
    assert index.count("t", "u") == 58
    # Asking for more rows than the user has returns all of them, searched exactly.
    assert len(index.query("t", "u", vectors[5].tolist(), 100)) == 58
    assert index.query("t", "u", vectors[5].tolist(), 1)[0][0] == "a5"
    index.drop("t", "u")
    assert index.count("t", "u") == 0


def test_bad_search_settings_are_refused(store: PostgresStore) -> None:
    with pytest.raises(ValueError, match="hnsw_threshold"):
        PgVectorIndex(store, "v", hnsw_threshold=0)
    with pytest.raises(ValueError, match="ef_search"):
        PgVectorIndex(store, "v", ef_search=5000)
    with pytest.raises(ValueError, match="max_scan_tuples"):
        PgVectorIndex(store, "v", max_scan_tuples=0)


def test_a_write_never_builds_the_hnsw_index_over_existing_rows(store: PostgresStore, postgres_url: str) -> None:
    """An upgraded store (rows, no index): writes leave the build to ensure_hnsw, and
    searches stay exact and complete until it is built."""
    rng = np.random.default_rng(5)
    index = PgVectorIndex(store, "v", hnsw_threshold=20)
    vectors = clustered_vectors(60, rng, dimension=DIMENSION)
    index.upsert("t", "u", [f"a{i}" for i in range(30)], vectors[:30].tolist())
    name = PgVectorIndex.hnsw_index_name(DIMENSION)
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"DROP INDEX {name}")  # as before migration 4 and its first write
    later = PgVectorIndex(store, "v", hnsw_threshold=20)
    later.upsert("t", "u", [f"a{i}" for i in range(30, 60)], vectors[30:].tolist())
    exists = "SELECT to_regclass(%s) IS NOT NULL"
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute(exists, (name,)).fetchone() == (False,)
    assert len(later.query("t", "u", vectors[0].tolist(), K)) == K  # exact meanwhile
    later.ensure_hnsw(DIMENSION)
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute(exists, (name,)).fetchone() == (True,)
    assert later.query("t", "u", vectors[0].tolist(), 1)[0][0] == "a0"


def test_a_small_users_search_is_one_statement(postgres_url: str, tmp_path: Path) -> None:
    # Its count and its exact search in one round trip (it was a transaction of five:
    # BEGIN, the count, the search, the check of its own writes, COMMIT).
    trace = ServerTrace(tmp_path / "trace.txt")
    store = PostgresStore(trace.pool(postgres_url))
    try:
        index = PgVectorIndex(store, "one", hnsw_threshold=50)
        vectors = clustered_vectors(20, np.random.default_rng(5), dimension=DIMENSION)
        index.upsert("t", "small", [f"s{i}" for i in range(20)], vectors.tolist())
        with store.one_connection():
            assert index.count("t", "small") == 20  # takes (and checks) the connection
            before = trace.round_trips()
            found = index.query("t", "small", vectors[3].tolist(), 5)
            assert trace.round_trips() - before == 1
        assert found[0][0] == "s3" and len(found) == 5
        assert index.query("t", "nobody", vectors[3].tolist(), 5) == []
    finally:
        store.close()
        trace.close()


def test_a_large_users_search_through_hnsw_leaves_out_the_ids_it_is_told(store: PostgresStore) -> None:
    rng = np.random.default_rng(5)
    index = PgVectorIndex(store, "v", hnsw_threshold=50)
    vectors = clustered_vectors(150, rng, dimension=DIMENSION)
    index.upsert("t", "u", [f"a{i}" for i in range(150)], vectors.tolist())
    query = vectors[7].tolist()
    nearest = [i for i, _ in index.query("t", "u", query, K)]
    left_out = set(nearest[:5])
    found = [i for i, _ in index.query("t", "u", query, K, left_out)]
    # k rows, none of them left out, the others of the first ten among them.
    assert len(found) == K and not left_out & set(found) and set(nearest[5:]) <= set(found)
