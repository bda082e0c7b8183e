"""The budget curve (``bench.budget``) runs end to end on the synthetic fixture, and the
baselines are given no more tokens than they are allowed."""

from __future__ import annotations

import json
from pathlib import Path

# importable: pyproject sets pytest's pythonpath to the repo root
from bench import budget


def test_budget_smoke_gives_a_point_per_setting_with_the_baselines_at_ours_tokens(tmp_path: Path) -> None:
    out, picture = tmp_path / "budget.json", tmp_path / "budget.png"

    report = budget.main(["--smoke", "--settings", "200:2,1500:10", "--json", str(out), "--plot", str(picture)])

    assert json.loads(out.read_text())["curve"] == json.loads(json.dumps(report["curve"]))
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    small, large = report["curve"]["200/2"], report["curve"]["1500/10"]
    assert set(small) == {"ours", "bm25_equal", "bm25_full", "dense_equal", "dense_full"}
    # A larger budget with more records shows more, and finds at least as much.
    assert small["ours"]["tokens"] < large["ours"]["tokens"] <= 1500
    assert small["ours"]["recall"]["overall"] <= large["ours"]["recall"]["overall"]
    for row in report["questions"]:
        for key, limit in (("200/2", 200), ("1500/10", 1500)):
            point = row["settings"][key]
            for name in budget.BASELINES:
                assert point[f"{name}_equal"]["tokens"] <= point["ours"]["tokens"]
                assert point[f"{name}_full"]["tokens"] <= limit
            assert point["ours"]["tokens"] <= limit


def test_fill_takes_ranked_turns_while_they_fit_and_counts_nothing_for_an_empty_block() -> None:
    lines = {"D1:1": 40, "D1:2": 500, "D1:3": 20}

    assert budget.fill(["D1:1", "D1:2", "D1:3"], lines, 100) == (["D1:1", "D1:3"], 90)
    assert budget.fill(["D1:2"], lines, 100) == ([], 0)
