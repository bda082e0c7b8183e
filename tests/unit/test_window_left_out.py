"""The window's own messages are left out where the candidates are chosen
(llama_memory/retrieval/apart.py): every search of a retrieval is told their ids, so a
long conversation costs a search no more hits than a new one, and what comes back is
what a store without those messages gives: none of the window's messages, none of the
other records lost, the same relevance. Real SQLite and Chroma, and PostgreSQL; the real
offline embedding model."""

from __future__ import annotations

import pytest

from bench.first_person import hobby_messages
from helpers import hold, message_texts, user
from llama_memory.retrieval.sync import ResidentVectors

#: What the user told before, one message per session, among hobby messages.
FACTS = (
    "My brother Theo plays the cello in a quartet.",
    "Theo studied music at the conservatory in Lyon.",
    "Theo's quartet rehearses every Thursday evening.",
    "My sister Ana moved to Porto for her new job.",
)
#: This conversation: every message is about Theo's music, closer to the question than
#: any fact (they would fill every place if they were candidates).
TALK = tuple(
    f"Theo's cello practice number {n} with the quartet was about music he plays, Theo said."
    for n in range(40)
)
QUESTION = "What instrument does my brother Theo play in the quartet?"


def blocks(make) -> tuple[list[tuple[str, float]], list[tuple[str, float]], list[str]]:
    """The block of a user who holds the facts only (asked with get(question)), and the
    block of one who also holds this conversation, all of it in the window (asked as an
    agent asks: put, then get()), as (text, relevance); and the window's texts."""
    for who in ("reference", "alice"):
        hold(make, [*hobby_messages(40), *FACTS], user_id=who)
    reference = make(user_id="reference", session_id="now")
    reference.get(QUESTION)
    memory = make(user_id="alice", session_id="now")
    memory.put_messages([user(text) for text in TALK])
    memory.put(user(QUESTION))
    window = [m.content for m in memory.get() if m.role.value == "user"]
    return [_shown(r) for r in reference.last_block.records], [_shown(r) for r in memory.last_block.records], window


def _shown(record) -> tuple[str, float]:
    return " / ".join(message_texts([record])), round(record.relevance if record.relevance is not None else -1.0, 6)


def test_no_window_message_enters_the_block_and_no_other_record_is_lost(make_memory_on) -> None:
    expected, found, window = blocks(make_memory_on)
    assert set(window) >= {*TALK, QUESTION}  # the whole conversation is in the window
    texts = " ".join(text for text, _ in found)
    assert not [t for t in (*TALK, QUESTION) if t in texts]  # nothing of the window leaks in
    assert any("cello" in text for text, _ in found)  # the fact that answers is there
    # The same records, in the same order: the conversation's messages are as if they were
    # not stored. Their relevance is close, not equal: it weighs the question's words by
    # their rarity in the store, and the store's word counts (cached between retrievals)
    # less the window's texts are not exactly the counts of a store without them.
    assert [text for text, _ in found] == [text for text, _ in expected]
    assert [r for _, r in found] == pytest.approx([r for _, r in expected], abs=0.05)


def test_a_search_asks_for_no_more_hits_however_long_the_window(make_memory, monkeypatch) -> None:
    asked: dict[str, list[tuple[str, int]]] = {"reference": [], "alice": []}
    current = ["reference"]
    ranking = ResidentVectors.ranking

    def spy_dense(self, query, *args, **kwargs):
        hits = ranking(self, query, *args, **kwargs)
        asked[current[0]].append(("dense", len(list(hits))))  # what it could give
        return ranking(self, query, *args, **kwargs)

    monkeypatch.setattr(ResidentVectors, "ranking", spy_dense)
    for who in ("reference", "alice"):
        hold(make_memory, [*hobby_messages(40), *FACTS], user_id=who)
    for who in ("reference", "alice"):
        memory = make_memory(user_id=who, session_id="now")
        if who == "alice":
            memory.put_messages([user(text) for text in TALK])
            memory.put(user(QUESTION))
        store = memory.source("vector").store
        search_text, rank_text = store.search_text, store.rank_text

        def spy_text(query, scope, source, limit, *exclude, who=who):
            asked[who].append(("text", limit))
            return search_text(query, scope, source, limit, *exclude)

        def spy_rank(query, scope, source, *args, who=who, **kwargs):
            asked[who].append(("ranked text", len(list(rank_text(query, scope, source, *args, **kwargs)))))
            return rank_text(query, scope, source, *args, **kwargs)

        current[0] = who
        store.search_text, store.rank_text = spy_text, spy_rank
        try:
            memory.get() if who == "alice" else memory.get(QUESTION)
        finally:
            del store.search_text, store.rank_text
    # A window of 41 messages, all of them stored and the best matches: the searches
    # are the same, and each could give as many hits as with no window at all (they
    # asked for 41 more each before, and the window's records were among them).
    assert asked["alice"] and asked["alice"] == asked["reference"]


@pytest.mark.parametrize("roles", [("user",), ("user", "assistant")])
def test_the_ids_left_out_are_those_of_the_windows_records(make_memory, roles) -> None:
    memory = make_memory(session_id="now")
    memory.put(user(QUESTION))
    source = memory.source("vector")
    stored = {r.id for r in source.store.recent_records(memory.scope, "vector", 10, (0, 1e12))}
    ids = source.store.record_ids([QUESTION.casefold()], roles, memory.scope, "vector")
    assert len(ids) == len(roles) and stored <= set(ids)


def test_forgetting_a_user_forgets_the_window_texts_held_with_their_ids(make_memory) -> None:
    memory = make_memory(session_id="now")
    memory.put(user(QUESTION))
    memory.get()
    source = memory.source("vector")
    assert source._window_ids._held  # the window's text is held with its ids
    source.reset(memory.scope)
    assert not source._window_ids._held
