"""The trace of one get() runs end to end (``bench.get_path``, in-process) and counts
what it saw: the facade and the read pipeline first, storage on the way."""

from __future__ import annotations

import pytest

from bench import get_path


def test_get_path_traces_one_get_through_the_layers(capsys: pytest.CaptureFixture[str]) -> None:
    trace = get_path.main([])

    printed = capsys.readouterr().out
    assert f"across {len(trace.modules)} modules" in printed
    assert trace.modules[:2] == ["llama_memory.memory.composable", "llama_memory.read.pipeline"]
    assert any(m.startswith("llama_memory.storage.") for m in trace.modules)
    assert len(set(trace.calls)) <= len(trace.calls) and trace.reentries < len(trace.calls)
