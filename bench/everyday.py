"""Everyday recall: facts a user mentions in passing, asked later in other words
(``../shared/data/everyday/``, its README gives the data and the recipe).

Two stores are built through the public API, as that README says:

* **small**: the fact exchanges (user message, assistant reply) in round-robin order
  by category, 10 per session (the development set's 90 over 9 sessions; n facts over
  ceil(n/10)), with two small-talk exchanges in each;
* **large**: the same exchanges as needles among the first 1,500 LoCoMo turns
  (``../shared/data/locomo/locomo_dev.json``; more if a set has more than 93 facts, 16
  turns for each), each turn a user message of the same user, one fact exchange after
  every 16th turn.

Each is copied once more with the ``updates`` as a later session (the update questions
are asked of that copy). Every question is asked in a fresh conversation of the set's
user (its ``user`` field) in each flow of :mod:`bench.asking`: ``get`` (``get(question)``) and
``agent`` (the question put as the first message of a new session, then ``get()``, then
taken back out of the store). Each flow starts from its own copy of the store as built.

Scored on the block's **record lines** (the ``- [...]`` lines; header, intro and
delimiters left out) with the README's keyword rule (:func:`has`):

* **recall**: a fact question is recalled when a record line holds one of the fact's
  answers; per category, and per fact (all its questions recalled);
* **two-part**: both facts' answers shown;
* **updates**: a new keyword is shown, and every record line holding an old keyword
  marks it as older (:func:`marked_older`): "new shown" and "old unmarked" apart;
* **never said** (near misses and unrelated) and **small talk**: the tokens injected
  (the whole block, counted by the memory's tokenizer: LlamaIndex's default, tiktoken)
  and the share of questions with nothing injected;
* **block tokens** of the recall questions beside recall;
* **misses**: each fact that a fact or two-part question did not show is classified
  (:func:`classify_miss`): *never retrieved*, with the fact message's rank by the
  embedding's cosine among every stored message; or *retrieved and left out*, with the
  block's rule (relevance below ``min_relevance``, the record floor, the budget, cut to
  fit, a duplicate).

The never-said and small-talk figures count on the small store; on the large one,
whose distractors are other people's chatter written as the user's, they are
information only (the README's rule).

Run::

    .venv/bin/python -m bench.everyday                          # both stores, both flows
    .venv/bin/python -m bench.everyday --stores small --flows get
    .venv/bin/python -m bench.everyday --json bench/results/everyday.json
    .venv/bin/python -m bench.everyday --min-relevance 0        # no relevance gate
    .venv/bin/python -m bench.everyday --smoke                  # tests/data/everyday_tiny.json, seconds
    .venv/bin/python -m bench.everyday --data bench/data/everyday_heldout/everyday_heldout.json
                                                                # the held-out set: measure, never tune

LoCoMo is CC BY-NC 4.0: its turns are read from outside the repository; the report
holds figures and ids only.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Optional

import numpy as np

from bench.asking import FLOW_TITLES, Asker
from bench.locomo import DEFAULT_DATA as LOCOMO_DATA
from bench.locomo import REPO_ROOT, parse_session_date
from bench.locomo import SMOKE_DATA as LOCOMO_SMOKE
from llama_memory.read.query_plan import question_parts

#: The development set, outside the repository.
DEFAULT_DATA = REPO_ROOT / ".." / "shared" / "data" / "everyday" / "everyday_dev.json"
#: A tiny synthetic set of the same schema, for ``--smoke``.
SMOKE_DATA = REPO_ROOT / "tests" / "data" / "everyday_tiny.json"
#: The held-out set, written independently of the development set: it measures, it is
#: never tuned on (its README).
HELDOUT_DATA = REPO_ROOT / "bench" / "data" / "everyday_heldout" / "everyday_heldout.json"
#: The development set's user, and the user of a set that names none.
USER = "dev-user"
#: The assistant's reply to small talk (README).
SMALL_TALK_REPLY = "Sure, I'm here whenever you need me."
#: The stores and flows, in report order.
STORES = ("small", "large")
FLOWS = ("get", "agent")
#: LoCoMo turns taken as distractors (at least; more when the facts need them), and a
#: fact exchange after every this many (README).
DISTRACTORS = 1500
EVERY = 16
#: Fact exchanges per session of the small store, and where its second small talk goes.
PER_SESSION = 10
#: A record line of the block (one per record): ``- [source, when] ...``.
RECORD_LINE = re.compile(r"^- \[")
#: Words by which a memory's rendering marks a value as no longer current.
OLDER_MARKS = re.compile(r"\b(?:superseded|previously|formerly|no longer|outdated|valid until)\b", re.IGNORECASE)
#: A conflict note quoting a record that is older than the one on the line.
OLDER_QUOTE = re.compile(r"conflict, older: \[[^\]]*\] \"(?:[^\"\\]|\\.)*\"")


# --------------------------------------------------------------------------- data


def has(text: str, keyword: str) -> bool:
    """The README's matching rule: ``keyword`` at a word start, case-insensitively."""
    return re.search(r"(?<!\w)" + re.escape(keyword), text, re.IGNORECASE) is not None


