"""The transaction spanning the ports: all or nothing, nested writes join it."""

from __future__ import annotations

import pytest
from llama_index.core.base.llms.types import ChatMessage

from llama_memory.core.types import Scope
from llama_memory.storage.ports import NewRecord

ALICE = Scope(user_id="alice", session_id="s1")


class Boom(Exception):
    pass


def test_a_failed_batch_leaves_nothing_of_any_port(backend) -> None:
    store = backend.open()
    ran: list[str] = []
    with pytest.raises(Boom):
        with store.transaction("put messages"):
            store.chat_log(ALICE).append([ChatMessage(role="user", content="hello")])
            store.add_records([NewRecord("vector", ALICE, "hello", ("m1",), 1.0)])
            store.enqueue("extract", {"m": "m1"})
            store.after_commit(lambda: ran.append("indexed"))
            raise Boom()
    again = backend.open()
    assert again.chat_log(ALICE).load() == []
    assert again.count_records("vector") == 0
    assert again.claim("w") is None
    assert ran == []  # work waiting for the commit is dropped with it


def test_a_committed_batch_is_all_there_and_then_runs_its_after_commit_work(backend) -> None:
    store = backend.open()
    ran: list[int] = []
    with store.transaction("put messages"):
        with store.transaction("nested"):  # joins the outer one
            store.add_records([NewRecord("vector", ALICE, "hello", ("m1",), 1.0)])
        store.chat_log(ALICE).append([ChatMessage(role="user", content="hello")])
        store.after_commit(lambda: ran.append(backend.open().count_records("vector")))
        assert ran == []
    assert ran == [1]  # ran after the commit: another store object sees the record
    assert [m.content for m in backend.open().chat_log(ALICE).load()] == ["hello"]


def test_the_change_token_moves_when_another_store_object_commits(backend) -> None:
    reader, writer = backend.open(), backend.open()
    before = reader.change_token()
    assert reader.change_token() == before
    writer.add_records([NewRecord("vector", ALICE, "hello", ("m1",), 1.0)])
    assert reader.change_token() != before


def test_the_change_token_stays_for_the_store_objects_own_writes_and_moves_for_anothers_among_them(
    backend,
) -> None:
    # Its own writes the memory applies itself (the held vectors): only another's
    # commit need make it reload, even when its own commit in between.
    store, other = backend.open(), backend.open()
    before = store.change_token()
    store.add_records([NewRecord("vector", ALICE, "mine", ("m1",), 1.0)])
    store.chat_log(ALICE).append([ChatMessage(role="user", content="mine")])
    assert store.change_token() == before
    store.add_records([NewRecord("vector", ALICE, "mine again", ("m2",), 2.0)])
    other.add_records([NewRecord("vector", ALICE, "theirs", ("m3",), 3.0)])
    store.add_records([NewRecord("vector", ALICE, "and mine", ("m4",), 4.0)])
    moved = store.change_token()
    assert moved != before
    assert store.change_token() == moved
