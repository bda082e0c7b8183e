"""The words a search takes a text to have: contractions and possessives leave no
word "s" (or "re", "t"...) behind."""

from __future__ import annotations

import pytest

from helpers import hold
from llama_memory.core.text import word_tokens
from llama_memory.read.query_plan import is_small_talk
from llama_memory.retrieval.relevance import content_words, idf, lexical_share
from llama_memory.storage.sqlite import fts_query


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("What's my mum's job?", ["what", "my", "mum", "job"]),
        ("How’s my eyesight?", ["how", "my", "eyesight"]),  # a typographic apostrophe
        ("We're sure it isn't Ana's, I'd say", ["we", "sure", "it", "isn", "ana", "i", "say"]),
        ("rock'n'roll at 5 o'clock", ["rock", "n", "roll", "at", "5", "o", "clock"]),
    ],
)
def test_contraction_and_possessive_tails_are_no_words(text: str, expected: list[str]) -> None:
    assert word_tokens(text) == expected


def test_a_question_with_a_contraction_shares_no_word_with_records_full_of_them() -> None:
    # Before, "What's" and "mum's" each left a word "s" that "That's fine, he's late" held.
    query = content_words("What's my mum's job?")
    assert "s" not in query
    weights = {w: idf(1, 3) for w in query}
    assert lexical_share(query, weights, "That's fine, he's late, it's ok.") == 0.0
    assert lexical_share(query, weights, "My mum works as a nurse, her job is hard.") > 0.5
    assert fts_query("What's my mum's job?") == '"mum" OR "job"'


def test_greetings_with_contractions_are_still_small_talk() -> None:
    assert is_small_talk("how's it going?") and is_small_talk("what's up") and is_small_talk("whats up")
    assert not is_small_talk("What's my cat called?")


def test_lexical_search_finds_no_record_by_a_contraction_tail(make_memory) -> None:
    hold(make_memory, ["That's fine, he's late and she's tired, it's ok.", "The weather in Porto was grey all week."])
    memory = make_memory(session_id="now", min_relevance=0.0)
    store = memory.source("vector").store

    found = store.search_text("What's my mum's job?", memory.scope, "vector", 10)

    assert found == []
