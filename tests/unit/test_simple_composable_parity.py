"""Parity with LlamaIndex's documented ``SimpleComposableMemory`` example.

The example (LlamaIndex docs, "Simple Composable Memory"): a ``VectorMemory``
secondary source holding "Bob likes burgers." / "Indeed, Bob likes apples." and
"Alice likes apples."; a ``ChatMemoryBuffer`` primary holding a system message
and "Jerry likes juice.". ``get("What does Bob like?")`` returns the primary's
messages with the retrieved Bob dialogue in the system message; a second ``get``
replaces that block; messages already in the primary are not injected;
``primary_memory.reset()`` clears only the primary and ``reset()`` clears all.

Each scenario is run against stock ``SimpleComposableMemory`` and against
``ComposableMemory`` with the same kind of sources, and the retrieved facts are
compared (not the formatting, which differs on purpose).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.core.memory import ChatMemoryBuffer, SimpleComposableMemory, VectorMemory

from helpers import message_texts
from llama_memory import ComposableMemory, default_embedding
from llama_memory.retrieval.excerpts import hit_of

SECONDARY_MESSAGES = [
    ("system", "You are a SOMEWHAT helpful assistant."),
    ("user", "Bob likes burgers."),
    ("assistant", "Indeed, Bob likes apples."),
    ("user", "Alice likes apples."),
]
PRIMARY_MESSAGES = [
    ("system", "You are a REALLY helpful assistant."),
    ("user", "Jerry likes juice."),
]
BOB_FACTS = {"Bob likes burgers.", "Indeed, Bob likes apples."}
ALICE_FACT = "Alice likes apples."
JERRY_FACT = "Jerry likes juice."
PRIMARY_SYSTEM = "You are a REALLY helpful assistant."
ALL_FACTS = BOB_FACTS | {ALICE_FACT, JERRY_FACT}


def msgs(pairs: list[tuple[str, str]]) -> list[ChatMessage]:
    return [ChatMessage.from_str(text, role) for role, text in pairs]


def vector_memory() -> VectorMemory:
    """The documented secondary source, with the offline embedding instead of OpenAI's."""
    memory = VectorMemory.from_defaults(
        vector_store=None,
        embed_model=default_embedding(),
        retriever_kwargs={"similarity_top_k": 1},
    )
    memory.set(msgs(SECONDARY_MESSAGES))
    return memory


def build(kind: str) -> tuple[object, VectorMemory]:
    """The documented setup with ``kind`` "stock" or "ours"; returns (memory, secondary)."""
    secondary = vector_memory()
    cls = SimpleComposableMemory if kind == "stock" else ComposableMemory
    memory = cls.from_defaults(
        primary_memory=ChatMemoryBuffer.from_defaults(), secondary_memory_sources=[secondary]
    )
    for message in msgs(PRIMARY_MESSAGES):
        memory.put(message)
    return memory, secondary


_STOCK_LINE = re.compile(r"^\t(?:USER|ASSISTANT|SYSTEM|TOOL): (.*)$", re.M)


def injected_facts(kind: str, memory: object, messages: list[ChatMessage]) -> set[str]:
    """The retrieved message texts the memory injected into ``messages``.

    Stock: the ``\\tROLE: text`` lines of SimpleComposableMemory's block.
    Ours: the records of the latest block, each checked to be in the system message.
    """
    system = messages[0].content if messages and messages[0].role == MessageRole.SYSTEM else ""
    if kind == "stock":
        return set(_STOCK_LINE.findall(system or ""))
    records = message_texts(memory.last_block.records)  # type: ignore[attr-defined]
    for text in records:
        assert text in system, f"{text!r} listed in last_block but not in the system message"
    return set(records)


def facts_in_text(text: str) -> set[str]:
    return {fact for fact in ALL_FACTS if fact in text}


@pytest.fixture(scope="module", autouse=True)
def _warm_embedding() -> None:
    default_embedding().get_query_embedding("warm up")


# --------------------------------------------------------------------------- the documented example


def test_get_injects_the_same_facts_as_simple_composable_memory() -> None:
    results = {}
    for kind in ("stock", "ours"):
        memory, _ = build(kind)
        out = memory.get("What does Bob like?")  # type: ignore[attr-defined]

        # Shape: one system message (the primary's, extended), then the primary's messages.
        assert [m.role for m in out] == [MessageRole.SYSTEM, MessageRole.USER], kind
        system = out[0].content or ""
        assert system.startswith(PRIMARY_SYSTEM), kind
        assert system.count(PRIMARY_SYSTEM) == 1, kind
        assert out[1].content == JERRY_FACT, kind
        # Only the Bob dialogue (top-1 node) is injected, and nothing else.
        assert facts_in_text(system) == BOB_FACTS, (kind, system)
        results[kind] = injected_facts(kind, memory, out)

    assert results["stock"] == BOB_FACTS
    assert results["ours"] == results["stock"]


