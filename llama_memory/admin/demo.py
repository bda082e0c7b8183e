"""The offline demo (``llama-memory demo``): a user's second conversation recalls the
first, with no API key or network; it prints the messages ``get()`` hands the LLM.
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Optional, TextIO

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from ..core.distribution import install_hint
from ..memory.composable import ComposableMemory
from ..storage.registry import backend_for

FIRST_CONVERSATION: tuple[tuple[str, str], ...] = (
    ("Hi! My name is John.", "Nice to meet you, John!"),
    ("I love pizza.", "Pizza is great. Do you have a favourite topping?"),
    ("Yes, pepperoni.", "Pepperoni it is, a classic."),
    ("I just moved to New York.", "Welcome to New York! How are you finding it?"),
)
#: What an agent's update_profile tool (or a formation pass) would record after each turn.
PROFILE_UPDATES: tuple[dict, ...] = (
    {"name": "John"},
    {"food": {"loves": "pizza"}},
    {"food": {"pizza_topping": "pepperoni"}},
    {"city": "New York"},
)
#: What an agent's ``save_knowledge`` calls (or ``memory.extract`` with an LLM) would
#: store from conversation 1; the demo has no LLM, so it writes them itself.
FIRST_CONVERSATION_TRIPLES: tuple[tuple[str, str, str], ...] = (
    ("John", "likes", "pizza"),
    ("John", "favourite topping", "pepperoni"),
    ("John", "lives in", "New York"),
)
SECOND_QUESTION = "Where should I go for dinner?"
SYSTEM_PROMPT = "You are a friendly assistant who gives short, personal recommendations."


def _print_profile(memory: ComposableMemory, out: TextIO) -> None:
    profile = memory.profile.get_profile(memory.scope)
    out.write(f"    profile: {json.dumps(profile, ensure_ascii=False)}\n")


def _ms(seconds: Sequence[float]) -> str:
    ordered = sorted(seconds)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    return f"median {statistics.median(ordered) * 1000:.2f} ms, p95 {p95 * 1000:.2f} ms"


def run_demo(path: Optional[Path] = None, out: Optional[TextIO] = None) -> None:
    """Run the demo, writing to ``out`` (stdout by default) and storing under ``path``
    (a new temporary directory by default)."""
    import sys

    out = out or sys.stdout
    if path is not None and backend_for(path).missing(path) is None:
        # The demo writes a user 'john' and 50 notes: not into an application's store.
        raise ValueError(
            f"{path} holds a memory store already, and the demo would write its user 'john' "
            "into it: give --path a new or empty directory, or leave --path out for a "
            "temporary one (to look at a store, use `llama-memory users --store PATH`)"
        )
    path = Path(path) if path is not None else Path(tempfile.mkdtemp(prefix="llama-memory-demo-"))
    out.write(f"Memory directory: {path}\n\n")

    out.write("== Before: John's profile from the sign-up form (session signup) ==\n")
    signup = ComposableMemory.from_defaults(user_id="john", session_id="signup", path=path)
    signup.profile.update_profile({"city": "Boston"}, signup.scope)
    _print_profile(signup, out)
    signup.close()

    out.write("\n== Conversation 1 (session-1): John tells a few facts; his profile evolves ==\n")
    first = ComposableMemory.from_defaults(user_id="john", session_id="session-1", path=path, triples=True)
    profile = first.profile
    for (question, answer), update in zip(FIRST_CONVERSATION, PROFILE_UPDATES):
        first.put(ChatMessage(role=MessageRole.USER, content=question))
        first.put(ChatMessage(role=MessageRole.ASSISTANT, content=answer))
        out.write(f"user: {question}\nassistant: {answer}\n")
        profile.update_profile(update, first.scope)
        _print_profile(first, out)
    out.write("history('city'), oldest first:\n")
    for change in profile.history("city", first.scope):
        state = "current" if change.current else "superseded"
        out.write(f"    {change.value!r} (session {change.session_id}, {state})\n")
    first.add_triples(FIRST_CONVERSATION_TRIPLES)
    out.write("knowledge triples saved from it (as save_knowledge or extract() would):\n")
    for fact in FIRST_CONVERSATION_TRIPLES:
        out.write(f"    {' — '.join(fact)}\n")
    first.close()

    out.write(
        f"\n== Conversation 2 (session-2, same user): {SECOND_QUESTION!r} ==\n"
        "What get() returns, i.e. what the agent's LLM receives:\n\n"
    )
    second = ComposableMemory.from_defaults(user_id="john", session_id="session-2", path=path, triples=True)
    second.put(ChatMessage(role=MessageRole.SYSTEM, content=SYSTEM_PROMPT))
    second.put(ChatMessage(role=MessageRole.USER, content=SECOND_QUESTION))
    for message in second.get():
        out.write(f"--- {message.role.value} ---\n{message.content}\n")
    second.close()

    out.write("\n== Persistence: a fresh ComposableMemory on the same path ==\n")
    reopened = ComposableMemory.from_defaults(user_id="john", session_id="session-2", path=path, triples=True)
    out.write(f"session-2 chat history restored: {len(reopened.get_all())} messages\n")
    out.write("search('what kind of food do I like?'):\n")
    # The profile is served first whatever the query; show the vector source's ranking.
    found = reopened.search("what kind of food do I like?", k=10)
    for record in [r for r in found if r.source == "vector"][:3]:
        out.write(f"  {record.score:.3f}  [{record.source}, session {record.session_id}] {record.transcript}\n")

    out.write("\n== John's knowledge triples ==\n")
    knowledge = reopened.triple_source
    reopened.add_triples([("John", "lives in", "Chicago")])  # "I moved again, to Chicago."
    out.write("John says he moved again, to Chicago; 'lives in' holds one value, so it supersedes:\n")
    for triple in knowledge.triples(reopened.scope):
        out.write(f"  {triple.render()}\n")
    out.write("history('John', 'lives in'):\n")
    for triple in knowledge.history("John", "lives in", reopened.scope):
        out.write(f"  {triple.text()}  ({'current' if triple.current else 'superseded'})\n")
    try:
        picture = knowledge.plot(path / "knowledge-graph.png", reopened.scope)
        out.write(f"Knowledge graph picture: {picture}\n")
    except ImportError:  # matplotlib is an extra: a plain install runs the demo without it
        out.write(f"Knowledge graph picture: needs matplotlib ({install_hint('graph')})\n")

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
    out.write(
        f"get(): {_ms(gets)}  (embeds the new message once and reuses it as the query for"
        " every source; a lexical and a dense lookup per source)\n"
    )
    reopened.close()
