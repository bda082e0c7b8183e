"""Conformance of a triple timeline backend: the behaviour every implementation of
:class:`~llama_memory.storage.sql.triples.TripleTimeline` must have, written
against the port only, parametrised by backend (the one ``backend`` fixture of
``conftest.py``: a PostgreSQL backend adds itself there and runs exactly these tests).

Covers persistence, transactions (all or nothing, joining an open one), the update
rules' reads and writes, history, expiry (filter, refresh on read, purge),
forgetting, per-user isolation, lexical search, index bookkeeping and concurrent
writers.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Optional

import pytest

from llama_memory import Scope
from llama_memory.storage.ports.triples import NewTriple, TimelineEntry, TripleMention
from llama_memory.storage.sql.triples import TripleTimeline

if TYPE_CHECKING:
    from .conftest import Backend

T0 = 1_700_000_000.0
ALICE = Scope(user_id="alice")
BOB = Scope(user_id="bob")
ACME_ALICE = Scope(user_id="alice", tenant_id="acme")

Opener = Callable[[], TripleTimeline]


@pytest.fixture
def open_backend(backend: Backend) -> Opener:
    """Opens the backend's triple timeline on one location, as often as asked (each
    opening is another connection, as another process would have)."""
    return backend.triples


@pytest.fixture
def timeline(open_backend: Opener) -> TripleTimeline:
    return open_backend()


def mention(at: float = T0, session: Optional[str] = "s1", ids: tuple[str, ...] = ()) -> TripleMention:
    return TripleMention(session, ids, at, at, "api")


def new(
    id: str,
    subject: str = "Alice",
    predicate: str = "lives in",
    obj: str = "Paris",
    *,
    user: str = "alice",
    tenant: str = "default",
    start: float = T0,
    end: Optional[float] = None,
    successor: Optional[str] = None,
    ttl: Optional[float] = None,
) -> NewTriple:
    return NewTriple(
        id=id, tenant_id=tenant, user_id=user, subject=subject, predicate=predicate, object=obj,
        subject_key=subject.lower(), predicate_key=predicate.replace(" ", "_"),
        object_key=obj.lower(), valid_from=start, valid_to=end, superseded_by=successor,
        ttl=ttl, expires_at=start + ttl if ttl is not None else None,
        search_text=f"{subject} {predicate} {obj}", mention=mention(start),
    )  # fmt: skip


def ids(rows: list) -> list[str]:
    return [r.id for r in rows]


def words(found: list[tuple[str, float]]) -> list[str]:
    """The ids of a lexical search's (id, score) pairs, best first."""
    return [i for i, _ in found]


# --------------------------------------------------------------------------- persistence


def test_a_triple_and_its_mentions_persist_across_openings(open_backend: Opener) -> None:
    first = open_backend()
    with first.transaction("write"):
        first.insert(new("t1"))
        first.add_mention("t1", mention(T0 + 5, "s2", ("m1",)), None, None)
    [row] = open_backend().select(ALICE, T0)
    assert (row.id, row.subject, row.predicate, row.object) == ("t1", "Alice", "lives in", "Paris")
    assert (row.subject_key, row.predicate_key, row.object_key) == ("alice", "lives_in", "paris")
    assert (row.valid_from, row.valid_to, row.superseded_by) == (T0, None, None)
    assert [(m.session_id, m.message_ids, m.event_time) for m in row.mentions] == [
        ("s1", (), T0),
        ("s2", ("m1",), T0 + 5),
    ]


# --------------------------------------------------------------------------- transactions


def test_a_failed_transaction_writes_nothing(timeline: TripleTimeline) -> None:
    with pytest.raises(RuntimeError):
        with timeline.transaction("batch"):
            timeline.insert(new("t1"))
            timeline.end(["t1"], T0 + 1, "t2")
            raise RuntimeError("the batch fails half way")
    assert timeline.select(ALICE, T0) == []
    assert timeline.counts(ALICE, T0) == (0, 0)


def test_writes_inside_a_transaction_see_each_other_and_join_it(timeline: TripleTimeline) -> None:
    with pytest.raises(RuntimeError):
        with timeline.transaction("outer"):
            timeline.insert(new("t1"))
            with timeline.transaction("inner"):  # joins: committed only with the outer one
                timeline.insert(new("t2", obj="Berlin", start=T0 + 10))
            assert ids(timeline.timeline(ALICE, "alice", "lives_in")) == ["t1", "t2"]
            raise RuntimeError("the outer write fails")
    assert timeline.timeline(ALICE, "alice", "lives_in") == []


# --------------------------------------------------------------------------- the update rules


