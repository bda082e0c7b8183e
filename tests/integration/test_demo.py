"""``llama-memory demo``, as a plain install runs it: the second conversation recalls the
first, and without matplotlib (the ``graph`` extra) the demo still runs, saying how to get
the knowledge-graph picture."""

from __future__ import annotations

import io
import sys
from pathlib import Path
from typing import Any

import pytest

from helpers import user
from llama_memory import ComposableMemory, MemoryAdmin
from llama_memory.admin.cli import main
from llama_memory.admin.demo import run_demo
from llama_memory.storage.sqlite import DB_FILENAME


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


def test_the_demo_refuses_a_directory_that_holds_a_store(
    tmp_path: Path, embed_model: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    """``llama-memory demo --path ./memory`` on an application's store would write the demo's
    user 'john' and 50 notes into it: refused, and the store is left as it was."""
    store = tmp_path / "memory"
    memory = ComposableMemory.from_defaults(user_id="alice", path=store, embed_model=embed_model)
    memory.put(user("I keep bees."))
    memory.close()
    before = (store / DB_FILENAME).read_bytes()
    assert main(["demo", "--path", str(store)]) == 1
    err = capsys.readouterr().err
    assert f"{store} holds a memory store already, and the demo would write its user 'john' into it" in err
    assert "leave --path out for a temporary one" in err
    assert (store / DB_FILENAME).read_bytes() == before
    with MemoryAdmin(store) as admin:
        assert [u.user_id for u in admin.users()] == ["alice"]
