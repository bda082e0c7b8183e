"""The dense index port: per-user partitions, nearest neighbours, deletes."""

from __future__ import annotations

import numpy as np


def test_vectors_are_kept_per_user_and_found_by_cosine(backend) -> None:
    index = backend.index()
    index.upsert("default", "alice", ["a", "b"], [[1.0, 0.0], [0.0, 1.0]])
    index.upsert("default", "bob", ["c"], [[1.0, 0.0]])
    hits = index.query("default", "alice", [0.9, 0.1], 2)
    assert [i for i, _ in hits] == ["a", "b"] and hits[0][1] > 0.9
    assert index.ids("default", "alice") == {"a", "b"}
    index.delete("default", "alice", ["a"])
    assert index.ids("default", "alice") == {"b"} and index.count("default", "bob") == 1
    index.drop("default", "alice")
    assert index.query("default", "alice", [1.0, 0.0], 5) == []
    assert index.collection_names() == [index.collection_name("default", "bob")]


def test_stored_vectors_come_back_as_arrays_of_their_values(backend) -> None:
    # The PostgreSQL backend reads them in pgvector's binary form (its text form took
    # 0.2 ms a vector to parse): arrays, as Chroma gives them, of the stored values.
    index = backend.index()
    stored = {"a": [0.1, -2.5, 3.0e-5], "b": [1.0 / 3.0, 7.0, -0.0]}
    index.upsert("default", "alice", list(stored), list(stored.values()))
    found = index.vectors("default", "alice", ["a", "b", "missing"])
    assert set(found) == {"a", "b"}
    for record_id, vector in found.items():
        assert isinstance(vector, np.ndarray)
        # (Chroma's may differ in the last bit of a float32)
        assert np.allclose(vector, stored[record_id], rtol=1e-6, atol=0), record_id


def test_a_query_leaves_out_the_ids_it_is_told(backend) -> None:
    index = backend.index()
    ids = [f"v{n}" for n in range(6)]
    index.upsert("default", "alice", ids, [[1.0, n / 10] for n in range(6)])
    everything = [i for i, _ in index.query("default", "alice", [1.0, 0.0], 6)]
    assert everything == ids
    # The 2 nearest of the others, as if the left-out ids were not stored: not fewer.
    assert [i for i, _ in index.query("default", "alice", [1.0, 0.0], 2, {"v0", "v1", "v3"})] == ["v2", "v4"]
    assert index.query("default", "alice", [1.0, 0.0], 3, set(ids)) == []