def test_a_second_get_replaces_the_block() -> None:
    for kind in ("stock", "ours"):
        memory, _ = build(kind)
        memory.get("What does Bob like?")  # type: ignore[attr-defined]
        out = memory.get("What does Alice like?")  # type: ignore[attr-defined]
        system = out[0].content or ""
        assert facts_in_text(system) == {ALICE_FACT}, (kind, system)
        assert injected_facts(kind, memory, out) == {ALICE_FACT}, kind
        assert system.count(PRIMARY_SYSTEM) == 1, kind
        # The primary memory itself was never modified by get().
        stored = memory.get_all()  # type: ignore[attr-defined]
        assert [m.content for m in stored] == [PRIMARY_SYSTEM, JERRY_FACT], kind


def test_a_block_written_back_into_the_primary_is_replaced_not_stacked() -> None:
    """An app that stores what ``get`` returned (``primary_memory.set(memory.get(...))``)."""
    for kind in ("stock", "ours"):
        memory, _ = build(kind)
        memory.primary_memory.set(memory.get("What does Bob like?"))  # type: ignore[attr-defined]
        # The Bob block is now part of the stored system message.
        assert BOB_FACTS <= facts_in_text(memory.get_all()[0].content or "")  # type: ignore[attr-defined]
        out = memory.get("What does Alice like?")  # type: ignore[attr-defined]
        system = out[0].content or ""
        assert facts_in_text(system) == {ALICE_FACT}, (kind, system)
        assert system.count(PRIMARY_SYSTEM) == 1, kind


def test_messages_already_in_the_primary_are_not_injected() -> None:
    for kind in ("stock", "ours"):
        memory, secondary = build(kind)
        # put() reached the secondary too: it does return Jerry's message for the query ...
        assert JERRY_FACT in [m.content for m in secondary.get("What does Jerry like?")], kind
        out = memory.get("What does Jerry like?")  # type: ignore[attr-defined]
        # ... but it is already in the window, so it is not injected a second time.
        everything = "\n".join(m.content or "" for m in out)
        assert everything.count(JERRY_FACT) == 1, (kind, everything)
        assert injected_facts(kind, memory, out) == set(), kind
        assert [m.content for m in out] == [PRIMARY_SYSTEM, JERRY_FACT], kind


def test_primary_reset_clears_only_the_primary_and_reset_differs_on_purpose() -> None:
    for kind in ("stock", "ours"):
        memory, secondary = build(kind)
        memory.primary_memory.reset()  # type: ignore[attr-defined]
        assert memory.get_all() == [], kind  # type: ignore[attr-defined]
        assert {m.content for m in secondary.get("What does Bob like?")} == BOB_FACTS, kind
        # The composed memory still recalls from the secondary.
        out = memory.get("What does Bob like?")  # type: ignore[attr-defined]
        assert injected_facts(kind, memory, out) == BOB_FACTS, kind

        memory.reset()  # type: ignore[attr-defined]
        assert memory.get_all() == [], kind  # type: ignore[attr-defined]
        if kind == "stock":  # SimpleComposableMemory.reset() clears the secondaries too
            assert secondary.get("What does Bob like?") == [], kind
            assert memory.get("What does Bob like?") == [], kind  # type: ignore[attr-defined]
            continue
        # Ours clears the conversation only (like LlamaIndex's Memory.reset()) ...
        assert {m.content for m in secondary.get("What does Bob like?")} == BOB_FACTS
        assert injected_facts(kind, memory, memory.get("What does Bob like?")) == BOB_FACTS  # type: ignore[attr-defined]
        # ... and the stock behaviour is an explicit reset of each source.
        for source in memory.sources:  # type: ignore[attr-defined]
            source.reset(memory.scope)  # type: ignore[attr-defined]
        assert secondary.get("What does Bob like?") == []
        assert memory.get("What does Bob like?") == []  # type: ignore[attr-defined]


def test_get_without_input_retrieves_for_the_latest_user_message() -> None:
    """The one intended difference: agents call ``get()`` with no input. Stock
    retrieves nothing then; ComposableMemory uses the latest user message."""
    injected: dict[str, set[str]] = {}
    for kind in ("stock", "ours"):
        memory, _ = build(kind)
        # Into the primary only: put() would also store the question in the top-1
        # VectorMemory, whose only hit would then be the question itself.
        memory.primary_memory.put(ChatMessage.from_str("What does Bob like?", "user"))  # type: ignore[attr-defined]
        out = memory.get()  # type: ignore[attr-defined]
        injected[kind] = injected_facts(kind, memory, out)
    assert injected == {"stock": set(), "ours": BOB_FACTS}


# --------------------------------------------------------------------------- ComposableMemory's own defaults


