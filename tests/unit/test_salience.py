"""Importance and recency in the ranking, and the batched record of
which records a block showed (their last_used)."""

from __future__ import annotations

import pytest

from helpers import user
from llama_memory.core.types import MemoryRecord, now
from llama_memory.retrieval.ranking import DAY, NO_SALIENCE, Salience, signal_importance

YEAR = 365 * DAY


def said(memory, text: str, when: float) -> None:
    memory.put(user(text, timestamp=when))


def drinks(memory) -> list[str]:
    """The drinks of the preferences found for the question, best first."""
    found = memory.search("what do I like to drink?", k=5)
    return [d for r in found for d in ("coffee", "tea") if f"prefer {d}" in r.text]


def vector_source(memory):
    return next(s for s in memory.runtime.sources if s.name == "vector")


def preferences(make_memory, older: str, newer: str):
    old = make_memory(session_id="last-year")
    said(old, f"I prefer {older}, I drink it every morning.", now() - YEAR)
    said(old, "My sister lives in Toronto.", now() - YEAR)
    recent = make_memory(session_id="this-week")
    said(recent, f"These days I prefer {newer}, I drink it every morning.", now() - 2 * DAY)
    said(recent, "The weather was grey all week.", now() - 2 * DAY)
    return make_memory(session_id="today")


def test_a_stale_preference_yields_to_a_newer_one(make_memory) -> None:
    ask = preferences(make_memory, older="tea", newer="coffee")
    assert drinks(ask)[:1] == ["coffee"]
    # Without importance and recency the older one matches better and comes first:
    # the newer wins by its time, not by its wording.
    vector_source(ask).salience = NO_SALIENCE
    assert drinks(ask)[:1] == ["tea"]


def test_a_pass_judgement_outranks_the_signals_and_signals_add_up() -> None:
    plain = MemoryRecord("x", role="assistant", message_ids=["m1"])
    by_user = MemoryRecord("x", role="user", message_ids=["m1", "m2"], last_used=1.0)
    judged = MemoryRecord("x", role="assistant", importance=0.95)
    assert signal_importance(plain) == pytest.approx(0.4)
    assert signal_importance(by_user) == pytest.approx(1.0)
    assert signal_importance(judged) == 0.95


def test_recency_is_halved_every_half_life_and_counts_the_last_use() -> None:
    s = Salience(half_life=10 * DAY)
    t = 1_000 * DAY
    assert s.recency(MemoryRecord("x", event_time=t - 10 * DAY), t) == pytest.approx(0.5)
    used = MemoryRecord("x", event_time=t - 100 * DAY, last_used=t)
    assert s.recency(used, t) == pytest.approx(1.0)


def test_bad_weights_are_refused_with_what_was_wrong() -> None:
    with pytest.raises(ValueError, match="recency_weight and importance_weight"):
        Salience(recency_weight=-1)
    with pytest.raises(ValueError, match="half_life"):
        Salience(half_life=0)


def test_records_shown_in_a_block_get_their_last_use_with_the_next_put(make_memory) -> None:
    memory = make_memory()
    memory.put(user("My locker code is 4471."))
    memory.put(user("The weather is nice."))
    first = make_memory(session_id="s2")
    first.get("what is my locker code?")
    shown = [r for r in first.last_block.records if "locker" in r.text]
    assert shown
    store = first.runtime.store
    ids = [p.id for r in shown for p in (r.parts or [r])]
    # get() wrote nothing: the use is noted in memory only.
    assert all(r.last_used is None for r in store.get_records(ids, first.scope, "vector").values())
    first.put(user("thanks"))  # written in this put's transaction
    used = store.get_records(ids, first.scope, "vector")
    assert all(r.last_used is not None for r in used.values())
