"""Real async behind ``aget``/``aput`` on PostgreSQL: the sync
pipeline runs on the event loop through llama_memory.core.asyncbridge, each statement
awaited on psycopg's AsyncConnectionPool, with no thread per call. Real server (the
``postgres_url`` fixture), the real offline embedding model, real agents driven by
ScriptedLLM."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any, Callable

import psycopg
import pytest
from llama_index.core.agent.workflow import FunctionAgent

from helpers import Ticker, WordHashEmbedding, assistant, hold, memory_factory, user
from llama_memory import ComposableMemory, OfflineEmbedding
from llama_memory.core.asyncbridge import SuspendedCallError
from llama_memory.core.errors import MemoryClosedError, StorageError
from llama_memory.testing import ScriptedLLM
from llama_memory.write.buffer import ChatBuffer

Make = Callable[..., ComposableMemory]


@pytest.fixture
def make_pg(postgres_url: str, embed_model: OfflineEmbedding) -> Iterator[Make]:
    with memory_factory(embed_model, store=postgres_url) as make:
        yield make


@pytest.fixture
def to_thread_calls(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every asyncio.to_thread call made while the test runs."""
    calls: list[Any] = []
    real = asyncio.to_thread

    async def spy(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        calls.append(fn)
        return await real(fn, *args, **kwargs)

    monkeypatch.setattr(asyncio, "to_thread", spy)
    return calls


def chat_rows(url: str, user_id: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT message_json::jsonb -> 'blocks' -> 0 ->> 'text' FROM chat_messages WHERE user_id = %s ORDER BY 1",
            (user_id,),
        ).fetchall()
    return [r[0] for r in rows]


async def test_a_function_agent_on_a_postgres_memory_sees_what_a_sync_get_shows(
    make_pg: Make, to_thread_calls: list[Any]
) -> None:
    memory = make_pg()
    memory.put_messages([user("My sister Carla lives in Lisbon and plays the cello."), assistant("Noted.")])
    memory.put_messages([user("Let us talk about something else."), assistant("Sure.")])
    llm = ScriptedLLM(["She lives in Lisbon."])
    agent = FunctionAgent(llm=llm, system_prompt="You are helpful.")
    answer = await agent.run(user_msg="Where does Carla live?", memory=memory)
    assert "Lisbon" in str(answer)
    shown = "\n".join(m.content or "" for m in llm.calls[0].messages)
    assert "Carla lives in Lisbon" in shown
    assert to_thread_calls == []  # the agent's memory calls were bridged
    # The same block a sync get() builds for that input, in another session (in this
    # one the fact is still in the window, so no block repeats it).
    sync_memory = make_pg(session_id="s2")
    sync_memory.get("Where does Carla live?")
    async_memory = make_pg(session_id="s2")
    await async_memory.aget("Where does Carla live?")
    assert async_memory.last_block.text == sync_memory.last_block.text != ""
    # The agent's turn is stored once.
    assert [m.content for m in memory.get_all()[-2:]] == ["Where does Carla live?", "She lives in Lisbon."]


async def test_fifty_aput_and_aget_calls_start_no_thread(make_pg: Make, to_thread_calls: list[Any]) -> None:
    memory = make_pg()
    await memory.aput(user("warm-up"))  # the loop's pool opens
    threads = threading.active_count()
    for i in range(25):
        await memory.aput(user(f"message number {i}"))
        await memory.aget(f"number {i}")
    assert to_thread_calls == []
    assert asyncio.get_running_loop()._default_executor is None  # type: ignore[attr-defined]
    assert threading.active_count() == threads
    assert len(memory.get_all()) == 26


async def test_the_loop_runs_on_while_the_database_makes_aput_wait(
    make_pg: Make, postgres_url: str, to_thread_calls: list[Any]
) -> None:
    memory = make_pg()
    await memory.aput(user("before the lock"))
    with psycopg.connect(postgres_url) as blocker:
        blocker.execute("LOCK TABLE chat_messages IN ACCESS EXCLUSIVE MODE")
        put = asyncio.create_task(memory.aput(user("written while the table was locked")))
        ticks = 0
        start = time.monotonic()
        while time.monotonic() - start < 0.3:
            await asyncio.sleep(0.01)
            ticks += 1
        assert not put.done()  # the database holds it...
        assert ticks >= 10  # ...and the loop went on meanwhile
        blocker.rollback()  # releases the lock
        await asyncio.wait_for(put, 10)
    assert to_thread_calls == []  # and no thread did the waiting
    assert chat_rows(postgres_url, "alice") == ["before the lock", "written while the table was locked"]


async def test_twenty_users_on_one_store_at_once_each_see_only_their_own(
    make_pg: Make, postgres_url: str, to_thread_calls: list[Any]
) -> None:
    writers = [make_pg(f"user{i}") for i in range(20)]
    readers = [make_pg(f"user{i}", session_id="s2") for i in range(20)]

    async def turn(i: int) -> str:
        await writers[i].aput(user(f"My locker code is {1000 + i} and my pet is called Rex{i}."))
        await writers[i].aput(assistant("Noted."))
        await readers[i].aget("What is my locker code?")  # another session: from the records
        return readers[i].last_block.text

    blocks = await asyncio.gather(*(turn(i) for i in range(20)))
    for i, block in enumerate(blocks):
        assert str(1000 + i) in block
        assert all(str(1000 + j) not in block for j in range(20) if j != i)
        assert chat_rows(postgres_url, f"user{i}") == [f"My locker code is {1000 + i} and my pet is called Rex{i}.", "Noted."]
    assert to_thread_calls == []


async def test_concurrent_calls_of_one_memory_run_one_at_a_time(make_pg: Make, postgres_url: str) -> None:
    memory = make_pg()
    texts = [f"note number {i}" for i in range(10)]
    results = await asyncio.gather(*(memory.aput(user(t)) for t in texts), memory.aget("note"))
    # The calls queued in order, each ran whole: the get saw every put before it.
    assert [m.content for m in results[-1] if m.role.value == "user"] == texts
    assert sorted(chat_rows(postgres_url, "alice")) == sorted(texts)  # each put once


def test_a_memory_works_from_two_successive_event_loops(make_pg: Make, to_thread_calls: list[Any]) -> None:
    memory = make_pg()
    asyncio.run(memory.aput(user("said in the first loop")))
    asyncio.run(memory.aput(user("said in the second loop")))  # a new loop: a new async pool
    assert to_thread_calls == []
    assert [m.content for m in asyncio.run(memory.aget_all())] == ["said in the first loop", "said in the second loop"]
    assert memory.get_all()[-1].content == "said in the second loop"  # sync calls still work


async def test_a_server_that_refuses_connections_fails_aget_fast_naming_it(
    make_pg: Make, postgres_url: str, to_thread_calls: list[Any]
) -> None:
    memory = make_pg()
    await memory.aput(user("hello"))
    dbname = postgres_url.rsplit("/", 1)[1]
    with psycopg.connect(postgres_url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as admin:
        admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS false')
        admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (dbname,))
        try:
            start = time.monotonic()
            with pytest.raises(StorageError) as raised:
                await memory.aget("hello")
            assert time.monotonic() - start < 5
            host_port = postgres_url.split("@")[-1].split("/")[0]
            assert host_port in str(raised.value)
            assert to_thread_calls == []  # the probe was awaited too
        finally:
            admin.execute(f'ALTER DATABASE "{dbname}" ALLOW_CONNECTIONS true')
    assert [m.content for m in await memory.aget()] == ["hello"]  # back once it answers


@pytest.mark.timeout(30)  # before the bridge: a silent deadlock of the loop
async def test_a_sync_call_from_the_loop_while_an_async_call_waits_raises(
    make_pg: Make, postgres_url: str
) -> None:
    memory = make_pg()
    await memory.aput(user("first"))
    with psycopg.connect(postgres_url) as blocker:
        blocker.execute("LOCK TABLE chat_messages IN ACCESS EXCLUSIVE MODE")
        put = asyncio.create_task(memory.aput(user("second")))
        await asyncio.sleep(0.2)
        with pytest.raises(SuspendedCallError, match="await the async method"):
            memory.get()
        blocker.rollback()
    await put


async def test_a_chat_buffer_on_a_postgres_log_is_bridged(
    make_pg: Make, to_thread_calls: list[Any]
) -> None:
    buffer = make_pg().primary_memory
    assert isinstance(buffer, ChatBuffer)
    await buffer.aput(user("straight into the buffer"))
    assert [m.content for m in await buffer.aget_all()] == ["straight into the buffer"]
    assert to_thread_calls == []


class AsyncAPIEmbedding(WordHashEmbedding):
    """A model with an async API of its own (as OpenAI's): its async calls wait 0.2 s
    on the loop, as an HTTP request would; the sync ones are counted."""

    async def _aget_query_embedding(self, query: str) -> list[float]:
        CALLS.append("async query")
        await asyncio.sleep(0.2)
        return self._vector(query)

    async def _aget_text_embedding(self, text: str) -> list[float]:
        CALLS.append("async text")
        await asyncio.sleep(0.2)
        return self._vector(text)

    def _get_query_embedding(self, query: str) -> list[float]:
        CALLS.append("sync query")
        return self._vector(query)


CALLS: list[str] = []


async def test_a_model_with_an_async_api_is_awaited_on_the_loop(
    postgres_url: str, to_thread_calls: list[Any]
) -> None:
    with memory_factory(AsyncAPIEmbedding(), store=postgres_url) as make:
        memory = make()
        CALLS.clear()
        ticker = Ticker().start()
        await memory.aput(user("The boat is moored in Porto."))
        await memory.aget("Where is the boat moored?")
        ticker.stop()
    assert "async query" in CALLS and "sync query" not in CALLS
    assert "async text" in CALLS  # the put's document vectors too
    assert ticker.ticks >= 20  # the loop ran while the model's calls waited
    assert to_thread_calls == []


async def test_a_cancelled_aput_leaves_the_memory_usable(make_pg: Make, postgres_url: str) -> None:
    memory = make_pg()
    await memory.aput(user("before"))
    with psycopg.connect(postgres_url) as blocker:
        blocker.execute("LOCK TABLE chat_messages IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(memory.aput(user("never acknowledged")), 0.3)
        blocker.rollback()
    # The cancelled call gave back its locks and its connection: the memory goes on.
    await memory.aput(user("after"))
    assert "after" in [m.content for m in await memory.aget()]
    assert "after" in chat_rows(postgres_url, "alice")
    memory.get()  # and a sync call on this thread finds no lock left held


async def waiting_on_lock(url: str, statement: str) -> None:
    """Until a connection to ``url``'s database waits for a lock in ``statement``."""
    with psycopg.connect(url, autocommit=True) as watcher:
        for _ in range(200):
            row = watcher.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event_type = 'Lock' AND query LIKE %s",
                (f"%{statement}%",),
            ).fetchone()
            if row and row[0]:
                return
            await asyncio.sleep(0.02)
    raise AssertionError(f"no statement like {statement!r} waited for a lock")


async def test_an_aput_cancelled_before_its_commit_leaves_the_window_as_stored(
    make_pg: Make, postgres_url: str
) -> None:
    # The buffer takes the batch inside the put's transaction; the transaction goes on
    # (here: the usage notes of the last block, kept waiting by another client's row
    # locks) and is rolled back by the cancellation. The window showed the batch anyway.
    hold(make_pg, ["I keep my kayak at the Porto marina."])
    memory = make_pg(session_id="now")
    await memory.aput(user("before"))
    assert await memory.aget("Where do I keep my kayak?")
    assert memory.runtime.usage is not None and memory.runtime.usage.pending  # the next put writes them
    with psycopg.connect(postgres_url) as blocker:
        blocker.execute("SELECT id FROM records WHERE user_id = 'alice' FOR UPDATE")
        put = asyncio.create_task(memory.aput(user("never committed")))
        await waiting_on_lock(postgres_url, "last_used")
        put.cancel()
        with pytest.raises(asyncio.CancelledError):
            await put
        blocker.rollback()
    assert "never committed" not in chat_rows(postgres_url, "alice")
    assert [m.content for m in await memory.aget_all()] == ["before"]
    await memory.aput(user("after"))
    assert [m.content for m in await memory.aget_all()] == ["before", "after"]
    assert [m.content for m in make_pg(session_id="now").get_all()] == ["before", "after"]


async def test_async_with_waits_for_the_calls_under_way_then_closes(make_pg: Make, postgres_url: str) -> None:
    # Leaving `async with` while another task's aput waits on the database closed the
    # memory with a sync close() on the loop: SuspendedCallError ("await the async
    # method"), though the app used nothing sync.
    memory = make_pg()
    await memory.aput(user("first"))
    with psycopg.connect(postgres_url) as blocker:
        blocker.execute("LOCK TABLE chat_messages IN ACCESS EXCLUSIVE MODE")
        async with memory:
            put = asyncio.create_task(memory.aput(user("second")))
            await asyncio.sleep(0.2)
            assert not put.done()
            asyncio.get_running_loop().call_later(0.3, blocker.rollback)
    assert put.done() and put.exception() is None  # closed after the put, not under it
    assert chat_rows(postgres_url, "alice") == ["first", "second"]
    await memory.aclose()  # closing twice is harmless
    with pytest.raises(MemoryClosedError):
        await memory.aget()


async def test_the_memory_tools_act_on_the_loop_with_no_thread(make_pg: Make, to_thread_calls: list[Any]) -> None:
    memory = make_pg(user_id="tools-user", triples=True)
    update, get, save, search, _instructions = memory.tools()
    await save.acall(triples=[{"subject": "Dana", "predicate": "works at", "object": "Acme"}])
    await update.acall(operations=[{"op": "set", "path": "diet", "value": "vegan"}])
    assert "Acme" in str(await search.acall(query="where does Dana work"))
    assert "vegan" in str(await get.acall())
    assert to_thread_calls == []  # every tool call was bridged, as aget/aput are
    assert [t.text() for t in memory.triple_source.triples(memory.scope)] == ["Dana — works at — Acme"]


def test_asyncio_run_ends_while_a_pool_worker_connects() -> None:
    # asyncio.run() cancels every task once at its end and waits for them. psycopg_pool's
    # worker, and its AddConnection task (which catches CancelledError to keep the pool's
    # count right), swallowed that cancellation while connecting: the run waited forever
    # (a whole CI run hung in a test's teardown this way). The memory's async pools are
    # LoopPools; here one connects to a server that accepts and never answers.
    from llama_memory.storage.postgres.bridged import LoopPool

    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        url = f"postgresql://nobody@127.0.0.1:{silent.getsockname()[1]}/nothing"

        async def open_and_leave() -> None:
            pool = LoopPool(url, min_size=2, open=False)
            await pool.open(wait=False)
            await asyncio.sleep(0.3)  # its workers are inside AddConnection, connecting

        ended = threading.Event()
        runner = threading.Thread(target=lambda: (asyncio.run(open_and_leave()), ended.set()), daemon=True)
        runner.start()
        runner.join(timeout=10)
        assert ended.is_set(), "asyncio.run() still waits for the pool's workers"
