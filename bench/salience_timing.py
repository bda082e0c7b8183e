"""Focused timing of get() with and without the hot-path additions of importance and recency: noting the
records a block shows (``llama_memory.memory.runtime.UsageLog``) and the importance and recency rerank
(``llama_memory.retrieval.ranking``), modes alternated, on one store of 500 messages.

Run: ``python -m bench.salience_timing`` (about a minute on an idle machine).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time

from llama_index.core.base.llms.types import ChatMessage

from llama_memory import ComposableMemory
from llama_memory.embeddings.offline import OfflineEmbedding
from llama_memory.memory.runtime import Runtime
from llama_memory.retrieval.ranking import NO_SALIENCE, Salience

MODES = ("before", "after", "usage only", "salience only")


class NoUsage:
    """A usage log that notes nothing (the "before")."""

    def note(self, *args: object) -> None:
        """Note nothing."""


def main(rounds: int = 4) -> dict[str, list[float]]:
    """Time get() per mode; print and return the times (ms) per mode."""
    path, model = tempfile.mkdtemp(), OfflineEmbedding()
    writer = ComposableMemory.from_defaults(user_id="a", session_id="s0", path=path, embed_model=model)
    writer.put_messages([
        ChatMessage(role="user" if i % 2 == 0 else "assistant",
                    content=f"Message {i}: about topic {i % 37} and the city number {i % 11}.")
        for i in range(500)
    ])
    writer.close()
    memory = ComposableMemory.from_defaults(user_id="a", session_id="eval", path=path, embed_model=model)
    source = memory.source("vector")
    questions = [f"what did I say about topic {i}?" for i in range(37)]
    for question in questions:  # warm up: the query embeddings are cached
        memory.get(question)
    real_log = Runtime.usage_log
    times: dict[str, list[float]] = {mode: [] for mode in MODES}
    try:
        for _ in range(rounds):
            for mode in MODES:
                source.salience = Salience() if mode in ("after", "salience only") else NO_SALIENCE
                use_log = mode in ("after", "usage only")
                Runtime.usage_log = real_log if use_log else (lambda rt: NoUsage())  # type: ignore[assignment,method-assign,return-value]
                for question in questions:
                    started = time.perf_counter()
                    memory.get(question)
                    times[mode].append((time.perf_counter() - started) * 1000)
    finally:
        Runtime.usage_log = real_log  # type: ignore[method-assign]
    print(f"load average {os.getloadavg()}")
    for mode, values in times.items():
        values.sort()
        print(f"{mode:14} get() ms median {statistics.median(values):.2f} "
              f"p95 {values[int(len(values) * 0.95)]:.2f} n {len(values)}")
    started = time.perf_counter()
    written = memory.runtime.usage.write() if memory.runtime.usage is not None else 0
    print(f"one write of {written} noted ids: {(time.perf_counter() - started) * 1000:.2f} ms")
    memory.close()
    return times


if __name__ == "__main__":
    main()
