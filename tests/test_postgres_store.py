"""What the PostgreSQL store does beyond the ports' conformance suite: migrations,
errors that name the server, connections cut by the server replaced."""

from __future__ import annotations

import threading

import psycopg
import pytest

from bench.postgres_server import free_port
from llama_memory.errors import StorageError
from llama_memory.storage.ports import NewRecord
from llama_memory.storage.postgres import MIGRATIONS, PostgresStore
from llama_memory.types import Scope

ALICE = Scope(user_id="alice", session_id="s1")


def test_workers_opening_a_new_database_at_once_migrate_it_once(postgres_url: str) -> None:
    stores: list[PostgresStore] = []
    errors: list[BaseException] = []

    def open_store() -> None:
        try:
            stores.append(PostgresStore(postgres_url, max_size=1))
        except BaseException as exc:  # collected: a thread's exception is lost otherwise
            errors.append(exc)

    threads = [threading.Thread(target=open_store) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with psycopg.connect(postgres_url) as conn:
        versions = conn.execute("SELECT version FROM llama_memory_migrations ORDER BY version").fetchall()
    assert [v for (v,) in versions] == list(range(1, len(MIGRATIONS) + 1))
    for store in stores:
        store.close()


def test_a_schema_newer_than_the_code_is_refused_with_what_to_do(postgres_url: str) -> None:
    PostgresStore(postgres_url).close()
    with psycopg.connect(postgres_url) as conn:
        conn.execute("INSERT INTO llama_memory_migrations (version) VALUES (%s)", (len(MIGRATIONS) + 1,))
    with pytest.raises(StorageError, match="newer than this release.*upgrade llama-memory"):
        PostgresStore(postgres_url)


def test_an_unreachable_server_raises_a_storage_error_naming_it() -> None:
    port = free_port()
    with pytest.raises(StorageError, match=f"PostgreSQL store 127.0.0.1:{port}/memory"):
        PostgresStore(f"postgresql://someone:secret@127.0.0.1:{port}/memory", timeout=1.0)


def test_a_url_that_is_not_postgresql_is_refused_with_an_example() -> None:
    with pytest.raises(ValueError, match="postgresql://user@host:5432/dbname"):
        PostgresStore("sqlite:///memory.db")


def test_connections_cut_by_the_server_are_replaced_without_failing_a_call(postgres_url: str) -> None:
    store = PostgresStore(postgres_url, max_size=2)
    [record_id] = store.add_records([NewRecord("vector", ALICE, "bees on the roof", ("m1",), 1.0)])
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        # As a proxy or a server restart would: every other connection to the database is cut.
        cut = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    assert cut is not None and cut[0] >= 1
    assert set(store.get_records([record_id], ALICE, "vector")) == {record_id}
    store.close()
