"""A whole memory on PostgreSQL: ``ComposableMemory.from_defaults(store=...)`` keeps
chat logs, records, vectors (pgvector), profile, triples and jobs in one database,
shared by memory objects in other processes. Real server: the
``postgres_url`` fixture (a new database on a throwaway PostgreSQL with pgvector)."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any, Callable

import psycopg
import pytest
from psycopg_pool import ConnectionPool

import workers
from helpers import assistant, memory_factory, user
from llama_memory import ComposableMemory, LlamaMemoryError, OfflineEmbedding
from llama_memory.storage.postgres import PostgresStore

Make = Callable[..., ComposableMemory]


@pytest.fixture
def make_pg(postgres_url: str, embed_model: OfflineEmbedding) -> Iterator[Make]:
    """Build memories on the test's database; closes them at the end."""
    with memory_factory(embed_model, store=postgres_url) as make:
        yield make


def _count(url: str, sql: str) -> int:
    with psycopg.connect(url) as conn:
        row = conn.execute(sql).fetchone()
        assert row is not None
        return int(row[0])


def test_a_fact_stored_by_one_memory_is_retrieved_by_another_process(
    make_pg: Make, postgres_url: str
) -> None:
    writer = make_pg()
    writer.put(user("My sister Carla lives in Lisbon and teaches the cello."))
    writer.put(assistant("Noted: Carla, Lisbon, cello."))
    make_pg("bob").put(user("Bob's secret: the vault code is 4711."))

    ctx = workers.forkserver()
    process, conn = workers.start(ctx, workers.postgres_recaller, postgres_url, "alice", "s2", "where does Carla live?")
    status, texts, block = workers.receive(conn)
    process.join(30)
    assert status == "ok", texts
    assert any("Lisbon" in t for t in texts)
    assert "Lisbon" in block and "4711" not in block  # another user's record never shows
    # Nothing of the store is local: the rows are in the database.
    assert _count(postgres_url, "SELECT count(*) FROM record_embeddings WHERE user_id = 'alice'") >= 2


def test_two_memory_objects_on_one_session_share_the_window(make_pg: Make) -> None:
    first, second = make_pg(), make_pg()
    first.put(user("hello from the first worker"))
    second.put(assistant("hello from the second worker"))
    expected = ["hello from the first worker", "hello from the second worker"]
    assert [m.content for m in first.get_all()] == expected
    assert [m.content for m in second.get_all()] == expected
    assert [m.content for m in make_pg(session_id="other").get_all()] == []


def test_default_sources_and_triples_work_and_forget_removes_the_user(
    make_pg: Make, postgres_url: str
) -> None:
    memory = make_pg(triples=True)
    assert [s.name for s in memory.sources] == ["vector", "profile", "triples"]
    memory.put(user("I moved to Porto last spring."))
    memory.profile.set_field("diet", "vegan", memory.scope)
    memory.add_triples([("user", "lives in", "Porto")])
    bob = make_pg("bob", triples=True)
    bob.put(user("Bob likes sailing."))
    bob.add_triples([("user", "likes", "sailing")])

    reader = make_pg(session_id="s2", triples=True)
    assert reader.profile.get_profile(reader.scope) == {"diet": "vegan"}
    block = reader.get("where do I live?")[0].content
    assert "Porto" in block and "vegan" in block and "sailing" not in block

    reader.forget()
    tables = ("records", "record_embeddings", "chat_messages", "profile_fields", "triples", "triple_mentions")
    for table in tables:
        assert _count(postgres_url, f"SELECT count(*) FROM {table} WHERE user_id = 'alice'") == 0, table
    assert "sailing" in make_pg("bob", session_id="b2", triples=True).get("what do I like?")[0].content
    assert make_pg(session_id="s3", triples=True).search("Porto") == []