def test_a_timeline_is_ordered_by_start_then_write_order(timeline: TripleTimeline) -> None:
    with timeline.transaction("write"):
        timeline.insert(new("late", obj="Berlin", start=T0 + 20))
        timeline.insert(new("early", obj="Paris", start=T0, end=T0 + 20, successor="late"))
        timeline.insert(new("tie", obj="Rome", start=T0, end=T0 + 20, successor="late"))
        timeline.insert(new("other", predicate="works at", obj="ACME"))
    entries = timeline.timeline(ALICE, "alice", "lives_in")
    assert entries == [
        TimelineEntry("early", "paris", T0, T0 + 20),
        TimelineEntry("tie", "rome", T0, T0 + 20),
        TimelineEntry("late", "berlin", T0 + 20),
    ]


def test_superseding_ends_the_old_triple_and_keeps_it_in_history(timeline: TripleTimeline) -> None:
    with timeline.transaction("move"):
        timeline.insert(new("paris"))
        timeline.insert(new("berlin", obj="Berlin", start=T0 + 10))
        timeline.end(["paris"], T0 + 10, "berlin")
    assert timeline.current(ALICE, "alice", "lives_in", "paris") is None
    assert timeline.current(ALICE, "alice", "lives_in", "berlin") == TimelineEntry(
        "berlin", "berlin", T0 + 10
    )
    assert ids(timeline.select(ALICE, T0, include_history=False)) == ["berlin"]
    [old, now] = timeline.select(ALICE, T0, subject_key="alice", predicate_key="lives_in")
    assert (old.valid_to, old.superseded_by, now.valid_to) == (T0 + 10, "berlin", None)
    assert timeline.counts(ALICE, T0) == (2, 1)
    assert timeline.current_ids(ALICE, ["paris", "berlin", "nope"]) == {"berlin"}


def test_a_retracted_triple_ends_with_no_successor_and_stays_in_history(timeline: TripleTimeline) -> None:
    timeline.insert(new("paris"))
    timeline.end(["paris"], T0 + 10, None)  # "I don't live in Paris any more"
    assert timeline.current(ALICE, "alice", "lives_in", "paris") is None
    [old] = timeline.select(ALICE, T0, subject_key="alice", predicate_key="lives_in")
    assert (old.valid_to, old.superseded_by) == (T0 + 10, None)
    assert timeline.counts(ALICE, T0) == (1, 0)


def test_a_mention_renews_the_lifetime_and_a_start_can_move(timeline: TripleTimeline) -> None:
    with timeline.transaction("write"):
        timeline.insert(new("t1", ttl=100))
        timeline.add_mention("t1", mention(T0 + 50), 100, T0 + 150)
        timeline.move_start("t1", T0 - 30)
    [entry] = timeline.timeline(ALICE, "alice", "lives_in")
    assert (entry.valid_from, entry.ttl, entry.expires_at) == (T0 - 30, 100, T0 + 150)
    [row] = timeline.select(ALICE, T0)
    assert len(row.mentions) == 2 and row.expires_at == T0 + 150


def test_spellings_are_those_first_written(timeline: TripleTimeline) -> None:
    with timeline.transaction("write"):
        timeline.insert(new("t1", subject="John", predicate="likes", obj="Alice"))
        timeline.insert(new("t2", subject="alice", predicate="LIKES", obj="pizza"))
    assert timeline.entity_spelling(ALICE, "alice") == "Alice"  # as an object first
    assert timeline.predicate_spelling(ALICE, "likes") == "likes"
    assert timeline.entity_spelling(ALICE, "nobody") is None
    assert timeline.entity_spelling(BOB, "alice") is None


# --------------------------------------------------------------------------- reads


def test_lexical_search_matches_words_safely_and_current_triples_by_default(
    timeline: TripleTimeline,
) -> None:
    with timeline.transaction("write"):
        timeline.insert(new("paris", obj="Paris", end=T0 + 10, successor="berlin"))
        timeline.insert(new("berlin", obj="Berlin", start=T0 + 10))
        timeline.insert(new("pizza", predicate="likes", obj="pizza"))
    [(berlin, score)] = timeline.search_words(ALICE, "Paris or Berlin?", 10, False)
    assert berlin == "berlin" and score > 0  # higher is better: fusion divides by the best
    assert set(words(timeline.search_words(ALICE, "Paris or Berlin?", 10, True))) == {
        "paris",
        "berlin",
    }
    # Query syntax in user text is read as plain words, never as an error.
    assert words(timeline.search_words(ALICE, 'pizza" OR (NEAR* -', 10, False)) == ["pizza"]
    assert timeline.search_words(ALICE, "?!", 10, False) == []


