"""put() and get() latency with background extraction due on every turn.

A scripted LLM that sleeps 2 s per call answers every extraction pass; ``put()`` queues
the pass and returns, a worker thread runs it. Compared with the same puts without
extraction. Run: ``python -m bench.formation [--puts 200] [--repeat 3]``: the two runs
alternate ``--repeat`` times (the machine's load drifts; alternating shares it out), and
each row also gives put()'s own CPU time (``time.thread_time``: its work, not its waits for
the CPU or the GIL).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from typing import Any

from llama_index.core.base.llms.types import ChatMessage

from llama_memory import ComposableMemory
from llama_memory.testing import ScriptedLLM, ToolCallReply, pass_answer

LLM_SECONDS = 2.0


def slow_reply(messages: list[Any]) -> ToolCallReply:
    """A profile update after LLM_SECONDS, as a slow LLM would give it."""
    time.sleep(LLM_SECONDS)
    return pass_answer(profile=[{"op": "append", "path": "likes", "value": "x"}])


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def run(puts: int, extraction: bool) -> dict[str, float]:
    """Milliseconds: put() p50/p95 and get() p95 for ``puts`` turns."""
    with tempfile.TemporaryDirectory() as path:
        extra: dict[str, Any] = (
            {"llm": ScriptedLLM([slow_reply] * (puts + 1)), "extract_every": 1} if extraction else {}
        )
        memory = ComposableMemory.from_defaults(
            user_id="alice", session_id="s1", path=path, secondary_memory_sources=[], profile=True, **extra
        )
        put_ms: list[float] = []
        put_cpu: list[float] = []
        get_ms: list[float] = []
        for i in range(puts):
            message = ChatMessage(role="user", content=f"I like thing number {i}.")
            began, cpu = time.perf_counter(), time.thread_time()
            memory.put(message)
            put_ms.append((time.perf_counter() - began) * 1000)
            put_cpu.append((time.thread_time() - cpu) * 1000)
            began = time.perf_counter()
            memory.get()
            get_ms.append((time.perf_counter() - began) * 1000)
        passes_running = extraction and threading.active_count() > 1
        began = time.perf_counter()
        memory.flush()
        flushed = time.perf_counter() - began
        memory.close()
    return {
        "put_p50": statistics.median(put_ms),
        "put_p95": percentile(put_ms, 95),
        "put_cpu_p50": statistics.median(put_cpu),
        "get_p95": percentile(get_ms, 95),
        "get_max": max(get_ms),
        "flush_s": flushed,
        "passes_running": float(passes_running),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--puts", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    print(f"{args.puts} puts, LLM {LLM_SECONDS:.0f} s per call, extraction due on every user turn")
    print(f"{'':24}{'put p50':>10}{'put p95':>10}{'put cpu':>10}{'get p95':>10}{'get max':>10}")
    differences: list[float] = []
    for _ in range(args.repeat):
        without = run(args.puts, extraction=False)
        with_ = run(args.puts, extraction=True)
        for label, r in (("without extraction", without), ("with extraction", with_)):
            print(
                f"{label:24}{r['put_p50']:>8.2f}ms{r['put_p95']:>8.2f}ms{r['put_cpu_p50']:>8.2f}ms"
                f"{r['get_p95']:>8.2f}ms{r['get_max']:>8.2f}ms"
            )
        differences.append(with_["put_p95"] - without["put_p95"])
        print(f"flush() after the last put waited {with_['flush_s']:.1f} s for the pass running then")
    print(f"put p95 difference per run: {', '.join(f'{d:+.2f}' for d in differences)} ms; "
          f"median {statistics.median(differences):+.2f} ms (target: within 2 ms)")


if __name__ == "__main__":
    main()
