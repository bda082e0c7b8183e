"""Vectors held in memory: exact search, kept in step with this memory's writes and
reloaded after anyone else's, on real SQLite, real Chroma and the real offline model."""

from __future__ import annotations

import numpy as np
import pytest

from helpers import message_texts, user
from llama_memory.retrieval.sync import ResidentVectors

BEES = "I keep bees on the roof of my building."
FILLER = [f"Today I watered the {plant}." for plant in ("roses", "tulips", "cactus", "ferns")]


def test_search_is_exact_and_a_new_vector_replaces_the_old() -> None:
    rng = np.random.default_rng(7)
    matrix = rng.standard_normal((150, 16)).astype(np.float32)  # grows past its first capacity
    held = ResidentVectors(16)
    held.add([f"r{i}" for i in range(100)], matrix[:100])
    held.add([f"r{i}" for i in range(100, 150)], matrix[100:])
    query = rng.standard_normal(16)
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    cosines = unit @ (query / np.linalg.norm(query))
    best = np.argsort(-cosines)[:5]
    found = held.search(query, 5)
    assert [i for i, _ in found] == [f"r{i}" for i in best]
    assert np.allclose([s for _, s in found], cosines[best], atol=1e-5)
    assert len(held.search(query, 500)) == len(held) == 150
    held.add(["r3"], [query])  # r3 now points where the query does
    assert held.search(query, 1) == [("r3", pytest.approx(1.0, abs=1e-5))]
    assert len(held) == 150 and "r3" in held and "r150" not in held
    assert set(held.vectors(["r3", "nope"])) == {"r3"}
    with pytest.raises(ValueError, match="2 record ids but 1 vectors"):
        held.add(["a", "b"], [query])


def test_a_write_by_another_memory_is_seen_by_meaning(make_memory) -> None:
    reader = make_memory(session_id="s1")
    reader.put_messages([user(t) for t in FILLER])
    reader.source("vector").flush()
    assert "roses" in message_texts(reader.search("flowers in the garden", k=1))[0]  # loaded
    writer = make_memory(session_id="s2")  # another connection to the same file
    writer.put(user(BEES))
    writer.source("vector").flush()  # indexed there: nothing is left pending for the reader
    # No word in common: only the vector finds it, so the reader's held set was reloaded.
    found = message_texts(reader.search("apiary hobby with honey", k=1))
    assert found and BEES in found[0]


def test_a_user_past_the_limit_is_searched_in_chroma(make_memory) -> None:
    memory = make_memory(session_id="s1")
    memory.put_messages([user(t) for t in [*FILLER, BEES]])
    vectors = memory.source("vector")
    vectors.flush()
    vectors.index.clear()  # Chroma lost: only the held vectors still know the meaning
    assert BEES in message_texts(memory.search("apiary hobby with honey", k=1))
    vectors.resident_limit = len(FILLER)  # one too few: Chroma answers, and has nothing
    assert memory.search("apiary hobby with honey", k=1) == []
    assert vectors.reindex() == len(FILLER) + 1
    assert BEES in message_texts(memory.search("apiary hobby with honey", k=1))


def test_forgetting_a_user_empties_what_is_held(make_memory) -> None:
    memory = make_memory(session_id="s1")
    memory.put_messages([user(t) for t in [*FILLER, BEES]])
    memory.source("vector").flush()
    assert memory.search("apiary hobby with honey", k=1)
    memory.forget()
    assert memory.search("apiary hobby with honey", k=1) == []
    memory.put(user("I collect stamps from Peru."))
    assert message_texts(memory.search("philately", k=5)) == ["I collect stamps from Peru."]


def test_a_search_leaves_out_the_ids_it_is_told_and_still_gives_k() -> None:
    held = ResidentVectors(2)
    held.add([f"v{n}" for n in range(5)], [[1.0, n / 10] for n in range(5)])
    assert [i for i, _ in held.search([1.0, 0.0], 2, {"v0", "v2", "absent"})] == ["v1", "v3"]
    assert [i for i, _ in held.search([1.0, 0.0], 9, {"v4"})] == ["v0", "v1", "v2", "v3"]
    assert held.search([1.0, 0.0], 3, {f"v{n}" for n in range(5)}) == []


class _NoMatmul(np.ndarray):
    """A matrix whose ``@`` fails: what the search must not use (see below)."""

    def __matmul__(self, other: object) -> np.ndarray:
        raise AssertionError("the search handed its product to matmul (OpenBLAS threads)")


def test_search_stays_on_the_calling_thread_and_ranks_as_matmul_does() -> None:
    # ``matrix @ vector`` splits a product of 2,000 x 384 over every core (OpenBLAS):
    # on a busy machine the threads wait for each other and one search cost 8-12 ms of
    # CPU instead of 0.15 ms. The search computes its cosines with einsum instead.
    rng = np.random.default_rng(11)
    matrix = rng.standard_normal((2000, 384)).astype(np.float32)
    held = ResidentVectors(384)
    held.add([f"r{i}" for i in range(2000)], matrix)
    query = rng.standard_normal(384)
    expected = held.search(query, 40)  # before the matrix refuses ``@``
    held._matrix = held._matrix.view(_NoMatmul)
    found = held.search(query, 40, exclude=["r1", "nope"])
    assert [i for i, _ in found] == [i for i, _ in expected if i != "r1"][:40]
    unit = matrix / np.linalg.norm(matrix, axis=1, keepdims=True)
    cosines = unit @ (query / np.linalg.norm(query)).astype(np.float32)
    order = [int(i[1:]) for i, _ in found]
    assert np.allclose([s for _, s in found], cosines[order], atol=1e-6)
    assert order == [i for i in np.argsort(-cosines, kind="stable") if i != 1][:40]


def test_the_cosines_of_candidates_outside_the_pool_stay_on_the_calling_thread_too() -> None:
    from llama_memory.retrieval.sync import add_cosines, cosine

    rng = np.random.default_rng(5)
    matrix = rng.standard_normal((120, 384)).astype(np.float32)  # past OpenBLAS's threading size
    query = rng.standard_normal(384)
    expected = (matrix @ query) / (np.linalg.norm(matrix, axis=1) * np.linalg.norm(query))
    assert np.allclose(cosine(matrix.view(_NoMatmul), query), expected, atol=1e-6)
    into = {"v0": 2.0}  # the larger one wins
    add_cosines(into, {f"v{i}": matrix[i] for i in range(120)}, query)
    assert into["v0"] == 2.0 and np.isclose(into["v7"], expected[7], atol=1e-6)
