"""Where one ``get(input=...)`` on PostgreSQL spends its time: the
query embedding, each store statement (by the action name the store gives it: "search
text", "search vectors", "count word matches", ...) and the rest (composition in
Python), as medians over ``--gets`` calls.

Run it on a database ``bench.speed --backend postgres --url URL`` has loaded (it keeps
the database; its name is ``bench_<pid>_<n>``)::

    .venv/bin/python -m bench.pg_profile --url postgresql://.../bench_123_1 --gets 20
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Optional

from bench import speed
from bench.pg_speed import USER, open_memory
from llama_memory import default_embedding
from llama_memory.embeddings.store_model import vector_cache
from llama_memory.storage.postgres.connection import PostgresConnection


@contextmanager
def timed_store(times: dict[str, float]) -> Iterator[None]:
    """Add each store statement's and transaction's time to ``times`` by action name
    (a statement inside a transaction counts in the transaction's time only)."""
    query, transaction = PostgresConnection.query, PostgresConnection.transaction

    def timed_query(self: PostgresConnection, action: str, *args: Any, **kwargs: Any) -> Any:
        start = time.perf_counter()
        try:
            return query(self, action, *args, **kwargs)
        finally:
            if self._held() is None:
                times[action] += time.perf_counter() - start

    @contextmanager
    def timed_transaction(self: PostgresConnection, action: str) -> Iterator[Any]:
        outer = self._held() is None
        start = time.perf_counter()
        try:
            with transaction(self, action) as conn:
                yield conn
        finally:
            if outer:
                times[action] += time.perf_counter() - start

    PostgresConnection.query = timed_query  # type: ignore[method-assign]
    PostgresConnection.transaction = timed_transaction  # type: ignore[assignment,method-assign]
    try:
        yield
    finally:
        PostgresConnection.query = query  # type: ignore[method-assign]
        PostgresConnection.transaction = transaction  # type: ignore[method-assign]


def profile(url: str, gets: int, seed: int = 8, user: str = USER, turns: bool = False) -> dict[str, Any]:
    """Medians (ms) of each part of ``gets`` calls of ``get(input=...)`` of ``user``;
    with ``turns``, of ``get()`` in turns as ``bench.speed`` times them (the user's
    message put before, the reply after: the get() embeds the message just put)."""
    memory = open_memory("postgres", url, user)
    cls = type(default_embedding())  # the model open_memory gives every memory
    workload = speed.make_workload(0, gets + 1, seed)[1]
    questions = [u.content or "" for u, _ in workload]
    # The process's vector cache may hold these questions' vectors from an earlier run
    # (bench.speed asks the same ones): the profile would then time no query embedding.
    vector_cache(memory.embed_model).clear()
    memory.get(input=questions[-1])  # warm-up
    parts: dict[str, list[float]] = defaultdict(list)
    embed, embed_texts = cls._get_query_embedding, cls._get_text_embeddings
    for turn, question in enumerate(questions[:gets]):
        if turns:
            memory.put(workload[turn][0].model_copy(deep=True))
        times: dict[str, float] = defaultdict(float)

        def timed(part: str, method: Any, _times: dict[str, float] = times) -> Any:
            def run(model: Any, text: Any) -> Any:
                start = time.perf_counter()
                try:
                    return method(model, text)
                finally:
                    _times[part] += time.perf_counter() - start

            return run

        cls._get_query_embedding = timed("query embedding", embed)  # type: ignore[method-assign]
        # The messages put since the last get() are embedded by it (the index's sync).
        cls._get_text_embeddings = timed("embedding of new messages", embed_texts)  # type: ignore[method-assign]
        try:
            with timed_store(times):
                start = time.perf_counter()
                memory.get() if turns else memory.get(input=question)
                total = time.perf_counter() - start
        finally:
            cls._get_query_embedding, cls._get_text_embeddings = embed, embed_texts  # type: ignore[method-assign]
        parts["get() total"].append(total * 1000)
        for name, seconds in times.items():
            parts[name].append(seconds * 1000)
        parts["rest (Python)"].append((total - sum(times.values())) * 1000)
        if turns:
            memory.put(workload[turn][1].model_copy(deep=True))
    memory.close()
    return {name: {"median_ms": statistics.median(v + [0.0] * (gets - len(v))), "max_ms": max(v)}
            for name, v in sorted(parts.items(), key=lambda kv: -statistics.median(kv[1]))}  # fmt: skip


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """Parse arguments, profile, print the parts."""
    parser = argparse.ArgumentParser(prog="python -m bench.pg_profile", description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True, help="a database loaded by bench.speed --backend postgres")
    parser.add_argument("--gets", type=int, default=20)
    parser.add_argument("--user", default=USER)
    parser.add_argument("--turns", action="store_true",
                        help="time get() in turns as bench.speed does (a message put before each)")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    report = {"load_average_before": load, "parts": profile(args.url, args.gets, user=args.user, turns=args.turns),
              "load_average_after": os.getloadavg()[0]}  # fmt: skip
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
