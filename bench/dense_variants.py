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

With ``--second wordllama``, a second model's cosine fused with the default's instead
(the vectors of both, side by side; each is a unit vector, so each part's dot product is
its cosine): ``fused w`` is ``cos_default + w * cos_second``, ``rrf k [w]`` reciprocal-rank
fusion ``1 / (k + rank_default) + w / (k + rank_second)`` (ranks from 1). The second model is
WordLlama's static token table from its installed wheel (:func:`bench.embedders.wordllama_spec`),
read without the package's loader.

Run::

    python -m bench.dense_variants            # every scoring, about a minute of embedding
    python -m bench.dense_variants --only hub
    python -m bench.dense_variants --second wordllama
    python -m bench.dense_variants --second wordllama --everyday bench/data/everyday_heldout/everyday_heldout.json
"""

from __future__ import annotations

import argparse
import copy
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
    StaticEmbedder,
    _evidence,
    _turns,
    auc,
    default_spec,
    distractor_turns,
    query_ms,
    wordllama_spec,
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
#: The deeper cut of the everyday stores (what the fusion can still pick from).
DEEP = 30

Scoring = Callable[[np.ndarray, np.ndarray], np.ndarray]


class Vectors:
    """Every vector the screen needs, embedded once."""

    def __init__(self, embedder: Embedder | StaticEmbedder, everyday: Path = EVERYDAY, locomo: Path = LOCOMO) -> None:
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


def side_by_side(first: Vectors, second: Vectors) -> Vectors:
    """Both models' vectors of the same texts, joined row by row (``first``'s columns first)."""
    both = copy.copy(first)
    for name in ("facts", "distractors", "questions", "never", "topics"):
        setattr(both, name, np.hstack([getattr(first, name), getattr(second, name)]))
    both.locomo = [(np.hstack([p1, p2]), np.hstack([q1, q2]), e, c)
                   for (p1, q1, e, c), (p2, q2, _, _) in zip(first.locomo, second.locomo)]
    return both


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


def fused(w: float, split: int, first: float = 1.0) -> Scoring:
    """``first`` times the cosine of the columns before ``split`` plus ``w`` times that of
    the columns after it (side-by-side vectors, :func:`side_by_side`)."""
    def score(q: np.ndarray, p: np.ndarray) -> np.ndarray:
        return first * (q[:, :split] @ p[:, :split].T) + w * (q[:, split:] @ p[:, split:].T)
    return score


def _rank(s: np.ndarray) -> np.ndarray:
    """Each passage's rank per query (0 = nearest)."""
    return np.argsort(np.argsort(-s, axis=1, kind="stable"), axis=1, kind="stable")


def rrf(k: int, split: int, w: float = 1.0) -> Scoring:
    """Reciprocal-rank fusion of the two parts' cosine rankings: ``1 / (k + rank) + w / (k + rank2)``,
    ranks counted from 1."""
    def score(q: np.ndarray, p: np.ndarray) -> np.ndarray:
        first, second = _rank(q[:, :split] @ p[:, :split].T), _rank(q[:, split:] @ p[:, split:].T)
        return 1 / (k + 1 + first) + w / (k + 1 + second)
    return score


def evaluate(v: Vectors, score: Scoring) -> dict[str, float]:
    """The screen's figures for one scoring."""
    out: dict[str, float] = {}
    for name, passages in (("small", v.facts), ("large", np.vstack([v.facts, v.distractors]))):
        s = score(v.questions, passages)
        order = np.argsort(-s, axis=1, kind="stable")
        pos = [int(np.nonzero(row == n)[0][0]) for n, row in zip(v.answer, order)]
        out[f"{name} recall@{K}"] = sum(p < K for p in pos) / len(pos)
        out[f"{name} recall@{DEEP}"] = sum(p < DEEP for p in pos) / len(pos)
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


def fusions(split: int) -> list[tuple[str, Scoring]]:
    """The default's cosine alone, the second model's alone, and their fusions."""
    rows: list[tuple[str, Scoring]] = [("cosine", fused(0.0, split)), ("second alone", fused(1.0, split, first=0.0))]
    rows += [(f"fused {w}", fused(w, split)) for w in (0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0)]
    rows += [(f"rrf {k} {w}", rrf(k, split, w)) for k in (10, 60) for w in (0.5, 1.0)]
    return rows


def main(argv: Optional[Sequence[str]] = None) -> list[dict[str, Any]]:
    parser = argparse.ArgumentParser(prog="python -m bench.dense_variants", description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="only the scorings whose name starts with this (cosine always)")
    parser.add_argument("--second", choices=("wordllama",), default=None,
                        help="fuse a second model's cosine with the default's instead of the dense variants")
    parser.add_argument("--everyday", type=Path, default=EVERYDAY, help="the everyday set (the held-out one, say)")
    args = parser.parse_args(argv)
    default = Embedder(default_spec())
    v = Vectors(default, args.everyday)
    if not args.second:
        rows_to_run = scorings(v)
    else:
        second = StaticEmbedder(wordllama_spec())
        rows_to_run = fusions(v.facts.shape[1])
        v = side_by_side(v, Vectors(second, args.everyday))
        asked = [q for f in json.loads(args.everyday.read_text())["facts"][:30] for q in f["questions"][:1]]
        print(f"(ms per query embedding: default {query_ms(default, asked, 3):.2f}, "
              f"{second.spec.name} {query_ms(second, asked, 3):.3f})")
    rows = []
    for name, score in rows_to_run:
        if name != "cosine" and not name.startswith(args.only):
            continue
        figures = evaluate(v, score)
        if not rows:
            print("| scoring | " + " | ".join(figures) + " |\n| --- |" + " ---: |" * len(figures))
        rows.append({"scoring": name, **figures})
        print(f"| {name} | " + " | ".join(f"{x:.3f}" for x in figures.values()) + " |", flush=True)
    return rows


if __name__ == "__main__":
    main()
