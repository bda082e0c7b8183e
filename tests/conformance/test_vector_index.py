"""The dense index port: per-user partitions, nearest neighbours, deletes."""

from __future__ import annotations


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
