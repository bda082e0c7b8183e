"""A second model's cosine fused with the default's in ``bench.dense_variants``, and the
static token-table model it reads (the measurement itself is run by
``python -m bench.dense_variants --second wordllama``; wordllama is not a dependency, so
the one test that needs its files is skipped without it)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from bench.dense_variants import fused, rrf
from bench.embedders import StaticEmbedder, StaticSpec, read_safetensor

# Two queries and three passages in two 2-dimension spaces side by side (split at 2).
Q = np.asarray([[1.0, 0.0, 0.0, 1.0], [0.0, 1.0, 1.0, 0.0]])
P = np.asarray([[0.9, 0.1, 0.0, 1.0], [0.8, 0.6, 1.0, 0.0], [0.0, 1.0, 0.6, 0.8]])


def test_fused_adds_the_second_cosine_times_its_weight() -> None:
    first, second = Q[:, :2] @ P[:, :2].T, Q[:, 2:] @ P[:, 2:].T
    assert np.allclose(fused(0.0, 2)(Q, P), first)
    assert np.allclose(fused(1.0, 2, first=0.0)(Q, P), second)
    assert np.allclose(fused(0.5, 2)(Q, P), first + 0.5 * second)
    # the first query: passage 0 leads on the first model, passage 0 too on the second
    assert int(np.argmax(fused(0.5, 2)(Q, P)[0])) == 0


def test_rank_fusion_scores_by_the_ranks_alone() -> None:
    scores = rrf(10, 2)(Q, P)
    # the second query: first model ranks 2, 1, 0; second ranks 1, 2, 0
    assert np.allclose(scores[1], [1 / 13 + 1 / 13, 1 / 12 + 1 / 11, 1 / 11 + 1 / 12])
    assert np.allclose(rrf(10, 2, w=0.0)(Q, P)[1], [1 / 13, 1 / 12, 1 / 11])


def _safetensors(path: Path, table: np.ndarray) -> None:
    header = json.dumps({"embedding.weight": {"dtype": "F16", "shape": list(table.shape),
                                              "data_offsets": [0, table.astype(np.float16).nbytes]}}).encode()
    path.write_bytes(len(header).to_bytes(8, "little") + header + table.astype(np.float16).tobytes())


def test_a_static_model_averages_its_tokens_rows(tmp_path: Path) -> None:
    table = np.asarray([[5, 5, 5], [1, 0, 0], [0, 1, 0], [0, 0, 2]], dtype=np.float32)
    _safetensors(tmp_path / "w.safetensors", table)
    assert np.array_equal(read_safetensor(tmp_path / "w.safetensors", "embedding.weight"), table)
    tokenizer = Tokenizer(models.WordLevel({"[PAD]": 0, "tea": 1, "boat": 2, "[UNK]": 3}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    model = StaticEmbedder(StaticSpec("tiny", tmp_path / "w.safetensors", tmp_path / "tokenizer.json"))
    # the padding (a row of its own) is left out of the shorter texts' means
    vectors = model.embed(["tea boat", "tea", "tea tea boat xyz"])
    assert np.allclose(vectors[0], [2 ** -0.5, 2 ** -0.5, 0])
    assert np.allclose(vectors[1], [1, 0, 0])
    assert np.allclose(vectors[2], np.asarray([2, 1, 2]) / 3)


@pytest.mark.skipif(importlib.util.find_spec("wordllama") is None, reason="wordllama is not installed")
def test_wordllama_from_its_wheels_files_gives_its_own_vectors() -> None:
    from safetensors import safe_open
    from wordllama.inference import WordLlamaInference

    from bench.embedders import wordllama_spec

    spec = wordllama_spec()
    with safe_open(str(spec.weights), framework="np", device="cpu") as f:
        table = f.get_tensor("embedding.weight")
    theirs = WordLlamaInference(table, Tokenizer.from_file(str(spec.tokenizer)))
    texts = ["Where do I live?", "I just moved to Porto last month, still unpacking 😅", "What's my dog's name?"]
    assert np.allclose(StaticEmbedder(spec).embed(texts), theirs.embed(texts, norm=True), atol=1e-6)
