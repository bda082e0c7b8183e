"""What the memory block reaches by budget: block recall and tokens of ours at several
``memory_token_limit`` / ``top_k`` settings, beside BM25 and dense retrieval given the
same tokens (LoCoMo).

For each conversation the store is built as ``bench.locomo`` builds it, and each setting
asks every scored question of a fresh copy of it (``bench.asking``: ``get(question)`` by
default, or an agent's flow with ``--flow``). Block recall is the share of a question's
evidence turns among the message ids of the records the block shows.

The baselines (``bench.locomo``'s ``bm25``, with its stopwords, and ``dense``) rank single
turns. Their block is their ranked turns, each as one line ``- [date] "text"`` (counted
with the same tokenizer, plus :data:`BLOCK_OVERHEAD` tokens of fixed lines), taken in rank
order while they fit:

* **equal tokens**: as many tokens as ours' block spent on that question at that setting;
* **full budget**: the setting's ``memory_token_limit``.

Run::

    .venv/bin/python -m bench.budget --data ../shared/data/locomo/locomo_dev.json \\
        --json bench/results/budget.json --plot docs/block-budget.png
    .venv/bin/python -m bench.budget --smoke            # tests/data/locomo_tiny.json, seconds

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

from bench.asking import FLOW_TITLES, FLOWS, Asker
from bench.locomo import (
    BM25,
    CATEGORIES,
    DEFAULT_DATA,
    OVERALL,
    SMOKE_DATA,
    STOPWORDS,
    Conversation,
    Dense,
    Ours,
    Retriever,
    date_prefix,
    load_average,
    load_dataset,
    score,
)

#: (memory_token_limit, top_k) per point of the curve: top_k grows with the budget so
#: that the records retrieved can fill it (10 records of excerpts fill about 1,500 tokens).
SETTINGS = ((1000, 10), (1500, 10), (3000, 25), (6000, 50))
#: The baselines, by ``bench.locomo`` name.
BASELINES = ("bm25", "dense")
#: The fixed lines of a baseline's block (open, intro, close), in tokens.
BLOCK_OVERHEAD = 30
#: Turns a baseline ranks per question (enough to fill the largest budget).
BASELINE_DEPTH = 200


def run(
    data: Path,
    settings: Sequence[tuple[int, int]] = SETTINGS,
    select: Optional[Sequence[int]] = None,
    limit: Optional[int] = None,
    flow: str = "get",
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Ask every question at every setting, and the baselines at the same tokens; return
    the report (per-question rows, ids and figures only)."""
    from llama_index.core.utils import get_tokenizer

    from llama_memory import default_embedding

    started, load_before = time.time(), load_average()
    dataset = load_dataset(data, limit, select)
    default_embedding().load()
    tokenizer = get_tokenizer()
    rows: list[dict[str, Any]] = []
    for conversation in dataset.conversations:
        t0 = time.time()
        lines = {t.dia_id: len(tokenizer(f'- [{date_prefix(t.when, t.date_raw)}] {json.dumps(t.text)}')) + 1
                 for t in conversation.turns}
        ranked = rank_baselines(conversation)
        mine = [{"conversation": q.conversation, "qa_index": q.index, "category": q.category, "settings": {}}
                for q in conversation.questions]
        ours = Ours()
        try:
            ours.build(conversation)
            for budget, top_k in settings:
                asker = Asker(ours.fresh_copy(f"budget-{budget}-{top_k}"), conversation.sample_id, flow,
                              top_k=top_k, memory_token_limit=budget, credit=ours.credited)
                try:
                    for q, row in zip(conversation.questions, mine):
                        shown = asker.ask(q.question)
                        point: dict[str, Any] = {"ours": {
                            "tokens": shown.tokens, "recall": score([shown.ids], q.evidence, 1)["turn_recall"]}}
                        for name in BASELINES:
                            turns = ranked[name][q.index]
                            for label, allowed in (("equal", shown.tokens), ("full", budget)):
                                ids, used = fill(turns, lines, allowed)
                                point[f"{name}_{label}"] = {
                                    "tokens": used, "recall": score([ids], q.evidence, 1)["turn_recall"]}
                        row["settings"][f"{budget}/{top_k}"] = point
                finally:
                    asker.close()
        finally:
            ours.close()
        rows.extend(mine)
        log(f"  {conversation.sample_id}: {len(mine)} questions, {time.time() - t0:.0f} s (load {load_average()})")
    return {
        "meta": {"data": str(data), "conversations": [c.sample_id for c in dataset.conversations],
                 "settings": [list(s) for s in settings], "flow": flow, "baselines": list(BASELINES),
                 "bm25_stopwords": True, "duration_s": round(time.time() - started, 1),
                 "load_before": load_before, "load_after": load_average()},
        "curve": curve(rows, settings),
        "questions": rows,
    }


