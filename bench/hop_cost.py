"""What the second hop costs a ``get()``, measured in one process.

One LoCoMo conversation's store is built as ``bench.locomo`` builds it; then each
question is asked with the hop off (``hop_weight=0``) and on (``--weight``), the order
alternating question by question, so that load changes touch both alike. The first
``get()`` of a question embeds it (the cost an agent pays for a new message); the second
finds its vector cached (as right after ``put(user)``). Reported: median ``get()`` ms
of each, and the median time spent in the hop itself (``VectorSource._hop``); each also
in CPU time (``get_cpu_ms_median``: the process's, embedding threads included;
``hop_cpu_ms_median``: the calling thread's), which the other work on a shared machine
moves much less than the wall clock.

``--agent-flow`` asks as an agent does (as ``bench.speed`` does): each question is first
``put()`` as the user's message of the evaluation session, then ``get()`` is called with
no input; so the window's own messages are in the store and left out of what is
retrieved (the check reads the candidates' records).

Run::

    .venv/bin/python -m bench.hop_cost                        # conv-26 (419 messages), 150 questions
    .venv/bin/python -m bench.hop_cost --conversation 2 --questions 100
    .venv/bin/python -m bench.hop_cost --agent-flow           # put(question), then get()
    .venv/bin/python -m bench.hop_cost --smoke                # tests/data/locomo_tiny.json, seconds
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from bench.locomo import DEFAULT_DATA, SMOKE_DATA, Ours, load_average, load_dataset


def measure(
    data: Path, conversation: int, questions: int, weight: float, agent_flow: bool = False
) -> dict[str, Any]:
    """Median ms of ``get()`` with and without the hop (first and second ask of each
    question) and of the hop itself, on one conversation's store; with ``agent_flow``,
    each question is put as the user's message first and ``get()`` has no input."""
    from llama_index.core.base.llms.types import ChatMessage, MessageRole

    from llama_memory import default_embedding

    default_embedding().load()
    conv = load_dataset(data, None, [conversation]).conversations[0]
    retriever = Ours()
    try:
        retriever.build(conv)
        memory = retriever.memory
        source = memory.source("vector")
        hop = source._hop
        hop_ms: list[float] = []
        hop_cpu_ms: list[float] = []

        def timed_hop(*args: Any, **kwargs: Any) -> Any:
            t0, c0 = time.perf_counter(), time.thread_time()
            out = hop(*args, **kwargs)
            if source.hop_weight > 0:
                hop_ms.append((time.perf_counter() - t0) * 1000)
                hop_cpu_ms.append((time.thread_time() - c0) * 1000)
            return out

        source._hop = timed_hop
        ms: dict[tuple[str, str], list[float]] = {}
        cpu_ms: dict[tuple[str, str], list[float]] = {}
        settings = [("without", 0.0), ("with", weight)]
        for n, q in enumerate(conv.questions[:questions]):
            one, other = settings if n % 2 == 0 else settings[::-1]
            if agent_flow:
                memory.put(ChatMessage(role=MessageRole.USER, content=q.question))
            # the first get embeds the question; the next two find it embedded
            for (label, w), ask in ((one, "first (embeds)"), (other, "again"), (one, "again")):
                source.hop_weight = w
                t0, c0 = time.perf_counter(), time.process_time()
                memory.get() if agent_flow else memory.get(q.question)
                ms.setdefault((label, ask), []).append((time.perf_counter() - t0) * 1000)
                cpu_ms.setdefault((label, ask), []).append((time.process_time() - c0) * 1000)
        return {
            "conversation": conv.sample_id,
            "messages": sum(len(t) for t in conv.sessions.values()),
            "questions": min(questions, len(conv.questions)),
            "agent_flow": agent_flow,
            "get_ms_median": {f"{label}, {ask}": round(statistics.median(v), 1)
                              for (label, ask), v in sorted(ms.items())},
            "get_cpu_ms_median": {f"{label}, {ask}": round(statistics.median(v), 1)
                                  for (label, ask), v in sorted(cpu_ms.items())},
            "hop_ms_median": round(statistics.median(hop_ms), 2) if hop_ms else None,
            "hop_cpu_ms_median": round(statistics.median(hop_cpu_ms), 2) if hop_cpu_ms else None,
            "load": load_average(),
        }
    finally:
        retriever.close()


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """Run the measurement and print it."""
    parser = argparse.ArgumentParser(prog="python -m bench.hop_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None, help=f"LoCoMo-schema JSON (default {DEFAULT_DATA})")
    parser.add_argument("--conversation", type=int, default=0, help="0-based position in the data")
    parser.add_argument("--questions", type=int, default=150, help="how many of its questions")
    parser.add_argument("--weight", type=float, default=0.5, help="the hop's weight when on")
    parser.add_argument("--agent-flow", action="store_true",
                        help="put() each question as the user's message, then get() with no input")
    parser.add_argument("--smoke", action="store_true", help=f"run on {SMOKE_DATA.name}, in seconds")
    args = parser.parse_args(argv)
    data = args.data or (SMOKE_DATA if args.smoke else DEFAULT_DATA)
    if not data.is_file():
        parser.error(f"no data file at {data}")
    if not 0 < args.weight <= 1:
        parser.error(f"--weight is above 0 and at most 1, got {args.weight}")
    if args.questions <= 0:
        parser.error(f"--questions is a positive count, got {args.questions}")
    print(f"bench.hop_cost: {data}; load average {load_average()}", flush=True)
    report = measure(data, args.conversation, args.questions, args.weight, args.agent_flow)
    for key, value in report.items():
        print(f"{key}: {value}")
    return report


if __name__ == "__main__":
    main()
