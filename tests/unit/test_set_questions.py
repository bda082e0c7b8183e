"""Questions that ask for a set: more records, from more sessions."""

from __future__ import annotations

import pytest

from helpers import hold, message_texts
from llama_memory.retrieval.excerpts import SET_SPREAD, asks_for_a_set, records_for

#: One hobby per session, as a conversation tells them: weeks apart, one turn each.
HOBBIES = (
    "Ana: my new hobby is pottery, I made a bowl at the class.",
    "Ana: climbing has become my favourite hobby, we went bouldering on Sunday.",
    "Ana: I took up chess as a hobby, I play online every evening.",
)
OTHERS = (
    "Ana: the dentist says my teeth are fine.",
    "Ana: I bought a new bike helmet, the old one was cracked.",
    "Ana: the weather forecast says rain all week, what a shame.",
)


@pytest.fixture
def sessions(make_memory):
    """Each of HOBBIES and OTHERS said in a session of its own."""
    hold(make_memory, [*HOBBIES, *OTHERS])
    return make_memory


def shown_sessions(memory) -> set[str]:
    return {r.session_id for r in memory.last_block.records if r.session_id}


def test_a_set_question_gets_turns_from_more_sessions_into_the_block(sessions) -> None:
    memory = sessions(session_id="now", top_k=2)
    memory.get("What hobbies does Ana have?")
    assert set(HOBBIES) <= set(message_texts(memory.last_block.records))
    assert len(shown_sessions(memory)) == 3

    memory.set_spread = 1  # the control: as many records as any other question
    memory.get("What hobbies does Ana have?")
    assert len(memory.last_block.records) == 2
    assert not set(HOBBIES) <= set(message_texts(memory.last_block.records))


def test_a_question_about_one_thing_gets_top_k_records(sessions) -> None:
    memory = sessions(session_id="now", top_k=2)
    memory.get("What is Ana's favourite hobby?")
    assert len(memory.last_block.records) == 2


@pytest.mark.parametrize("question", [
    "What activities does Melanie partake in?",
    "What pets does Nate have?",
    "Which cities has Jon visited?",
    "What kind of books does Caroline read?",
    "What outdoor activities has John done with his colleagues?",
    "How many children does Melanie have?",
    "What do Jon and Gina both have in common?",
    "What has Melanie painted?",
    "In what ways is Caroline participating in the LGBTQ community?",
])
def test_questions_that_ask_for_a_set(question: str) -> None:
    assert asks_for_a_set(question)


@pytest.mark.parametrize("question", [
    "What is Caroline's identity?",
    "What does Melanie do to destress?",
    "Which activity helps Nate escape?",
    "What kind of flooring is Jon looking for?",
    "When did Caroline go to the support group?",
    "Where did Caroline move from 4 years ago?",
    "What's the capital of Australia?",
    "hi",
    "",
])
def test_questions_about_one_thing(question: str) -> None:
    assert not asks_for_a_set(question)


def test_records_for_a_set_question() -> None:
    assert records_for("What pets does Nate have?", 10) == round(10 * SET_SPREAD) > 10
    assert records_for("What pets does Nate have?", 10, spread=1.3) == 13
    assert records_for("What pets does Nate have?", 10, spread=1) == 10
    assert records_for("What is Nate's pet called?", 10) == 10
    assert records_for("What pets does Nate have?", 0) == 0


def test_bad_spreads_and_questions_say_what_was_wrong(make_memory) -> None:
    with pytest.raises(ValueError, match="set spread .* is 1"):
        records_for("What pets does Nate have?", 10, spread=0.5)
    with pytest.raises(TypeError, match="as a str, not int"):
        asks_for_a_set(3)  # type: ignore[arg-type]
    memory = make_memory(session_id="now")
    spread = memory.set_spread
    with pytest.raises(ValueError, match="set_spread.* got 0.5"):
        memory.set_spread = 0.5  # refused where it is given, as from_defaults refuses it
    assert memory.set_spread == spread
    memory.get("What pets does Nate have?")  # and the memory still answers


def test_the_bench_chooses_the_set_spread_leave_one_out() -> None:
    from bench import multihop

    report = multihop.main(["--smoke", "--weights", "0.5", "--set-spreads", "1,1.3"])
    assert report["leave_one_out"]["key"] == "set_spread"
    assert {r["set_spread"] for r in report["rows"]} == {1.0, 1.3}
    assert set(report["weights"]) == {1.0, 1.3}
    with pytest.raises(SystemExit):  # one thing is chosen at a time
        multihop.main(["--smoke", "--weights", "0,0.5", "--set-spreads", "1,1.3"])


def test_the_set_spread_is_an_argument_and_survives_to_dict(make_memory, embed_model) -> None:
    from llama_memory import ComposableMemory

    memory = make_memory(session_id="now", set_spread=1.0)
    assert memory.set_spread == 1.0
    restored = ComposableMemory.from_dict(memory.to_dict(), embed_model=embed_model)
    try:
        assert restored.set_spread == 1.0
    finally:
        restored.close()
    with pytest.raises(ValueError, match="set_spread"):
        make_memory(session_id="bad", set_spread=0.5)
