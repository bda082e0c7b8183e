"""The scorings of ``bench.dense_variants`` on vectors small enough to check by hand (the
model itself is run by ``python -m bench.dense_variants``)."""

from __future__ import annotations

import numpy as np

from bench.dense_variants import cosine, hub, prf, topic


def _unit(rows: list[list[float]]) -> np.ndarray:
    m = np.asarray(rows, dtype=np.float64)
    return m / np.linalg.norm(m, axis=1, keepdims=True)


#: three near-identical chatter passages, one lone fact a little farther from the query
PASSAGES = _unit([[1, 0.30, 0], [1, 0.32, 0], [1, 0.34, 0], [1, 0, 0.5]])
QUERY = _unit([[1, 0.2, 0.25]])


def test_hubness_lifts_the_lone_passage_over_the_cluster() -> None:
    assert int(np.argmax(cosine(QUERY, PASSAGES))) != 3
    assert int(np.argmax(hub(0.5, 2)(QUERY, PASSAGES))) == 3
    # ranking again only the head by cosine gives the same when the head holds it
    assert int(np.argmax(hub(0.5, 2, depth=4)(QUERY, PASSAGES))) == 3


def test_feedback_moves_the_query_toward_its_best_hits() -> None:
    before, after = cosine(QUERY, PASSAGES)[0], prf(2, 1.0)(QUERY, PASSAGES)[0]
    assert after[:3].mean() - after[3] > before[:3].mean() - before[3]


def test_a_shared_topic_adds_its_weight() -> None:
    topics = _unit([[0, 0, 1], [0, 1, 0]])
    scores = topic("hard", 0.1, topics)(QUERY, PASSAGES) - cosine(QUERY, PASSAGES)
    same = (QUERY @ topics.T).argmax(1)[0] == (PASSAGES @ topics.T).argmax(1)
    assert np.allclose(scores[0], 0.1 * same)
