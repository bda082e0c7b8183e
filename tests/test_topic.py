"""The topic query of a question that asks for a set (issue 16, multi-hop): its topic
alone, searched by meaning among the turns of the person it names."""

from __future__ import annotations

import pytest

from helpers import memory_factory, message_texts, user
from llama_memory.retrieval.topic import named_speakers, speaker_of, topic_hop, topic_of

QUESTION = "What hobbies does Ana have?"
#: What Ana did, one session each: none shares a word with the question but her name.
ANAS = (
    "Ana: we went camping by the lake last weekend, the kids loved the campfire.",
    "Ana: I went swimming at the lido this morning, forty lengths!",
    "Ana: I signed up for a pottery class yesterday, I made a little bowl.",
)
#: The other speaker's hobbies, and his turns with the question's words: nearer the
#: question than Ana's hobbies, by meaning and by words; enough of them to fill the
#: first ranking's candidates.
BENS = (
    "Ben: I went hiking in the mountains and climbed to the summit.",
    "Ben: I play tennis every Sunday morning at the club.",
    "Ben: we went kayaking down the river on Saturday.",
    "Ben: I go running in the park before work.",
    "Ben: I joined a salsa dance class on Thursdays.",
    "Ben: I went cycling along the coast with friends.",
    "Ben: I play chess online every evening.",
    "Ben: I started learning the guitar, my fingers hurt.",
    "Ben: we went skiing in the Alps in February.",
    "Ben: I go fishing at the pier on Sundays.",
    "Ben: the hobbies fair at the community centre is in May, Ana.",
    "Ben: Ana, you have to come to the book club, it is my hobby.",
    "Ben: Ana, a hobby keeps you sane, I have a few.",
    "Ben: my hobbies take all my weekends, Ana.",
    "Ben: Ana, what hobbies did you have as a kid?",
)
#: Ana's other turns.
NEAR = tuple(
    f"Ana: {text}" for text in (
        "I paid the electricity bill and the water bill today.",
        "the dentist says my teeth are fine.",
        "my landlord finally fixed the heating.",
        "the train was late again this morning.",
        "I need to renew my passport before June.",
        "my sister is moving to Leeds next month.",
        "I bought a new phone, the old one broke.",
        "the weather forecast says rain all week.",
    )
)


def test_a_speaker_is_the_capitalised_name_before_the_colon_that_opens_a_message() -> None:
    assert speaker_of("Ana: we went camping") == "Ana"
    assert speaker_of("  Jean-Luc: hello") == "Jean-Luc"
    assert speaker_of("we went camping: it rained") is None
    assert speaker_of("note: buy milk") is None  # not capitalised: no name
    assert speaker_of("") is None


def test_the_speakers_a_question_names() -> None:
    texts = [*ANAS, *BENS]
    assert named_speakers(QUESTION, texts) == {"Ana"}
    assert named_speakers("What do Ana and Ben both like?", texts) == {"Ana", "Ben"}
    assert named_speakers("What activities does Cleo like?", texts) == set()


def test_the_topic_is_the_questions_content_words_without_the_person() -> None:
    assert topic_of("What activities does Ana partake in?", {"Ana"}) == "activities partake"
    assert topic_of("What activities does Ana partake in?") == "activities ana partake"
    assert topic_of("What has Ana done?", {"Ana"}) == "done"
    assert topic_of("What did Ana do?", {"Ana"}) == ""


TEXTS = {"first": BENS[6], "ana-camping": ANAS[0], "ben-hiking": BENS[0], "ana-pottery": ANAS[2]}


def _texts(ids):
    return {i: TEXTS[i] for i in ids if i in TEXTS}


def test_topic_hits_of_the_person_named_join_the_ranking_at_the_weight() -> None:
    asked = []

    def nearest(topic, count):
        asked.append((topic, count))
        return [("ben-hiking", 0.6), ("ana-camping", 0.5), ("ana-pottery", 0.3)]

    ranked = [("first", 1.0), ("ana-pottery", 0.5)]
    assert topic_hop(QUESTION, ranked, _texts, nearest, weight=0.8) == [
        ("first", 1.0), ("ana-camping", pytest.approx(0.8)), ("ana-pottery", 0.5)
    ]
    # the topic without the name, as many hits as the ranking holds; Ben's hit is not
    # Ana's turn, and the worst of Ana's hits keeps its own, higher score
    assert asked == [("hobbies", 2)]


def test_without_a_named_speaker_every_hit_counts_and_weight_0_is_off() -> None:
    ranked = [("first", 1.0)]
    hits = [("ben-hiking", 0.6), ("ana-camping", 0.5), ("ana-pottery", 0.3)]
    found = topic_hop("What activities do people partake in?", ranked, _texts,
                      lambda topic, count: hits, weight=0.5)
    # rescaled among the hits: the worst scores 0 and so joins nothing
    assert found == [("first", 1.0), ("ben-hiking", 0.5), ("ana-camping", pytest.approx(0.5 * 2 / 3))]
    assert topic_hop(QUESTION, ranked, _texts, lambda t, c: hits, weight=0) == ranked


@pytest.fixture(params=["sqlite", "postgres"])
def sessions(request, embed_model):
    """Each turn of ANAS, NEAR and BENS said in a session of its own, on each backend
    (the topic query uses the dense index port only)."""
    if request.param == "sqlite":
        make = request.getfixturevalue("make_memory")
    else:
        factory = memory_factory(embed_model, store=request.getfixturevalue("postgres_url"))
        make = factory.__enter__()
        request.addfinalizer(lambda: factory.__exit__(None, None, None))
    for n, text in enumerate([*NEAR, *ANAS, *BENS]):
        memory = make(session_id=f"old-{n}")
        memory.put(user(text))
        memory.close()
    return make


def test_a_set_question_finds_what_the_person_did_by_its_topic(sessions) -> None:
    memory = sessions(session_id="now", top_k=3)
    memory.get(QUESTION)
    shown = set(message_texts(memory.last_block.records))
    # Ben's turns fill the first ranking's candidates (his hobbies by meaning, his turns
    # with "hobby" by words); Ana's, nearest to the topic among her turns, join it
    assert shown & set(ANAS)
    assert not shown & set(BENS[:10])

    memory.source("vector").topic_weight = 0  # the control: without the topic query
    memory.get(QUESTION)
    assert not set(message_texts(memory.last_block.records)) & set(ANAS)


def test_only_a_question_that_asks_for_a_set_makes_a_topic_query(sessions) -> None:
    memory = sessions(session_id="now", top_k=3)
    search = memory.source("vector")._search
    topics: list[str] = []
    candidates = search.candidates

    def counted(query, scope, pool, **weights):
        if weights.get("lexical_weight") == 0:
            topics.append(query)
        return candidates(query, scope, pool, **weights)

    search.candidates = counted
    memory.get("What is Ana's favourite hobby?")
    assert topics == []
    memory.get(QUESTION)
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
