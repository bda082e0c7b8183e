"""What encryption at rest costs: ``put()`` and ``get()`` on an encrypted SQLite store
(SQLCipher, ``encryption_key=``) against a plain one, in the same run.

Each round builds a fresh memory of each kind under a new directory with the offline
embedding model, puts ``--messages`` messages (user and assistant in turn) timing each
``put()``, then times ``--gets`` ``get()`` calls with a query; the kinds alternate
within each round so that load on the machine falls on both alike. Reported: the
median put() and get() of each kind over every round, their ratio (encrypted / plain),
the time to create a memory's store (an encrypted one derives its key from the
passphrase there), and the time to reopen it ``--reopens`` times in the same warm
process (the derived key is kept per store and passphrase in the process, so a reopen
derives nothing: :mod:`llama_memory.storage.sqlite.driver`).

    python -m bench.encryption                      # 300 messages, 100 gets, 3 rounds
    python -m bench.encryption --messages 50 --gets 20 --rounds 1 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from llama_memory import ComposableMemory
from llama_memory.embeddings.offline import default_embedding

KINDS = ("plain", "encrypted")
#: The passphrase of the encrypted runs (key derivation included, as a user's would be).
PASSPHRASE = "bench passphrase"

TOPICS = ["cello lessons", "a trip to Lisbon", "my sister Ana", "the dentist", "a new job at the bakery",
          "running a marathon", "my cat Miso", "learning Japanese", "the garden", "a broken bike"]  # fmt: skip
QUERIES = ["what instrument do I play?", "where did I travel?", "who is Ana?", "what pet do I have?"]


def conversation(n: int) -> list[ChatMessage]:
    """``n`` messages, user and assistant in turn, about varied topics."""
    messages = []
    for i in range(n):
        topic = TOPICS[i % len(TOPICS)]
        if i % 2 == 0:
            messages.append(ChatMessage(role=MessageRole.USER, content=f"Day {i}: let me tell you about {topic}, part {i}."))
        else:
            messages.append(ChatMessage(role=MessageRole.ASSISTANT, content=f"Noted about {topic} (turn {i})."))
    return messages


def run_kind(kind: str, messages: list[ChatMessage], gets: int, embed_model: Any, reopens: int = 5) -> dict[str, Any]:
    """One memory of ``kind`` in a new directory: open, put every message, get ``gets``
    times, close, then reopen (and close) it ``reopens`` times."""
    key = {"encryption_key": PASSPHRASE} if kind == "encrypted" else {}
    with tempfile.TemporaryDirectory() as folder:
        started = time.perf_counter()
        memory = ComposableMemory.from_defaults(
            user_id="bench", path=Path(folder) / "store", embed_model=embed_model, **key
        )
        open_ms = (time.perf_counter() - started) * 1000
        puts, reads = [], []
        for message in messages:
            started = time.perf_counter()
            memory.put(message)
            puts.append((time.perf_counter() - started) * 1000)
        for i in range(gets):
            started = time.perf_counter()
            memory.get(QUERIES[i % len(QUERIES)])
            reads.append((time.perf_counter() - started) * 1000)
        memory.close()
        reopen_ms = []
        for _ in range(reopens):
            started = time.perf_counter()
            ComposableMemory.from_defaults(user_id="bench", path=Path(folder) / "store", embed_model=embed_model, **key).close()
            reopen_ms.append((time.perf_counter() - started) * 1000)
    return {"kind": kind, "open_ms": open_ms, "reopen_ms": reopen_ms, "put_ms": puts, "get_ms": reads}


def main(argv: Optional[list[str]] = None) -> dict[str, Any]:
    """Run the benchmark, print a table, return (and optionally write) the figures."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=300, help="messages put per memory (default 300)")
    parser.add_argument("--gets", type=int, default=100, help="get() calls per memory (default 100)")
    parser.add_argument("--rounds", type=int, default=3, help="rounds, each kind once per round (default 3)")
    parser.add_argument("--reopens", type=int, default=5, help="reopens per memory (default 5)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    embed_model = default_embedding()
    messages = conversation(args.messages)
    run_kind("plain", messages[:4], 2, embed_model)  # warm-up: the model, imports, Chroma
    runs = []
    for round_ in range(args.rounds):
        order = KINDS if round_ % 2 == 0 else tuple(reversed(KINDS))
        runs += [run_kind(kind, messages, args.gets, embed_model, args.reopens) for kind in order]
    summary: dict[str, dict[str, float]] = {}
    for kind in KINDS:
        mine = [r for r in runs if r["kind"] == kind]
        summary[kind] = {
            "put_median_ms": statistics.median(x for r in mine for x in r["put_ms"]),
            "get_median_ms": statistics.median(x for r in mine for x in r["get_ms"]),
            "create_median_ms": statistics.median(r["open_ms"] for r in mine),
            "reopen_median_ms": statistics.median(x for r in mine for x in r["reopen_ms"]),
        }
    ratios = {
        name: summary["encrypted"][name] / summary["plain"][name] for name in summary["plain"]
    }
    print(f"{args.messages} messages, {args.gets} gets, {args.rounds} rounds; medians in ms")
    print(f"{'':10} {'put()':>8} {'get()':>8} {'create':>8} {'reopen':>8}")
    for kind in KINDS:
        row = summary[kind]
        print(
            f"{kind:10} {row['put_median_ms']:8.2f} {row['get_median_ms']:8.2f} "
            f"{row['create_median_ms']:8.1f} {row['reopen_median_ms']:8.1f}"
        )
    print(
        f"{'ratio':10} {ratios['put_median_ms']:8.2f} {ratios['get_median_ms']:8.2f} "
        f"{ratios['create_median_ms']:8.2f} {ratios['reopen_median_ms']:8.2f}"
    )
    report = {
        "messages": args.messages, "gets": args.gets, "rounds": args.rounds, "reopens": args.reopens,
        "summary": summary, "ratios": ratios,
    }  # fmt: skip
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
