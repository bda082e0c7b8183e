"""A relevance score means the same in a store of 3 records and in one of 2,000: an
unrelated record never scores near 1, and a record that answers scores above the
unrelated ones and enters the block (``min_relevance``'s default)."""

from __future__ import annotations

import pytest

from helpers import hold, user
from llama_memory.retrieval.relevance import DEFAULT_MIN_RELEVANCE

#: One fact per conversation: what the issue's 3-record store held.
FACTS = (
    "My favourite tea is a smoky lapsang souchong, I drink it every afternoon.",
    "Our beagle Biscuit ate a whole sock this morning and seems fine.",
    "We moved to Porto last month and I love the light over the river.",
)
QUESTIONS = {
    "What tea do I like?": 0,
    "What's my dog called?": 1,
    "Which city do I live in?": 2,
}


def filler(n: int) -> list[str]:
    """``n`` distinct messages about other things (work chatter), none about tea, dogs
    or where the user lives."""
    topics = ("the quarterly report", "the printer on floor two", "the budget meeting", "the new intern",
              "the server migration", "the client call", "the expense form", "the team offsite")
    moods = ("ran late again", "went better than expected", "needs another review", "was moved to Friday",
             "is finally done", "got postponed", "took the whole morning", "is on hold")
    return [f"Note {i}: {topics[i % len(topics)]} {moods[(i // len(topics)) % len(moods)]} (item {i})."
            for i in range(n)]


def scores(memory, question: str) -> dict[int, float]:
    """The relevance ``search`` gives each fact for ``question``, by its index in FACTS."""
    out = {}
    for record in memory.search(question, k=10):
        for n, fact in enumerate(FACTS):
            if fact in record.text:
                out[n] = max(out.get(n, 0.0), record.relevance)
    return out


@pytest.fixture
def small(make_memory):
    hold(make_memory, FACTS)
    return make_memory(session_id="now")


def test_in_a_three_record_store_only_the_answer_passes(small) -> None:
    # Before, the query's best match set every record's score: all three scored 1.0
    # for "What tea do I like?".
    for question, answer in QUESTIONS.items():
        found = scores(small, question)
        assert found[answer] >= DEFAULT_MIN_RELEVANCE, (question, found)
        assert all(v < DEFAULT_MIN_RELEVANCE for n, v in found.items() if n != answer), (question, found)
        small.get(question)
        assert [r.text for r in small.last_block.records] == [FACTS[answer]]


def test_a_question_about_nothing_stored_scores_every_record_low(small) -> None:
    for question in ("What's the capital of Australia?", "one sec", "hey there!"):
        assert all(r.relevance < DEFAULT_MIN_RELEVANCE for r in small.search(question, k=3)), question


def test_the_same_record_scores_alike_among_two_thousand_others(make_memory, small) -> None:
    alone = {q: scores(small, q)[a] for q, a in QUESTIONS.items()}
    busy = make_memory(session_id="busy")
    busy.put_messages([user(t) for t in filler(2000)])
    busy.close()
    memory = make_memory(session_id="later")

    for question, answer in QUESTIONS.items():
        found = scores(memory, question)
        assert found[answer] == pytest.approx(alone[question], rel=0.25), question
        # None of the 2,000 unrelated records scores near 1, nor as high as the answer.
        others = [r.relevance for r in memory.search(question, k=10) if not any(f in r.text for f in FACTS)]
        assert all(v < min(0.5, found[answer]) for v in others), (question, others)
