"""Tests of the offline embedding model, run against the real ONNX model (no mocks)."""

from __future__ import annotations

import copy
import math
import os
import pickle
import shutil
import sys
import threading
from pathlib import Path

import numpy as np
import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.embeddings import MockEmbedding
from tokenizers import Tokenizer

from llama_memory.core.errors import ModelIntegrityError
from llama_memory.embeddings.offline import (
    MODEL_SHA256,
    TOKENIZER_SHA256,
    OfflineEmbedding,
    default_embedding,
    default_model_path,
    default_tokenizer_path,
    embedding_dimension,
)
from llama_memory.embeddings.onnx_model import THREADS_VARIABLE, embed_threads

# Well over 256 word pieces.
LONG_TEXT = " ".join(
    f"Sentence {i}: the assistant should remember that the user prefers tea to coffee."
    for i in range(40)
)


@pytest.fixture(scope="module")
def emb() -> OfflineEmbedding:
    model = default_embedding()
    model.load()
    return model


def _cos(a: list[float], b: list[float]) -> float:
    va, vb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    return float(va @ vb / (np.linalg.norm(va) * np.linalg.norm(vb)))


def test_dimension_known_without_loading() -> None:
    model = OfflineEmbedding()
    assert model.dimension == 384
    assert not model.is_loaded
    assert model.model_name == "all-MiniLM-L6-v2-onnx-int8"
    assert model.embed_batch_size == 64
    assert model.max_length == 256
    assert OfflineEmbedding.class_name() == "OfflineEmbedding"


def test_query_embedding_is_384_dim_unit_vector(emb: OfflineEmbedding) -> None:
    vec = emb.get_query_embedding("What is my favourite colour?")
    assert len(vec) == 384
    assert all(isinstance(x, float) for x in vec)
    assert math.isclose(math.fsum(x * x for x in vec), 1.0, abs_tol=1e-5)


def test_semantic_similarity(emb: OfflineEmbedding) -> None:
    query = emb.get_query_embedding("I love pizza")
    food = emb.get_text_embedding("pepperoni pizza is my favourite food")
    stocks = emb.get_text_embedding("the stock market fell today")
    assert _cos(query, food) > _cos(query, stocks) + 0.3


def test_batch_matches_single_calls(emb: OfflineEmbedding) -> None:
    texts = [
        "hi",
        "The quick brown fox jumps over the lazy dog.",
        "",
        LONG_TEXT,
        "My daughter's birthday is on the 14th of March and she wants a bicycle.",
    ]
    raw = Tokenizer.from_file(str(default_tokenizer_path()))
    raw.no_truncation()
    raw.no_padding()
    assert len(raw.encode(LONG_TEXT).ids) > 256
    batch = emb.get_text_embedding_batch(texts)
    assert len(batch) == len(texts)
    for text, vec in zip(texts, batch):
        single = emb.get_text_embedding(text)
        np.testing.assert_allclose(vec, single, atol=1e-5)
        np.testing.assert_allclose(vec, emb.get_query_embedding(text), atol=1e-5)


def test_batches_larger_than_batch_size(emb: OfflineEmbedding) -> None:
    texts = [f"note number {i} about the garden" for i in range(70)]
    many = np.asarray(emb._get_text_embeddings(texts))  # 64 + 6 internally
    assert many.shape == (70, 384)
    np.testing.assert_allclose(many[65], emb.get_text_embedding(texts[65]), atol=1e-5)
    assert emb.embed_array([]).shape == (0, 384)
    # Batches are formed by length (less padding); the rows still follow the input order.
    mixed = [("word " * (i % 23)) + f"item {i}" for i in range(70)]
    rows = emb.embed_array(mixed)
    for i in (0, 22, 45, 69):
        np.testing.assert_allclose(rows[i], emb.get_text_embedding(mixed[i]), atol=1e-5)


