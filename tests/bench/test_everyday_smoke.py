"""The everyday benchmark runs end to end (``bench.everyday --smoke``, in-process) and
scores as the data's README says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# importable: pyproject sets pytest's pythonpath to the repo root
from bench import everyday


def test_everyday_smoke_reports_both_stores_and_flows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "everyday.json"

    report = everyday.main(["--smoke", "--json", str(out)])

    printed = capsys.readouterr().out
    assert set(report["runs"]) == {"small/get", "small/agent", "large/get", "large/agent"}
    assert set(json.loads(out.read_text())["runs"]) == set(report["runs"])
    for figures in report["runs"].values():
        assert 0 <= figures["recall"] <= 1 and 0 <= figures["two_part"] <= figures["two_part_any"] <= 1
        assert figures["small_talk"]["tokens"] == 0
    # Every fact a question did not show is classified, by one rule each.
    for name, rows in report["rows"].items():
        missed = [r for r in rows if r["kind"] == "fact" and not r["ok"]]
        assert all(r["extra"]["why"] for r in missed), name
        for r in missed:
            why = next(iter(r["extra"]["why"].values()))
            assert why["kind"] in {"never retrieved", "left out", "shown, keyword not in its line"}
            if why["kind"] == "never retrieved":
                assert why["rank"] >= 1
    assert "recall (questions)" in printed and "Misses" in printed
    # The two-part questions' misses are counted apart, with a part's embedding rank.
    assert "Two-part questions' misses" in printed
    for figures in report["runs"].values():
        assert sum(figures["two_part_misses"].values()) <= 2 * len(json.loads(everyday.SMOKE_DATA.read_text())["two_part"])


def test_the_stores_follow_the_recipe() -> None:
    data = json.loads(everyday.SMOKE_DATA.read_text())
    small = everyday.small_store(data)
    # One session of 4 facts and 2 small-talk exchanges, user then assistant each.
    assert [m.id for m in small[::2]] == ["talk-1a", "home-1", "pets-1", "work-1", "food-1", "talk-1b"]
    assert {m.role for m in small[1::2]} == {"assistant"}
    assert len(small) == 2 * (len(data["facts"]) + 2)
    large = everyday.large_store(data, everyday.LOCOMO_SMOKE, every=3)
    facts = [m for m in large if not m.id.startswith("locomo/")]
    assert [m.id for m in facts][::2] == [f["id"] for f in everyday.round_robin(data["facts"])]
    # A fact exchange follows every third turn, in that turn's session and at its time.
    first = next(i for i, m in enumerate(large) if m.id == "home-1")
    assert first == 3 and large[first].session == large[first - 1].session and large[first].when == large[first - 1].when


def test_keywords_match_at_word_starts_and_an_old_value_counts_only_unmarked() -> None:
    assert everyday.has("we love waxwings", "waxwing") and not everyday.has("a contralto", "alto")
    old = ["Tampere"]
    assert not everyday.marked_older('- [vector, 2025-01-06] user: "we moved to Tampere"', old)
    assert everyday.marked_older(
        '- [vector, 2025-03-10] user: "now in Oulu" (conflict, older: [vector] "we moved to Tampere" says otherwise; ask)', old)
    assert everyday.marked_older(
        '- [vector, 2025-01-06] user: "we moved to Tampere" (conflict, newer: [vector] "now in Oulu" says otherwise)', old)
    assert everyday.record_lines("<memory>\nLong-term memory: intro\n- [vector] x\n</memory>") == ["- [vector] x"]
