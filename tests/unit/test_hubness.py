"""Hubness: a record near many others in the store ranks a little lower on the dense side."""

from __future__ import annotations

import numpy as np

from llama_memory.retrieval.hubness import HubnessCache, hubness, reranked


def _unit(rows: list[list[float]]) -> np.ndarray:
    m = np.asarray(rows, dtype=np.float32)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


def test_hubness_is_the_mean_cosine_of_the_nearest_others_without_the_record_itself() -> None:
    held = _unit([[1, 0], [1, 0.1], [1, 0.2], [0, 1]])
    value = hubness(held[:1], held, [0], neighbours=2)
    expected = float(np.mean(np.sort(held[1:] @ held[0])[-2:]))
    assert abs(float(value[0]) - expected) < 1e-6
    # a vector not held has no row of its own to leave out
    assert abs(float(hubness(held[:1], held, [None], neighbours=1)[0]) - 1.0) < 1e-6


def test_a_record_among_many_near_ones_falls_below_a_lone_one_slightly_farther() -> None:
    hits = iter([("chatter", 0.50), ("fact", 0.48), ("other", 0.10)])
    hubs = {"chatter": 0.9, "fact": 0.2, "other": 0.1}
    order = [i for i, _ in reranked(hits, lambda ids: hubs, first=3, weight=0.35)]
    assert order[:2] == ["fact", "chatter"]


def test_the_cache_computes_again_once_the_store_has_grown() -> None:
    calls: list[list[str]] = []

    def compute(ids):  # type: ignore[no-untyped-def]
        calls.append(list(ids))
        return {i: 0.5 for i in ids}

    cache, held = HubnessCache(), object()
    cache.values(held, 100, ["a", "b"], compute)
    cache.values(held, 105, ["a", "c"], compute)
    assert calls == [["a", "b"], ["c"]]
    cache.values(held, 200, ["a"], compute)
    assert calls[-1] == ["a"]
