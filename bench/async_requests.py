"""A web server's shape on one event loop: ``python -m bench.async_requests``.

``--requests`` requests of five users at once, each opening a memory for its user (one
conversation per user), ``aput_messages`` of a turn, ``aget``, and leaving ``async
with``. Prints the wall and CPU time, the longest gap of a 10 ms ticker task while the
requests run (how long the loop stood still), the longest and total time of the closes,
and what was lost or crossed users (both must be 0). On SQLite (a new directory) and on
PostgreSQL (a throwaway server, bench/postgres_server.py, unless ``--url``).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from collections import Counter
from typing import Any

from llama_index.core.llms import ChatMessage

from bench.postgres_server import PostgresServer
from llama_memory import ComposableMemory, default_embedding

USERS = [f"user{i}" for i in range(5)]


async def serve(where: dict[str, Any], model: Any, requests: int) -> dict[str, float]:
    """Run the requests with the ticker; the figures."""
    gaps: list[float] = []
    closes: list[float] = []
    crossed = 0

    async def ticker() -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    async def request(n: int) -> None:
        nonlocal crossed
        owner = USERS[n % 5]
        memory = ComposableMemory.from_defaults(user_id=owner, session_id="chat", embed_model=model, **where)
        async with memory:
            turn = [ChatMessage(role="user", content=f"{owner} likes colour {n}"),
                    ChatMessage(role="assistant", content=f"noted for {owner}")]  # fmt: skip
            await memory.aput_messages(turn)
            shown = " ".join(str(m.content) for m in await memory.aget(f"what colour does {owner} like"))
            crossed += any(u in shown for u in USERS if u != owner)
            started = time.perf_counter()
        closes.append(time.perf_counter() - started)

    ticking = asyncio.create_task(ticker())
    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(request(n) for n in range(requests)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    ticking.cancel()
    lost = 0
    for owner in USERS:
        with ComposableMemory.from_defaults(user_id=owner, session_id="chat", embed_model=model, **where) as memory:
            have = Counter(str(m.content) for m in memory.get_all())
        lost += sum(f"{owner} likes colour {n}" not in have for n in range(requests) if USERS[n % 5] == owner)
    return {"wall s": wall, "cpu s": cpu, "longest loop gap ms": max(gaps) * 1000,
            "longest close ms": max(closes) * 1000, "closes ms": sum(closes) * 1000,
            "lost": lost, "crossed": crossed}  # fmt: skip


def main() -> None:
    """Run on each backend and print the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--url", help="a PostgreSQL database (default: a throwaway server)")
    args = parser.parse_args()
    model = default_embedding()
    model.get_text_embedding("warm up")
    server = None if args.url else PostgresServer().start()
    try:
        url = args.url or server.create_database("requests")  # type: ignore[union-attr]
        for name, where in (("sqlite", {"path": tempfile.mkdtemp()}), ("postgresql", {"store": url})):
            with ComposableMemory.from_defaults(user_id="warm", embed_model=model, **where) as memory:
                memory.put(ChatMessage(role="user", content="warm up"))  # the schema, the pools
            figures = asyncio.run(serve(where, model, args.requests))
            print(name, ", ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in figures.items()))
    finally:
        if server is not None:
            server.stop()


if __name__ == "__main__":
    main()