def test_long_text_is_truncated_at_256_tokens(emb: OfflineEmbedding) -> None:
    longer = LONG_TEXT + " Completely different ending about volcanoes and finance." * 20
    np.testing.assert_allclose(
        emb.get_text_embedding(LONG_TEXT), emb.get_text_embedding(longer), atol=1e-6
    )
    vec = np.asarray(emb.get_text_embedding(longer))
    assert np.all(np.isfinite(vec))


@pytest.mark.parametrize("text", ["", "   ", "\n"])
def test_empty_text_gives_finite_unit_vector(emb: OfflineEmbedding, text: str) -> None:
    vec = np.asarray(emb.get_text_embedding(text))
    assert vec.shape == (384,)
    assert np.all(np.isfinite(vec))
    assert math.isclose(float(np.linalg.norm(vec)), 1.0, abs_tol=1e-5)


def test_tokenizer_checksum_mismatch(tmp_path: Path) -> None:
    bad = tmp_path / "tokenizer.json"
    data = bytearray(default_tokenizer_path().read_bytes())
    data[-2] = ord(" ") if data[-2] != ord(" ") else ord("\n")  # still valid JSON
    bad.write_bytes(bytes(data))
    model = OfflineEmbedding(tokenizer_path=str(bad))
    with pytest.raises(ModelIntegrityError) as info:
        model.get_query_embedding("hello")
    message = str(info.value)
    assert str(bad) in message
    assert TOKENIZER_SHA256 in message
    assert "actual sha256 " in message
    assert not model.is_loaded


def test_model_checksum_mismatch(tmp_path: Path) -> None:
    bad = tmp_path / "model.onnx"
    shutil.copyfile(default_model_path(), bad)
    with bad.open("r+b") as fh:
        fh.seek(-1, 2)
        last = fh.read(1)
        fh.seek(-1, 2)
        fh.write(bytes([last[0] ^ 0xFF]))
    model = OfflineEmbedding(model_path=str(bad))
    with pytest.raises(ModelIntegrityError) as info:
        model.load()
    assert str(bad) in str(info.value)
    assert MODEL_SHA256 in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    model = OfflineEmbedding(tokenizer_path=str(missing), verify_checksum=False)
    with pytest.raises(ModelIntegrityError, match="missing") as info:
        model.get_text_embedding("hello")
    assert str(missing) in str(info.value)


@pytest.mark.parametrize("missing", ["onnxruntime", "tokenizers"])
def test_a_runtime_that_cannot_be_imported_says_what_to_do(monkeypatch: pytest.MonkeyPatch, missing: str) -> None:
    """A platform without the runtime's wheel: not a bare ModuleNotFoundError from inside."""
    monkeypatch.setitem(sys.modules, missing, None)  # its import fails, as when not installed
    model = OfflineEmbedding()
    with pytest.raises(ModelIntegrityError, match=rf"runs on onnxruntime and tokenizers, .*\(import of {missing} .*pass embed_model="):
        model.get_text_embedding("hello")


def test_file_settings_are_frozen() -> None:
    model = OfflineEmbedding()
    with pytest.raises(Exception):
        model.max_length = 128  # type: ignore[misc]
    model.embed_batch_size = 8  # ordinary settings stay mutable
    assert model.embed_batch_size == 8


def test_default_embedding_is_shared() -> None:
    first = default_embedding()
    assert default_embedding() is first
    assert isinstance(first, OfflineEmbedding)


def test_concurrent_first_use_loads_once() -> None:
    model = OfflineEmbedding()
    barrier = threading.Barrier(4)
    results: list[list[float]] = []
    sessions: list[object] = []
    errors: list[BaseException] = []

    def work() -> None:
        try:
            barrier.wait()
            results.append(model.get_query_embedding("shared first load"))
            sessions.append(model._session)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert len({id(s) for s in sessions}) == 1
    for vec in results[1:]:
        np.testing.assert_allclose(vec, results[0], atol=1e-6)


