"""Fit the relevance calibration on both development corpora, and validate it by
leaving one corpus out (:mod:`llama_memory.retrieval.relevance`).

The two corpora differ on purpose (DESIGN.md section 6): LoCoMo's questions are about
two people's long conversations; the everyday set's are a user's own facts asked in
everyday words. A calibration fitted on one only is checked on the other.

For every question of both corpora, ``search(question, k=10)`` of a memory on the
store gives the records and the evidence the library computed for each
(``metadata["evidence"]``). A record is a positive when it holds the answer:

* **LoCoMo** (five conversations, one store each): a message id behind it is an
  evidence turn of the question (categories 1-4);
* **everyday** (the small and the large store of ``bench.everyday``): its text holds one
  of the fact's answer keywords (a two-part question: of either fact).

Questions about things never said are negatives throughout: on LoCoMo the next
conversation's questions, on the everyday set its never-said questions (near misses
and unrelated) and its small talk searched as a query.

A logistic model over :data:`FEATURES` is fitted on a training set of questions and
judged on another: **in corpus** (fitted on the corpus it is judged on) and **out of
corpus** (fitted on the other one). With the threshold chosen on the training set as
the lowest whose never-said questions keep at most ``--max-never-tokens`` tokens of
records on average, each judgement reports the share of answerable questions that keep a
record holding the answer (**recall**), the mean tokens kept for never-said questions,
and how far the scores of answering and other records lie apart (the mean relevance of
each, and AUC).

Run::

    .venv/bin/python -m bench.calibrate                         # both corpora, stores cached in a temp dir
    .venv/bin/python -m bench.calibrate --stores /tmp/cal-stores  # keep the built stores for another run
    .venv/bin/python -m bench.calibrate --json bench/results/calibrate.json

LoCoMo is CC BY-NC 4.0: read from outside the repository; the report holds figures only.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np

from bench import everyday
from bench.locomo import DEFAULT_DATA as LOCOMO_DATA
from bench.locomo import Ours, load_dataset
from bench.noise import fit_logistic

#: The calibration's inputs (names of :meth:`llama_memory.retrieval.relevance.Evidence.features`):
#: the record's own evidence only. The query's best match among the other records
#: (``best_cosine``, ``best_lexical``) and the share of the query the store has never
#: seen (``unknown``) were tried: they depend on what else the store holds, and a
#: record that is the best of three scored like the best of 2,000.
FEATURES = ("cosine", "lexical", "cosine_lexical", "unknown_name", "personal", "personal_cosine")
#: What each row records of a record (FEATURES and those tried), for refitting from ``--json``.
RECORDED = (*FEATURES, "best_cosine", "best_lexical", "unknown")
#: Records searched per question (the block's ``top_k``).
K = 10
#: The block's fixed lines in tokens, counted once per question that keeps a record.
BLOCK_OVERHEAD = 30
#: The most tokens a never-said question may keep on average (the issue's target).
MAX_NEVER_TOKENS = 60.0
#: The thresholds of the trade-off curve (the fit on both corpora).
CURVE = (0.0, 0.01, 0.02, 0.03, 0.05, 0.08, 0.1, 0.15, 0.2, 0.3, 0.4)
#: Thresholds tried, lowest first.
THRESHOLDS = tuple(round(x, 3) for x in np.arange(0.0, 1.0001, 0.01))


def build_stores(root: Path, log: Callable[[str], None]) -> dict[str, Any]:
    """The stores (built into ``root`` unless already there) and their questions."""
    root.mkdir(parents=True, exist_ok=True)
    data = json.loads(everyday.DEFAULT_DATA.read_text(encoding="utf-8"))
    stores: dict[str, Any] = {}
    for name in ("small", "large"):
        path = root / f"everyday-{name}"
        if not path.exists():
            messages = everyday.small_store(data) if name == "small" else everyday.large_store(data, _LOCOMO)
            everyday.write_store(path, messages)
            log(f"built everyday {name}")
        stores[f"everyday/{name}"] = {"corpus": "everyday", "path": path, "user": everyday.USER}
    dataset = load_dataset(_LOCOMO)
    for c in dataset.conversations:
        path = root / c.sample_id
        if not (path / "memory").exists():
            retriever = Ours()
            retriever.workdir = path
            retriever.write(c, c.sample_id)
            log(f"built {c.sample_id}")
        stores[c.sample_id] = {"corpus": "locomo", "path": path / "memory", "user": c.sample_id}
    return {"stores": stores, "everyday": data, "locomo": dataset}


#: The LoCoMo file (``--locomo``).
_LOCOMO: Path = LOCOMO_DATA


def collect(built: dict[str, Any], log: Callable[[str], None]) -> list[dict[str, Any]]:
    """One row per question: its corpus, whether it is answerable, and its records'
    features, labels and tokens."""
    from llama_memory import ComposableMemory

    data, dataset = built["everyday"], built["locomo"]
    facts = {f["id"]: f for f in data["facts"]}
    rows: list[dict[str, Any]] = []
    for name, store in built["stores"].items():
        work = Path(tempfile.mkdtemp(prefix="llama-memory-calibrate-"))
        copy = work / "memory"
        shutil.copytree(store["path"], copy)
        memory = ComposableMemory.from_defaults(user_id=store["user"], session_id="calibrate", path=copy, top_k=K)
        tokens = memory.tokenizer_fn
        try:
            if store["corpus"] == "everyday":
                asked = [(q, [f["answers"]], None) for f in data["facts"] for q in f["questions"]]
                asked += [(p["question"], [facts[i]["answers"] for i in p["facts"]], None) for p in data["two_part"]]
                asked += [(n["question"], [], None) for n in data["never_said"]]
                asked += [(t, [], None) for t in data["small_talk"]]
            else:
                convs = dataset.conversations
                mine = next(c for c in convs if c.sample_id == name)
                other = convs[(convs.index(mine) + 1) % len(convs)]
                asked = [(q.question, None, set(q.evidence)) for q in mine.questions]
                asked += [(q.question, [], None) for q in other.questions]
            for question, answers, evidence in asked:
                records = memory.search(question, k=K)
                answerable = bool(answers) or bool(evidence)
                out = []
                for r in records:
                    if evidence is not None:
                        positive = bool(evidence & set(r.message_ids))
                    else:
                        positive = any(everyday.has(r.text, k) for group in answers or [] for k in group)
                    e = r.metadata.get("evidence") or {}
                    out.append({"x": [float(e.get(f) or 0.0) for f in FEATURES],
                                "recorded": {f: float(e.get(f) or 0.0) for f in RECORDED}, "y": int(positive),
                                "tokens": len(tokens(r.text)) + 8, "relevance": r.relevance,
                                "text": r.text})
                rows.append({"corpus": store["corpus"], "store": name, "question": question,
                             "answerable": answerable, "records": out})
        finally:
            memory.close()
            shutil.rmtree(work, ignore_errors=True)
        log(f"searched {name}: {sum(1 for r in rows if r['store'] == name)} questions")
    return rows


def predict(w: np.ndarray, rows: Sequence[dict[str, Any]]) -> list[np.ndarray]:
    """Each row's records' relevance under the model ``w``."""
    out = []
    for row in rows:
        x = np.array([r["x"] for r in row["records"]], dtype=float).reshape(-1, len(FEATURES))
        out.append(1 / (1 + np.exp(-np.clip(w[0] + x @ w[1:], -50, 50))))
    return out


def block(rows: Sequence[dict[str, Any]], scores: Sequence[np.ndarray], threshold: float) -> dict[str, float]:
    """The blocks a threshold keeps: recall of the answerable questions (a kept record
    holds the answer) and mean tokens of the never-said ones."""
    recall, never = [], []
    for row, s in zip(rows, scores):
        kept = [r for r, p in zip(row["records"], s) if p >= threshold]
        if row["answerable"]:
            recall.append(float(any(r["y"] for r in kept)))
        else:
            never.append(float(sum(r["tokens"] for r in kept) + (BLOCK_OVERHEAD if kept else 0)))
    return {"recall": statistics.fmean(recall) if recall else 0.0,
            "never_tokens": statistics.fmean(never) if never else 0.0}


def auc(labels: np.ndarray, scores: np.ndarray) -> Optional[float]:
    """The area under the ROC curve (the chance that an answering record scores above
    another), by ranks."""
    pos, neg = scores[labels == 1], scores[labels == 0]
    if not len(pos) or not len(neg):
        return None
    order = np.argsort(np.r_[pos, neg], kind="mergesort")
    ranks = np.empty(len(order))
    ranks[order] = np.arange(1, len(order) + 1)
    return float((ranks[: len(pos)].sum() - len(pos) * (len(pos) + 1) / 2) / (len(pos) * len(neg)))


def judge(w: np.ndarray, threshold: float, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """How the model ``w`` and ``threshold`` do on ``rows``."""
    scores = predict(w, rows)
    labels = np.array([r["y"] for row in rows for r in row["records"]])
    flat = np.concatenate(scores) if scores else np.zeros(0)
    answering = flat[labels == 1]
    others = flat[labels == 0]
    never = np.concatenate([s for row, s in zip(rows, scores) if not row["answerable"]] or [np.zeros(0)])
    return {**block(rows, scores, threshold), "auc": auc(labels, flat),
            "mean_answering": float(answering.mean()) if len(answering) else None,
            "mean_other": float(others.mean()) if len(others) else None,
            "max_never_said": float(never.max()) if len(never) else None,
            "answering_below_0.05": float((answering < 0.05).mean()) if len(answering) else None}


def fit(rows: Sequence[dict[str, Any]], max_never_tokens: float) -> tuple[np.ndarray, float]:
    """The model fitted on ``rows``' records (answerable and never-said questions weigh
    alike per corpus) and the lowest threshold whose never-said questions keep at most
    ``max_never_tokens`` tokens on average."""
    x = np.array([r["x"] for row in rows for r in row["records"]], dtype=float)
    y = np.array([r["y"] for row in rows for r in row["records"]], dtype=float)
    w = fit_logistic(x, y, l2=1.0)
    scores = predict(w, rows)
    threshold = next((t for t in THRESHOLDS if block(rows, scores, t)["never_tokens"] <= max_never_tokens), 1.0)
    return w, threshold


def leave_one_corpus_out(rows: Sequence[dict[str, Any]], max_never_tokens: float) -> dict[str, Any]:
    """In-corpus and out-of-corpus judgements, and the model fitted on both."""
    corpora = sorted({r["corpus"] for r in rows})
    out: dict[str, Any] = {"folds": []}
    for trained in [*corpora, "both"]:
        train = [r for r in rows if trained in ("both", r["corpus"])]
        w, threshold = fit(train, max_never_tokens)
        fold = {"fitted_on": trained, "threshold": threshold,
                "weights": {"intercept": round(float(w[0]), 3), **{f: round(float(v), 3) for f, v in zip(FEATURES, w[1:])}},
                "judged": {}}
        for corpus in corpora:
            fold["judged"][corpus] = judge(w, threshold, [r for r in rows if r["corpus"] == corpus])
        out["folds"].append(fold)
    both = out["folds"][-1]
    w = np.array([both["weights"]["intercept"], *(both["weights"][f] for f in FEATURES)])
    out["curve"] = {corpus: [{"threshold": t, **block(mine, predict(w, mine), t)} for t in CURVE]
                    for corpus in corpora for mine in [[r for r in rows if r["corpus"] == corpus]]}
    # The library's calibration as it is, for comparison (its own threshold).
    from llama_memory.retrieval.relevance import DEFAULT_MIN_RELEVANCE

    out["library"] = {corpus: _judge_library([r for r in rows if r["corpus"] == corpus], DEFAULT_MIN_RELEVANCE)
                      for corpus in corpora}
    return out


def _judge_library(rows: Sequence[dict[str, Any]], threshold: float) -> dict[str, Any]:
    scores = [np.array([r["relevance"] if r["relevance"] is not None else 1.0 for r in row["records"]]) for row in rows]
    labels = np.array([r["y"] for row in rows for r in row["records"]])
    flat = np.concatenate(scores)
    return {**block(rows, scores, threshold), "auc": auc(labels, flat),
            "mean_answering": float(flat[labels == 1].mean()), "mean_other": float(flat[labels == 0].mean())}


def format_report(report: dict[str, Any]) -> str:
    lines = [f"Relevance calibration, fitted per corpus and on both (threshold: the lowest with never-said "
             f"tokens <= {report['max_never_tokens']:.0f} on the training set)", "",
             "| fitted on | threshold | judged on | recall | never-said tokens | AUC | mean answering | mean other | answering < 0.05 |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for fold in report["fit"]["folds"]:
        for corpus, j in fold["judged"].items():
            where = "in corpus" if fold["fitted_on"] in (corpus, "both") else "OUT of corpus"
            lines.append(f"| {fold['fitted_on']} | {fold['threshold']:.2f} | {corpus} ({where}) | {j['recall']:.3f} | "
                         f"{j['never_tokens']:.1f} | {j['auc']:.3f} | {j['mean_answering']:.3f} | {j['mean_other']:.3f} | "
                         f"{j['answering_below_0.05']:.3f} |")
    for corpus, j in report["fit"]["library"].items():
        lines.append(f"| (the library's calibration) | min_relevance | {corpus} | {j['recall']:.3f} | {j['never_tokens']:.1f} | "
                     f"{j['auc']:.3f} | {j['mean_answering']:.3f} | {j['mean_other']:.3f} | - |")
    lines += ["", "Trade-off of the fit on both corpora (search's top 10 kept from the threshold on): "
              "recall / never-said tokens", "", "| threshold | " + " | ".join(report["fit"]["curve"]) + " |",
              "|" + " --- |" * (1 + len(report["fit"]["curve"]))]
    for n, t in enumerate(CURVE):
        lines.append(f"| {t:.2f} | " + " | ".join(f"{c[n]['recall']:.3f} / {c[n]['never_tokens']:.0f}"
                                                  for c in report["fit"]["curve"].values()) + " |")
    lines += ["", "Weights:"]
    for fold in report["fit"]["folds"]:
        lines.append(f"- {fold['fitted_on']}: {json.dumps(fold['weights'])}")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    global _LOCOMO
    p = argparse.ArgumentParser(prog="python -m bench.calibrate", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=everyday.DEFAULT_DATA, help="the everyday set")
    p.add_argument("--locomo", type=Path, default=LOCOMO_DATA, help="the LoCoMo conversations")
    p.add_argument("--stores", type=Path, help="build the stores here, or reuse those built here before")
    p.add_argument("--max-never-tokens", type=float, default=MAX_NEVER_TOKENS)
    p.add_argument("--json", type=Path)
    args = p.parse_args(argv)
    from llama_memory import default_embedding

    everyday.DEFAULT_DATA = args.data
    _LOCOMO = args.locomo
    started = time.time()
    default_embedding().load()
    root = args.stores or Path(tempfile.mkdtemp(prefix="llama-memory-calibrate-stores-"))
    log = lambda s: print(s, file=sys.stderr)  # noqa: E731
    try:
        rows = collect(build_stores(root, log), log)
    finally:
        if args.stores is None:
            shutil.rmtree(root, ignore_errors=True)
    report = {"max_never_tokens": args.max_never_tokens, "fit": leave_one_corpus_out(rows, args.max_never_tokens),
              "questions": len(rows), "seconds": round(time.time() - started)}
    print(format_report(report))
    if args.json:
        args.json.write_text(json.dumps({**report, "rows": rows}, default=str), encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