def _seed_defaults(path: Path) -> None:
    earlier = ComposableMemory.from_defaults(user_id="alice", session_id="earlier", path=path)
    earlier.put_messages(msgs(SECONDARY_MESSAGES))
    earlier.close()


def _open_defaults(path: Path, session_id: str = "now") -> ComposableMemory:
    return ComposableMemory.from_defaults(user_id="alice", session_id=session_id, path=path)


def test_a_source_appended_or_assigned_after_building_is_used_as_stock_does() -> None:
    for kind in ("stock", "ours"):
        cls = SimpleComposableMemory if kind == "stock" else ComposableMemory
        memory = cls.from_defaults(primary_memory=ChatMemoryBuffer.from_defaults(), secondary_memory_sources=[])
        memory.put(ChatMessage.from_str("Hello.", "user"))
        memory.secondary_memory_sources.append(vector_memory())
        appended = memory.get("What does Bob like?")
        assert facts_in_text(appended[0].content or "") == BOB_FACTS, kind

        alice = VectorMemory.from_defaults(vector_store=None, embed_model=default_embedding())
        alice.put(ChatMessage.from_str(ALICE_FACT, "user"))
        memory.secondary_memory_sources = [alice]
        assigned = memory.get("What does Alice like?")
        assert facts_in_text(assigned[0].content or "") == {ALICE_FACT}, kind
        if kind == "ours":  # not "none": from_dict must ask for the sources, not drop them
            assert memory.to_dict()["sources"] == "custom"  # type: ignore[attr-defined]
            assert [s.name for s in memory.sources] == ["VectorMemory#1"]  # type: ignore[attr-defined]


def test_defaults_recall_bob_from_an_earlier_session(tmp_path: Path) -> None:
    _seed_defaults(tmp_path)
    memory = _open_defaults(tmp_path)
    try:
        memory.put_messages(msgs(PRIMARY_MESSAGES))
        out = memory.get("What does Bob like?")
        assert [m.role for m in out] == [MessageRole.SYSTEM, MessageRole.USER]
        system = out[0].content or ""
        assert system.startswith(PRIMARY_SYSTEM)
        assert "Bob likes burgers." in system
        shown = message_texts(memory.last_block.records)
        assert "Bob likes burgers." in shown
        assert "Bob" in hit_of(memory.last_block.records[0]).text  # the most relevant comes first
        # Jerry's message is in the window (and now also in the long-term store): not injected.
        assert JERRY_FACT not in shown
        assert "\n".join(m.content or "" for m in out).count(JERRY_FACT) == 1
        # System prompts are not long-term facts.
        assert "You are a SOMEWHAT helpful assistant." not in system
        assert len(shown) == len(set(shown))

        # A second get replaces the block.
        again = memory.get("What does Alice like?")
        assert (again[0].content or "").count(PRIMARY_SYSTEM) == 1
        assert hit_of(memory.last_block.records[0]).text == ALICE_FACT
        assert (again[0].content or "").count(ALICE_FACT) == 1
    finally:
        memory.close()


def test_defaults_contain_the_same_facts_as_stock_for_the_query(tmp_path: Path) -> None:
    """Same script against stock (VectorMemory, top-1) and our defaults (top-k): the
    stock facts are among ours, and ours rank a Bob fact first."""
    stock, _ = build("stock")
    stock_facts = injected_facts("stock", stock, stock.get("What does Bob like?"))

    _seed_defaults(tmp_path)
    ours = _open_defaults(tmp_path)
    try:
        ours.put_messages(msgs(PRIMARY_MESSAGES))
        out = ours.get("What does Bob like?")
        our_facts = message_texts(ours.last_block.records)
        assert stock_facts == BOB_FACTS
        assert stock_facts <= set(our_facts)
        assert hit_of(ours.last_block.records[0]).text in stock_facts  # a Bob fact first
        assert injected_facts("ours", ours, out) == set(our_facts)
    finally:
        ours.close()


def test_defaults_reset_keeps_long_term_and_a_source_reset_clears_it(tmp_path: Path) -> None:
    _seed_defaults(tmp_path)
    memory = _open_defaults(tmp_path)
    try:
        memory.put_messages(msgs(PRIMARY_MESSAGES))
        memory.reset()
        assert memory.get_all() == []
        assert BOB_FACTS <= set(message_texts(memory.search("What does Bob like?", k=10)))
        out = memory.get("What does Bob like?")
        assert "Bob likes burgers." in "\n".join(m.content or "" for m in out)

        memory.source("vector").reset(memory.scope)
        assert memory.get_all() == []
        assert memory.search("What does Bob like?", k=10) == []
        assert memory.get("What does Bob like?") == []
    finally:
        memory.close()
    # The source's reset reached the disk: a fresh memory on the path finds nothing either.
    reopened = _open_defaults(tmp_path, session_id="later")
    try:
        assert reopened.search("What does Bob like?", k=10) == []
    finally:
        reopened.close()
