"""The one index sync and the one hybrid search serve any indexed collection, not only
the vector source's: here a collection of its own, on the real SQLite store and an
in-process Chroma, with the vectors held in memory turned off (what the triple source
needs)."""

from __future__ import annotations

import numpy as np

from helpers import WordHashEmbedding
from llama_memory.core.types import Scope
from llama_memory.retrieval.hybrid import HybridSearch
from llama_memory.retrieval.sync import IndexSync
from llama_memory.storage.chroma import DenseIndex, ephemeral_client
from llama_memory.storage.ports import NewRecord
from llama_memory.storage.sqlite import SQLiteStore

ALICE = Scope(user_id="alice", session_id="s1")
FACTS = ["alice keeps bees", "alice lives in lyon", "alice plays the cello", "bob keeps goats"]


def collection() -> tuple[SQLiteStore, IndexSync, list[str], list[int]]:
    model = WordHashEmbedding()
    calls: list[int] = []

    def embed(texts: list[str]) -> list[np.ndarray]:
        calls.append(len(texts))
        return [np.asarray(v, dtype=np.float32) for v in model.get_text_embedding_batch(texts)]

    store = SQLiteStore()
    ids = store.add_records(
        [NewRecord("facts", ALICE, text, (f"m{n}",), None) for n, text in enumerate(FACTS[:3])]
        + [NewRecord("facts", Scope(user_id="bob"), FACTS[3], ("m9",), None)]
    )
    index = DenseIndex(ephemeral_client(), DenseIndex.unique_prefix("facts"))
    return store, IndexSync(store, index, "facts", embed, batch_size=2, resident_limit=0), ids, calls


def test_rows_are_embedded_in_batches_written_per_user_and_marked_indexed() -> None:
    store, sync, ids, calls = collection()
    assert sync.flush() == 4
    assert calls == [2, 2]  # batches of batch_size
    assert sync.index.ids("default", "alice") == set(ids[:3])
    assert sync.index.ids("default", "bob") == {ids[3]}
    assert store.pending_records("facts", 10) == []
    assert sync.flush() == 0 and calls == [2, 2]  # nothing waits: nothing embedded again


def test_reconcile_and_reindex_bring_the_index_back_in_line_with_the_rows() -> None:
    store, sync, ids, _ = collection()
    sync.flush()
    sync.index.delete("default", "alice", ids[:1])  # a vector lost
    sync.index.upsert("default", "alice", ["ghost"], [[1.0] + [0.0] * 383])  # an orphan
    report = sync.reconcile(catch_up=True, owner=("default", "alice"))
    assert (report.missing, report.orphans, report.indexed) == (1, 1, 1)
    assert sync.index.ids("default", "alice") == set(ids[:3])
    assert sync.reindex() == 4 and sync.index.count("default", "alice") == 3


def test_the_hybrid_search_finds_a_users_rows_by_words_and_by_meaning() -> None:
    store, sync, ids, _ = collection()
    model = WordHashEmbedding()
    search = HybridSearch(
        sync, store, lambda q: np.asarray(model.get_query_embedding(q), dtype=np.float32)
    )
    ranked = search.search("who keeps bees", ALICE, 3)  # embeds what waits first
    assert ranked[0][0] == ids[0] and ids[3] not in dict(ranked)  # bob's row never
    lexical, dense = search.candidates("cello", ALICE, 3)
    assert [i for i, _ in lexical] == [ids[2]] and set(dense) == set(ids[:3])
    words_only = search.search("cello", ALICE, 3, dense_weight=0.0)
    assert [i for i, _ in words_only] == [ids[2]]


def test_the_vectors_held_in_memory_are_bounded_over_all_users() -> None:
    store, _, _, _ = collection()
    model = WordHashEmbedding()

    def embed(texts: list[str]) -> list[np.ndarray]:
        return [np.asarray(v, dtype=np.float32) for v in model.get_text_embedding_batch(texts)]

    loads: list[str] = []
    user_vectors = store.user_vectors

    def counted(source: str, tenant_id: str, user_id: str, limit: int):
        loads.append(user_id)
        return user_vectors(source, tenant_id, user_id, limit)

    store.user_vectors = counted  # type: ignore[method-assign]
    index = DenseIndex(ephemeral_client(), DenseIndex.unique_prefix("facts"))
    for total, reloaded in ((4, []), (3, ["alice"])):
        sync = IndexSync(store, index, "facts", embed, resident_limit=10, resident_total=total)
        sync.flush()
        loads.clear()
        held = [sync.resident(owner, 384) for owner in (("default", "alice"), ("default", "bob"))]
        assert [len(h) for h in held if h is not None] == [3, 1]
        # Alice's 3 and Bob's 1 fit in 4; in 3, Alice's (searched longest ago) are dropped.
        assert sync.resident(("default", "alice"), 384) is not None
        assert loads == ["alice", "bob", *reloaded], total


def test_each_side_is_searched_once_and_read_further_when_those_set_apart_leave_it_short() -> None:
    # The lexical side found every match it holds (one); the dense side is left short by
    # those set apart: it is read further, and neither side is searched again.
    store, sync, ids, _ = collection()
    more = store.add_records(
        [NewRecord("facts", ALICE, f"alice wrote note number {n}", (f"n{n}",), None) for n in range(9)]
    )
    model = WordHashEmbedding()
    search = HybridSearch(sync, store, lambda q: np.asarray(model.get_query_embedding(q), dtype=np.float32))
    apart = {ids[0], *more[:7]}  # the best hit of both sides among them
    lexical_asks: list[int] = []
    rank_text = store.rank_text

    def counted(query, scope, source, exclude=(), first=30):
        lexical_asks.append(first)
        return rank_text(query, scope, source, exclude, first)

    store.rank_text = counted  # type: ignore[method-assign]
    searched: list[int] = []
    hits = search._hits

    def counted_hits(query, scope, owner, first, *args):
        searched.append(first)
        return hits(query, scope, owner, first, *args)

    search._hits = counted_hits  # type: ignore[method-assign]
    ranked, aside = search.search_apart("who keeps bees", ALICE, 2, lambda found: apart & set(found))
    assert lexical_asks == [2] and searched == [2]  # one search each, however short
    assert aside[0][0] == ids[0] and len(ranked) >= 2
    assert not {i for i, _ in ranked} & apart and not {i for i, _ in aside} - apart
