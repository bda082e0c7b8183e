"""What the PostgreSQL store does beyond the ports' conformance suite: migrations,
errors that name the server, connections cut by the server replaced."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any, Callable
from urllib.parse import quote

import psycopg
import pytest

from bench.postgres_server import free_port
from helpers import ServerTrace, user
from llama_memory import ComposableMemory
from llama_memory.core.errors import StorageError
from llama_memory.core.types import Expiry, MemoryRecord, Scope
from llama_memory.memory.runtime import UsageLog
from llama_memory.sources.profile import ProfileSource
from llama_memory.storage.ports import NewRecord
from llama_memory.storage.postgres import MIGRATIONS, PostgresProfileRows, PostgresStore

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
    started = time.monotonic()
    with pytest.raises(StorageError, match=f"PostgreSQL store 127.0.0.1:{port}/memory") as caught:
        PostgresStore(f"postgresql://someone:secret@127.0.0.1:{port}/memory")
    assert "Connection refused" in str(caught.value) and "secret" not in str(caught.value)
    assert time.monotonic() - started < 3.0  # at once, not after the pool's 10 s timeout


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



def _cut_every_connection(url: str) -> int:
    """Terminate every other connection to the database, as a proxy or a failover would."""
    with psycopg.connect(url, autocommit=True) as admin:
        row = admin.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
    return int(row[0]) if row else 0


def test_a_pool_full_of_cut_connections_is_replaced_at_once_not_one_check_at_a_time(postgres_url: str) -> None:
    store = PostgresStore(postgres_url, min_size=4, max_size=4)
    try:
        [record_id] = store.add_records([NewRecord("vector", ALICE, "bees on the roof", ("m1",), 1.0)])
        deadline = time.monotonic() + 5
        while store._pool.get_stats()["pool_available"] < 4 and time.monotonic() < deadline:
            time.sleep(0.05)  # the pool opens its min_size connections in the background
        assert _cut_every_connection(postgres_url) == 4
        started = time.monotonic()
        assert set(store.get_records([record_id], ALICE, "vector")) == {record_id}
        elapsed = time.monotonic() - started
        # psycopg_pool alone checks them one by one, sleeping 1 s, 2 s... after each failure.
        print(f"\n4 cut connections replaced in {elapsed:.2f} s")
        assert elapsed < 3.0, f"{elapsed:.1f} s to replace 4 cut connections"
    finally:
        store.close()


def test_a_memory_whose_connections_were_cut_answers_on_the_same_objects(
    postgres_url: str, embed_model: object
) -> None:
    memory = ComposableMemory.from_defaults(user_id="alice", session_id="s1", store=postgres_url, embed_model=embed_model)
    try:
        memory.put(user("bees on the roof"))
        assert _cut_every_connection(postgres_url) >= 1
        memory.put(user("after the cut"))
        assert [m.content for m in memory.get_all()] == ["bees on the roof", "after the cut"]
        assert "bees" in (memory.get("where are the bees?")[0].content or "")
    finally:
        memory.close()


def test_the_change_token_moves_when_a_write_running_at_the_last_read_commits(postgres_url: str) -> None:
    # Another app server's transaction began before the token was read and commits
    # after the store's own next write: its commit still moves the token.
    store = PostgresStore(postgres_url)
    try:
        store.add_records([NewRecord("vector", ALICE, "first", ("m1",), 1.0)])
        with psycopg.connect(postgres_url) as other:
            other.execute("UPDATE records SET importance = 0.5")  # running, not committed
            before = store.change_token()
            store.add_records([NewRecord("vector", ALICE, "mine", ("m2",), 2.0)])
            assert store.change_token() == before  # the other has not committed yet
            other.commit()
            assert store.change_token() != before
    finally:
        store.close()


def test_a_get_takes_its_change_token_from_the_check_of_its_connection(postgres_url: str, tmp_path: Path) -> None:
    # The pool's check of the connection a get() keeps reads the server's snapshot (a
    # round trip it made anyway): the change token costs no statement of its own; a
    # second token in the same hold is read afresh, and sees another's commit.
    store, other = PostgresStore(postgres_url), PostgresStore(postgres_url)
    trace = ServerTrace(tmp_path / "trace.txt")
    try:
        with store.one_connection():
            with store._connection() as conn:  # the hold's connection, taken and checked now
                trace.follow(conn)
            before = trace.round_trips()
            first = store.change_token()
            assert trace.round_trips() == before
            other.add_records([NewRecord("vector", ALICE, "another's write", ("o1",), 1.0)])
            assert store.change_token() != first
            assert trace.round_trips() == before + 1
    finally:
        store.close()
        other.close()
        trace.close()


def test_a_get_reads_the_instructions_and_the_profile_in_one_statement(postgres_url: str, tmp_path: Path) -> None:
    # Within one get() (one_connection) the first document read fetches both documents'
    # current rows: the second read sends nothing, and each applies expiry at its own
    # time; a write of the store object in between is read afresh.
    store = PostgresStore(postgres_url)
    trace = ServerTrace(tmp_path / "trace.txt")
    dana = Scope(user_id="dana-docs", session_id="s1")
    instructions, profile = PostgresProfileRows(store, "instructions"), PostgresProfileRows(store, "profile")
    clock = [1_000.0]
    ProfileSource(instructions).set_field("tone", "brief", dana)
    ProfileSource(profile, expiry=Expiry(clock=lambda: clock[0])).set_field("city", "Porto", dana, ttl=10)
    ProfileSource(profile).set_field("diet", "vegan", dana)
    ProfileSource(profile).set_field("diet", "vegetarian", dana)
    alone = (instructions.current(dana, 1_005.0), profile.current(dana, 1_005.0), profile.current(dana, 1_020.0))
    try:
        with store.one_connection():
            assert store.count_records("vector", dana) == 0  # takes (and checks) the connection
            with store._connection() as conn:  # the hold's connection
                trace.follow(conn)
            before = trace.round_trips()
            assert instructions.current(dana, 1_005.0) == alone[0]
            assert profile.current(dana, 1_020.0) == alone[2]  # the city expired by then
            assert trace.round_trips() == before + 1
            assert profile.current(dana, 1_005.0) == alone[1]  # read again: from the same rows
            assert trace.round_trips() == before + 1  # (each retrieval of a get() reads it)
            ProfileSource(instructions).set_field("tone", "warm", dana)  # a write in the hold
            assert [c.value for c in instructions.current(dana, 1_005.0)] == ["warm"]
    finally:
        store.close()
        trace.close()


def _until_waiting(url: str, count: int) -> None:
    """Until ``count`` connections to ``url``'s database wait for a lock."""
    with psycopg.connect(url, autocommit=True) as watcher:
        for _ in range(250):
            row = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
            ).fetchone()
            if row and row[0] >= count:
                return
            time.sleep(0.02)
    raise AssertionError(f"fewer than {count} connections waited for a lock")


