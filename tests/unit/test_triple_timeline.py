"""The triples' update rules and ranking as pure functions: no database, no model.

The same rules are exercised end to end (SQLite, Chroma, the real embedding) in
tests/unit/test_triples.py; here each rule is pinned on its own, with hand-made timelines.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from llama_memory.core.types import later_expiry
from llama_memory.sources.triples.model import to_triple
from llama_memory.sources.triples.normalize import query_entities
from llama_memory.sources.triples.search import neighbourhood, rank_triples, triple_record
from llama_memory.sources.triples.timeline import Decision, decide
from llama_memory.storage.ports.triples import (
    StoredTriple,
    TimelineEntry,
    TripleEdge,
    TripleMention,
)


def entry(id: str, obj: str, start: float, end: float | None = None) -> TimelineEntry:
    return TimelineEntry(id=id, object_key=obj, valid_from=start, valid_to=end)


# --------------------------------------------------------------------------- several values


def test_a_new_value_of_a_multi_valued_predicate_is_a_new_current_triple() -> None:
    assert decide([entry("a", "pizza", 10)], "sushi", 20, functional=False) == Decision()


def test_stating_a_current_value_again_is_a_mention_and_keeps_its_start() -> None:
    assert decide([entry("a", "pizza", 10)], "pizza", 20, functional=False) == Decision(target="a")


def test_an_older_statement_of_a_current_value_moves_its_start_earlier() -> None:
    decision = decide([entry("a", "pizza", 10)], "pizza", 5, functional=False)
    assert decision == Decision(target="a", start=5)
    assert not decision.creates


def test_a_value_that_held_once_but_not_now_is_stated_anew() -> None:
    # "likes pizza" ended (the predicate was functional then): a new interval begins.
    decision = decide([entry("a", "pizza", 10, 15)], "pizza", 20, functional=False)
    assert decision.creates and decision.ends == ()


# --------------------------------------------------------------------------- one value at a time


def test_a_new_value_supersedes_the_one_holding_and_holds_now() -> None:
    decision = decide([entry("paris", "paris", 10)], "berlin", 20, functional=True)
    assert decision == Decision(ends=("paris",))
    assert decision.creates and decision.valid_to is None


def test_the_value_holding_stated_again_is_a_mention_without_supersede() -> None:
    timeline = [entry("paris", "paris", 10, 20), entry("berlin", "berlin", 20)]
    assert decide(timeline, "paris", 15, functional=True) == Decision(target="paris")
    assert decide(timeline, "berlin", 30, functional=True) == Decision(target="berlin")


def test_a_statement_dated_in_the_past_slots_into_the_history() -> None:
    # Paris from 10, Berlin from 30; "Rome" stated at 20 ends Paris at 20 and ends
    # itself where Berlin begins: what is known to be newer is not overridden.
    timeline = [entry("paris", "paris", 10, 30), entry("berlin", "berlin", 30)]
    decision = decide(timeline, "rome", 20, functional=True)
    assert decision == Decision(valid_to=30, superseded_by="berlin", ends=("paris",))


def test_a_statement_older_than_everything_known_ends_nothing() -> None:
    decision = decide([entry("paris", "paris", 10)], "rome", 5, functional=True)
    assert decision == Decision(valid_to=10, superseded_by="paris", ends=())


def test_an_older_statement_of_the_next_value_moves_that_value_earlier() -> None:
    # Paris from 10, Berlin from 30; "Berlin" stated at 20: Berlin held since 20.
    timeline = [entry("paris", "paris", 10, 30), entry("berlin", "berlin", 30)]
    decision = decide(timeline, "berlin", 20, functional=True)
    assert decision == Decision(target="berlin", start=20, ends=("paris",))


def test_the_boundary_instant_belongs_to_the_later_interval() -> None:
    timeline = [entry("paris", "paris", 10, 30), entry("berlin", "berlin", 30)]
    assert decide(timeline, "berlin", 30, functional=True) == Decision(target="berlin")
    assert decide(timeline, "rome", 30, functional=True) == Decision(ends=("berlin",))


def test_every_value_holding_at_the_time_is_ended() -> None:
    # A predicate declared functional late may hold two current values at once.
    timeline = [entry("a", "paris", 10), entry("b", "rome", 12)]
    assert decide(timeline, "berlin", 20, functional=True) == Decision(ends=("a", "b"))


def test_the_timeline_is_read_in_time_order_whatever_order_it_comes_in() -> None:
    timeline = [entry("berlin", "berlin", 30), entry("paris", "paris", 10, 30)]
    decision = decide(timeline, "rome", 20, functional=True)
    assert decision == Decision(valid_to=30, superseded_by="berlin", ends=("paris",))


# --------------------------------------------------------------------------- renewal


@pytest.mark.parametrize(
    ("kept", "stated", "expected"),
    [
        ((10.0, 110.0), (20.0, 220.0), (20.0, 220.0)),  # the later expiry wins
        ((50.0, 300.0), (20.0, 220.0), (50.0, 300.0)),  # an earlier one changes nothing
        ((None, None), (20.0, 220.0), (None, None)),  # kept forever stays so
        ((10.0, 110.0), (None, None), (None, None)),  # stated forever: kept forever
    ],
)
def test_stating_a_fact_again_renews_it(kept: tuple, stated: tuple, expected: tuple) -> None:
    # The one rule of expiry (core/types.py), the same for records, triples and profile values.
    assert later_expiry(kept, stated) == expected


# --------------------------------------------------------------------------- ranking


def edges_touching(edges: Sequence[TripleEdge]):
    def touching(keys: Sequence[str]) -> list[TripleEdge]:
        return [e for e in edges if e.subject_key in keys or e.object_key in keys]

    return touching


def rank(query: str, dense: list[str], lexical: list[str], edges: Sequence[TripleEdge], k: int,
         hops: int, fusion: str = "scores"):
    """rank_triples as the source calls it: the query's named entities and their
    neighbourhood first; made-up cosines and word scores falling with rank."""
    named = query_entities(query)
    touching = edges_touching(edges)
    cosines = {i: 0.9 - 0.1 * n for n, i in enumerate(dense)}
    words = [(i, 10.0 - n) for n, i in enumerate(lexical)]
    return rank_triples(named, neighbourhood(named, touching), words, cosines, touching, k, hops, fusion)


def test_triples_touching_two_named_entities_come_first_then_the_newest() -> None:
    edges = [
        TripleEdge("old", "alice", "pizza", 1),
        TripleEdge("new", "alice", "sushi", 5),
        TripleEdge("both", "alice", "john", 0),
    ]
    found = neighbourhood({"alice", "john"}, edges_touching(edges))
    assert [e.id for e in found] == ["both", "new", "old"]
    assert neighbourhood(set(), edges_touching(edges)) == []


def test_a_second_hop_reaches_facts_about_a_neighbour_but_never_above_the_first() -> None:
    edges = [TripleEdge("friend", "alice", "john", 1), TripleEdge("likes", "john", "pizza", 2)]
    one, _ = rank("who is Alice's friend", [], [], edges, 10, hops=1)
    assert set(one) == {"friend"}
    two, matched = rank("who is Alice's friend", [], [], edges, 10, hops=2)
    assert set(two) == {"friend", "likes"}
    assert two["likes"] == pytest.approx(0.5 * two["friend"])
    assert matched == {"friend": ["entity"], "likes": ["2-hop"]}


@pytest.mark.parametrize("fusion", ["scores", "rrf"])
def test_the_three_rankings_are_fused_and_each_match_is_named(fusion: str) -> None:
    scores, matched = rank("pizza", ["b", "a"], ["b"], [], 10, hops=1, fusion=fusion)
    assert scores["b"] > scores["a"]
    assert matched == {"a": ["dense"], "b": ["dense", "lexical"]}


def test_score_fusion_adds_the_share_of_the_named_entities_a_triple_touches() -> None:
    # "c" is found by its entities alone: it scores by them, and by its cosine
    # (here the worst of the candidates, so 0), never above a triple found by all three.
    edges = [TripleEdge("b", "john", "pizza", 1), TripleEdge("c", "john", "mary", 2)]
    scores, matched = rank("Does John like pizza?", ["b", "a"], ["b"], edges, 10, hops=1)
    assert scores["b"] == pytest.approx(1.0)  # best by words, by meaning and by entities
    assert scores["c"] == pytest.approx(1 / 6)  # touches one of the two named entities
    assert matched["c"] == ["entity"] and scores["a"] == pytest.approx(0.0)
    with pytest.raises(ValueError, match="fusion must be one of"):
        rank("pizza", [], [], [], 10, hops=1, fusion="sum")


# --------------------------------------------------------------------------- rows to the API


def test_a_stored_triple_sums_up_its_mentions_as_provenance() -> None:
    mentions = (
        TripleMention("s1", ("m1",), 20.0, 100.0, "api"),
        TripleMention("s2", ("m1", "m2"), 10.0, 200.0, "tool"),
        TripleMention(None, (), 30.0, 300.0, "extraction"),
    )
    row = StoredTriple(
        "t1", "default", "alice", "Alice", "lives_in", "Paris", "alice", "liv_in", "paris",
        10.0, None, None, 100.0, None, None, mentions,
    )  # fmt: skip
    triple = to_triple(row)
    assert (triple.session_id, triple.session_ids) == ("s1", ("s1", "s2"))
    assert triple.message_ids == ("m1", "m2")
    assert (triple.event_time, triple.mentions, triple.current) == (10.0, 3, True)
    assert triple.text() == "Alice — lives in — Paris"
    record = triple_record(triple, 0.5, ["dense"], "triples")
    assert record.text.startswith("Alice — lives in — Paris (since 1970-01-01)")
    assert record.event_time is None and record.metadata["event_time"] == 10.0