def rank_baselines(conversation: Conversation) -> dict[str, dict[int, list[str]]]:
    """Each baseline's turns for each question, best first (:data:`BASELINE_DEPTH`)."""
    out: dict[str, dict[int, list[str]]] = {}
    for name in BASELINES:
        retriever: Retriever = BM25(stopwords=STOPWORDS) if name == "bm25" else Dense()
        try:
            retriever.build(conversation)
            out[name] = {q.index: [r[0] for r in retriever.search(q.question, BASELINE_DEPTH)]
                         for q in conversation.questions}
        finally:
            retriever.close()
    return out


def fill(turns: Sequence[str], line_tokens: dict[str, int], allowed: int) -> tuple[list[str], int]:
    """The turns, in rank order, that fit in ``allowed`` tokens with the block's fixed
    lines (a turn that does not fit is skipped, a later shorter one may); and the tokens
    used (0 for an empty block)."""
    used, ids = BLOCK_OVERHEAD, []
    for dia_id in turns:
        if used + line_tokens[dia_id] <= allowed:
            used += line_tokens[dia_id]
            ids.append(dia_id)
    return ids, used if ids else 0


def curve(rows: Sequence[dict[str, Any]], settings: Sequence[tuple[int, int]]) -> dict[str, Any]:
    """Per setting and per retriever: mean tokens, block recall overall and per category."""
    out: dict[str, Any] = {}
    for budget, top_k in settings:
        key = f"{budget}/{top_k}"
        points = [(row["settings"][key], row["category"]) for row in rows if key in row["settings"]]
        if not points:
            continue
        out[key] = {}
        for name in points[0][0]:
            recall: dict[str, list[float]] = {}
            for point, category in points:
                for group in (CATEGORIES[category], OVERALL):
                    recall.setdefault(group, []).append(point[name]["recall"])
            out[key][name] = {"tokens": statistics.fmean(p[name]["tokens"] for p, _ in points),
                              "recall": {g: statistics.fmean(v) for g, v in recall.items()}}
    return out


def format_report(report: dict[str, Any]) -> str:
    """The curve as a table."""
    meta = report["meta"]
    n = len(report["questions"])
    lines = [f"bench.budget: {len(meta['conversations'])} conversations ({', '.join(meta['conversations'])}), "
             f"{n} questions; ours asked by {FLOW_TITLES[meta['flow']]}; baselines given ours' tokens per "
             f"question (equal) or the whole budget (full)",
             f"{'budget/top_k':<13} {'retriever':<12} {'tokens':>7} {'recall':>7} {'multi-hop':>9} "
             f"{'temporal':>8} {'open-dom':>8} {'single-hop':>10}"]
    for key, by_name in report["curve"].items():
        for name, figures in by_name.items():
            r = figures["recall"]
            lines.append(f"{key:<13} {name:<12} {figures['tokens']:>7.0f} {r.get(OVERALL, float('nan')):>7.3f} "
                         + " ".join(f"{r.get(g, float('nan')):>{w}.3f}" for g, w in
                                    (("multi-hop", 9), ("temporal", 8), ("open-domain", 8), ("single-hop", 10))))
    lines.append(f"{meta['duration_s']} s, load {meta['load_before']} -> {meta['load_after']}")
    return "\n".join(lines)


