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