def test_to_dict_carries_the_url_without_the_password_and_from_dict_reopens_the_database(
    make_pg: Make, postgres_url: str
) -> None:
    url = postgres_url.replace("postgres@", "postgres:s3cret@")  # the test server trusts loopback
    memory = make_pg(store=url)
    memory.put(user("remember the blue door"))
    data = memory.to_dict()
    assert "s3cret" not in repr(data)
    assert data["store"] == postgres_url and data["path"] is None
    assert "chat_history" not in data  # the conversation is in the database
    memory.close()
    restored = ComposableMemory.from_dict(data, embed_model=memory.sources[0].embed_model)
    try:
        assert [m.content for m in restored.get_all()] == ["remember the blue door"]
    finally:
        restored.close()


def test_an_application_pool_is_borrowed_left_open_and_asked_for_again_on_restore(
    make_pg: Make, postgres_url: str
) -> None:
    with ConnectionPool(postgres_url, min_size=1, max_size=2, open=True) as pool:
        memory = make_pg(store=pool)
        memory.put(user("pooled hello"))
        data = memory.to_dict()
        memory.close()
        assert not pool.closed  # the application's pool is the application's to close
        with pool.connection() as conn:  # its connections keep their own settings
            assert conn.autocommit is False
            assert isinstance(conn.execute("SELECT 1").fetchone(), tuple)
        assert data["store"]["url"] == postgres_url
        with pytest.raises(LlamaMemoryError, match="store=pool"):
            ComposableMemory.from_dict(data)
        again = make_pg(**{**_args(data), "store": pool})
        assert [m.content for m in again.get_all()] == ["pooled hello"]


def test_a_get_on_an_application_pool_holds_one_of_its_connections_and_gives_it_back_as_it_was(
    make_pg: Make, postgres_url: str
) -> None:
    # A get() keeps one connection for all its statements (one_connection): a borrowed
    # one needs the store's settings while held and its own again when given back.
    with ConnectionPool(postgres_url, min_size=1, max_size=1, open=True) as pool:
        make_pg(store=pool).put(user("I keep bees in Porto"))
        later = make_pg(store=pool, session_id="later")
        assert "bees in Porto" in (later.get("where are my bees?")[0].content or "")
        assert [r.text for r in later.search("bees", k=1)] == ["I keep bees in Porto"]
        with pool.connection() as conn:
            assert conn.autocommit is False
            assert isinstance(conn.execute("SELECT 1").fetchone(), tuple)


def test_many_users_memories_on_one_application_pool_share_its_connections(
    make_pg: Make, postgres_url: str
) -> None:
    # One agent serving many users (docs/howto/postgres.md, "Many users in one process"):
    # a memory per user, all on the process's one pool. Each memory opened from a URL
    # would keep a pool, and a connection, of its own.
    codes = {f"user{i}": f"{4000 + 37 * i}" for i in range(12)}
    with ConnectionPool(postgres_url, min_size=1, max_size=2, open=True) as pool:
        memories = {name: make_pg(user_id=name, store=pool) for name in codes}
        for name, memory in memories.items():
            memory.put(user(f"My locker code is {codes[name]}"))
        for name, memory in memories.items():
            block = memory.get("what is my locker code?")[0].content or ""
            assert codes[name] in block
            assert not [c for other, c in codes.items() if other != name and c in block]
        connections = _count(
            postgres_url,
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()",
        )
        assert connections <= pool.max_size  # twelve memories, the pool's connections only
        for memory in memories.values():
            memory.close()
        assert not pool.closed


@pytest.mark.parametrize("prepare_threshold", [None, 5], ids=["behind pgbouncer", "default"])
def test_a_pool_without_prepared_statements_leaves_none_on_the_server(
    make_pg: Make, postgres_url: str, prepare_threshold: Any
) -> None:
    # docs/howto/postgres.md, "Behind pgbouncer": the pool's prepare_threshold holds for
    # the memory's statements (pgbouncer in transaction mode cannot keep them).
    with ConnectionPool(
        postgres_url, min_size=1, max_size=1, kwargs={"prepare_threshold": prepare_threshold}, open=True
    ) as pool:
        memory = make_pg(store=pool)
        for turn in range(8):
            memory.put(user(f"turn {turn}: I keep bees"))
            memory.get("where are my bees?")
        with pool.connection() as conn:  # the one connection the memory used
            row = conn.execute("SELECT count(*) FROM pg_prepared_statements").fetchone()
        assert row is not None
        assert (row[0] == 0) == (prepare_threshold is None)


