"""A question that asks for two things is searched for each part."""

from __future__ import annotations

import pytest

from helpers import hold
from llama_memory.read.query_plan import choose_query, question_parts


@pytest.mark.parametrize(
    ("question", "parts"),
    [
        ("Which tea do I like and which boat do I own?", ("Which tea do I like", "which boat do I own?")),
        ("Where do I work, and who is my manager?", ("Where do I work", "who is my manager?")),
        ("What car do we own and do I still cycle to work?", ("What car do we own", "do I still cycle to work?")),
    ],
)
def test_a_question_of_two_questions_has_two_parts(question: str, parts: tuple[str, ...]) -> None:
    assert question_parts(question) == parts
    assert choose_query(question).parts == parts


@pytest.mark.parametrize(
    "question",
    [
        "What did Caroline and Melanie paint together?",  # one question about two people
        "What are my mum's and dad's names?",
        "How are you and what's up?",  # the second part names nothing
        "I like tea and I own a boat.",  # no question
        "Where do I live?",
    ],
)
def test_one_question_is_not_split(question: str) -> None:
    assert question_parts(question) == ()


#: A store where one topic crowds out the other: four messages about tea, one about a boat.
TEA_AND_BOAT = (
    "My favourite tea is a smoky lapsang souchong, brewed strong.",
    "I drink tea every afternoon, green tea in summer and black tea in winter.",
    "Bought a new teapot for the tea collection, a cast iron one.",
    "We tried a tea tasting in town, the oolong was lovely.",
    "My sailing boat is a 1978 wooden sloop called Marigold, moored in Cascais.",
)


def test_each_part_of_a_two_part_question_is_found(make_memory) -> None:
    hold(make_memory, TEA_AND_BOAT)
    memory = make_memory(session_id="now", top_k=2)

    memory.get("Which tea do I like and which boat do I own?")

    shown = [r.text for r in memory.last_block.records]
    assert any("tea" in t for t in shown) and any("Marigold" in t for t in shown)


def test_search_finds_each_part_too(make_memory) -> None:
    hold(make_memory, TEA_AND_BOAT)
    memory = make_memory(session_id="now")

    texts = [r.text for r in memory.search("Which tea do I like and which boat do I own?", k=2)]

    assert any("Marigold" in t for t in texts) and any("tea" in t for t in texts)


def test_a_profile_field_and_a_triple_answer_the_two_parts(make_memory) -> None:
    old = make_memory(session_id="old", triples=True)
    old.source("profile").set_field("favourite_tea", "lapsang souchong", old.scope)
    old.add_triples([("user", "owns the sailing boat", "Marigold")])
    old.close()
    hold(make_memory, TEA_AND_BOAT[1:4], triples=True)
    memory = make_memory(session_id="now", triples=True)

    memory.get("Which tea do I like and which boat do I own?")

    shown = memory.last_block.text
    assert "lapsang" in shown and "Marigold" in shown, shown


def test_each_part_keeps_the_places_of_a_question_of_one_part(make_memory) -> None:
    # Before, the merged rankings (each part's, then the whole question's) were cut to
    # one ranking's length: with three rankings each part kept a third of its places, and
    # a part's answer at its second place here was never shown.
    from llama_memory.read.pipeline import retrieve, retrieve_parts

    hold(make_memory, TEA_AND_BOAT)
    memory = make_memory(session_id="now", top_k=2)
    question = "Which tea do I like and which boat do I own?"
    parts = choose_query(question).parts

    merged = {r.id for r in retrieve_parts(memory._rt, question, parts, 2)}

    for part in parts:
        assert {r.id for r in retrieve(memory._rt, part, 2)} <= merged, part
