"""Word overlap cannot bury the records closest in meaning: the n-th closest ranks no
lower than (2n + 1)-th, whatever the words of the others say."""

from __future__ import annotations

from helpers import hold
from llama_memory.retrieval.ranking import fuse_scores

#: Five lines that share "play" with the question, and the one that answers it, which
#: shares no word with it and is the closest in meaning.
INSTRUMENT = (
    "We play board games every Friday night.",
    "My brother can play football really well.",
    "Put on some music to play while we cook.",
    "The band will play at the wedding in June.",
    "We play it by ear most weekends.",
    "I play chess online when I cannot sleep.",
    "Practising scales on the cello every evening before dinner.",
)


def test_the_closest_in_meaning_keeps_a_place_among_word_matches() -> None:
    lexical = [(f"w{n}", 10.0 - n * 0.1) for n in range(5)]
    dense = {"w0": 0.35, "w1": 0.34, "w2": 0.33, "w3": 0.32, "w4": 0.31, "m": 0.40, "far": 0.0}

    ranked = [i for i, _ in fuse_scores(lexical, dense)]

    assert ranked.index("m") <= 2


def test_search_finds_the_answer_that_shares_no_word_with_the_question(make_memory) -> None:
    hold(make_memory, INSTRUMENT)
    memory = make_memory(session_id="now")

    texts = [r.text for r in memory.search("Which instrument do I play?", k=3)]

    assert INSTRUMENT[-1] in texts, texts
