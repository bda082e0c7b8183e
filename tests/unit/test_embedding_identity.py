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
from llama_memory.embeddings.store_model import PROBE_TEXT

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

    with pytest.raises(EmbeddingMismatchError) as caught:
        open_memory(tmp_path, second)  # refused when it opens: it can write nothing
    message = str(caught.value)
    assert "WordHashEmbedding:word-hash-0" in message and "WordHashEmbedding:word-hash-1" in message
    assert "reembed=True" in message
    assert isinstance(caught.value, EmbeddingModelError)

    # Nothing of the other model reached the store: the right model still finds by meaning.
    again = open_memory(tmp_path, first)
    assert dense_top(again, "Where does my sister Maria live?") == NOTES[0]
    assert again.source("vector").store.count_records("vector") == len(NOTES)
    again.close()


def test_a_model_recorded_after_the_open_is_checked_before_the_first_put(tmp_path: Path) -> None:
    """Two memories open on a new store at once, with two models of one name and
    dimension: the first to embed makes the store its own, and the other's put() is
    refused before anything is written; its close() does not raise."""
    early = open_memory(tmp_path, WordHashEmbedding(seed=0))  # the store records no model yet
    other = WordHashEmbedding(seed=1, model_name="word-hash-0")  # same name, another space
    first = ComposableMemory.from_defaults(user_id="alice", session_id="s2", path=tmp_path, embed_model=other)
    first.put(user("Written through the first model to embed."))  # its vector waits
    store = early.source("vector").store
    with pytest.raises(EmbeddingMismatchError, match="cosine"):
        early.put(user("My sister Maria lives in Porto."))
    assert store.count_records("vector") == 1
    assert "My sister Maria lives in Porto." not in message_texts(early.get_all())
    early.close()  # would index the waiting record with its model: logged, never raised
    assert "Written through the first model to embed." in message_texts(first.search("first model"))
    first.close()


def test_the_offline_model_is_recognised_and_another_one_refused(tmp_path: Path, embed_model) -> None:
    build_store(tmp_path, embed_model)
    # Another instance of the real model (its own session, one thread): accepted.
    fresh = open_memory(tmp_path, OfflineEmbedding(num_threads=1))
    assert dense_top(fresh, "Which medicine must I avoid?") == NOTES[1]
    fresh.close()

    with pytest.raises(EmbeddingMismatchError, match="OfflineEmbedding:all-MiniLM-L6-v2-onnx-int8"):
        open_memory(tmp_path, WordHashEmbedding())  # also 384 dimensions


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
    with pytest.raises(EmbeddingMismatchError, match="word-hash-1.*word-hash-0"):
        open_memory(tmp_path, first)

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
    memory.runtime.store.delete_meta(["embedding_fingerprint"])  # as an older version left it
    memory.close()

    with pytest.raises(EmbeddingMismatchError, match="predates model fingerprints"):
        open_memory(tmp_path, second)
    # The model it names is taken at its word, and its fingerprint recorded from now on.
    same = open_memory(tmp_path, first)
    assert dense_top(same, "Where does my sister Maria live?") == NOTES[0]
    same.close()
    with pytest.raises(EmbeddingMismatchError, match="cosine"):
        open_memory(tmp_path, second)


def _open_databases(under: Path) -> list[str]:
    """The SQLite files under ``under`` this process holds open (Linux /proc; Chroma's
    files stay open in its process-wide client, by design)."""
    held = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = str(fd.readlink())
        except OSError:  # closed while listing
            continue
        if target.startswith(str(under)) and "memory.sqlite3" in target:
            held.append(target)
    return held


def test_a_refused_open_leaves_no_store_open(tmp_path: Path) -> None:
    """The refusal comes after the store opened (a source checks the model): the open
    that fails closes it, so the refused memory holds no file of the store."""
    build_store(tmp_path, WordHashEmbedding(seed=0))
    assert _open_databases(tmp_path) == []
    with pytest.raises(EmbeddingMismatchError) as caught:
        open_memory(tmp_path, WordHashEmbedding(seed=1))
    # Checked while the error (and its traceback, holding the failed open's frames) is
    # alive: what the open left open is still open now.
    assert caught.value is not None
    assert _open_databases(tmp_path) == []