def user_of(data: dict[str, Any]) -> str:
    """The user every record of the set belongs to: its ``user`` field."""
    return str(data.get("user") or USER)


def round_robin(facts: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The facts in round-robin order by category (README)."""
    categories = list(dict.fromkeys(f["category"] for f in facts))
    queues = {c: [f for f in facts if f["category"] == c] for c in categories}
    out: list[dict[str, Any]] = []
    while any(queues.values()):
        for c in categories:
            if queues[c]:
                out.append(queues[c].pop(0))
    return out


@dataclass
class Message:
    """One message to store: its id, role, text, time and conversation."""

    id: str
    role: str
    text: str
    when: Optional[datetime]
    session: str


def exchange(fact_id: str, user: str, reply: str, when: Optional[datetime], session: str,
             reply_when: Optional[datetime] = None) -> list[Message]:
    """A user message and the assistant's reply, ids ``<id>`` and ``<id>/reply``."""
    return [Message(fact_id, "user", user, when, session),
            Message(f"{fact_id}/reply", "assistant", reply, reply_when or when, session)]


def small_store(data: dict[str, Any]) -> list[Message]:
    """The small store's messages, session by session (README, recipe (a))."""
    facts, talk = round_robin(data["facts"]), data["small_talk"]
    out: list[Message] = []
    half = PER_SESSION // 2
    for s in range(1, math.ceil(len(facts) / PER_SESSION) + 1):
        chunk = facts[PER_SESSION * (s - 1): PER_SESSION * s]
        pairs = ([(f"talk-{s}a", talk[(2 * s - 2) % len(talk)], SMALL_TALK_REPLY)]
                 + [(f["id"], f["message"], f["reply"]) for f in chunk[:half]]
                 + [(f"talk-{s}b", talk[(2 * s - 1) % len(talk)], SMALL_TALK_REPLY)]
                 + [(f["id"], f["message"], f["reply"]) for f in chunk[half:]])
        t = datetime(2025, 1, 6, 19, 0) + timedelta(days=7 * (s - 1))
        for pair_id, user, reply in pairs:
            out += exchange(pair_id, user, reply, t, f"session_{s}", t + timedelta(minutes=1))
            t += timedelta(minutes=2)
    return out


def locomo_turns(path: Path, n: int) -> list[Message]:
    """The first ``n`` LoCoMo turns in file order, each a user message without its
    speaker's name, at its session's time (README)."""
    turns: list[Message] = []
    for sample in json.loads(path.read_text(encoding="utf-8")):
        conv = sample["conversation"]
        keys = sorted((k for k in conv if re.fullmatch(r"session_\d+", k)), key=lambda k: int(k.split("_")[1]))
        for k in keys:
            when = parse_session_date(conv.get(k + "_date_time"))
            for t in conv[k]:
                turns.append(Message(f"locomo/{sample['sample_id']}/{t['dia_id']}", "user", t["text"],
                                     when, f"{sample['sample_id']}/{k}"))
    return turns[:n]


def large_store(data: dict[str, Any], locomo: Path, n: int = DISTRACTORS, every: int = EVERY) -> list[Message]:
    """The large store's messages in order: the LoCoMo turns, a fact exchange after
    every ``every``-th, in the session and at the time of the turn before it (README,
    recipe (b)). ``n`` turns are taken, or ``every`` per fact when that is more, so that
    every fact finds its place (the development set's 90 facts need 1,440 of the 1,500)."""
    facts, out = round_robin(data["facts"]), []
    for i, turn in enumerate(locomo_turns(locomo, max(n, every * len(facts))), start=1):
        out.append(turn)
        if i % every == 0 and i // every <= len(facts):
            f = facts[i // every - 1]
            out += exchange(f["id"], f["message"], f["reply"], turn.when, turn.session)
    return out


def updates_session(data: dict[str, Any], messages: Sequence[Message]) -> list[Message]:
    """The later session of the ``updates`` exchanges: a week after the latest message
    (for the small store that is 19:00 on 2025-03-10, as the README has it)."""
    latest = max((m.when for m in messages if m.when is not None), default=datetime(2025, 3, 3, 19, 0))
    t = (latest + timedelta(days=7)).replace(hour=19, minute=0, second=0, microsecond=0)
    out: list[Message] = []
    for n, u in enumerate(data["updates"]):
        out += exchange(f"update-{n}", u["message"], u["reply"], t, "updates", t + timedelta(minutes=1))
        t += timedelta(minutes=2)
    return out


# --------------------------------------------------------------------------- stores


def write_store(path: Path, messages: Sequence[Message], user: str = USER) -> float:
    """Put ``messages`` into the store at ``path`` as ``user``, one memory per run of one
    session (``put_messages``, each with its id and time); the seconds it took."""
    from llama_index.core.base.llms.types import ChatMessage, MessageRole

    from llama_memory import ComposableMemory

    started = time.perf_counter()
    runs: list[list[Message]] = []
    for m in messages:
        if runs and runs[-1][0].session == m.session:
            runs[-1].append(m)
        else:
            runs.append([m])
    for run in runs:
        memory = ComposableMemory.from_defaults(user_id=user, session_id=run[0].session, path=path)
        try:
            memory.put_messages([
                ChatMessage(role=MessageRole.USER if m.role == "user" else MessageRole.ASSISTANT, content=m.text,
                            additional_kwargs={"message_id": m.id,
                                               **({"timestamp": m.when.isoformat()} if m.when else {})})
                for m in run
            ])
        finally:
            memory.close()
    return time.perf_counter() - started


class EmbeddingRanks:
    """The rank (1 = nearest) of a stored message by the default embedding's cosine with
    a question, among every message of the store: where a fact that was never retrieved
    stood by meaning alone."""

    def __init__(self, messages: Sequence[Message]) -> None:
        from llama_memory import default_embedding

        self.model = default_embedding()
        self.ids = [m.id for m in messages]
        self.matrix = np.asarray(self.model.embed_array([m.text for m in messages]), dtype=np.float32)

    def rank(self, question: str, message_id: str) -> Optional[int]:
        """The rank of ``message_id`` for ``question`` (None: not stored)."""
        if message_id not in self.ids:
            return None
        cosines = self.matrix @ np.asarray(self.model.get_query_embedding(question), dtype=np.float32)
        mine = cosines[self.ids.index(message_id)]
        return int((cosines > mine).sum()) + 1


# --------------------------------------------------------------------------- scoring


def record_lines(block_text: str) -> list[str]:
    """The block's lines that show stored records (not its header, intro or delimiters)."""
    return [line for line in block_text.splitlines() if RECORD_LINE.match(line)]


def shows(lines: Iterable[str], keywords: Iterable[str]) -> bool:
    """Whether a record line holds one of ``keywords``."""
    words = list(keywords)
    return any(has(line, k) for line in lines for k in words)


def marked_older(line: str, old: Sequence[str]) -> bool:
    """Whether a record line that holds an old keyword marks it as no longer current:
    the old value appears only in a quote of a record the memory marks as older
    (``conflict, older: [...] "..."``), or the line itself says it is superseded (a
    conflict with a newer record, or a word of :data:`OLDER_MARKS`)."""
    rest = OLDER_QUOTE.sub("", line)
    if not any(has(rest, k) for k in old):
        return True
    return "conflict, newer" in rest or bool(OLDER_MARKS.search(rest))


def classify_miss(memory: Any, question: str, fact_id: str, ranks: EmbeddingRanks) -> dict[str, Any]:
    """Why the block did not show fact ``fact_id``: the rule of the block that left out
    a retrieved record holding its message, or, never retrieved, its embedding rank (for
    a question of several parts also ``part_rank``, its best rank for any part)."""
    block = memory.last_block
    for left in block.left_out:
        ids = {i for p in (left.record.parts or [left.record]) for i in ([p.id] + list(p.message_ids))}
        if fact_id in ids:
            return {"kind": "left out", "rule": left.rule or left.reason}
    for record in block.records:
        if fact_id in record.message_ids:
            return {"kind": "shown, keyword not in its line", "rule": "shown"}
    miss = {"kind": "never retrieved", "rule": "never retrieved", "rank": ranks.rank(question, fact_id)}
    parts = question_parts(question)
    if parts:
        # A question of two parts is searched part by part too: the fact's best rank by
        # the embedding for any of its parts says whether a part could have found it.
        miss["part_rank"] = min(r for r in (ranks.rank(p, fact_id) for p in parts) if r is not None)
    return miss


@dataclass
class Store:
    """One built store and what is known of it."""

    name: str
    messages: list[Message]
    built: Path
    updated: Path
    ranks: EmbeddingRanks
    build_s: float


def build(name: str, messages: list[Message], data: dict[str, Any], workdir: Path, log: Callable[[str], None]) -> Store:
    """Write the store and its copy with the updates session."""
    built = workdir / f"{name}-built"
    seconds = write_store(built, messages, user_of(data))
    updated = workdir / f"{name}-updated"
    shutil.copytree(built, updated)
    later = updates_session(data, messages)
    write_store(updated, later, user_of(data))
    log(f"[{name}] {len(messages)} messages written in {seconds:.1f}s (+{len(later)} updates)")
    return Store(name, messages, built, updated, EmbeddingRanks([*messages, *later]), seconds)


def fresh(store_path: Path, workdir: Path, label: str) -> Path:
    """A copy of a built store under a new path (each flow starts from the store as
    built: a get() marks what it showed as used, which later ranks higher)."""
    copy = workdir / label
    shutil.copytree(store_path, copy)
    return copy


@dataclass
class Asked:
    """One question's outcome."""

    kind: str
    question: str
    tokens: int
    ms: float
    ok: Optional[bool] = None
    extra: dict[str, Any] = field(default_factory=dict)


def ask_all(store: Store, data: dict[str, Any], flow: str, workdir: Path,
            min_relevance: Optional[float], log: Callable[[str], None]) -> list[Asked]:
    """Every question of the set, in ``flow``, on fresh copies of ``store``."""
    facts = {f["id"]: f for f in data["facts"]}
    rows: list[Asked] = []
    asker = Asker(fresh(store.built, workdir, f"{store.name}-{flow}"), user_of(data), flow, min_relevance=min_relevance)
    try:
        def ask(text: str, wanted: Sequence[tuple[str, list[str]]] = ()) -> tuple[list[str], dict[str, Any], int, float]:
            """The question's record lines, why each wanted fact (id, answers) is not
            shown (classified while the memory that asked is open), tokens and get() ms."""
            seen: dict[str, Any] = {}

            def inspect(memory: Any) -> None:
                lines = record_lines(memory.last_block.text)
                seen["lines"] = lines
                seen["why"] = {fid: classify_miss(memory, text, fid, store.ranks)
                               for fid, answers in wanted if not shows(lines, answers)}

            shown = asker.ask(text, inspect=inspect)
            return seen["lines"], seen["why"], shown.tokens, shown.get_ms

        for fact in data["facts"]:
            for q in fact["questions"]:
                lines, why, tokens, ms = ask(q, [(fact["id"], fact["answers"])])
                rows.append(Asked("fact", q, tokens, ms, shows(lines, fact["answers"]),
                                  {"fact": fact["id"], "category": fact["category"], "why": why}))
        for pair in data["two_part"]:
            lines, why, tokens, ms = ask(pair["question"], [(fid, facts[fid]["answers"]) for fid in pair["facts"]])
            found = [shows(lines, facts[fid]["answers"]) for fid in pair["facts"]]
            rows.append(Asked("two_part", pair["question"], tokens, ms, all(found),
                              {"any": any(found), "why": why}))
        for item in data["never_said"]:
            _, _, tokens, ms = ask(item["question"])
            rows.append(Asked("never_said_near" if item.get("near") else "never_said_unrelated",
                              item["question"], tokens, ms))
        for line in data["small_talk"]:
            _, _, tokens, ms = ask(line)
            rows.append(Asked("small_talk", line, tokens, ms))
    finally:
        asker.close()
    # Updates: on the store with the later session.
    asker = Asker(fresh(store.updated, workdir, f"{store.name}-{flow}-updated"), user_of(data), flow, min_relevance=min_relevance)
    try:
        for u in data["updates"]:
            captured: dict[str, Any] = {}
            shown = asker.ask(u["question"], inspect=lambda m: captured.update(lines=record_lines(m.last_block.text)))
            lines = captured["lines"]
            new = shows(lines, u["new"])
            unmarked = [line for line in lines if any(has(line, k) for k in u["old"]) and not marked_older(line, u["old"])]
            rows.append(Asked("update", u["question"], shown.tokens, shown.get_ms, new and not unmarked,
                              {"new": new, "old_unmarked": bool(unmarked)}))
    finally:
        asker.close()
    log(f"[{store.name}/{flow}] {len(rows)} questions")
    return rows


def mean(values: Sequence[float]) -> Optional[float]:
    return statistics.fmean(values) if values else None


def figures(rows: Sequence[Asked], data: dict[str, Any]) -> dict[str, Any]:
    """The report of one store and flow."""
    facts = [r for r in rows if r.kind == "fact"]
    by_fact: dict[str, list[bool]] = defaultdict(list)
    by_category: dict[str, list[bool]] = defaultdict(list)
    for r in facts:
        by_fact[r.extra["fact"]].append(bool(r.ok))
        by_category[r.extra["category"]].append(bool(r.ok))
    two = [r for r in rows if r.kind == "two_part"]
    updates = [r for r in rows if r.kind == "update"]
    out: dict[str, Any] = {
        "recall": mean([float(bool(r.ok)) for r in facts]),
        "fact_recall": mean([float(all(v)) for v in by_fact.values()]),
        "per_category": {c: mean([float(x) for x in v]) for c, v in by_category.items()},
        "recall_tokens": mean([r.tokens for r in facts]),
        "two_part": mean([float(bool(r.ok)) for r in two]),
        "two_part_any": mean([float(r.extra["any"]) for r in two]),
        "updates": mean([float(bool(r.ok)) for r in updates]),
        "updates_new_shown": mean([float(r.extra["new"]) for r in updates]),
        "updates_old_unmarked": mean([float(r.extra["old_unmarked"]) for r in updates]),
        "get_ms": mean([r.ms for r in rows]),
    }
    for kind in ("never_said_near", "never_said_unrelated", "small_talk"):
        mine = [r for r in rows if r.kind == kind]
        out[kind] = {"tokens": mean([r.tokens for r in mine]), "empty": mean([float(r.tokens == 0) for r in mine])}
    said = [r for r in rows if r.kind.startswith("never_said")]
    out["never_said"] = {"tokens": mean([r.tokens for r in said]), "empty": mean([float(r.tokens == 0) for r in said])}
    misses, never_retrieved = _misses(rows, "rank")
    # The two-part questions' misses apart: does a part fail to find its fact, or the gate?
    two_misses, two_never_retrieved = _misses(two, "part_rank")
    out["misses"] = misses
    out["two_part_misses"] = two_misses
    out["two_part_never_retrieved_part_rank"] = two_never_retrieved
    out["never_retrieved_rank"] = never_retrieved
    return out


def _misses(rows: Sequence[Asked], rank: str) -> tuple[dict[str, int], dict[str, Any]]:
    """The misses of these rows by rule, most first, and the embedding's ``rank`` field
    of those never retrieved: its median and how many were in the top 10."""
    misses: Counter = Counter()
    ranks: list[int] = []
    for r in rows:
        for why in r.extra.get("why", {}).values():
            misses[why["rule"]] += 1
            if why.get(rank) is not None:
                ranks.append(why[rank])
    summary = {
        "median": statistics.median(ranks) if ranks else None,
        "top10": sum(1 for x in ranks if x <= 10), "n": len(ranks),
    }
    return dict(misses.most_common()), summary


# --------------------------------------------------------------------------- report


def _f(value: Optional[float], digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def format_table(report: dict[str, Any]) -> str:
    """The report as text tables."""
    runs = report["runs"]
    keys = list(runs)
    out = [f"Everyday recall ({report['data']}), min_relevance {report['min_relevance']}", ""]
    head = "| measure | " + " | ".join(keys) + " |"
    out += [head, "|" + " --- |" * (len(keys) + 1)]

    def row(title: str, pick: Callable[[dict[str, Any]], Optional[float]], digits: int = 3) -> None:
        out.append(f"| {title} | " + " | ".join(_f(pick(runs[k]), digits) for k in keys) + " |")

    row("recall (questions)", lambda r: r["recall"])
    row("recall (facts, all questions)", lambda r: r["fact_recall"])
    row("tokens per recall question", lambda r: r["recall_tokens"], 0)
    row("two-part recall (both)", lambda r: r["two_part"])
    row("two-part (at least one)", lambda r: r["two_part_any"])
    row("updates passed", lambda r: r["updates"])
    row("updates: new shown", lambda r: r["updates_new_shown"])
    row("updates: old shown unmarked", lambda r: r["updates_old_unmarked"])
    row("never-said tokens (all)", lambda r: r["never_said"]["tokens"], 1)
    row("never-said near-miss tokens", lambda r: r["never_said_near"]["tokens"], 1)
    row("never-said unrelated tokens", lambda r: r["never_said_unrelated"]["tokens"], 1)
    row("never-said empty share", lambda r: r["never_said"]["empty"])
    row("small-talk tokens", lambda r: r["small_talk"]["tokens"], 1)
    row("small-talk empty share", lambda r: r["small_talk"]["empty"])
    row("get() ms (mean)", lambda r: r["get_ms"], 1)
    out += ["", "Recall by category:", "",
            "| category | " + " | ".join(keys) + " |", "|" + " --- |" * (len(keys) + 1)]
    for c in runs[keys[0]]["per_category"]:
        out.append(f"| {c} | " + " | ".join(_f(runs[k]["per_category"].get(c)) for k in keys) + " |")
    out += ["", "Misses (facts of fact and two-part questions not shown), by cause:", ""]
    for k in keys:
        r = runs[k]
        nr = r["never_retrieved_rank"]
        out.append(f"- {k}: " + ", ".join(f"{rule}: {n}" for rule, n in r["misses"].items())
                   + (f"; never retrieved: median embedding rank {nr['median']}, {nr['top10']} of {nr['n']} in the top 10"
                      if nr["n"] else ""))
    out += ["", "Two-part questions' misses (each fact not shown), by cause:", ""]
    for k in keys:
        r = runs[k]
        pr = r.get("two_part_never_retrieved_part_rank") or {"n": 0}
        out.append(f"- {k}: " + (", ".join(f"{rule}: {n}" for rule, n in r.get("two_part_misses", {}).items()) or "none")
                   + (f"; never retrieved, the fact's best embedding rank for a part: median {pr['median']}, "
                      f"{pr['top10']} of {pr['n']} in the top 10" if pr["n"] else ""))
    out += ["", f"Never-said and small talk count on the small store (large: information only). "
            f"Tokens: the memory's tokenizer (tiktoken). Built in {report['build_s']}. Ran {report['seconds']:.0f}s."]
    return "\n".join(out)


def run(data_path: Path, locomo: Path, stores: Sequence[str], flows: Sequence[str],
        min_relevance: Optional[float] = None, distractors: int = DISTRACTORS, every: int = EVERY,
        log: Callable[[str], None] = print) -> dict[str, Any]:
    """Build the stores, ask every question in every flow, return the report."""
    from llama_memory import default_embedding

    started = time.time()
    data = json.loads(Path(data_path).read_text(encoding="utf-8"))
    default_embedding().load()
    workdir = Path(tempfile.mkdtemp(prefix="llama-memory-everyday-"))
    runs: dict[str, Any] = {}
    build_s: dict[str, float] = {}
    rows_out: dict[str, Any] = {}
    try:
        for name in stores:
            messages = small_store(data) if name == "small" else large_store(data, locomo, distractors, every)
            store = build(name, messages, data, workdir, log)
            build_s[name] = round(store.build_s, 1)
            for flow in flows:
                rows = ask_all(store, data, flow, workdir, min_relevance, log)
                runs[f"{name}/{flow}"] = figures(rows, data)
                rows_out[f"{name}/{flow}"] = [r.__dict__ for r in rows]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return {"data": str(data_path), "min_relevance": min_relevance if min_relevance is not None else "default",
            "runs": runs, "rows": rows_out, "build_s": build_s, "seconds": time.time() - started,
            "flows": {f: FLOW_TITLES[f] for f in flows}}


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.everyday", description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=DEFAULT_DATA, help="the everyday set (default %(default)s)")
    p.add_argument("--locomo", type=Path, default=LOCOMO_DATA, help="LoCoMo turns for the large store's distractors")
    p.add_argument("--stores", default=",".join(STORES), help="comma-separated, of small, large")
    p.add_argument("--flows", default=",".join(FLOWS), help="comma-separated, of get, agent")
    p.add_argument("--min-relevance", type=float, default=None, help="the memory's min_relevance (default: the library's)")
    p.add_argument("--json", type=Path, help="also write the report (with every question's row) here")
    p.add_argument("--smoke", action="store_true", help="tests/data/everyday_tiny.json with tests/data/locomo_tiny.json, seconds")
    return p.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    args = parse_args(argv)
    stores = [s for s in args.stores.split(",") if s]
    flows = [f for f in args.flows.split(",") if f]
    for s in stores:
        if s not in STORES:
            raise SystemExit(f"unknown store {s!r}: choose from {', '.join(STORES)}")
    for f in flows:
        if f not in FLOWS:
            raise SystemExit(f"unknown flow {f!r}: choose from {', '.join(FLOWS)}")
    data, locomo, distractors, every = args.data, args.locomo, DISTRACTORS, EVERY
    if args.smoke:
        data, locomo, distractors, every = SMOKE_DATA, LOCOMO_SMOKE, DISTRACTORS, 3
    report = run(data, locomo, stores, flows, args.min_relevance, distractors, every,
                 log=lambda s: print(s, file=sys.stderr))
    print(format_table(report))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1, default=str), encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
