"""The async PostgreSQL path: ``python -m bench.pg_async``.

One process, one event loop, serving ``aget(input)`` for N users at once (concurrency
1, 4, 16: N coroutines, each looping over its own user's memory) for ``--seconds``
each: gets per second and the most threads alive, for

* ``bridged``: ``memory.aget`` (the sync pipeline on the loop through
  llama_memory.core.asyncbridge, an AsyncConnectionPool per loop, no thread);
* ``to_thread``: the path before it, ``asyncio.to_thread(memory.get, input)`` (the
  loop's default executor).

The two paths alternate within one run (the machine is shared: load varies). Each user
has ``--history`` messages (one session) and is asked in a new session, so the block
comes from the records (query embedded by the offline model, its time included). A
throwaway PostgreSQL (bench/postgres_server.py) is started unless ``--url`` names one.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import threading
import time
from typing import Any, Callable

from bench import speed
from bench.postgres_server import PostgresServer
from llama_memory import ComposableMemory, default_embedding


async def _serve(memories: list[ComposableMemory], questions: list[str], path: str, seconds: float) -> dict[str, Any]:
    """Run one coroutine per memory for ``seconds``; return gets/s and threads seen."""
    done = 0
    most_threads = threading.active_count()
    deadline = time.perf_counter() + seconds

    async def user_loop(i: int, memory: ComposableMemory) -> None:
        nonlocal done, most_threads
        n = 0
        while time.perf_counter() < deadline:
            question = questions[(i + n) % len(questions)]
            if path == "bridged":
                await memory.aget(question)
            else:
                await asyncio.to_thread(memory.get, question)
            n += 1
            done += 1
            most_threads = max(most_threads, threading.active_count())

    start = time.perf_counter()
    await asyncio.gather(*(user_loop(i, m) for i, m in enumerate(memories)))
    elapsed = time.perf_counter() - start
    return {"gets_per_s": done / elapsed, "threads": most_threads}


def run(url: str, concurrency: tuple[int, ...], history: int, seconds: float, rounds: int) -> list[dict[str, Any]]:
    """Build the users' memories on ``url``, then measure both paths, alternating."""
    model = default_embedding()
    users = max(concurrency)
    questions = [m.content or "" for m, _ in speed.make_workload(0, 32, 7)[1]]
    for u in range(users):
        writer = ComposableMemory.from_defaults(user_id=f"u{u}", store=url, embed_model=model)
        writer.put_messages(speed.make_workload(history, 0, u)[0])
        writer.flush()
        writer.close()
    readers = [
        ComposableMemory.from_defaults(user_id=f"u{u}", session_id="ask", store=url, embed_model=model)
        for u in range(users)
    ]
    results: list[dict[str, Any]] = []
    try:
        for n in concurrency:
            for r in range(rounds):
                for path in ("bridged", "to_thread") if r % 2 == 0 else ("to_thread", "bridged"):
                    # A fresh loop per measurement, as asyncio.run in an app: its own pool/executor.
                    row = asyncio.run(_serve(readers[:n], questions, path, seconds))
                    row.update(concurrency=n, path=path, round=r, load=os.getloadavg()[0])
                    results.append(row)
                    print(
                        f"concurrency {n:2d}  {path:9s}  {row['gets_per_s']:7.1f} gets/s  "
                        f"threads {row['threads']:2d}  load {row['load']:.2f}",
                        flush=True,
                    )
    finally:
        for memory in readers:
            memory.close()
    return results


def main(argv: list[str] | None = None) -> None:
    """Command line: see the module docstring."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--url", help="a PostgreSQL database to use (default: a throwaway server)")
    parser.add_argument("--concurrency", default="1,4,16", help="users served at once (comma-separated)")
    parser.add_argument("--history", type=int, default=200, help="messages per user")
    parser.add_argument("--seconds", type=float, default=4.0, help="seconds per measurement")
    parser.add_argument("--rounds", type=int, default=2, help="measurements per path and concurrency")
    args = parser.parse_args(argv)
    concurrency = tuple(int(c) for c in args.concurrency.split(","))
    print(f"uptime: load {os.getloadavg()}", flush=True)
    measure: Callable[[str], list[dict[str, Any]]] = lambda url: run(  # noqa: E731
        url, concurrency, args.history, args.seconds, args.rounds
    )
    if args.url:
        measure(args.url)
        return
    server = PostgresServer().start()
    try:
        measure(server.create_database("pg_async"))
    finally:
        server.stop()
    print(f"uptime: load {os.getloadavg()}", flush=True)


if __name__ == "__main__":
    main()
