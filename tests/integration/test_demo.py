"""``llama-memory demo``, as a plain install runs it: the second conversation recalls the
first, and without matplotlib (the ``graph`` extra) the demo still runs, saying how to get
the knowledge-graph picture."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from llama_memory.admin.demo import run_demo


def test_the_demo_runs_without_matplotlib_and_recalls_the_first_conversation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)  # an import of it fails, as when not installed
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    out = io.StringIO()
    run_demo(tmp_path / "memory", out=out)
    text = out.getvalue()
    assert '"city: New York' in text  # conversation 2's block recalls conversation 1
    assert "Knowledge graph picture: needs matplotlib (pip install 'llama-index-memory-composable[graph]')" in text
    assert not (tmp_path / "memory" / "knowledge-graph.png").exists()
