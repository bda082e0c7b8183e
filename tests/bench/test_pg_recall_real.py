"""``bench.pg_recall --data real``: recall of per-user HNSW search on the offline
model's embeddings of real-looking texts, end to end on the test
server at a small size (the published run: docs/benchmarks.md, "PostgreSQL")."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from bench import locomo, pg_recall, real_texts


@pytest.fixture
def tiny_locomo(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """The texts drawn from the tests' tiny LoCoMo file, their vectors cached in tmp_path."""
    monkeypatch.setattr(real_texts, "DEFAULT_DATA", locomo.SMOKE_DATA)
    monkeypatch.setattr(real_texts, "CACHE", tmp_path / "cache")
    return tmp_path / "cache"


def test_texts_are_distinct_and_a_smaller_run_is_a_larger_ones_beginning(tiny_locomo: Path) -> None:
    many = real_texts.texts(200)
    assert len(set(many)) == 200
    assert real_texts.texts(50) == many[:50]  # what lets a cache of 100k serve 20k
    assert "Marek" not in " ".join(many)  # the speakers renamed (Ines is also one of NAMES)
    assert len(real_texts.questions(5)) == 5


def test_vectors_are_cached_in_chunks_and_reused(tiny_locomo: Path) -> None:
    first = real_texts.cached_vectors(120, chunk=50)
    assert first.shape == (120, 384)
    assert np.allclose(np.linalg.norm(first, axis=1), 1.0, atol=1e-4)
    assert len(list(tiny_locomo.glob("*.npy"))) == 3
    assert np.array_equal(real_texts.cached_vectors(60, chunk=50), first[:60])  # from the cache


def test_real_data_recall_of_the_hnsw_path_is_measured(tiny_locomo: Path, postgres_url: str) -> None:
    report = pg_recall.run(postgres_url, 300, 5, ["all"], [], data="real")
    [result] = report["layouts"].values()
    assert report["data"] == "real" and result["user_rows"] == 300
    assert result["returned_min"] == pg_recall.K and 0.9 <= result["recall_mean"] <= 1.0
    with pytest.raises(ValueError, match="unknown data 'fake': synthetic or real"):
        pg_recall.run(postgres_url, 10, 1, ["all"], [], data="fake")
