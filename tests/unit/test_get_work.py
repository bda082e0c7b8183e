"""What one ``get()`` computes on SQLite, and no more: the window's records left out of a
lexical search after its sort (one statement, the same hits in the same order), each
candidate's text normalised once across retrievals, a record's plain metadata and single
message id read without the JSON decoder, and the window's texts read for the
calibration only when there is one. Real SQLite and Chroma; a word-hash model, and the
real offline model where the calibration is the default one's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import WordHashEmbedding, hold, memory_factory, user
from llama_memory.core.types import Scope
from llama_memory.retrieval import apart
from llama_memory.retrieval.apart import KnownLines, RecordReads, SetApart
from llama_memory.storage.ports import NewRecord
from llama_memory.storage.sql import records
from llama_memory.storage.sqlite.store import SQLiteStore

ALICE = Scope(user_id="alice", session_id="s1")


def note(text: str, mid: str, **kwargs) -> NewRecord:
    return NewRecord(source="vector", scope=ALICE, text=text, message_ids=(mid,), event_time=1.0, **kwargs)


@pytest.fixture
def store(tmp_path: Path):
    opened = SQLiteStore(tmp_path / "store.db")
    yield opened
    opened.close()


def traced(store: SQLiteStore) -> list[str]:
    """Every statement the store's connection runs from now, in order."""
    sent: list[str] = []
    store._conn.set_trace_callback(sent.append)
    return sent


def test_a_ranked_search_leaves_out_the_ids_it_is_told_after_its_sort_in_one_statement(store) -> None:
    # Scores tie by the dozen (the same words, the same length): the order of ties is
    # the sort's, and leaving ids out must keep it.
    ids = store.add_records([note(f"bees {'honey ' * (n % 3)}jar {n:03d}", f"m{n}") for n in range(90)])
    every = list(store.rank_text("bees honey jar", ALICE, "vector"))
    assert len(every) == 90 and len({s for _, s in every}) < 10
    left_out = frozenset(ids[::4])
    sent = traced(store)
    kept = list(store.rank_text("bees honey jar", ALICE, "vector", left_out))
    assert kept == [(i, s) for i, s in every if i not in left_out]
    # As the search with nothing left out: no look-up of the ids left out in the statement.
    searches = [s for s in sent if "bm25" in s]
    assert len(searches) == 1 and "json_each" not in searches[0]
    # Any collection of ids, not only a set.
    assert list(store.rank_text("bees honey jar", ALICE, "vector", list(left_out))) == kept


def test_a_candidate_text_is_normalised_once_across_retrievals_until_records_are_forgotten(store, monkeypatch) -> None:
    ids = store.add_records([note(f"Bees  on the roof, hive {n}", f"m{n}") for n in range(6)])
    normalised: list[str] = []
    normalize = apart.normalize_text

    def counting(text: str) -> str:
        normalised.append(text)
        return normalize(text)

    monkeypatch.setattr(apart, "normalize_text", counting)
    known = KnownLines()
    known.clear()  # nothing held from another test
    shown = frozenset({"bees on the roof, hive 2"})
    for _ in range(3):  # three retrievals of one get(), or three get()s
        pick = SetApart(RecordReads(store, ALICE, "vector", known), shown)
        assert pick(ids) == {ids[2]} and pick.own == {ids[2]}
    assert sorted(normalised) == sorted(f"Bees  on the roof, hive {n}" for n in range(6))
    # A ranking read further asks again about hits decided already: nothing is read.
    sent = traced(store)
    assert pick(ids[2:4]) == {ids[2]} and pick(ids[3:]) == set() and pick(["no-such-id", *ids]) == {ids[2]}
    assert [s for s in sent if "records" in s] == [s for s in sent if "no-such-id" in s]
    known.clear()  # records were forgotten: no text of theirs stays held
    SetApart(RecordReads(store, ALICE, "vector", known), shown)(ids)
    assert len(normalised) == 12


def test_records_are_read_back_the_same_with_or_without_the_json_decoder(store, monkeypatch) -> None:
    plain, tagged, quoted = store.add_records([
        note("plain message", "m1"),
        note("tagged message", "m2", metadata={"standalone": True, "tags": ["a", "b"]}),
        note("odd id message", 'm"3\\é'),
    ])  # fmt: skip
    store.add_records([note("plain message", "m4")])  # the same text: its ids merge
    decoded: list[str] = []
    loads = json.loads
    monkeypatch.setattr(records.json, "loads", lambda text, **kw: decoded.append(text) or loads(text, **kw))
    read = store.get_records([plain, tagged, quoted], ALICE, "vector")
    assert read[plain].message_ids == ["m1", "m4"] and read[plain].metadata == {}
    assert read[tagged].message_ids == ["m2"] and read[tagged].metadata == {"standalone": True, "tags": ["a", "b"]}
    assert read[quoted].message_ids == ['m"3\\é'] and read[quoted].metadata == {}
    # Decoded: the two ids merged, the metadata given and the id with a quote; not the
    # empty metadata nor a single plain id.
    assert sorted(decoded) == sorted(['["m1", "m4"]', json.dumps({"standalone": True, "tags": ["a", "b"]}),
                                      json.dumps(['m"3\\é'])])  # fmt: skip
    again = store.get_records([plain], ALICE, "vector")[plain]
    again.metadata["seen"] = True  # each record has a dict of its own
    assert store.get_records([plain], ALICE, "vector")[plain].metadata == {}


@pytest.mark.parametrize("calibrated", [False, True])
def test_the_window_texts_are_read_for_the_calibration_only_when_there_is_one(
    tmp_path: Path, monkeypatch, embed_model, calibrated: bool
) -> None:
    asked: list[str] = []
    own_texts = SetApart.own_texts

    def spy(self, query: str) -> list[str]:
        asked.append(query)
        return own_texts(self, query)

    monkeypatch.setattr(SetApart, "own_texts", spy)
    model = embed_model if calibrated else WordHashEmbedding()
    with memory_factory(model, path=tmp_path / "memory") as make:
        hold(make, ["I keep bees on the roof.", "The hive gave ten jars of honey."])
        memory = make(session_id="now")
        memory.put(user("How much honey did the bees give?"))
        memory.get()
        assert memory.last_block.records  # retrieved, with the window's message set apart
        assert (memory.source("vector").calibration is not None) is calibrated
    assert bool(asked) is calibrated
