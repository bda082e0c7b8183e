"""Other relevance judgements, tried on the records ``bench.calibrate`` collected.

``python -m bench.calibrate --json FILE`` writes, for every question of both development
corpora (LoCoMo and the everyday set's small and large stores), the records
``search(question, k=10)`` returned with the evidence the library computed, whether each
holds the answer, its tokens and its text. This module fits other judgements on those
records, each a logistic model over other evidence, and reports for each:

* **leave one corpus out**: the AUC (the chance that a record holding the answer scores
  above one that does not) fitted on one corpus and judged on the other, beside the
  in-corpus AUC;
* **the trade-off**: with the model fitted on both corpora, the threshold at which the
  everyday small store's never-said questions keep at most 250, 170, 120 and 60 tokens,
  and the recall there of the small and the large store and of LoCoMo (with LoCoMo's
  never-said tokens): a judgement that beats the library's must win on all three at the
  same small-store tokens.

The judgements (:data:`VARIANTS`) are built from:

* the record's own evidence as the library records it (``cosine``, ``lexical``: the
  share of the question's words weighed by the store's counts, ``personal``,
  ``unknown_name``);
* **the query's background** (``background``): the mean of the question's five best
  cosines with a fixed bank of neutral chat sentences (``bench/data/neutral_chat.txt``,
  written for this, about no one in either corpus), so that a question near everything
  and one near nothing are judged apart, whatever the store holds;
* **the best sentence** (``sentence``, with ``--sentences``): the record's best cosine
  with the question over the sentences of its messages, a second look at a long message
  whose one clause answers (it embeds every sentence of every record: minutes).

Run::

    .venv/bin/python -m bench.calibrate --stores /tmp/cal-stores --json /tmp/cal.json
    .venv/bin/python -m bench.judgements /tmp/cal.json --sentences

The figures are in docs/benchmarks.md ("Judgements tried").
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np

from bench.calibrate import auc, block
from bench.noise import fit_logistic

#: The bank of neutral chat sentences a question's background is measured against.
BANK = Path(__file__).parent / "data" / "neutral_chat.txt"
#: The small store's never-said token levels at which the judgements are compared.
TOKEN_LEVELS = (250.0, 170.0, 120.0, 60.0)

Features = Callable[[dict[str, Any], dict[str, Any]], list[float]]


def _own(row: dict[str, Any], r: dict[str, Any]) -> tuple[float, float, float, float]:
    e = r["recorded"]
    return e["cosine"], e["lexical"], e["personal"], e["unknown_name"]


def _library(row: dict[str, Any], r: dict[str, Any]) -> list[float]:
    c, lex, p, u = _own(row, r)
    return [c, lex, c * lex, u, p, p * c]


def _meaning(row: dict[str, Any], r: dict[str, Any]) -> list[float]:
    c, _, p, u = _own(row, r)
    return [c, u, p, p * c]


def _meaning_background(row: dict[str, Any], r: dict[str, Any]) -> list[float]:
    c, _, p, u = _own(row, r)
    gap = c - row["background"]
    return [c, u, p, p * c, gap, p * gap]


def _words_background(row: dict[str, Any], r: dict[str, Any]) -> list[float]:
    c, lex, p, u = _own(row, r)
    gap = c - row["background"]
    return [c, lex, c * lex, u, p, p * c, gap, p * gap]


def _sentence(row: dict[str, Any], r: dict[str, Any]) -> list[float]:
    c, _, p, u = _own(row, r)
    s = r["sentence"]
    return [c, s, u, p, p * c, p * s]


def _sentence_background(row: dict[str, Any], r: dict[str, Any]) -> list[float]:
    c, _, p, u = _own(row, r)
    s, gap = r["sentence"], c - row["background"]
    return [c, s, u, p, p * c, p * s, gap, p * gap]


def _words_sentence(row: dict[str, Any], r: dict[str, Any]) -> list[float]:
    c, lex, p, u = _own(row, r)
    s = r["sentence"]
    return [c, lex, c * lex, u, p, p * c, s, p * s]


#: The judgements tried, by name: (features, needs the best sentence).
VARIANTS: dict[str, tuple[Features, bool]] = {
    "library's features, refitted": (_library, False),
    "meaning only (no word share)": (_meaning, False),
    "meaning + background": (_meaning_background, False),
    "library's + background": (_words_background, False),
    "meaning + best sentence": (_sentence, True),
    "meaning + best sentence + background": (_sentence_background, True),
    "library's + best sentence": (_words_sentence, True),
}


def _unit(vectors: Any) -> np.ndarray:
    v = np.asarray(vectors, dtype=np.float32)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def sentences(text: str) -> list[str]:
    """The sentences (three words or more) of a record's messages, without the
    ``user:``/``assistant:`` and speaker labels."""
    from llama_memory.retrieval.relevance import _SENTENCE_END

    out = []
    for line in text.split("\n"):
        line = re.sub(r"^(?:user|assistant):\s*", "", line)
        line = re.sub(r"^[A-Z][a-z]+:\s*", "", line)
        out += [s for s in _SENTENCE_END.split(line.strip()) if len(s.split()) >= 3]
    return out


def add_evidence(rows: Sequence[dict[str, Any]], with_sentences: bool, log: Callable[[str], None]) -> None:
    """Give each row its question's ``background`` and, ``with_sentences``, each record
    its best ``sentence`` cosine (the default embedding)."""
    from llama_memory import default_embedding

    model = default_embedding()
    bank = _unit(model.get_text_embedding_batch([s for s in BANK.read_text(encoding="utf-8").splitlines() if s.strip()]))
    questions = sorted({row["question"] for row in rows})
    query = {q: _unit(model.get_query_embedding(q)) for q in questions}
    for row in rows:
        row["background"] = float(np.sort(bank @ query[row["question"]])[-5:].mean())
    if not with_sentences:
        return
    wanted = sorted({s for row in rows for r in row["records"] for s in sentences(r["text"])})
    log(f"embedding {len(wanted)} sentences")
    vectors: dict[str, np.ndarray] = {}
    for i in range(0, len(wanted), 64):
        batch = wanted[i:i + 64]
        vectors.update(zip(batch, _unit(model.get_text_embedding_batch(batch))))
    for row in rows:
        q = query[row["question"]]
        for r in row["records"]:
            r["sentence"] = max((float(vectors[s] @ q) for s in sentences(r["text"])), default=0.0)


def predict(w: np.ndarray, features: Features, rows: Sequence[dict[str, Any]]) -> list[np.ndarray]:
    """Each row's records' scores under the model ``w``."""
    out = []
    for row in rows:
        x = np.array([features(row, r) for r in row["records"]], dtype=float).reshape(-1, len(w) - 1)
        out.append(1 / (1 + np.exp(-np.clip(w[0] + x @ w[1:], -50, 50))))
    return out


def fit(features: Features, rows: Sequence[dict[str, Any]]) -> np.ndarray:
    """The logistic model over ``features`` fitted on ``rows``' records."""
    x = np.array([features(row, r) for row in rows for r in row["records"]], dtype=float)
    y = np.array([r["y"] for row in rows for r in row["records"]], dtype=float)
    return fit_logistic(x, y, l2=1.0)


