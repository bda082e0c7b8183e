"""Dense-side ideas screened by the model alone, on both corpora, before any library change.

The default embedding's ranking of the answer, for each way of scoring a record against a
question (``bench.embedders``' method: the model alone, no fusion, no gate):

* **everyday small**: the 90 facts' messages and their 90 replies as passages, the 184 fact
  questions as queries; **everyday large**: the same among the large store's 1,500 LoCoMo
  distractors; recall@10 and MRR of the fact's message; on the small store also the AUC of
  the answer's score against the best score of each never-said question (what the gate
  must separate);
* **LoCoMo**: each conversation's turns (``speaker: text``), its questions of categories
  1-4; turn recall@10 (and multi-hop's), MRR.

The scorings (docs/benchmarks.md, "Fourth round on retrieval"):

* ``cosine``: what the library ranks by before this round;
* ``prf m a``: pseudo-relevance feedback, the query vector moved toward the mean of its
  ``m`` best hits (``q + a * mean``, normalised) and searched again;
* ``topic MODE b``: coarse life-area topics (:data:`TOPICS`, written generally), each
  record's and question's the nearest description; ``hard``: ``b`` added when the
  question's and the record's topics are the same; ``soft``: ``b`` times the dot product
  of their softmax topic distributions; ``expand``: the query moved toward its topic's
  description; ``profile``: ``b`` times the cosine of the centred topic profiles;
* ``hub w k [M]``: the cosine less ``w`` times the record's hubness (the mean cosine of
  its ``k`` nearest other passages), the first ``M`` by cosine ranked again
  (:mod:`llama_memory.retrieval.hubness`).

Run::

    python -m bench.dense_variants            # every scoring, about a minute of embedding
    python -m bench.dense_variants --only hub
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np

from bench.embedders import (
    EVERYDAY,
    LOCOMO,
    Embedder,
    _evidence,
    _turns,
    auc,
    default_spec,
    distractor_turns,
)

#: Life areas, each described in general words (not from any development question).
TOPICS = {
    "home": "my home: the house or flat where I live, the town or city and neighbourhood, moving house, rent, the garden",
    "work": "my work: my job, what I do for a living, my employer and company, the office, my boss and colleagues, my career",
    "family": "my family: my partner, wife or husband, my kids, my parents, mum and dad, my brother and sister, relatives",
    "health": "my health: illness, doctor visits, medication, allergies, injuries, sleep, my body, eyes and teeth",
    "food": "food and drink: cooking, meals, dishes I like, restaurants, diet, coffee and tea",
    "hobbies": "my hobbies: sports and exercise, games, music, reading, crafts, what I do for fun in my free time",
    "travel": "travel: trips and holidays, flights, visiting other countries and cities",
    "money": "money: finances, savings, bills, budget, spending and buying things",
    "pets": "pets and animals: my dog or cat and looking after them",
    "plans": "plans: goals, upcoming events, things I am going to do soon or next year",
    "education": "education: school, university, studies, courses, my degree, learning a language",
    "friends": "friends and social life: meeting people, parties, my friends",
    "possessions": "things I own: my car, bike, phone, furniture and other belongings",
}
K = 10

Scoring = Callable[[np.ndarray, np.ndarray], np.ndarray]


class Vectors:
    """Every vector the screen needs, embedded once."""

    def __init__(self, embedder: Embedder, everyday: Path = EVERYDAY, locomo: Path = LOCOMO) -> None:
        data = json.loads(everyday.read_text())
        facts = data["facts"]
        self.facts = embedder.passages([f["message"] for f in facts] + [f["reply"] for f in facts])
        self.distractors = embedder.passages(distractor_turns(locomo, 1500))
        self.questions = embedder.queries([q for f in facts for q in f["questions"]])
        self.answer = [n for n, f in enumerate(facts) for _ in f["questions"]]
        self.never = embedder.queries([q["question"] for q in data["never_said"]])
        self.topics = embedder.passages(list(TOPICS.values()))
        self.locomo: list[tuple[np.ndarray, np.ndarray, list[list[int]], list[int]]] = []
        for sample in json.loads(locomo.read_text()):
            turns = _turns(sample)
            where = {t["dia_id"]: n for n, t in enumerate(turns)}
            asked = [(q["question"], [where[e] for e in _evidence(q.get("evidence", [])) if e in where], q["category"])
                     for q in sample["qa"] if q.get("category") in (1, 2, 3, 4)]
            asked = [a for a in asked if a[1]]
            self.locomo.append((embedder.passages([f"{t['speaker']}: {t['text']}" for t in turns]),
                                embedder.queries([a[0] for a in asked]), [a[1] for a in asked], [a[2] for a in asked]))


def _unit(m: np.ndarray) -> np.ndarray:
    return m / np.clip(np.linalg.norm(m, axis=1, keepdims=True), 1e-12, None)


def cosine(q: np.ndarray, p: np.ndarray) -> np.ndarray:
    return q @ p.T


def prf(m: int, a: float) -> Scoring:
    def score(q: np.ndarray, p: np.ndarray) -> np.ndarray:
        top = np.argsort(-(q @ p.T), axis=1)[:, :m]
        return _unit(q + a * p[top].mean(axis=1)) @ p.T
    return score


def topic(mode: str, b: float, topics: np.ndarray, tau: float = 0.05) -> Scoring:
    def softmax(x: np.ndarray) -> np.ndarray:
        z = np.exp((x - x.max(1, keepdims=True)) / tau)
        return z / z.sum(1, keepdims=True)

    def score(q: np.ndarray, p: np.ndarray) -> np.ndarray:
        s, qt, pt = q @ p.T, q @ topics.T, p @ topics.T
        if mode == "hard":
            return s + b * (qt.argmax(1)[:, None] == pt.argmax(1)[None, :])
        if mode == "soft":
            return s + b * (softmax(qt) @ softmax(pt).T)
        if mode == "expand":
            return _unit(q + b * topics[qt.argmax(1)]) @ p.T
        qc, pc = _unit(qt - qt.mean(1, keepdims=True)), _unit(pt - pt.mean(1, keepdims=True))
        return s + b * (qc @ pc.T)
    return score


def hub(w: float, k: int, depth: Optional[int] = None) -> Scoring:
    def score(q: np.ndarray, p: np.ndarray) -> np.ndarray:
        s = q @ p.T
        pp = p @ p.T
        np.fill_diagonal(pp, -np.inf)
        n = min(k, len(p) - 1)
        hubness = -np.partition(-pp, n - 1, axis=1)[:, :n].mean(1)
        adjusted = s - w * hubness[None, :]
        if depth is None:
            return adjusted
        out = np.full_like(s, -9.0)
        head = np.argsort(-s, axis=1)[:, :depth]
        rows = np.arange(len(q))[:, None]
        out[rows, head] = adjusted[rows, head] + 5.0  # the head, ranked again, stays above the rest
        return out
    return score


def evaluate(v: Vectors, score: Scoring) -> dict[str, float]:
    """The screen's figures for one scoring."""
    out: dict[str, float] = {}
    for name, passages in (("small", v.facts), ("large", np.vstack([v.facts, v.distractors]))):
        s = score(v.questions, passages)
        order = np.argsort(-s, axis=1, kind="stable")
        pos = [int(np.nonzero(row == n)[0][0]) for n, row in zip(v.answer, order)]
        out[f"{name} recall@{K}"] = sum(p < K for p in pos) / len(pos)
        out[f"{name} MRR"] = statistics.fmean(1 / (p + 1) for p in pos)
        if name == "small":
            never = score(v.never, passages)
            out["small AUC never-said"] = auc([float(s[i, n]) for i, n in enumerate(v.answer)], never.max(1).tolist())
    recall, multi, reciprocal = [], [], []
    for passages, questions, evidence, categories in v.locomo:
        order = np.argsort(-score(questions, passages), axis=1, kind="stable")
        for e, row, c in zip(evidence, order, categories):
            top = set(row[:K].tolist())
            recall.append(sum(x in top for x in e) / len(e))
            if c == 1:
                multi.append(recall[-1])
            reciprocal.append(1 / (min(int(np.nonzero(row == x)[0][0]) for x in e) + 1))
    out[f"LoCoMo recall@{K}"] = statistics.fmean(recall)
    out["LoCoMo multi-hop"] = statistics.fmean(multi)
    out["LoCoMo MRR"] = statistics.fmean(reciprocal)
    return out