def test_the_neighbourhood_and_known_entities(timeline: TripleTimeline) -> None:
    with timeline.transaction("write"):
        timeline.insert(new("friend", subject="Alice", predicate="has friend", obj="John", start=T0))
        timeline.insert(new("likes", subject="John", predicate="likes", obj="pizza", start=T0 + 5))
        timeline.insert(new("old", subject="Bob", predicate="knows", obj="John", end=T0 + 1, successor="x"))
    assert {e.id for e in timeline.touching(ALICE, ["john"], False)} == {"friend", "likes"}
    assert {e.id for e in timeline.touching(ALICE, ["john"], True)} == {
        "friend",
        "likes",
        "old",
    }
    names = timeline.entity_names(ALICE)
    assert names[:2] in (["John", "pizza"], ["pizza", "John"]) and set(names) == {"Alice", "John", "pizza"}


# --------------------------------------------------------------------------- expiry


def test_expired_triples_are_never_read_and_are_purged(timeline: TripleTimeline) -> None:
    with timeline.transaction("write"):
        timeline.insert(new("brief", obj="Paris", ttl=10))
        timeline.insert(new("kept", predicate="likes", obj="pizza"))
    assert timeline.counts(ALICE, T0 + 5) == (2, 2)
    assert ids(timeline.select(ALICE, T0 + 11)) == ["kept"]
    assert timeline.counts(ALICE, T0 + 11) == (1, 1)
    timeline.refresh_expiry(["brief", "kept"], T0 + 8)  # read at +8: lives until +18
    assert ids(timeline.select(ALICE, T0 + 15)) == ["brief", "kept"]
    gone = timeline.delete_expired(T0 + 20)
    assert [(r.tenant_id, r.user_id, r.id) for r in gone] == [("default", "alice", "brief")]
    assert ids(timeline.select(ALICE, 0.0)) == ["kept"]


# --------------------------------------------------------------------------- forgetting and isolation


def test_users_and_tenants_are_isolated_and_forgetting_one_keeps_the_others(
    timeline: TripleTimeline,
) -> None:
    with timeline.transaction("write"):
        timeline.insert(new("a", user="alice"))
        timeline.insert(new("b", user="bob"))
        timeline.insert(new("c", user="alice", tenant="acme"))
    assert ids(timeline.select(ALICE, T0)) == ["a"]
    assert ids(timeline.select(BOB, T0, ids=["a", "b", "c"])) == ["b"]
    assert words(timeline.search_words(BOB, "Paris", 10, False)) == ["b"]
    assert timeline.current_ids(BOB, ["a", "c"]) == set()
    timeline.delete_user(ALICE)
    assert timeline.select(ALICE, T0) == []
    assert timeline.search_words(ALICE, "Paris", 10, True) == []
    assert ids(timeline.select(BOB, T0)) == ["b"]
    assert ids(timeline.select(ACME_ALICE, T0)) == ["c"]


# --------------------------------------------------------------------------- dense index bookkeeping


def test_pending_triples_until_marked_indexed_and_the_flags(timeline: TripleTimeline) -> None:
    with timeline.transaction("write"):
        timeline.insert(new("a", obj="Paris"))
        timeline.insert(new("b", predicate="likes", obj="pizza", user="bob"))
    pending = timeline.pending(10)
    assert [(r.id, r.user_id, r.object) for r in pending] == [("a", "alice", "Paris"), ("b", "bob", "pizza")]
    assert ids(timeline.pending(1)) == ["a"]
    timeline.mark_indexed(["a"])
    assert ids(timeline.pending(10)) == ["b"]
    assert timeline.index_flags() == {("default", "alice"): {"a": True}, ("default", "bob"): {"b": False}}
    assert timeline.index_flags(BOB) == {("default", "bob"): {"b": False}}
    timeline.mark_all_unindexed()
    assert ids(timeline.pending(10)) == ["a", "b"]


# --------------------------------------------------------------------------- concurrency


def test_concurrent_writers_on_separate_connections_lose_nothing(open_backend: Opener) -> None:
    writers = [open_backend() for _ in range(3)]
    errors: list[BaseException] = []

    def write(n: int, timeline: TripleTimeline) -> None:
        try:
            for i in range(10):
                with timeline.transaction("write"):
                    timeline.insert(new(f"{n}-{i}", predicate="likes", obj=f"dish {n} {i}"))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n, w)) for n, w in enumerate(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert open_backend().counts(ALICE, T0) == (30, 30)
