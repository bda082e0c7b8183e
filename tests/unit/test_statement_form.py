"""A question is searched by its meaning blended with the statement that answers it."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import hold
from llama_memory import default_embedding
from llama_memory.embeddings.offline import vector_cache
from llama_memory.retrieval.statement_form import blend, statement_form


@pytest.mark.parametrize(
    ("question", "statement"),
    [
        ("Which city do I live in these days?", "I live in these days city"),
        ("What's my husband's name?", "my husband's name"),
        ("Am I allergic to anything?", "I am allergic to anything"),
        ("Who owns the flat we rent?", "owns the flat we rent"),
        ("If I ask about local events, which town am I in?", "If I ask about local events I am in town"),
        ("When did Caroline go to the support group?", "Caroline go to the support group"),
        ("Do we have a car?", "we have a car"),
    ],
)
def test_a_question_becomes_the_statement_it_asks_about(question: str, statement: str) -> None:
    assert statement_form(question) == statement


@pytest.mark.parametrize("text", ["hi", "I moved to Porto last month.", "What?", "", "Tell me about my week."])
def test_a_text_that_asks_nothing_has_no_statement_form(text: str) -> None:
    assert statement_form(text) is None


def test_the_blend_is_a_unit_vector_nearer_the_statement() -> None:
    question, statement = np.array([1.0, 0.0], dtype=np.float32), np.array([0.0, 1.0], dtype=np.float32)

    mixed = blend(question, statement, 0.5)

    assert np.isclose(np.linalg.norm(mixed), 1.0)
    assert mixed @ question > mixed @ statement > 0


def test_a_question_and_its_statement_form_are_embedded_in_one_batch() -> None:
    model = default_embedding()
    cache = vector_cache(model)
    cache.clear()
    calls: list[int] = []
    original = model._embed_batch

    def counted(texts: list[str]) -> np.ndarray:
        calls.append(len(texts))
        return original(texts)

    object.__setattr__(model, "_embed_batch", counted)
    try:
        question, stated = cache.queries(["Where do I live?", "I live"])
    finally:
        object.__delattr__(model, "_embed_batch")
    assert calls == [2]
    assert np.allclose(question, model.embed_array(["Where do I live?"])[0], atol=1e-5)
    assert np.allclose(stated, model.embed_array(["I live"])[0], atol=1e-5)


def test_a_question_finds_the_statement_a_look_alike_outranked(make_memory) -> None:
    # Searched by the question alone, the line about holidays is nearer "Where do I
    # live?" (a place one might be) than the move; by the question blended with "I
    # live", the move comes first. No word of the question is in either message.
    hold(make_memory, (
        "Somewhere warm would be nice for the holidays.",
        "We finally moved into a little flat in Porto last month, loving it.",
    ))
    memory = make_memory(session_id="now")

    found = memory.search("Where do I live?", k=1)

    assert [r.text for r in found] == ["We finally moved into a little flat in Porto last month, loving it."]
