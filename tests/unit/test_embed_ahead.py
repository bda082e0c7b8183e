"""A question of two parts embeds its later parts and the whole question in background
threads, beside the first part's retrieval, with the same vectors and the same block."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from helpers import hold
from llama_memory import OfflineEmbedding
from llama_memory.embeddings import store_model
from llama_memory.embeddings.store_model import vector_cache

QUESTION = "Which tea do I like and which boat do I own?"
FIRST, SECOND = "Which tea do I like", "which boat do I own?"
STORED = (
    "My favourite tea is a smoky lapsang souchong, brewed strong.",
    "I drink tea every afternoon, green tea in summer and black tea in winter.",
    "My sailing boat is a 1978 wooden sloop called Marigold, moored in Cascais.",
)


@pytest.fixture
def embedded_on(monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The thread each query text was embedded on, by text."""
    threads: dict[str, str] = {}
    embed = OfflineEmbedding._get_query_embedding

    def recorded(self: OfflineEmbedding, query: str) -> list[float]:
        threads[query] = threading.current_thread().name
        return embed(self, query)

    monkeypatch.setattr(OfflineEmbedding, "_get_query_embedding", recorded)
    return threads


def block_of(memory) -> list[tuple[str, float | None]]:
    return [(r.text, None if r.relevance is None else round(r.relevance, 9)) for r in memory.last_block.records]


def test_the_later_parts_and_the_whole_question_embed_in_the_background(make_memory, embedded_on) -> None:
    hold(make_memory, STORED)
    memory = make_memory(session_id="now")
    vector_cache(memory.embed_model).clear()

    memory.get(QUESTION)

    # The first part in the caller's thread (nothing to wait for), the others ahead of it.
    assert embedded_on[FIRST] == threading.current_thread().name
    assert embedded_on[SECOND].startswith("llama-memory-embed")
    assert embedded_on[QUESTION].startswith("llama-memory-embed")


def test_a_question_of_one_part_embeds_in_the_callers_thread(make_memory, embedded_on) -> None:
    hold(make_memory, STORED)
    memory = make_memory(session_id="now")
    vector_cache(memory.embed_model).clear()

    memory.get("Which boat do I own?")

    assert embedded_on == {"Which boat do I own?": threading.current_thread().name}


def test_the_block_and_search_are_the_same_as_embedded_when_asked(make_memory, monkeypatch) -> None:
    hold(make_memory, STORED)
    memory = make_memory(session_id="now")
    cache = vector_cache(memory.embed_model)
    cache.clear()
    memory.get(QUESTION)
    ahead, vectors_ahead = block_of(memory), [cache.query(t) for t in (FIRST, SECOND, QUESTION)]
    found_ahead = [(r.text, r.relevance) for r in memory.search(QUESTION)]

    cache.clear()
    monkeypatch.setattr(store_model.VectorCache, "embed_ahead", lambda self, texts: None)
    memory.get(QUESTION)
    asked, vectors_asked = block_of(memory), [cache.query(t) for t in (FIRST, SECOND, QUESTION)]

    assert ahead == asked and len(asked) >= 2
    assert all(np.array_equal(a, b) for a, b in zip(vectors_ahead, vectors_asked))
    assert found_ahead == [(r.text, r.relevance) for r in memory.search(QUESTION)]


def test_a_vector_embedded_ahead_of_a_clear_is_not_kept(embed_model) -> None:
    cache = store_model.VectorCache(embed_model)
    gate = threading.Event()
    embed = cache._embed

    def slow(text: str) -> np.ndarray:
        gate.wait(10)
        return embed(text)

    cache._embed = slow  # type: ignore[method-assign]
    cache.embed_ahead(["a text of a user being forgotten"])
    coming = cache._coming["a text of a user being forgotten"]
    cache.clear()
    gate.set()
    coming.result(10)
    assert "a text of a user being forgotten" not in cache._queries
    assert cache._coming == {}


def test_a_failed_embedding_ahead_raises_in_the_caller(embed_model) -> None:
    cache = store_model.VectorCache(embed_model)
    calls = []
    embed = cache._embed

    def failing(text: str) -> np.ndarray:
        calls.append(threading.current_thread().name)
        if len(calls) == 1:
            raise RuntimeError("the model's first run failed")
        return embed(text)

    cache._embed = failing  # type: ignore[method-assign]
    cache.embed_ahead(["where do I live?"])
    vector = cache.query("where do I live?")  # embedded again, in this thread
    assert calls[0].startswith("llama-memory-embed") and calls[1] == threading.current_thread().name
    assert np.array_equal(vector, np.asarray(embed_model.get_query_embedding("where do I live?"), dtype=np.float32))
