"""How long ``llama-memory copy`` takes to move a SQLite memory directory into PostgreSQL.

    python -m bench.copy --users 20 --messages 50

Builds a directory with the default sources and triples (``--users`` users, each with
``--messages`` messages in two sessions and a few triples and profile fields, embedded
by the offline model), starts a throwaway PostgreSQL (bench/postgres_server.py), then
times :func:`llama_memory.admin.copying.copy_store` into an empty database (rows, then every
record and triple re-embedded into pgvector), and a ``reindex`` of the copy (the
embedding part alone, done again). Prints rows per second and the load average.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from llama_index.core.base.llms.types import ChatMessage

from bench.postgres_server import PostgresServer
from llama_memory import ComposableMemory, MemoryAdmin, default_embedding
from llama_memory.admin.copying import copy_store


def build(path: Path, users: int, messages: int) -> None:
    """The directory: each user's messages in two sessions, two triples, a profile field."""
    model = default_embedding()
    for u in range(users):
        for session in ("s1", "s2"):
            memory = ComposableMemory.from_defaults(
                user_id=f"user{u}", session_id=session, path=path, triples=True, embed_model=model
            )
            memory.put_messages(
                [
                    ChatMessage(role="user" if i % 2 == 0 else "assistant",
                                content=f"{session} message {i} of user {u}: the weather in city {i % 17}")
                    for i in range(messages // 2)
                ]  # fmt: skip
            )
            if session == "s1":
                memory.add_triples([(f"user{u}", "lives in", f"city {u % 17}"), (f"user{u}", "likes", "tea")])
                memory.profile.set_field("city", f"city {u % 17}", memory.scope)
            memory.close()


def main() -> None:
    """Run the benchmark and print its figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=20)
    parser.add_argument("--messages", type=int, default=50, help="messages per user")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp) / "memory"
        start = time.perf_counter()
        build(directory, args.users, args.messages)
        print(f"built {args.users} users x {args.messages} messages in {time.perf_counter() - start:.1f} s")
        server = PostgresServer().start()
        try:
            url = server.create_database("copy_bench")
            start = time.perf_counter()
            report = copy_store(directory, url, embed_model=default_embedding())
            elapsed = time.perf_counter() - start
            rows = sum(report.rows.values())
            print(
                f"copy: {len(report.users.get('default', []))} users, {rows} rows "
                f"({dict(sorted(report.rows.items()))}), {report.embedded} embedded, {elapsed:.1f} s "
                f"({rows / elapsed:.0f} rows/s with the embedding)"
            )
            with MemoryAdmin(url, embed_model=default_embedding()) as admin:
                start = time.perf_counter()
                count = admin.reindex()
                print(f"reindex of the copy (the embedding alone): {count} in {time.perf_counter() - start:.1f} s")
        finally:
            server.stop()
    print(f"load average {os.getloadavg()[0]:.1f} / {os.getloadavg()[1]:.1f} (1 / 5 min), {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
