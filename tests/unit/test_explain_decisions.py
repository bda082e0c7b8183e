"""``memory.last_block`` and ``llama-memory explain`` show why each record is in the
block or out of it: its calibrated relevance (0..1) and the rule that decided (the
threshold it passed or missed, the record it duplicates or conflicts with, the budget).
Real memories: SQLite, Chroma and the offline embedding model."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from helpers import hold, user
from llama_memory import ComposableMemory
from llama_memory.admin.cli import main
from llama_memory.read.compose import DUPLICATE, IRRELEVANT, OVER_BUDGET
from llama_memory.read.pipeline import threshold_text
from llama_memory.retrieval.relevance import DEFAULT_MIN_RELEVANCE

# The library's threshold: a relevance is the chance that the record holds the answer.
MIN = DEFAULT_MIN_RELEVANCE


def _remembered(make_memory, **kwargs: Any) -> ComposableMemory:
    # One conversation each: messages of one conversation come back as one excerpt.
    said = ["I play the cello in a string quartet.", "My friend John likes pizza from Napoli"]
    hold(make_memory, said, triples=True)
    old = make_memory(session_id="old", triples=True)
    old.add_triples([("John", "likes", "pizza")])
    old.add_triples([("Lena", "started at", "Acme in April")])
    old.put(user("Lena started at Acme in June"))
    old.close()
    return make_memory(session_id="now", triples=True, min_relevance=MIN, **kwargs)


def test_each_shown_record_has_its_relevance_and_rule(make_memory) -> None:
    memory = _remembered(make_memory)

    memory.get("What food does John like?")

    block = memory.last_block
    assert block.records and len(block.admitted) == len(block.records)
    for record, rule in zip(block.records, block.admitted):
        if record.is_turn:
            assert record.relevance is not None and 0.0 <= record.relevance <= 1.0
            assert rule.startswith(f"relevance {record.relevance:.2f} >= min_relevance {threshold_text(MIN)}"), rule
    [napoli] = [rule for r, rule in zip(block.records, block.admitted) if "Napoli" in r.text]
    assert '; stands for [triples] "John — likes — pizza' in napoli


def test_what_was_left_out_says_by_which_rule(make_memory) -> None:
    memory = _remembered(make_memory)

    memory.get("What food does John like?")

    left = memory.last_block.left_out
    [duplicate] = [o for o in left if o.reason == DUPLICATE]
    assert duplicate.detail.startswith('says nothing that [vector] "My friend John likes pizza from Napoli"')
    memory.get("what is my wife's name?")  # never said
    irrelevant = [o for o in memory.last_block.left_out if o.reason == IRRELEVANT]
    assert irrelevant
    for item in irrelevant:
        assert item.detail == f"relevance {item.record.relevance:.2f} below min_relevance {threshold_text(MIN)}"


def test_a_conflict_is_named_in_the_rule(make_memory) -> None:
    memory = _remembered(make_memory)

    memory.get("When did Lena start at Acme?")

    rules = dict(zip((r.text for r in memory.last_block.records), memory.last_block.admitted))
    assert "Lena started at Acme in June" in rules, memory.last_block.text
    assert '; conflict: newer than [triples] "Lena — started at — Acme in April' in rules["Lena started at Acme in June"]


def test_over_budget_names_the_budget(make_memory) -> None:
    memory = _remembered(make_memory, memory_token_limit=60)

    memory.get("Tell me about John, Lena, Acme, pizza and the cello")

    over = [o for o in memory.last_block.left_out if o.reason == OVER_BUDGET]
    assert over and all(o.detail == "no room left in memory_token_limit (60 tokens)" for o in over)
    assert memory.last_block.token_limit == 60 and memory.last_block.token_count <= 60


@pytest.fixture
def store(make_memory, memory_dir: Path) -> Path:
    _remembered(make_memory).close()
    return memory_dir


def test_explain_prints_relevance_on_0_1_and_the_rules(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "alice", "What food does John like?", "--store", str(store)]) in (0, None)
    out = capsys.readouterr().out
    shown, left = out.split("\nleft out:\n", 1)
    relevances = [float(v) for v in re.findall(r"relevance (\d+\.\d+)  id ", shown)]
    assert relevances and all(0.0 <= v <= 1.0 for v in relevances)
    assert "     admitted: relevance " in shown
    assert '  - duplicate (says nothing that [vector] "My friend John likes pizza from Napoli"' in left
    assert main(["explain", "alice", "what is my wife's name?", "--store", str(store)]) in (0, None)
    left = capsys.readouterr().out.split("\nleft out:\n", 1)[1]
    found = re.search(r"  - not relevant \(relevance (\d\.\d\d) below min_relevance " + f"{threshold_text(MIN)}".replace(".", r"\.")
                      + r"\), relevance \1:", left)
    assert found, left


def test_explain_json_has_the_decision_per_record(store: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "alice", "What food does John like?", "--store", str(store), "--json"]) in (0, None)
    explained = json.loads(capsys.readouterr().out)
    assert [s["id"] for s in explained["shown"]] == [r["id"] for r in explained["records"]]
    for item in explained["shown"]:
        assert item["admitted"] and (item["relevance"] is None or 0.0 <= item["relevance"] <= 1.0)
    assert {"reason", "detail", "other", "record"} <= set(explained["left_out"][0])


def _theo_store(make_memory) -> ComposableMemory:
    """A user with a few statements, two earlier questions and two facts: asked about
    Theo's music, one fact passes min_relevance but not the record floor."""
    said = [
        "I play the cello in a string quartet.", "My friend John likes pizza from Napoli",
        "What instrument does my brother Theo play?", "I repaint old bicycles on weekends.",
        "My wife Ana and I went hiking in the Alps.", "Where did my brother Theo study music?",
    ]
    hold(make_memory, said, triples=True)
    old = make_memory(session_id="old", triples=True)
    old.add_triples([("John", "likes", "pizza"), ("Theo", "plays", "the violin")])
    old.close()
    return make_memory(session_id="now", triples=True, min_relevance=MIN)


