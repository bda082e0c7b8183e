"""The speed benchmark runs end to end (``bench.speed --smoke``, in-process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import speed  # importable: pyproject sets pytest's pythonpath to the repo root


def test_speed_smoke_reports_figures_for_both_memories(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "speed.json"

    report = speed.main(["--smoke", "--json", str(out)])

    printed = capsys.readouterr().out
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    results = report["results"]
    for memory in (speed.OURS, speed.STOCK):
        assert memory in printed
        runs = [r for r in results if r["memory"] == memory]
        assert {r["embedding"] for r in runs} == {"offline", "fake"}
        for r in runs:
            assert r["status"] == "ok", r
            assert len(r["get_ms"]) == speed.SMOKE_GETS
            for key in ("build_s", "get_median_ms", "get_p95_ms", "put_user_median_ms",
                        "put_assistant_median_ms", "get_input_median_ms"):
                assert r[key] is not None and r[key] > 0, (memory, r["embedding"], key, r[key])
    assert {(q["embedding"], q["size"]) for q in report["ratios"]} == {
        ("offline", speed.SMOKE_SIZES[0]), ("fake", speed.SMOKE_SIZES[0])
    }
    assert all(q["get_median_ms_stock_over_ours"] > 0 for q in report["ratios"])
