"""Rank fusion."""

from llama_memory.retrieval import fuse_rankings


def test_items_ranked_well_by_both_retrievers_come_first() -> None:
    dense = [("a", 0.9), ("b", 0.8), ("c", 0.7)]
    lexical = [("c", 12.0), ("a", 9.0), ("d", 1.0)]
    fused = [item for item, _ in fuse_rankings([(dense, 1.0), (lexical, 1.0)])]
    assert fused[:2] == ["a", "c"]
    assert set(fused) == {"a", "b", "c", "d"}


def test_weights_tilt_the_fusion_and_zero_turns_a_retriever_off() -> None:
    dense = [("a", 0.9), ("b", 0.8)]
    lexical = [("b", 5.0), ("a", 1.0)]
    assert fuse_rankings([(dense, 1.0), (lexical, 2.0)])[0][0] == "b"
    assert fuse_rankings([(dense, 2.0), (lexical, 1.0)])[0][0] == "a"
    assert [i for i, _ in fuse_rankings([(dense, 1.0), (lexical, 0.0)])] == ["a", "b"]


def test_word_overlap_alone_cannot_bury_the_closest_match_in_meaning() -> None:
    from llama_memory.retrieval import fuse_scores

    # "What do I usually eat?": many records share "eat" and little meaning; the fact
    # ("breakfast is always porridge") shares no word and is the closest in meaning.
    lexical = [("eat-1", 9.0), ("eat-2", 8.5), ("eat-3", 8.0)]
    dense = {"fact": 0.62, "eat-1": 0.20, "eat-2": 0.18, "eat-3": 0.15, "other": 0.10}

    fused = [item for item, _ in fuse_scores(lexical, dense)]

    assert fused[0] == "fact"


def test_words_still_lift_a_record_close_in_meaning() -> None:
    from llama_memory.retrieval import fuse_scores

    lexical = [("both", 5.0)]
    dense = {"meaning": 0.60, "both": 0.58, "far": 0.10}

    assert [item for item, _ in fuse_scores(lexical, dense)][:2] == ["both", "meaning"]
