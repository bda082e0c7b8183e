"""The judgements tried on bench.calibrate's records run end to end (``bench.judgements``,
in-process, on a few hand-written records of both corpora) and report every variant."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

# importable: pyproject sets pytest's pythonpath to the repo root
from bench import judgements


def record(cosine: float, lexical: float, personal: float, y: int, text: str) -> dict:
    """One record as bench.calibrate writes it."""
    return {"recorded": {"cosine": cosine, "lexical": lexical, "personal": personal, "unknown_name": 0.0},
            "y": y, "tokens": 40, "relevance": cosine / 2, "text": text}


def rows() -> list[dict]:
    """Answerable and never-said questions of each store, the answer scoring higher."""
    out = []
    for corpus, store in (("everyday", "everyday/small"), ("everyday", "everyday/large"), ("locomo", "conv-x")):
        for n in range(6):
            out.append({"corpus": corpus, "store": store, "question": f"Where do I live now? ({n})", "answerable": True,
                        "records": [record(0.5 + n / 100, 0.3, 1.0, 1, "user: We moved to Porto last spring. I love it."),
                                    record(0.2, 0.4, 1.0, 0, "user: The printer jammed twice today.")]})
            out.append({"corpus": corpus, "store": store, "question": f"What's my cat called? ({n})", "answerable": False,
                        "records": [record(0.25 + n / 100, 0.2, 1.0, 0, "user: Our beagle ate a sock this morning.")]})
    return out


def test_every_variant_is_judged_both_ways(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = tmp_path / "calibrate.json"
    source.write_text(json.dumps({"rows": rows()}))
    out = tmp_path / "judgements.json"

    report = judgements.main([str(source), "--sentences", "--json", str(out)])

    assert set(report) == {"the library's relevance", *judgements.VARIANTS}
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    for name in judgements.VARIANTS:
        assert set(report[name]["auc"]) == {"everyday->everyday", "everyday->locomo", "locomo->everyday", "locomo->locomo"}
        # The records that answer score above the others, in and out of corpus.
        assert all(v > 0.9 for v in report[name]["auc"].values()), (name, report[name]["auc"])
    for point in report["the library's relevance"]["trade_off"]:
        assert point["small_never"] <= point["level"]
    printed = capsys.readouterr().out
    assert "Leave one corpus out" in printed and "meaning + best sentence + background" in printed


def test_sentences_split_a_record_into_its_messages_sentences() -> None:
    text = "user: Caroline: We moved to Porto. It rains a lot here!\nassistant: Sounds lovely, enjoy it."
    assert judgements.sentences(text) == ["We moved to Porto.", "It rains a lot here!", "Sounds lovely, enjoy it."]