async def test_async_variants(emb: OfflineEmbedding) -> None:
    query = await emb.aget_query_embedding("I love pizza")
    np.testing.assert_allclose(query, emb.get_query_embedding("I love pizza"), atol=1e-6)
    text = await emb.aget_text_embedding("pizza")
    assert len(text) == 384
    batch = await emb.aget_text_embedding_batch(["a", "pizza", ""])
    assert len(batch) == 3
    np.testing.assert_allclose(batch[1], text, atol=1e-5)


def test_deepcopy_and_pickle(emb: OfflineEmbedding) -> None:
    clone = copy.deepcopy(emb)
    assert clone is not emb
    assert clone._session is emb._session  # the loaded model is shared, not reloaded
    assert clone._lock is not emb._lock
    restored = pickle.loads(pickle.dumps(emb))
    assert not restored.is_loaded
    assert restored.embed_batch_size == emb.embed_batch_size
    assert emb.is_loaded  # pickling does not strip the live instance


class _UnknownEmbedding(BaseEmbedding):
    """An embedding whose dimension cannot be known without calling it."""

    def _get_query_embedding(self, query: str) -> list[float]:
        raise AssertionError("embedding_dimension must not call the model")

    async def _aget_query_embedding(self, query: str) -> list[float]:
        raise AssertionError("embedding_dimension must not call the model")

    def _get_text_embedding(self, text: str) -> list[float]:
        raise AssertionError("embedding_dimension must not call the model")


def test_embedding_dimension() -> None:
    assert embedding_dimension(default_embedding()) == 384
    assert embedding_dimension(OfflineEmbedding()) == 384
    assert embedding_dimension(MockEmbedding(embed_dim=8)) == 8
    assert embedding_dimension(_UnknownEmbedding()) is None


def test_vector_cache_is_shared_per_model_and_reuses_vectors_only_when_symmetric(embed_model) -> None:
    from llama_memory.embeddings.store_model import vector_cache

    cache = vector_cache(embed_model)
    assert vector_cache(embed_model) is cache
    text = "A sentence embedded first as a query, then as a document."
    query = cache.query(text)
    [document] = cache.documents([text])
    assert document is query  # symmetric: the same vector, not a second embedding
    assert np.allclose(query, embed_model.get_text_embedding(text), atol=1e-5)

    asymmetric = MockEmbedding(embed_dim=8)
    other = vector_cache(asymmetric)
    assert other is not cache
    [doc] = other.documents(["x"])
    assert other.query("x") is not doc and other.query("x") is other.query("x")


def test_the_threads_variable_sets_the_sessions_threads_unless_num_threads_is_given(monkeypatch) -> None:
    # A worker process among several: its session takes the threads the variable gives.
    monkeypatch.setenv(THREADS_VARIABLE, "3")
    assert embed_threads() == 3
    model = OfflineEmbedding()
    model.get_query_embedding("how many threads")
    assert model._session is not None and model._session.get_session_options().intra_op_num_threads == 3
    given = OfflineEmbedding(num_threads=1)
    given.get_query_embedding("how many threads")
    assert given._session is not None and given._session.get_session_options().intra_op_num_threads == 1
    monkeypatch.delenv(THREADS_VARIABLE)
    assert embed_threads() == len(os.sched_getaffinity(0))


@pytest.mark.parametrize("value", ["0", "-2", "two", "1.5"])
def test_a_bad_threads_variable_says_what_it_takes(monkeypatch, value: str) -> None:
    monkeypatch.setenv(THREADS_VARIABLE, value)
    with pytest.raises(ValueError, match=f"LLAMA_MEMORY_EMBED_THREADS must be .* at least 1.*not '{value}'"):
        OfflineEmbedding().get_query_embedding("how many threads")


def test_the_sessions_idle_workers_sleep_instead_of_spinning() -> None:
    # Spinning workers took the cores from the search and the database after each query
    # embedding (and from other processes); the vectors are the same either way.
    from llama_memory.embeddings.onnx_model import SPINNING

    model = OfflineEmbedding(num_threads=2)
    model.get_query_embedding("do the workers spin")
    assert model._session is not None
    assert model._session.get_session_options().get_session_config_entry(SPINNING) == "0"