THEO = "What music did Theo study?"


def test_explain_counts_what_was_left_out_by_each_rule(
    make_memory, memory_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _theo_store(make_memory).close()

    assert main(["explain", "alice", THEO, "--store", str(memory_dir)]) in (0, None)

    out = capsys.readouterr().out
    left = out.split("\nleft out:\n", 1)[1]
    summary = [line for line in left.splitlines() if re.match(r"  \d+ record", line)]
    items = re.findall(r"^  - not relevant \((.*)\), relevance", left, re.M)
    floor = [i for i in items if "below the record floor" in i]
    below = [i for i in items if i.endswith(f"below min_relevance {threshold_text(MIN)}")]
    assert below and len(floor) + len(below) == len(items), items
    # Each rule counted apart, by its name and threshold: none counted under another's.
    # (The record floor judges a record's own evidence, which the calibration is now
    # made of alone: a record below it is below min_relevance first.)
    expected = [f"  {len(floor)} record{'s' * (len(floor) > 1)} not relevant: own relevance below the record floor 0.0001"] * bool(floor)
    assert summary == [*expected, f"  {len(below)} records not relevant: relevance below min_relevance {threshold_text(MIN)}"], summary


def test_every_score_explain_prints_is_on_0_1(
    make_memory, memory_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _theo_store(make_memory).close()

    for query in (THEO, "what is my wife's name?"):
        assert main(["explain", "alice", query, "--store", str(memory_dir)]) in (0, None)
        out = capsys.readouterr().out
        body = out.split("</memory>", 1)[1]
        assert "e-0" not in body and "rank score" not in body
        values = re.findall(r"(?:relevance|floor|min_relevance|cosine >=) (\d+(?:\.\d+)?)", body)
        assert values and all(0.0 <= float(v) <= 1.0 for v in values), values

        assert main(["explain", "alice", query, "--store", str(memory_dir), "--json"]) in (0, None)
        explained = json.loads(capsys.readouterr().out)
        dumped = json.dumps(explained)
        assert '"score"' not in dumped and "rank_score" not in dumped
        relevances = [float(v) for v in re.findall(r'"(?:own_)?relevance": ([-\d.e]+)', dumped)]
        assert relevances and all(0.0 <= v <= 1.0 for v in relevances), relevances
        by_rule = {(c["reason"], c["rule"]): c["records"] for c in explained["left_out_by_rule"]}
        assert sum(by_rule.values()) == len(explained["left_out"])
