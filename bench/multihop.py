"""Multi-hop: the second hop's weight, chosen and scored leave-one-conversation-out (LoCoMo).

For each conversation a store is built as ``bench.locomo`` builds it (one memory per
LoCoMo session, every turn put with its date and dia_id), then a memory of session
``"eval"`` (``top_k=10``, empty buffer) answers the conversation's questions through
``get()`` once per weight of the second hop (``VectorSource.hop_weight``, see
``llama_memory.retrieval.hybrid.second_hop``; 0 is the memory without it). Per weight: the block's
turn recall (evidence turns among the message ids of the records shown, as
``bench.locomo`` measures it) per category and overall, mean block tokens, median
``get()`` ms.

Leave-one-conversation-out: for each conversation, the weight is the one with the best
*training* block recall overall (the other conversations; ties: the smaller weight)
among those whose training mean block is at most ``--max-tokens``; the held-out
conversation is scored with it (with one conversation only, as ``--smoke``, its fold is
chosen on itself). The pooled held-out rows give the figures per category.

Run::

    .venv/bin/python -m bench.multihop                     # ../shared/data/locomo/locomo_dev.json, ~10 min
    .venv/bin/python -m bench.multihop --weights 0,0.5 --json bench/results/multihop.json
    .venv/bin/python -m bench.multihop --smoke             # tests/data/locomo_tiny.json, seconds
    .venv/bin/python -m bench.multihop --weights 0.5 --set-spreads 1,1.2,1.3,1.5,1.7   # the set spread

With several ``--set-spreads`` (the memory's ``set_spread``: how many more records a
question that asks for a set gets, ``llama_memory.retrieval.excerpts``) and one hop weight,
leave-one-out chooses the spread instead, the same way; 1 is "before". With several
``--topic-weights`` too (the vector source's ``topic_weight``: the topic query of a set
question, ``llama_memory.retrieval.topic``; 0 is without it), it chooses the pair
(spread, topic weight) among every combination, the same way; the smallest pair is
"before"::

    .venv/bin/python -m bench.multihop --weights 0.5 --set-spreads 1,1.2,1.3,1.4,1.5,1.7 --topic-weights 0,0.8

LoCoMo is CC BY-NC 4.0: read from outside the repository; the report holds ids and figures only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional

from bench.locomo import (
    CATEGORIES,
    DEFAULT_DATA,
    OVERALL,
    SMOKE_DATA,
    Ours,
    load_average,
    load_dataset,
    score,
)
from llama_memory.retrieval.excerpts import SET_SPREAD
from llama_memory.retrieval.topic import TOPIC_WEIGHT

#: The weights tried by default (0: no second hop).
WEIGHTS = (0.0, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0)
#: The issue's ceiling on the mean block.
MAX_TOKENS = 1200
#: What leave-one-out chooses, by its row key.
NAMES = {"weight": "hop weight", "set_spread": "set spread", "topic_weight": "topic weight",
         "setting": "set spread/topic weight"}


def run(
    data: Path,
    weights: Sequence[float],
    select: Optional[Sequence[int]] = None,
    log: Callable[[str], None] = print,
    spreads: Sequence[float] = (SET_SPREAD,),
    topic_weights: Sequence[float] = (TOPIC_WEIGHT,),
) -> list[dict[str, Any]]:
    """One row per (weight, set spread, topic weight, question): block recall, tokens,
    get() ms (``spreads``: the memory's ``set_spread``, see ``llama_memory.retrieval.excerpts``;
    ``topic_weights``: the vector source's ``topic_weight``, ``llama_memory.retrieval.topic``)."""
    from llama_memory import default_embedding

    default_embedding().load()
    rows: list[dict[str, Any]] = []
    for conversation in load_dataset(data, None, select).conversations:
        retriever = Ours()
        try:
            retriever.build(conversation)
            settings = [(w, s, t) for w in weights for s in spreads for t in topic_weights]
            for n, (weight, spread, topic) in enumerate(settings):
                if n:  # each setting on the store as built (salience marks what get() showed)
                    retriever.reopen_fresh()
                memory = retriever.memory
                memory.source("vector").hop_weight = weight
                memory.source("vector").topic_weight = topic
                memory.set_spread = spread
                for q in conversation.questions:
                    t0 = time.perf_counter()
                    memory.get(q.question)
                    get_ms = (time.perf_counter() - t0) * 1000
                    block = memory.last_block
                    ids = [i for r in block.records for i in r.message_ids]
                    rows.append({
                        "weight": weight, "set_spread": spread, "topic_weight": topic,
                        "setting": f"{spread:.2f}/{topic:.2f}",
                        "conversation": conversation.sample_id,
                        "category": CATEGORIES[q.category], "qa_index": q.index,
                        "tokens": block.token_count, "get_ms": get_ms,
                        "block_recall": score([ids], q.evidence, 1)["turn_recall"],
                    })
        finally:
            retriever.close()
        log(f"  {conversation.sample_id} (load {load_average()})")
    return rows


def figures(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Block recall per category and overall, mean tokens, median get() ms."""
    recall = {c: statistics.fmean(r["block_recall"] for r in rows if r["category"] == c)
              for c in CATEGORIES.values() if any(r["category"] == c for r in rows)}
    recall[OVERALL] = statistics.fmean(r["block_recall"] for r in rows)
    return {"n": len(rows), "recall": recall, "tokens": statistics.fmean(r["tokens"] for r in rows),
            "get_ms_median": statistics.median(r["get_ms"] for r in rows)}


def leave_one_out(
    rows: Sequence[dict[str, Any]], max_tokens: float = MAX_TOKENS, key: str = "weight"
) -> dict[str, Any]:
    """Per held-out conversation: the value of ``key`` (the hop ``"weight"``, the
    ``"set_spread"``, the ``"topic_weight"`` or the ``"setting"``: "spread/topic weight")
    chosen on the others, its figures before (the smallest value: no hop, no spread, no
    topic query) and after; and the pooled held-out figures. Ties go to the smaller value."""
    weights = sorted({r[key] for r in rows})
    conversations = list(dict.fromkeys(r["conversation"] for r in rows))
    folds, pooled, base = [], [], []
    for held in conversations:
        train = [r for r in rows if r["conversation"] != held] or list(rows)
        by_weight = {w: figures([r for r in train if r[key] == w]) for w in weights}
        allowed = [w for w in weights if by_weight[w]["tokens"] <= max_tokens] or [min(weights)]
        chosen = max(allowed, key=lambda w: (round(by_weight[w]["recall"][OVERALL], 4), -weights.index(w)))
        before = [r for r in rows if r["conversation"] == held and r[key] == min(weights)]
        after = [r for r in rows if r["conversation"] == held and r[key] == chosen]
        pooled += after
        base += before
        folds.append({"held_out": held, "weight": chosen, "before": figures(before), "after": figures(after)})
    return {"folds": folds, "before": figures(base), "after": figures(pooled), "max_tokens": max_tokens,
            "key": key}


def format_report(report: dict[str, Any]) -> str:
    cats = [*CATEGORIES.values(), OVERALL]
    head = " ".join(f"{c:>11}" for c in cats) + f" {'tokens':>7} {'get ms':>7}"

    def line(label: str, f: dict[str, Any]) -> str:
        return f"{label:<18}" + " ".join(
            f"{f['recall'][c]:>11.3f}" if c in f["recall"] else f"{'-':>11}" for c in cats
        ) + f" {f['tokens']:>7.0f} {f['get_ms_median']:>7.1f}"

    def label(value: Any) -> str:
        return value if isinstance(value, str) else f"{value:.2f}"

    loo = report["leave_one_out"]
    key = loo.get("key", "weight")
    name = NAMES.get(key, key)
    lines = [f"block recall per {name} (all conversations)", f"{key:<18}" + head]
    lines += [line(label(w), f) for w, f in report["weights"].items()]
    lines += ["", f"leave-one-conversation-out ({name}: best training block recall overall, mean "
              f"block <= {loo['max_tokens']} tokens)", f"{'held out / value':<18}" + head]
    smallest = min(report["weights"], key=lambda w: w if isinstance(w, str) else float(w))
    for f in loo["folds"]:
        lines.append(line(f"{f['held_out']} {label(smallest)}", f["before"]))
        lines.append(line(f"{f['held_out']} {label(f['weight'])}", f["after"]))
    lines.append(line("pooled before", loo["before"]))
    lines.append(line("pooled after", loo["after"]))
    lines.append(f"{report['meta']['duration_s']} s, load before {report['meta']['load_before']}, "
                 f"after {report['meta']['load_after']}")
    return "\n".join(lines)


def _numbers(
    parser: argparse.ArgumentParser, option: str, text: str, low: float, high: Optional[float] = None
) -> list[float]:
    """The distinct numbers of a comma-separated option, sorted; a parser error when
    one is no number or lies outside ``low``..``high`` (no upper bound when None)."""
    bound = f"between {low:g} and {high:g}" if high is not None else f"at least {low:g}"
    try:
        values = sorted({float(v) for v in text.split(",")})
    except ValueError:
        parser.error(f"{option} are numbers {'' if high is not None else 'of '}{bound}, comma-separated, got {text!r}")
    if not all(low <= v and (high is None or v <= high) for v in values):
        parser.error(f"{option} are {bound}, got {text!r}")
    return values


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """Run the benchmark; print the tables; write the JSON when asked."""
    parser = argparse.ArgumentParser(prog="python -m bench.multihop", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None, help=f"LoCoMo-schema JSON (default {DEFAULT_DATA})")
    parser.add_argument("--conversations", default=None, help="0-based positions, comma-separated")
    parser.add_argument("--weights", default=",".join(map(str, WEIGHTS)),
                        help="hop weights to try, comma-separated (0: no second hop)")
    parser.add_argument("--set-spreads", default=str(SET_SPREAD),
                        help="the memory's set_spread values to try, comma-separated (1: a question "
                        "asking for a set gets top_k records like any other); with more than one, "
                        "leave-one-out chooses the spread, and --weights must be one weight")
    parser.add_argument("--topic-weights", default=str(TOPIC_WEIGHT),
                        help="the vector source's topic_weight values to try, comma-separated (0: no "
                        "topic query for a set question); with more than one, leave-one-out chooses "
                        "it (with several --set-spreads, the pair), and --weights must be one weight")
    parser.add_argument("--max-tokens", type=float, default=MAX_TOKENS,
                        help="a weight whose training mean block is larger is not chosen")
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    parser.add_argument("--smoke", action="store_true", help=f"run on {SMOKE_DATA.name}, in seconds")
    args = parser.parse_args(argv)
    data = args.data or (SMOKE_DATA if args.smoke else DEFAULT_DATA)
    if not data.is_file():
        parser.error(f"no data file at {data}")
    weights = _numbers(parser, "--weights", args.weights, 0, 1)
    spreads = _numbers(parser, "--set-spreads", args.set_spreads, 1)
    topics = _numbers(parser, "--topic-weights", args.topic_weights, 0, 1)
    if len(weights) > 1 and (len(spreads) > 1 or len(topics) > 1):
        parser.error("leave-one-out chooses the hop weight or the set spread and topic weight: give one "
                     "--weights value with several --set-spreads or --topic-weights")
    key = ("setting" if len(spreads) > 1 and len(topics) > 1 else "set_spread" if len(spreads) > 1
           else "topic_weight" if len(topics) > 1 else "weight")
    select = [int(c) for c in args.conversations.split(",")] if args.conversations else None
    started, load_before = time.time(), load_average()
    print(f"bench.multihop: {data}; load average {load_before}", flush=True)
    rows = run(data, weights, select, log=lambda s: print(s, flush=True), spreads=spreads, topic_weights=topics)
    values = sorted({r[key] for r in rows})
    report = {
        "meta": {"data": str(data), "weights": weights, "set_spreads": spreads, "topic_weights": topics,
                 "duration_s": round(time.time() - started, 1),
                 "load_before": load_before, "load_after": load_average()},
        "weights": {w: figures([r for r in rows if r[key] == w]) for w in values},
        "leave_one_out": leave_one_out(rows, args.max_tokens, key),
        "rows": rows,
    }
    print()
    print(format_report(report))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
        print(f"\nwrote {args.json}")
    return report


if __name__ == "__main__":
    main()
    sys.exit(0)