def test_a_store_object_as_store_is_refused_with_the_way_to_share_a_pool(postgres_url: str) -> None:
    store = PostgresStore(postgres_url, prepare_threshold=None)
    try:
        with pytest.raises(TypeError, match=r"ConnectionPool\(url, kwargs=\{'prepare_threshold': None\}"):
            ComposableMemory.from_defaults(user_id="a", store=store)
    finally:
        store.close()


def _args(data: dict[str, Any]) -> dict[str, Any]:
    return {"user_id": data["user_id"], "session_id": data["session_id"]}


def test_path_and_store_are_exclusive_and_chroma_goes_with_path(tmp_path: Any) -> None:
    url = "postgresql://app@db.invalid/memory"
    with pytest.raises(ValueError, match="path= .* or store= .*not both"):
        ComposableMemory.from_defaults(user_id="a", path=tmp_path, store=url)
    with pytest.raises(ValueError, match="pgvector"):
        ComposableMemory.from_defaults(user_id="a", store=url, chroma_url="http://localhost:8000")
    with pytest.raises(TypeError, match="store takes a PostgreSQL URL"):
        ComposableMemory.from_defaults(user_id="a", store=tmp_path)
    # A directory as a string, given to store= by mistake: the error says where it goes.
    with pytest.raises(ValueError, match=r"store takes a PostgreSQL URL.*not the path .*pass path= instead"):
        ComposableMemory.from_defaults(user_id="a", store=str(tmp_path / "memory"))
    assert not (tmp_path / "memory").exists()
    with pytest.raises(ValueError, match="store='postgresql://"):
        ComposableMemory.from_defaults(user_id="a", path=url)


def test_the_store_behind_a_memory_is_postgres(make_pg: Make) -> None:
    assert isinstance(make_pg().runtime.store, PostgresStore)


def test_a_refused_url_never_shows_its_password() -> None:
    with pytest.raises(ValueError, match="not a 'mysql' URL") as refused:
        PostgresStore("mysql://app:hunter2@db.example.com/memory")
    assert "hunter2" not in str(refused.value)


def test_many_memories_opened_from_the_url_in_one_process_warn_to_share_a_pool(
    make_pg: Make,
    postgres_url: str,
    embed_model: OfflineEmbedding,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from llama_memory.storage.postgres import connection

    MANY_OWN_POOLS = 3  # the limit (16) made small, to open fewer memories
    monkeypatch.setattr(connection, "MANY_OWN_POOLS", MANY_OWN_POOLS)

    def a_request_that_drops_its_memory(user_id: str) -> None:
        ComposableMemory.from_defaults(user_id=user_id, store=postgres_url, embed_model=embed_model).get()

    with caplog.at_level("WARNING", logger="llama_memory.storage.postgres.connection"):
        for i in range(MANY_OWN_POOLS + 1):  # collected unclosed: counted out too
            a_request_that_drops_its_memory(f"dropped{i}")
            gc.collect()
        assert not caplog.records
        first = [make_pg(user_id=f"user{i}") for i in range(MANY_OWN_POOLS)]
        assert not caplog.records  # up to the limit: each memory its own pool, quietly
        for memory in first[1:]:
            memory.close()
        make_pg(user_id="one more")  # closed stores are counted out: still under the limit
        assert not caplog.records
        more = [make_pg(user_id=f"more{i}") for i in range(MANY_OWN_POOLS)]
    [warning] = caplog.records  # once, however many more
    assert "one psycopg_pool.ConnectionPool" in warning.getMessage()
    assert "Many users in one process" in warning.getMessage()
    for memory in [first[0], *more]:
        memory.close()
