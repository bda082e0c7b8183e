"""A store knows the embedding model that made its vectors, not only their dimension: a
fingerprint (the vector of a fixed probe text) refuses another model of the same
dimension, tolerates the small numeric differences of the same model, and
``reembed=True`` switches a store to a new model from the system of record."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.core.base.embeddings.base import BaseEmbedding

from helpers import Jittered, WordHashEmbedding, message_texts, user
from llama_memory import (
    ComposableMemory,
    EmbeddingDimensionError,
    EmbeddingMismatchError,
    EmbeddingModelError,
    OfflineEmbedding,
)
from llama_memory.embeddings import PROBE_TEXT

NOTES = [
    "My sister Maria lives in Porto.",
    "I am allergic to penicillin.",
    "Our cat is called Pimenta.",
]


def open_memory(path: Path, model: BaseEmbedding, **kwargs) -> ComposableMemory:
    return ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", path=path, embed_model=model, **kwargs
    )


def build_store(path: Path, model: BaseEmbedding, **kwargs) -> None:
    """A store whose vectors (and fingerprint) come from ``model``."""
    memory = open_memory(path, model, **kwargs)
    memory.put_messages([user(text) for text in NOTES])
    assert "I am allergic to penicillin." in message_texts(memory.search("penicillin", k=1))
    memory.close()


def dense_top(memory: ComposableMemory, query: str) -> str:
    """The best record by meaning alone (words off), so only the vectors decide."""
    vector = memory.source("vector")
    vector.lexical_weight = 0.0
    vector.excerpt_messages = 1
    try:
        return vector.retrieve(query, memory.scope, 1)[0].text
    finally:
        vector.lexical_weight = 1.0


def test_another_model_of_the_same_dimension_is_refused_naming_both(tmp_path: Path) -> None:
    first, second = WordHashEmbedding(seed=0), WordHashEmbedding(seed=1)
    build_store(tmp_path, first)

    # The same model with small numeric differences is the same model.
    same = open_memory(tmp_path, Jittered(inner=first, scale=1e-3))
    assert dense_top(same, "Where does my sister Maria live?") == NOTES[0]
    same.close()

    other = open_memory(tmp_path, second)
    other.put(user("Written through the other model."))  # the record needs no vector
    with pytest.raises(EmbeddingMismatchError) as caught:
        other.search("penicillin")
    message = str(caught.value)
    assert "WordHashEmbedding:word-hash-0" in message and "WordHashEmbedding:word-hash-1" in message
    assert "reembed=True" in message
    assert isinstance(caught.value, EmbeddingModelError)
    with pytest.raises(EmbeddingMismatchError):
        other.close()  # close() would index what waits: refused the same way

    # Nothing of the other model reached the index: the right model still finds by meaning.
    again = open_memory(tmp_path, first)
    assert dense_top(again, "Where does my sister Maria live?") == NOTES[0]
    assert "Written through the other model." in message_texts(again.search("other model", k=5))
    again.close()


def test_the_offline_model_is_recognised_and_another_one_refused(tmp_path: Path, embed_model) -> None:
    build_store(tmp_path, embed_model)
    # Another instance of the real model (its own session, one thread): accepted.
    fresh = open_memory(tmp_path, OfflineEmbedding(num_threads=1))
    assert dense_top(fresh, "Which medicine must I avoid?") == NOTES[1]
    fresh.close()

    stranger = open_memory(tmp_path, WordHashEmbedding())  # also 384 dimensions
    with pytest.raises(EmbeddingMismatchError, match="OfflineEmbedding:all-MiniLM-L6-v2-onnx-int8"):
        stranger.search("Which medicine must I avoid?")
    stranger.close()


def test_reembed_switches_the_store_to_the_new_model(tmp_path: Path) -> None:
    first, second = WordHashEmbedding(seed=0), WordHashEmbedding(seed=1)
    build_store(tmp_path, first, triples=True)
    memory = open_memory(tmp_path, first, triples=True)
    memory.add_triples([("Maria", "lives in", "Porto")])
    assert memory.triple_source.search("Maria", memory.scope, 1)
    memory.close()

    switched = open_memory(tmp_path, second, triples=True, reembed=True)
    # Every record was embedded again with the new model: meaning alone finds them.
    for text in NOTES:
        assert dense_top(switched, text) == text
    assert switched.triple_source.search("Where does Maria live?", switched.scope, 1)
    switched.close()

    # The store is the new model's now: the old one is refused, by name.
    old = open_memory(tmp_path, first)
    with pytest.raises(EmbeddingMismatchError, match="word-hash-1.*word-hash-0"):
        old.search("penicillin")
    old.close()

    # A model of another dimension too, once re-embedded.
    small = WordHashEmbedding(seed=2, embed_dim=64)
    with pytest.raises(EmbeddingDimensionError, match="reembed=True"):
        open_memory(tmp_path, small)
    resized = open_memory(tmp_path, small, reembed=True)
    assert dense_top(resized, "Our cat is called Pimenta.") == NOTES[2]
    resized.close()


class CountingProbe(WordHashEmbedding):
    """Counts how often the probe text is embedded."""

    probes: int = 0

    def _get_text_embedding(self, text: str) -> list[float]:
        if text == PROBE_TEXT:
            self.probes += 1
        return super()._get_text_embedding(text)


def test_the_fingerprint_costs_one_embedding_per_model_not_per_open(tmp_path: Path) -> None:
    model = CountingProbe()
    for session in ("s1", "s2", "s3"):  # a memory per request, one model for the process
        memory = ComposableMemory.from_defaults(
            user_id="alice", session_id=session, path=tmp_path, embed_model=model
        )
        memory.put(user(f"A note from {session}."))
        memory.search("note")
        memory.close()
    assert model.probes == 1


def test_a_store_from_before_fingerprints_is_checked_by_model_name(tmp_path: Path) -> None:
    first, second = WordHashEmbedding(seed=0), WordHashEmbedding(seed=1)
    build_store(tmp_path, first)
    memory = open_memory(tmp_path, first)
    memory._store.delete_meta(["embedding_fingerprint"])  # as an older version left it
    memory.close()

    other = open_memory(tmp_path, second)
    with pytest.raises(EmbeddingMismatchError, match="predates model fingerprints"):
        other.search("penicillin")
    other.close()
    # The model it names is taken at its word, and its fingerprint recorded from now on.
    same = open_memory(tmp_path, first)
    assert dense_top(same, "Where does my sister Maria live?") == NOTES[0]
    same.close()
    other = open_memory(tmp_path, second)
    with pytest.raises(EmbeddingMismatchError, match="cosine"):
        other.search("penicillin")
    other.close()
