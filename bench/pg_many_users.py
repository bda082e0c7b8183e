"""One process serving many users on PostgreSQL: ``python -m bench.pg_many_users``.

An app that serves many users (one agent, ``memory=`` per run) opens a memory per user,
either from the URL (``store=url``: each memory opens a pool of its own, migrations
checked, at least one connection kept while it is open) or on the process's one
``psycopg_pool.ConnectionPool`` (``store=pool``: the memories borrow its connections).
For each way, alternating over ``--rounds``:

* ``request_ms``: median of open + ``get(input=...)`` + close, a memory per request, as a
  web handler that does not keep memories between requests;
* ``connections``: server connections of the database while ``--users`` memories are
  open at once, each after one ``get()``;
* ``gather_ms``: one ``aget(input=...)`` of each of those memories at once, awaited
  together on one event loop (bridged on the loop for ``url``, a worker thread each on an
  application's pool); the second such round of the loop, as in a long-running app (the
  first opens each memory's pool for the loop).

Each user has a few messages; the offline model embeds each question (its time is in
every figure). A throwaway PostgreSQL (bench/postgres_server.py) is started unless
``--url`` names a database.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from bench import speed
from bench.postgres_server import PostgresServer
from llama_memory import ComposableMemory, default_embedding


def _connections(url: str, tag: str) -> int:
    """Server connections opened with ``application_name=tag``: this way's own, whatever
    else uses the database (other tests' pools, backends of closed connections that a
    loaded server has not reaped yet)."""
    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", (tag,)
        ).fetchone()
    return int(row[0]) if row else 0


def _tagged(url: str, tag: str) -> str:
    """``url`` with ``application_name=tag`` (a libpq parameter the server reports)."""
    return f"{url}{'&' if '?' in url else '?'}application_name={tag}"


def measure(url: str, way: str, users: int, requests: int, model: Any, questions: list[str]) -> dict[str, Any]:
    """The three figures of one way (``url`` or ``pool``) of opening the users' memories."""
    tag = f"bench-many-users-{way}-{uuid.uuid4().hex[:8]}"
    tagged = _tagged(url, tag)
    pool = ConnectionPool(tagged, min_size=1, max_size=4, open=True) if way == "pool" else None
    store: Any = pool if pool is not None else tagged
    try:
        times = []
        for i in range(requests):
            start = time.perf_counter()
            memory = ComposableMemory.from_defaults(user_id=f"user{i % users}", store=store, embed_model=model)
            memory.get(input=questions[i % len(questions)])
            memory.close()
            times.append((time.perf_counter() - start) * 1000)
        memories = [
            ComposableMemory.from_defaults(user_id=f"user{u}", store=store, embed_model=model) for u in range(users)
        ]
        try:
            for memory in memories:
                memory.get()
            connections = _connections(url, tag)

            async def gather() -> float:
                async def once(shift: int) -> float:
                    start = time.perf_counter()
                    asked = (m.aget(questions[(i + shift) % len(questions)]) for i, m in enumerate(memories))
                    await asyncio.gather(*asked)
                    return (time.perf_counter() - start) * 1000

                await once(0)  # the loop's first calls open its async pools (store=url)
                return await once(1)

            gather_ms = asyncio.run(gather())
        finally:
            for memory in memories:
                memory.close()
    finally:
        if pool is not None:
            pool.close()
    return {"way": way, "request_ms": statistics.median(times), "connections": connections, "gather_ms": gather_ms}


def run(url: str, users: int, requests: int, rounds: int) -> list[dict[str, Any]]:
    """Write a few messages for each user, then measure both ways, alternating."""
    model = default_embedding()
    questions = [m.content or "" for m, _ in speed.make_workload(0, 32, 7)[1]]
    for u in range(users):
        writer = ComposableMemory.from_defaults(user_id=f"user{u}", store=url, embed_model=model)
        writer.put_messages(speed.make_workload(6, 0, u)[0])
        writer.flush()
        writer.close()
    rows = []
    for r in range(rounds):
        for way in ("url", "pool") if r % 2 == 0 else ("pool", "url"):
            row = {**measure(url, way, users, requests, model, questions), "round": r, "load": os.getloadavg()[0]}
            rows.append(row)
            print(
                f"{way:4s}  open+get+close {row['request_ms']:5.1f} ms  connections with {users} memories open "
                f"{row['connections']:3d}  {users} agets at once {row['gather_ms']:6.0f} ms  load {row['load']:.2f}",
                flush=True,
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a PostgreSQL database to use (default: a throwaway server)")
    parser.add_argument("--users", type=int, default=20, help="users, each with a memory open at once")
    parser.add_argument("--requests", type=int, default=40, help="memories opened and closed per measurement")
    parser.add_argument("--rounds", type=int, default=2, help="measurements of each way")
    args = parser.parse_args(argv)
    if args.url:
        run(args.url, args.users, args.requests, args.rounds)
        return
    server = PostgresServer().start()
    try:
        run(server.create_database("pg_many_users"), args.users, args.requests, args.rounds)
    finally:
        server.stop()


if __name__ == "__main__":
    main()
