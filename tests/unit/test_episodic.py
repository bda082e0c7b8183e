"""Episodic memory: session summaries as records with provenance,
found like messages, one current per session, standing in for excerpts in a tight
block; offline (extractive) and as the formation pass's "summary" part."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from helpers import assistant, memory_factory, user
from llama_memory.core.types import now
from llama_memory.read.compose import SUMMARISED, covered_by_summaries, is_summary

TRIP = [
    user("We are planning a trip to Kyoto in April with my brother Tom."),
    assistant("Kyoto in April is cherry blossom season, book the hotels early."),
    user("Tom wants to see the Fushimi Inari shrine at sunrise."),
    assistant("Fushimi Inari is open all night, sunrise there is quiet and beautiful."),
    user("I also need a vegetarian restaurant near Gion for the second evening."),
    assistant("Shigetsu at Tenryu-ji serves Buddhist vegetarian cuisine."),
    user("ok thanks"),
]


def session(make_memory, session_id: str = "trip", messages=TRIP):
    memory = make_memory(session_id=session_id)
    memory.put_messages(list(messages))
    return memory


def test_summarise_keeps_a_summary_with_its_provenance_found_like_a_message(make_memory) -> None:
    memory = session(make_memory)
    record_id = memory.summarise(sentences=2)
    summary = memory.episodic.summary(memory.scope)
    assert summary is not None and summary.id == record_id and is_summary(summary)
    assert summary.metadata["session"] == "trip" and summary.role is None
    stored = memory.runtime.store.session_records(memory.scope, "vector", 100)
    assert set(summary.metadata["covers"]) == {r.id for r in stored}
    assert set(summary.message_ids) == {m for r in stored for m in r.message_ids}
    assert len(summary.text.split(": ")) == 3  # two sentences, each with its speaker
    later = make_memory(session_id="later")
    found = [r for r in later.search("what did we plan for Kyoto?", k=5) if is_summary(r)]
    assert [r.id for r in found] == [record_id]
    later.get("what did we plan for Kyoto?")
    assert "summary of the session of " in later.last_block.text


def test_a_newer_summary_of_a_session_replaces_the_older(make_memory) -> None:
    memory = session(make_memory)
    first = memory.summarise(sentences=1)
    memory.put(user("Change of plan: Tom cannot come, I will travel with my friend Ana."))
    second = memory.summarise(sentences=3)
    assert first != second
    assert memory.runtime.store.get_records([first], memory.scope, "vector") == {}
    summaries = [r for r in memory.search("Kyoto trip plans Tom Ana", k=10) if is_summary(r)]
    assert [r.id for r in summaries] == [second]


def test_a_session_without_sentences_to_pick_has_no_summary(make_memory) -> None:
    memory = session(make_memory, messages=[user("ok"), assistant("sure")])
    assert memory.summarise() is None
    assert memory.episodic.summary(memory.scope) is None
    with pytest.raises(ValueError, match="session_id"):
        memory.summarise(session_id="")


def test_a_summary_stands_in_for_the_excerpts_it_covers_only_when_the_budget_is_tight(make_memory) -> None:
    memory = session(make_memory)
    memory.summarise(sentences=2)
    roomy = make_memory(session_id="later", memory_token_limit=2000)
    roomy.get("what did we plan for Kyoto and Fushimi Inari?")
    assert not [x for x in roomy.last_block.left_out if x.reason == SUMMARISED]
    shown = roomy.last_block.records
    assert any(is_summary(r) for r in shown) and covered_by_summaries(shown)
    tight = make_memory(session_id="later2", memory_token_limit=170)
    tight.get("what did we plan for Kyoto and Fushimi Inari?")
    assert [x for x in tight.last_block.left_out if x.reason == SUMMARISED]
    assert any(is_summary(r) for r in tight.last_block.records)
    assert not covered_by_summaries(tight.last_block.records)


def test_the_pass_part_parses_whole_and_applies_in_the_pass_transaction(make_memory) -> None:
    memory = session(make_memory, messages=TRIP[:4])
    part = memory.episodic
    stored = memory.runtime.store.session_records(memory.scope, "vector", 100)
    window = SimpleNamespace(
        scope=memory.scope, messages=TRIP[:4], message_ids=[r.id for r in stored], now=now()
    )
    assert part.pass_field == "summary" and '"summary"' in part.pass_prompt(window)
    with pytest.raises(ValueError, match='"summary" must be a string or null'):
        part.parse_pass({"text": "x"}, window)
    assert part.parse_pass("  ", window) is None
    parsed = part.parse_pass("The user plans a Kyoto trip in April with Tom.", window)
    with memory.runtime.store.transaction("a pass"):
        part.apply_pass(parsed, window)
    first = part.summary(memory.scope)
    assert first is not None and first.metadata["covers"] == [r.id for r in stored]
    # The next pass sees the summary so far and extends its provenance.
    memory.put_messages(TRIP[4:6])
    newer = memory.runtime.store.session_records(memory.scope, "vector", 100)[4:]
    window = SimpleNamespace(scope=memory.scope, messages=TRIP[4:6], message_ids=[r.id for r in newer], now=now())
    assert "Kyoto trip in April with Tom" in part.pass_prompt(window)
    with memory.runtime.store.transaction("a pass"):
        part.apply_pass("Kyoto in April with Tom; a vegetarian dinner near Gion.", window)
    current = part.summary(memory.scope)
    assert current is not None and current.metadata["covers"] == [r.id for r in stored + newer]
    assert set(current.message_ids) == {m for r in stored + newer for m in r.message_ids}


def test_a_pass_that_rolls_back_keeps_the_previous_summary(make_memory) -> None:
    memory = session(make_memory)
    before = memory.summarise(sentences=1)
    window = SimpleNamespace(scope=memory.scope, messages=[], message_ids=[], now=now())
    with pytest.raises(RuntimeError):
        with memory.runtime.store.transaction("a pass"):
            memory.episodic.apply_pass("A summary that never lands.", window)
            raise RuntimeError("another part failed")
    current = memory.episodic.summary(memory.scope)
    assert current is not None and current.id == before


def test_summaries_on_postgresql(postgres_url: str, embed_model) -> None:
    with memory_factory(embed_model, store=postgres_url) as make:
        memory = session(make)
        first = memory.summarise(sentences=1)
        memory.put(user("Change of plan: Tom cannot come, I will travel with my friend Ana."))
        second = memory.summarise(sentences=3)
        assert memory.runtime.store.get_records([first], memory.scope, "vector") == {}
        later = make(session_id="later")
        found = [r for r in later.search("what did we plan for Kyoto?", k=5) if is_summary(r)]
        assert [r.id for r in found] == [second]
