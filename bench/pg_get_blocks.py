"""What ``get(input=...)`` and ``search()`` give on a database ``bench.speed --backend
postgres --url URL`` loaded (it keeps its databases, ``bench_<pid>_<n>``), and how many
statements each ``get()`` sends: to show that a change to the PostgreSQL store's reads
leaves every block the same, and what it saves.

Each run works on a fresh copy of the loaded database (``CREATE DATABASE ... TEMPLATE``,
dropped after), so runs of two versions of the code read the same rows::

    .venv/bin/python -m bench.pg_get_blocks run --url postgresql://.../bench_123_1 --out /tmp/a.json
    .venv/bin/python -m bench.pg_get_blocks compare /tmp/a.json /tmp/b.json

The questions: ``bench.speed``'s (as its PostgreSQL load times them), questions made of
the user's own records' words, and two-part questions joining two of them. For each: the
block of the default memory, the block with no relevance gate (every record retrieved
that fits the budget), and ``search(k=10)``; records by id with their relevance to 6
decimals.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

import psycopg

from bench import speed
from bench.pg_speed import USER
from llama_memory import ComposableMemory, default_embedding
from llama_memory.core.types import MemoryRecord
from llama_memory.embeddings.store_model import vector_cache
from llama_memory.storage.postgres import PostgresStore


@contextmanager
def counted_statements(counts: Counter[str], times: Optional[Counter[str]] = None) -> Iterator[None]:
    """Count every statement psycopg sends in this process (the pool's checks and the
    change tokens included), by the first words of its SQL; ``times``: the ms each kind
    took, as the caller waited for it."""
    execute = psycopg.Cursor.execute

    def counting(self: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
        text = query if isinstance(query, str) else repr(query)
        kind = " ".join(text.split())[:60]
        counts[kind] += 1
        start = time.perf_counter()
        try:
            return execute(self, query, *args, **kwargs)
        finally:
            if times is not None:
                times[kind] += (time.perf_counter() - start) * 1000

    psycopg.Cursor.execute = counting  # type: ignore[method-assign]
    try:
        yield
    finally:
        psycopg.Cursor.execute = execute  # type: ignore[method-assign]


@contextmanager
def database_copy(url: str) -> Iterator[str]:
    """A fresh copy of the database ``url`` names, dropped after."""
    server, name = url.rsplit("/", 1)
    copy = f"{name}_copy_{os.getpid()}"
    admin = PostgresStore(f"{server}/postgres")
    try:
        admin.query("bench: copy database", f"CREATE DATABASE {copy} TEMPLATE {name}")
        try:
            yield f"{server}/{copy}"
        finally:
            admin.query("bench: drop copy", f"DROP DATABASE {copy} WITH (FORCE)")
    finally:
        admin.close()


def questions(url: str, gets: int, seed: int, own: int) -> list[str]:
    """``bench.speed``'s questions of its PostgreSQL load (``gets`` timed by get(), as
    many by search()), then ``own`` made of
    the user's records' words, then ``own`` of two parts joining two of those."""
    asked = [u.content or "" for u, _ in speed.make_workload(0, 2 * gets, seed + 1)[1]]
    store = PostgresStore(url)
    try:
        rows = store.query(
            "bench: read texts", "SELECT text FROM records WHERE user_id = %s ORDER BY id", (USER,)
        )
    finally:
        store.close()
    texts = [r["text"] for r in rows]
    step = max(1, len(texts) // max(1, own))
    parts = [" ".join(t.split()[:7]).rstrip(".,!?") for t in texts[::step][:own]]
    mine = [f"What did I say about {p}?" for p in parts]
    two = [f"What about {a} and what about {b}?" for a, b in zip(parts, parts[1:] + parts[:1])]
    return asked + mine + two


def shown(records: Sequence[MemoryRecord]) -> list[list[Any]]:
    """Each record as [id, source, relevance to 6 decimals (None: not scored), text begun]."""
    return [[r.id, r.source, None if r.relevance is None else round(r.relevance, 6), r.text[:40]] for r in records]


def run(url: str, gets: int, seed: int, own: int) -> dict[str, Any]:
    """Blocks, searches, statements and times of every question on a copy of ``url``."""
    asked = questions(url, gets, seed, own)
    out: dict[str, Any] = {"load_average_before": os.getloadavg(), "questions": asked, "gets": []}
    with database_copy(url) as copy:
        memory = ComposableMemory.from_defaults(user_id=USER, store=copy, embed_model=default_embedding())
        open_gate = ComposableMemory.from_defaults(
            user_id=USER, store=copy, embed_model=memory.embed_model, min_relevance=0.0
        )
        vector_cache(memory.embed_model).clear()
        memory.get(input="warm-up question about my plans")
        per_get: list[int] = []
        kinds: Counter[str] = Counter()
        kind_ms: Counter[str] = Counter()
        wall, cpu = [], []
        for question in asked:
            counts: Counter[str] = Counter()
            start, start_cpu = time.perf_counter(), time.process_time()
            with counted_statements(counts, kind_ms):
                memory.get(input=question)
            wall.append((time.perf_counter() - start) * 1000)
            cpu.append((time.process_time() - start_cpu) * 1000)
            per_get.append(sum(counts.values()))
            kinds.update(counts)
            out["gets"].append({"question": question, "block": shown(memory.last_block.records)})
        # Apart from the counted gets: another memory's reads between them would change
        # what each get() finds cached.
        for row in out["gets"]:
            open_gate.get(input=row["question"])
            row["open_gate"] = shown(open_gate.last_block.records)
            row["search"] = shown(memory.search(row["question"], k=10))
        memory.close()
        open_gate.close()
    n = len(asked)
    out["statements_per_get"] = sum(per_get) / n
    out["statement_ms_per_get"] = sum(kind_ms.values()) / n
    out["statements_by_kind"] = {k: [v / n, kind_ms[k] / n] for k, v in kinds.most_common()}
    out["get_median_ms"], out["get_cpu_median_ms"] = statistics.median(wall), statistics.median(cpu)
    out["load_average_after"] = os.getloadavg()
    return out


def compare(before: dict[str, Any], after: dict[str, Any]) -> int:
    """Print how many gets give the same block, open-gate block and search; 0 if all."""
    differ = 0
    for a, b in zip(before["gets"], after["gets"]):
        for part in ("block", "open_gate", "search"):
            if a[part] != b[part]:
                differ += 1
                print(f"differs ({part}): {a['question']!r}\n  {a[part]}\n  {b[part]}")
    same = len(before["gets"]) - sum(
        any(a[p] != b[p] for p in ("block", "open_gate", "search")) for a, b in zip(before["gets"], after["gets"])
    )
    filled = sum(bool(g["block"]) for g in before["gets"])
    print(f"{same} of {len(before['gets'])} questions identical (blocks not empty: {filled}; "
          f"open-gate records: {sum(len(g['open_gate']) for g in before['gets'])}; "
          f"search hits: {sum(len(g['search']) for g in before['gets'])})")  # fmt: skip
    if len(before["gets"]) != len(after["gets"]):
        differ += 1
    return 1 if differ else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``run`` or ``compare``."""
    parser = argparse.ArgumentParser(prog="python -m bench.pg_get_blocks", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--url", required=True, help="a database loaded by bench.speed --backend postgres --url")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--gets", type=int, default=20, help="bench.speed's questions (its --gets)")
    r.add_argument("--seed", type=int, default=1234, help="bench.speed's --seed")
    r.add_argument("--own", type=int, default=20, help="questions of the user's records, and two-part ones")
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.command == "compare":
        return compare(json.loads(args.before.read_text()), json.loads(args.after.read_text()))
    report = run(args.url, args.gets, args.seed, args.own)
    args.out.write_text(json.dumps(report, indent=1))
    print(json.dumps({k: v for k, v in report.items() if k not in ("gets", "questions")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