def groups(rows: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The rows of the small and large everyday stores and of LoCoMo."""
    return {"small": [r for r in rows if r["store"] == "everyday/small"],
            "large": [r for r in rows if r["store"] == "everyday/large"],
            "locomo": [r for r in rows if r["corpus"] == "locomo"]}


def trade_off(scores: dict[str, list[np.ndarray]], rows: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """At each of :data:`TOKEN_LEVELS`: the lowest threshold whose small-store never-said
    questions keep at most that many tokens, and the recall of each group there."""
    out = []
    for level in TOKEN_LEVELS:
        for t in np.arange(0.0, 1.0, 0.0005):
            small = block(rows["small"], scores["small"], t)
            if small["never_tokens"] <= level:
                locomo = block(rows["locomo"], scores["locomo"], t)
                out.append({"level": level, "threshold": round(float(t), 4), "small": small["recall"],
                            "small_never": small["never_tokens"], "large": block(rows["large"], scores["large"], t)["recall"],
                            "locomo": locomo["recall"], "locomo_never": locomo["never_tokens"]})
                break
    return out


def judge(rows: list[dict[str, Any]], with_sentences: bool) -> dict[str, Any]:
    """Every variant (and the library's own relevance as recorded): leave-one-corpus-out
    AUCs and the trade-off."""
    by_corpus = {c: [r for r in rows if r["corpus"] == c] for c in ("everyday", "locomo")}
    by_group = groups(rows)
    report: dict[str, Any] = {}
    library = {g: [np.array([r["relevance"] if r["relevance"] is not None else 1.0 for r in row["records"]])
                   for row in rs] for g, rs in by_group.items()}
    report["the library's relevance"] = {"trade_off": trade_off(library, by_group)}
    for name, (features, needs_sentences) in VARIANTS.items():
        if needs_sentences and not with_sentences:
            continue
        aucs = {}
        for trained, train in by_corpus.items():
            w = fit(features, train)
            for judged, test in by_corpus.items():
                labels = np.array([r["y"] for row in test for r in row["records"]])
                aucs[f"{trained}->{judged}"] = auc(labels, np.concatenate(predict(w, features, test)))
        w = fit(features, rows)
        scores = {g: predict(w, features, rs) for g, rs in by_group.items()}
        report[name] = {"weights": [round(float(v), 3) for v in w], "auc": aucs,
                        "trade_off": trade_off(scores, by_group)}
    return report


def format_report(report: dict[str, Any]) -> str:
    """The report as two markdown tables."""
    lines = ["Leave one corpus out (AUC: fitted on -> judged on)", "",
             "| judgement | everyday->everyday | locomo->everyday | locomo->locomo | everyday->locomo |",
             "| --- | --- | --- | --- | --- |"]
    for name, r in report.items():
        if "auc" in r:
            a = r["auc"]
            lines.append(f"| {name} | {a['everyday->everyday']:.3f} | {a['locomo->everyday']:.3f} | "
                         f"{a['locomo->locomo']:.3f} | {a['everyday->locomo']:.3f} |")
    lines += ["", "Trade-off (fitted on both corpora; threshold set by the small store's never-said tokens): "
              "recall small / never-said tokens small, recall large, recall LoCoMo / never-said tokens LoCoMo", "",
              "| judgement | " + " | ".join(f"small <= {level:.0f} tokens" for level in TOKEN_LEVELS) + " |",
              "|" + " --- |" * (1 + len(TOKEN_LEVELS))]
    for name, r in report.items():
        cells = [f"{p['small']:.3f} / {p['small_never']:.0f}, {p['large']:.3f}, {p['locomo']:.3f} / {p['locomo_never']:.0f}"
                 for p in r["trade_off"]]
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(prog="python -m bench.judgements", description=__doc__.split("\n\n")[0])
    p.add_argument("rows", type=Path, help="the --json file of python -m bench.calibrate")
    p.add_argument("--sentences", action="store_true", help="also the best-sentence judgements (minutes)")
    p.add_argument("--json", type=Path, help="also write the report here")
    args = p.parse_args(argv)
    rows = json.loads(args.rows.read_text(encoding="utf-8"))["rows"]
    if args.sentences and not all("text" in r for row in rows for r in row["records"]):
        raise SystemExit(f"{args.rows} holds no record texts: rerun python -m bench.calibrate --json")
    add_evidence(rows, args.sentences, lambda s: print(s, file=sys.stderr))
    report = judge(rows, args.sentences)
    print(format_report(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1), encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
