"""The offline demo: a user's second conversation recalls the first.

Run with ``llama-memory demo`` (or ``make demo``). It needs no API key and no
network: the embedding is the offline default and no LLM is called. It prints
the exact messages ``get()`` hands an agent's LLM.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Optional, TextIO

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from .memory import ComposableMemory

FIRST_CONVERSATION: tuple[tuple[str, str], ...] = (
    ("Hi! My name is John.", "Nice to meet you, John!"),
    ("I love pizza.", "Pizza is great. Do you have a favourite topping?"),
    ("Yes, pepperoni.", "Pepperoni it is, a classic."),
    ("I just moved to New York.", "Welcome to New York! How are you finding it?"),
)
SECOND_QUESTION = "Where should I go for dinner?"
SYSTEM_PROMPT = "You are a friendly assistant who gives short, personal recommendations."


def _print_messages(messages: Sequence[ChatMessage], out: TextIO) -> None:
    for message in messages:
        out.write(f"--- {message.role.value} ---\n{message.content}\n")


def _ms(seconds: Sequence[float]) -> str:
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"median {statistics.median(ordered) * 1000:.2f} ms, p95 {p95 * 1000:.2f} ms"


def run_demo(path: Optional[Path] = None, out: Optional[TextIO] = None) -> None:
    """Run the demo, writing to ``out`` (stdout by default) and storing under ``path``
    (a new temporary directory by default)."""
    import sys

    out = out or sys.stdout
    path = path or Path(tempfile.mkdtemp(prefix="llama-memory-demo-"))
    out.write(f"Memory directory: {path}\n\n")

    out.write("== Conversation 1 (session-1): John tells a few facts ==\n")
    first = ComposableMemory.from_defaults(user_id="john", session_id="session-1", path=path)
    for question, answer in FIRST_CONVERSATION:
        first.put(ChatMessage(role=MessageRole.USER, content=question))
        first.put(ChatMessage(role=MessageRole.ASSISTANT, content=answer))
        out.write(f"user: {question}\nassistant: {answer}\n")
    first.close()

    out.write(
        f"\n== Conversation 2 (session-2, same user): {SECOND_QUESTION!r} ==\n"
        "What get() returns, i.e. what the agent's LLM receives:\n\n"
    )
    second = ComposableMemory.from_defaults(user_id="john", session_id="session-2", path=path)
    second.put(ChatMessage(role=MessageRole.SYSTEM, content=SYSTEM_PROMPT))
    second.put(ChatMessage(role=MessageRole.USER, content=SECOND_QUESTION))
    _print_messages(second.get(), out)
    second.close()

    out.write("\n== Persistence: a fresh ComposableMemory on the same path ==\n")
    reopened = ComposableMemory.from_defaults(user_id="john", session_id="session-2", path=path)
    out.write(f"session-2 chat history restored: {len(reopened.get_all())} messages\n")
    out.write("search('what food does John like?'):\n")
    for record in reopened.search("what food does John like?", k=3):
        out.write(
            f"  {record.score:.3f}  [{record.source}, session {record.session_id}] "
            f"{record.role}: {record.text}\n"
        )

    out.write("\n== Timings (this machine, offline embedding) ==\n")
    puts, gets = [], []
    for i in range(50):
        started = time.perf_counter()
        reopened.put(ChatMessage(role=MessageRole.USER, content=f"Note number {i}: I like jazz."))
        puts.append(time.perf_counter() - started)
        started = time.perf_counter()
        reopened.get()
        gets.append(time.perf_counter() - started)
    out.write(f"put(): {_ms(puts)}  (a row insert; embedding is batched before the next read)\n")
    out.write(f"get(): {_ms(gets)}  (embeds the new message once, reuses it as the query, one lookup)\n")
    reopened.close()