def _written_in_opposite_orders(url: str, write: Callable[[PostgresStore, list[str]], None]) -> dict[str, Any]:
    """Two stores each ``write`` the same two records in one transaction, one naming them
    a, b and the other b, a, while another client holds b a moment: the second waits for
    b, the first takes a and waits for b, and once b is free the second wants a. Returns
    the records as they are then; fails if a write raised."""
    stores = [PostgresStore(url) for _ in range(2)]
    a, b = stores[0].add_records([NewRecord("vector", ALICE, t, (t,), 1.0) for t in ("bees", "wasps")])
    errors: list[BaseException] = []

    def run(store: PostgresStore, ids: list[str]) -> None:
        try:
            with store.transaction("write"):
                write(store, ids)
        except BaseException as exc:
            errors.append(exc)

    try:
        with psycopg.connect(url) as other:
            other.execute("SELECT id FROM records WHERE id = %s FOR UPDATE", (b,))
            second = threading.Thread(target=run, args=(stores[1], [b, a]))
            second.start()
            _until_waiting(url, 1)
            first = threading.Thread(target=run, args=(stores[0], [a, b]))
            first.start()
            _until_waiting(url, 2)
        for thread in (first, second):
            thread.join(timeout=15)
        assert errors == []
        return stores[0].get_records([a, b], ALICE, "vector")
    finally:
        for store in stores:
            store.close()


def test_two_puts_noting_the_same_records_used_never_deadlock(postgres_url: str) -> None:
    # Two requests of one user write their blocks' uses in their puts' transactions (one
    # statement per time a block was shown), one noting a then b, the other b then a:
    # the two could wait on each other, and PostgreSQL aborted one ("deadlock detected").
    def put(store: PostgresStore, ids: list[str]) -> None:
        uses = UsageLog(store)
        for at, record_id in enumerate(ids, start=1):
            uses.note([MemoryRecord(text="", id=record_id)], float(at))
        uses.write()

    used = _written_in_opposite_orders(postgres_url, put)
    assert [r.last_used for r in used.values()] == [2.0, 2.0]


def test_two_flushes_of_the_same_records_never_deadlock(postgres_url: str) -> None:
    # Two memories of one user each flush the user's records waiting for their vectors,
    # listed in different orders: one UPDATE per record, row locks taken as they went.
    def flush(store: PostgresStore, ids: list[str]) -> None:
        store.mark_indexed(ids, vectors=[bytes(8)] * len(ids))

    assert len(_written_in_opposite_orders(postgres_url, flush)) == 2


def test_one_update_of_many_records_takes_their_locks_in_one_order_whatever_the_plan(postgres_url: str) -> None:
    # Two app servers' planners may read the same rows in different orders (a sequential
    # scan: where they lie; an index scan: by id), so two UPDATEs of the same records
    # locked them in opposite orders and PostgreSQL aborted one ("deadlock detected").
    planners = {"heap": "enable_indexscan=off -c enable_bitmapscan=off", "index": "enable_seqscan=off -c enable_bitmapscan=off"}
    stores = {k: PostgresStore(f"{postgres_url}?options={quote('-c ' + v)}") for k, v in planners.items()}
    ids = stores["heap"].add_records([NewRecord("vector", ALICE, t, (t,), 1.0) for t in ("bees", "wasps")])
    errors: list[BaseException] = []

    def mark(store: PostgresStore) -> None:
        try:
            store.mark_used(ids, 2.0)
        except BaseException as exc:
            errors.append(exc)

    try:
        with psycopg.connect(postgres_url) as other:
            in_heap = [r for (r,) in other.execute("SELECT id FROM records ORDER BY ctid").fetchall()]
            if in_heap == sorted(in_heap):  # the heap's order must be the index's reversed
                other.execute("UPDATE records SET importance = 0.5 WHERE id = %s", (in_heap[0],))
                other.commit()
                in_heap.reverse()
            other.execute("SELECT id FROM records WHERE id = %s FOR UPDATE", (in_heap[0],))
            by_heap = threading.Thread(target=mark, args=(stores["heap"],))
            by_heap.start()
            _until_waiting(postgres_url, 1)
            by_index = threading.Thread(target=mark, args=(stores["index"],))
            by_index.start()
            _until_waiting(postgres_url, 2)
        for thread in (by_heap, by_index):
            thread.join(timeout=15)
        assert errors == []
        assert {r.last_used for r in stores["heap"].get_records(ids, ALICE, "vector").values()} == {2.0}
    finally:
        for store in stores.values():
            store.close()
