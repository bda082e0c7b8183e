"""The noise benchmark runs end to end (``bench.noise --smoke --fit``, in-process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import noise  # importable: pyproject sets pytest's pythonpath to the repo root


def test_noise_smoke_reports_every_query_set_and_the_folds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "noise.json"

    report = noise.main(["--smoke", "--fit", "--json", str(out)])

    printed = capsys.readouterr().out
    assert json.loads(out.read_text())["sets"] == json.loads(json.dumps(report["sets"]))
    sets = report["sets"]
    assert set(sets) == {"small_talk", "never_said", "real"}
    # Small talk retrieves nothing; nothing of the synthetic store answers the never-said set.
    assert sets["small_talk"]["tokens_mean"] == 0 and sets["small_talk"]["query_choice"] == {"none": 20}
    assert sets["never_said"]["tokens_mean"] <= 60
    assert sets["real"]["tokens_mean"] > 0 and 0 < sets["real"]["block_recall"]["overall"] <= 1
    folds = report["leave_one_out"]["folds"]
    assert folds[-1]["held_out"] == "(all: the default)"
    assert set(folds[-1]["weights"]) == {"intercept", *noise.FEATURES}
    assert "leave-one-conversation-out" in printed and "block recall (real)" in printed


def test_noise_smoke_agent_flow_puts_each_query_first_and_still_injects_nothing_never_said() -> None:
    # As an agent does: the query is stored before get(); it must not be its own evidence.
    report = noise.main(["--smoke", "--agent-flow"])

    assert report["meta"]["agent_flow"] is True
    sets = report["sets"]
    assert sets["never_said"]["tokens_mean"] <= 60
    assert sets["real"]["tokens_mean"] > 0 and sets["real"]["block_recall"]["overall"] > 0.9
