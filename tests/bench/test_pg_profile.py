"""``bench.pg_profile`` splits one PostgreSQL ``get()`` into its parts (the query
embedding, each store statement by name, the rest) on the test server."""

from __future__ import annotations

from bench import pg_profile, speed
from bench.pg_speed import open_memory
from llama_memory.storage.postgres.connection import PostgresConnection


def test_a_get_is_split_into_embedding_statements_and_the_rest(postgres_url: str) -> None:
    memory = open_memory("postgres", postgres_url)
    memory.put_messages(speed.make_workload(30, 0, 7)[0])
    memory.flush()
    memory.close()
    query, transaction = PostgresConnection.query, PostgresConnection.transaction

    parts = pg_profile.profile(postgres_url, gets=2)

    assert {"get() total", "query embedding", "search text", "rest (Python)"} <= set(parts)
    total = parts["get() total"]["median_ms"]
    assert 0 < parts["query embedding"]["median_ms"] < total
    # The store is left as it was: no timing wrapper outlives the profile.
    assert (PostgresConnection.query, PostgresConnection.transaction) == (query, transaction)
