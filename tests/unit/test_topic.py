"""The topic query of a question that asks for a set: its topic
alone (the question without the names it mentions), searched by meaning."""

from __future__ import annotations

import pytest

from helpers import hold, message_texts
from llama_memory.retrieval.topic import topic_hop, topic_of

QUESTION = "What hobbies does Ana have?"
#: What Ana did, one session each, in her own words: none shares a word with the question.
ANAS = (
    "we went camping by the lake last weekend, the kids loved the campfire.",
    "I went swimming at the lido this morning, forty lengths!",
    "I signed up for a pottery class yesterday, I made a little bowl.",
)
#: Messages to Ana about anything but hobbies: her name makes them nearer the question,
#: by meaning and by words, than her hobbies; enough to fill the first ranking's candidates.
NAMED = tuple(
    f"Ana, {text}" for text in (
        "your dentist appointment is on Monday at nine.", "the passport office wants a new photo.",
        "the landlord called about the heating again.", "your train ticket to Leeds is booked.",
        "do you have the spare keys for the flat?", "the electricity bill came, it is high this month.",
        "your sister says she is moving in March.", "the bank sent you a new card.",
        "the library book is overdue by a week.", "your phone contract ends in April.",
        "have you seen the forecast? rain all week.", "the plumber will come on Thursday.",
        "your parcel is at the post office.", "the car needs its MOT next month.",
        "have you paid the council tax yet?",
    )
)


def test_the_topic_is_the_questions_content_words_without_the_names_it_mentions() -> None:
    assert topic_of("What activities does Ana partake in?") == "activities partake"
    assert topic_of("What has Ana done?") == "done"
    assert topic_of("What did Ana do?") == ""
    assert topic_of("Which books did Ana and Ben both read?") == "books both read"
    assert topic_of("Ana asked: what hobbies do I have?") == "ana asked hobbies"  # the first word is no name


def test_topic_hits_join_the_ranking_at_the_weight_rescaled_among_them() -> None:
    asked = []
    hits = [("ben-hiking", 0.6), ("ana-camping", 0.5), ("ana-pottery", 0.3)]

    def nearest(topic, count):
        asked.append((topic, count))
        return hits

    ranked = [("first", 1.0), ("ana-camping", 0.5)]
    # rescaled among the hits: the best scores the weight, the worst 0 (and so joins
    # nothing); a hit keeps its own score when that is higher
    assert topic_hop(QUESTION, ranked, nearest, weight=0.8) == [
        ("first", 1.0), ("ben-hiking", pytest.approx(0.8)), ("ana-camping", pytest.approx(0.8 * 2 / 3))
    ]
    # the topic without the name, as many hits as the ranking holds
    assert asked == [("hobbies", 2)]
    assert topic_hop(QUESTION, ranked, nearest, weight=0) == ranked


@pytest.fixture
def sessions(make_memory_on):
    """Each message of NAMED and ANAS said in a session of its own, on each backend
    (the topic query uses the dense index port only)."""
    make = make_memory_on
    hold(make, [*NAMED, *ANAS])
    return make


def test_a_set_question_finds_what_the_person_did_by_its_topic(sessions) -> None:
    # Every retrieved record shown (min_relevance 0): this is about what is ranked.
    memory = sessions(session_id="now", top_k=3, min_relevance=0.0)
    memory.get(QUESTION)
    shown = set(message_texts(memory.last_block.records))
    # The messages naming Ana fill the first ranking's candidates; her hobbies, near the
    # topic alone ("hobbies"), join it
    assert shown & set(ANAS)

    memory.source("vector").topic_weight = 0  # the control: without the topic query
    memory.get(QUESTION)
    assert not set(message_texts(memory.last_block.records)) & set(ANAS)


def test_only_a_question_that_asks_for_a_set_makes_a_topic_query(sessions) -> None:
    memory = sessions(session_id="now", top_k=3)
    search = memory.source("vector")._search
    topics: list[str] = []
    dense_hits = search.dense_hits

    def counted(query, scope, *args):
        topics.append(query)
        return dense_hits(query, scope, *args)

    search.dense_hits = counted
    memory.get("What is Ana's favourite hobby?")
    assert topics == []
    memory.get(QUESTION)
    # (one search, read further when the user's own questions among the hits leave it short)
    assert topics == ["hobbies"]


def test_topic_weight_is_between_0_and_1(make_memory) -> None:
    memory = make_memory()
    source = type(memory.source("vector"))
    with pytest.raises(ValueError, match="topic_weight is between 0"):
        source(memory.source("vector").store, memory.source("vector").index,
               memory.source("vector").embed_model, topic_weight=1.5)


def test_the_bench_chooses_the_set_spread_and_topic_weight_together_leave_one_out() -> None:
    from bench import multihop

    report = multihop.main(["--smoke", "--weights", "0.5", "--set-spreads", "1,1.3", "--topic-weights", "0,1"])
    assert report["leave_one_out"]["key"] == "setting"
    assert {(r["set_spread"], r["topic_weight"]) for r in report["rows"]} == {
        (1.0, 0.0), (1.0, 1.0), (1.3, 0.0), (1.3, 1.0)
    }
    assert set(report["weights"]) == {"1.00/0.00", "1.00/1.00", "1.30/0.00", "1.30/1.00"}
    only_topic = multihop.main(["--smoke", "--weights", "0.5", "--topic-weights", "0,1"])
    assert only_topic["leave_one_out"]["key"] == "topic_weight"
    with pytest.raises(SystemExit):  # the hop weight is chosen alone
        multihop.main(["--smoke", "--weights", "0,0.5", "--topic-weights", "0,1"])