def scorings(v: Vectors) -> list[tuple[str, Scoring]]:
    rows: list[tuple[str, Scoring]] = [("cosine", cosine)]
    rows += [(f"prf {m} {a}", prf(m, a)) for m in (3, 5, 10) for a in (0.25, 0.5, 1.0)]
    rows += [(f"topic {mode} {b}", topic(mode, b, v.topics))
             for mode, bs in (("hard", (0.02, 0.05, 0.1)), ("soft", (0.02, 0.05, 0.1)),
                              ("expand", (0.2, 0.5)), ("profile", (0.05, 0.1, 0.2))) for b in bs]
    rows += [(f"hub {w} {k}", hub(w, k)) for k in (5, 10, 20) for w in (0.1, 0.25, 0.35, 0.5)]
    rows += [(f"hub 0.35 5 {d}", hub(0.35, 5, d)) for d in (30, 60, 100)]
    return rows


def main(argv: Optional[Sequence[str]] = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(prog="python -m bench.dense_variants", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="only the scorings whose name starts with this (cosine always)")
    args = parser.parse_args(argv)
    v = Vectors(Embedder(default_spec()))
    rows = []
    for name, score in scorings(v):
        if name != "cosine" and not name.startswith(args.only):
            continue
        figures = evaluate(v, score)
        rows.append({"scoring": name, **figures})
        print(f"| {name} | " + " | ".join(f"{x:.3f}" for x in figures.values()) + " |", flush=True)
    return rows


if __name__ == "__main__":
    main()