def plot(report: dict[str, Any], path: Path) -> None:
    """Block recall (overall and multi-hop) against mean tokens, per retriever."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = {"ours": ("ours (memory_token_limit / top_k)", "o-", "C0"),
              "bm25_full": ("bm25, whole budget", "s--", "C1"), "dense_full": ("dense, whole budget", "^--", "C2"),
              "bm25_equal": ("bm25, ours' tokens", "s:", "C1"), "dense_equal": ("dense, ours' tokens", "^:", "C2")}
    figure, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for ax, group, title in ((axes[0], OVERALL, "all questions"), (axes[1], "multi-hop", "multi-hop")):
        for name, (label, style, color) in styles.items():
            points = [(c[name]["tokens"], c[name]["recall"].get(group)) for c in report["curve"].values() if name in c]
            points = [(x, y) for x, y in points if y is not None]
            if points:
                ax.plot(*zip(*points), style, color=color, label=label,
                        markerfacecolor="none" if name.endswith("equal") else color)
        if group == OVERALL:
            for key, c in report["curve"].items():
                ax.annotate(key, (c["ours"]["tokens"], c["ours"]["recall"][OVERALL]),
                            textcoords="offset points", xytext=(4, -12), fontsize=8)
        ax.set_title(f"block recall, {title}")
        ax.set_xlabel("tokens per get() (mean)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("evidence turns in the block")
    axes[1].legend(fontsize=8, loc="lower right")
    meta = report["meta"]
    figure.suptitle(f"LoCoMo, {len(meta['conversations'])} conversations, {len(report['questions'])} questions; "
                    f"ours by {meta['flow']}", fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    plt.close(figure)


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """Run, print the table, write the JSON and the plot when asked."""
    parser = argparse.ArgumentParser(prog="python -m bench.budget", description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=None, help=f"LoCoMo-schema JSON (default {DEFAULT_DATA})")
    parser.add_argument("--conversations", default=None, help="0-based positions, comma-separated")
    parser.add_argument("--limit-conversations", type=int, default=None, help="only the first N conversations")
    parser.add_argument("--settings", default=",".join(f"{b}:{k}" for b, k in SETTINGS),
                        help="memory_token_limit:top_k pairs, comma-separated")
    parser.add_argument("--flow", choices=FLOWS, default="get", help="how ours is asked (bench.asking)")
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    parser.add_argument("--plot", type=Path, default=None, help="also draw the curve into this PNG")
    parser.add_argument("--smoke", action="store_true", help=f"run on {SMOKE_DATA.name}, in seconds")
    args = parser.parse_args(argv)
    data = args.data or (SMOKE_DATA if args.smoke else DEFAULT_DATA)
    if not data.is_file():
        parser.error(f"no data file at {data}")
    try:
        settings = [tuple(int(x) for x in pair.split(":")) for pair in args.settings.split(",") if pair.strip()]
    except ValueError:
        parser.error(f"--settings takes memory_token_limit:top_k pairs, comma-separated, not {args.settings!r}")
    if not settings or any(len(s) != 2 or min(s) < 1 for s in settings):
        parser.error("--settings takes positive memory_token_limit:top_k pairs")
    if args.limit_conversations is not None and args.limit_conversations < 1:
        parser.error("--limit-conversations must be positive")
    select = [int(c) for c in args.conversations.split(",")] if args.conversations else None
    print(f"bench.budget: {data}; load average {load_average()}", flush=True)
    report = run(data, settings, select, args.limit_conversations, args.flow, log=lambda s: print(s, flush=True))
    print()
    print(format_report(report))
    if args.json is not None:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1))
        print(f"\nwrote {args.json}")
    if args.plot is not None:
        plot(report, args.plot)
        print(f"wrote {args.plot}")
    return report


if __name__ == "__main__":
    main()
    sys.exit(0)
