"""The question's background: a record's cosine counts by how far it rises above what
neutral chat gets for the same question, and that background is the question's own,
whatever the store holds."""

from __future__ import annotations

import pytest

from helpers import hold, user
from llama_memory import default_embedding
from llama_memory.embeddings.offline import vector_cache
from llama_memory.retrieval.background import NEUTRAL_CHAT, background
from llama_memory.retrieval.relevance import DEFAULT_CALIBRATION, Evidence

FACTS = (
    "My blood type is O negative, the nurse said it makes me a universal donor.",
    "We moved to Porto last month and I love the light over the river.",
    "Our beagle Biscuit ate a whole sock this morning and seems fine.",
)


def bg(question: str) -> float:
    vectors = vector_cache(default_embedding())
    return background(vectors, vectors.query(question))


def test_a_chatty_question_has_a_higher_background_than_a_specific_one() -> None:
    assert not {"How did your evening go?", "What is my blood type?"} & set(NEUTRAL_CHAT)
    chatty, specific = bg("How did your evening go?"), bg("What is my blood type?")
    assert chatty > specific + 0.2, (chatty, specific)


def test_the_same_cosine_means_less_for_a_question_near_all_chat() -> None:
    near_nothing = Evidence(cosine=0.4, lexical=0.0, personal=1.0, background=0.15)
    near_everything = Evidence(cosine=0.4, lexical=0.0, personal=1.0, background=0.5)
    assert DEFAULT_CALIBRATION.relevance(near_nothing) > 2 * DEFAULT_CALIBRATION.relevance(near_everything)


def test_the_background_is_the_questions_own_whatever_the_store_holds(make_memory) -> None:
    hold(make_memory, FACTS)
    memory = make_memory(session_id="now")
    question = "What is my blood type?"

    def backgrounds() -> list[float]:
        found = memory.search(question, k=5)
        assert found
        return [r.metadata["evidence"]["cosine"] - r.metadata["evidence"]["background_gap"] for r in found]

    alone = backgrounds()
    busy = make_memory(session_id="busy")
    busy.put_messages([user(f"Note {i}: the weekly report for project {i} went out on time.") for i in range(40)])
    busy.close()
    among_others = backgrounds()

    assert alone == pytest.approx([bg(question)] * len(alone), abs=1e-5)
    assert among_others == pytest.approx([bg(question)] * len(among_others), abs=1e-5)
