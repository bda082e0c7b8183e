#!/usr/bin/env python3
"""Check everyday_heldout.json (the held-out "everyday recall" set).

The checks are the development set's (``../shared/data/everyday/validate.py``), copied so that
this file runs without the shared data, with the held-out set's sizes in :data:`SIZES`.

Usage:
    python3 validate.py [path/to/everyday_heldout.json] [--locomo PATH | --no-locomo]

Python 3.11 standard library only. Prints a summary, one line per violation, and exits 1 when
there is any violation (0 when the file passes).

Keyword matching is the one the scorer uses: case-insensitive, at a word start
(the keyword may not be preceded by a letter, digit or underscore; it may be followed by anything,
so "waxwing" matches "waxwings").

Checks:
- shape, ids, categories, and the sizes the set promises (60 facts, 5 per category,
  12 two-part, 24 never-said of which 12 near misses, 10 small-talk lines, 8 updates);
- fact messages have 15-45 words, 2-3 distinct questions, at least one answer keyword;
- every answer keyword occurs in its own fact's message, and in no other fact's message, reply or
  question;
- no question and no reply contains its own fact's answer keywords;
- two-part, never-said, small-talk and update texts contain no fact's answer keyword
  (an update's old value must not reappear in the update, and its new value must not appear in
  any fact or in another update);
- update "old" keywords occur in the updated fact's message; "new" keywords occur in the update
  message and nowhere else;
- when the LoCoMo file is present (default: the repository's ../shared/data/locomo/locomo_dev.json), no answer keyword and no
  update keyword occurs in any LoCoMo turn, so a distractor in the large store can never be
  counted as recalling a fact.
It also prints, for information only, how many content words the questions share with their
fact's message (lower means more paraphrased).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
CATEGORIES = [
    "home", "work", "family", "pets", "health", "food", "hobbies", "plans",
    "possessions", "preferences", "education", "background",
]
#: The held-out set's sizes ("per_category": the least and the most facts in each category).
SIZES = {"facts": 60, "per_category": (5, 5), "two_part": 12, "never_said": 24, "near_misses": 12,
         "small_talk": 10, "updates": 8}
#: The LoCoMo turns the large store takes its distractors from (outside the repository).
LOCOMO = HERE.parents[2] / ".." / "shared" / "data" / "locomo" / "locomo_dev.json"
STOP = set("""
about after again also always because been before being could does doing done down each even
every from going have having here into just know like made make many more most much need only
other over really right same should since some still such than that their them then there these
they thing this those through today very want were what when where which while will with would
your yours mine what's where's who's when's don't didn't it's i'm i've we're
""".split())


def has(text: str, keyword: str) -> bool:
    """Keyword occurs in text, case-insensitively, starting at a word start."""
    return re.search(r"(?<!\w)" + re.escape(keyword), text, re.IGNORECASE) is not None


def words(text: str) -> list[str]:
    return text.split()


def content_words(text: str) -> set[str]:
    toks = re.findall(r"[a-z][a-z'\-]+", text.lower())
    return {t for t in toks if len(t) >= 4 and t not in STOP}


def load_locomo_turns(path: Path) -> list[tuple[str, str]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    turns = []
    for sample in data:
        conv = sample["conversation"]
        keys = sorted((k for k in conv if re.fullmatch(r"session_\d+", k)),
                      key=lambda k: int(k.split("_")[1]))
        for k in keys:
            for t in conv[k]:
                turns.append((f"{sample.get('sample_id')}:{t.get('dia_id')}", t.get("text") or ""))
    return turns


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", nargs="?", default=str(HERE / "everyday_heldout.json"))
    ap.add_argument("--locomo", default=str(LOCOMO),
                    help="LoCoMo file whose turns are the large store's distractors")
    ap.add_argument("--no-locomo", action="store_true", help="skip the LoCoMo check")
    args = ap.parse_args(argv)

    errors: list[str] = []
    err = errors.append

    raw = Path(args.path).read_bytes()
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        print(f"ERROR: {args.path} is not UTF-8 JSON: {exc}")
        return 1

    # ---- shape -------------------------------------------------------------------------
    for key, typ in [("about", str), ("user", str), ("facts", list), ("two_part", list),
                     ("never_said", list), ("small_talk", list), ("updates", list)]:
        if not isinstance(data.get(key), typ):
            err(f"top level: '{key}' missing or not a {typ.__name__}")
    if errors:
        for e in errors:
            print("ERROR:", e)
        return 1

    facts = data["facts"]
    by_id: dict[str, dict] = {}
    per_cat: dict[str, int] = {c: 0 for c in CATEGORIES}
    for i, f in enumerate(facts):
        fid = f.get("id")
        where = f"fact[{i}] {fid}"
        for key, typ in [("id", str), ("category", str), ("message", str), ("reply", str),
                         ("questions", list), ("answers", list)]:
            if not isinstance(f.get(key), typ):
                err(f"{where}: '{key}' missing or not a {typ.__name__}")
        if not all(isinstance(f.get(k), t) for k, t in [("id", str), ("category", str),
                   ("message", str), ("reply", str), ("questions", list), ("answers", list)]):
            continue
        if fid in by_id:
            err(f"{where}: duplicate id")
        by_id[fid] = f
        cat = f["category"]
        if cat not in per_cat:
            err(f"{where}: unknown category '{cat}'")
        else:
            per_cat[cat] += 1
        if not re.fullmatch(re.escape(cat) + r"-\d+", fid):
            err(f"{where}: id should be '<category>-<n>'")
        n = len(words(f["message"]))
        if not 15 <= n <= 45:
            err(f"{where}: message has {n} words (want 15-45)")
        if not f["reply"].strip():
            err(f"{where}: empty reply")
        qs = f["questions"]
        if not 2 <= len(qs) <= 3:
            err(f"{where}: {len(qs)} questions (want 2-3)")
        if len({q.strip().lower() for q in qs}) != len(qs):
            err(f"{where}: questions are not all different")
        if not f["answers"] or not all(isinstance(a, str) and a.strip() for a in f["answers"]):
            err(f"{where}: answers must be non-empty strings")

    if len(facts) != SIZES["facts"]:
        err(f"facts: {len(facts)} (want {SIZES['facts']})")
    low, high = SIZES["per_category"]
    for cat, n in per_cat.items():
        if not low <= n <= high:
            err(f"category {cat}: {n} facts (want {low}-{high})")

    all_keywords = [(fid, a) for fid, f in by_id.items() for a in f["answers"]]

    # ---- answer keywords vs facts ------------------------------------------------------------
    for fid, f in by_id.items():
        for a in f["answers"]:
            if not has(f["message"], a):
                err(f"{fid}: answer '{a}' not in its own message")
            if has(f["reply"], a):
                err(f"{fid}: reply repeats answer '{a}'")
            for q in f["questions"]:
                if has(q, a):
                    err(f"{fid}: question contains its own answer '{a}': {q!r}")
            for oid, o in by_id.items():
                if oid == fid:
                    continue
                for field, text in ([("message", o["message"]), ("reply", o["reply"])]
                                    + [("question", q) for q in o["questions"]]):
                    if has(text, a):
                        err(f"{fid}: answer '{a}' also occurs in {oid}'s {field}: {text!r}")

    # every question text unique across the whole set
    seen_q: dict[str, str] = {}
    def note_question(q: str, where: str) -> None:
        k = q.strip().lower()
        if k in seen_q:
            err(f"{where}: question duplicates {seen_q[k]}: {q!r}")
        else:
            seen_q[k] = where
    for fid, f in by_id.items():
        for q in f["questions"]:
            note_question(q, fid)

    def no_fact_keyword(text: str, where: str) -> None:
        for fid, a in all_keywords:
            if has(text, a):
                err(f"{where}: contains answer keyword '{a}' of {fid}: {text!r}")

    # ---- two-part --------------------------------------------------------------------------
    tp = data["two_part"]
    if len(tp) != SIZES["two_part"]:
        err(f"two_part: {len(tp)} (want {SIZES['two_part']})")
    pairs = set()
    for i, t in enumerate(tp):
        where = f"two_part[{i}]"
        q, ids = t.get("question"), t.get("facts")
        if not isinstance(q, str) or not isinstance(ids, list) or len(ids) != 2 \
                or len(set(ids)) != 2:
            err(f"{where}: needs a question and two different fact ids")
            continue
        for x in ids:
            if x not in by_id:
                err(f"{where}: unknown fact '{x}'")
        if frozenset(ids) in pairs:
            err(f"{where}: pair {ids} used twice")
        pairs.add(frozenset(ids))
        no_fact_keyword(q, where)
        note_question(q, where)

    # ---- never-said ------------------------------------------------------------------------
    ns = data["never_said"]
    if len(ns) != SIZES["never_said"]:
        err(f"never_said: {len(ns)} (want {SIZES['never_said']})")
    near = 0
    for i, n in enumerate(ns):
        where = f"never_said[{i}]"
        q = n.get("question")
        if not isinstance(q, str) or "near" not in n:
            err(f"{where}: needs 'question' and 'near'")
            continue
        if n["near"] is not None:
            near += 1
            if n["near"] not in by_id:
                err(f"{where}: unknown near fact '{n['near']}'")
        no_fact_keyword(q, where)
        note_question(q, where)
    if near != SIZES["near_misses"]:
        err(f"never_said: {near} near misses (want {SIZES['near_misses']})")

    # ---- small talk ------------------------------------------------------------------------
    st = data["small_talk"]
    if len(st) != SIZES["small_talk"]:
        err(f"small_talk: {len(st)} (want {SIZES['small_talk']})")
    if len({s.strip().lower() for s in st if isinstance(s, str)}) != len(st):
        err("small_talk: lines must be distinct strings")
    for i, s in enumerate(st):
        if isinstance(s, str):
            no_fact_keyword(s, f"small_talk[{i}]")

    # ---- updates ---------------------------------------------------------------------------
    ups = data["updates"]
    if len(ups) != SIZES["updates"]:
        err(f"updates: {len(ups)} (want {SIZES['updates']})")
    updated = set()
    for i, u in enumerate(ups):
        where = f"updates[{i}] {u.get('fact')}"
        ok = all(isinstance(u.get(k), str) for k in ("fact", "message", "reply", "question")) \
            and all(isinstance(u.get(k), list) and u.get(k) for k in ("new", "old"))
        if not ok:
            err(f"{where}: needs fact, message, reply, question, non-empty new and old")
            continue
        f = by_id.get(u["fact"])
        if f is None:
            err(f"{where}: unknown fact")
            continue
        if u["fact"] in updated:
            err(f"{where}: fact updated twice")
        updated.add(u["fact"])
        n = len(words(u["message"]))
        if not 8 <= n <= 45:
            err(f"{where}: message has {n} words (want 8-45)")
        for text, field in [(u["message"], "message"), (u["reply"], "reply"),
                            (u["question"], "question")]:
            no_fact_keyword(text, f"{where} {field}")
        note_question(u["question"], where)
        for a in u["old"]:
            if not has(f["message"], a):
                err(f"{where}: old keyword '{a}' not in {u['fact']}'s message")
        for a in u["new"]:
            if not has(u["message"], a):
                err(f"{where}: new keyword '{a}' not in the update message")
            for field in ("reply", "question"):
                if has(u[field], a):
                    err(f"{where}: {field} contains new keyword '{a}'")
            for oid, o in by_id.items():
                for field, text in ([("message", o["message"]), ("reply", o["reply"])]
                                    + [("question", q) for q in o["questions"]]):
                    if has(text, a):
                        err(f"{where}: new keyword '{a}' occurs in {oid}'s {field}")
            for j, v in enumerate(ups):
                if j == i:
                    continue
                for field in ("message", "reply", "question"):
                    if isinstance(v.get(field), str) and has(v[field], a):
                        err(f"{where}: new keyword '{a}' occurs in updates[{j}] {field}")
            for k, tq in enumerate(tp):
                if isinstance(tq.get("question"), str) and has(tq["question"], a):
                    err(f"{where}: new keyword '{a}' occurs in two_part[{k}]")
            for k, nq in enumerate(ns):
                if isinstance(nq.get("question"), str) and has(nq["question"], a):
                    err(f"{where}: new keyword '{a}' occurs in never_said[{k}]")
            for k, s in enumerate(st):
                if isinstance(s, str) and has(s, a):
                    err(f"{where}: new keyword '{a}' occurs in small_talk[{k}]")

    # ---- LoCoMo distractors ---------------------------------------------------------------------
    locomo_note = "skipped (--no-locomo)"
    if not args.no_locomo:
        lpath = Path(args.locomo)
        if lpath.exists():
            turns = load_locomo_turns(lpath)
            keys = [(fid, a) for fid, a in all_keywords] + \
                   [(f"update {u.get('fact')}", a) for u in ups for a in u.get("new", [])]
            hits = 0
            for owner, a in keys:
                pat = re.compile(r"(?<!\w)" + re.escape(a), re.IGNORECASE)
                found = [tid for tid, text in turns if pat.search(text)]
                if found:
                    hits += 1
                    err(f"{owner}: keyword '{a}' occurs in {len(found)} LoCoMo turn(s), "
                        f"e.g. {found[:3]}")
            locomo_note = f"{len(turns)} turns of {lpath.name} checked, {hits} keyword(s) found"
        else:
            locomo_note = f"skipped ({lpath} not found)"

    # ---- report --------------------------------------------------------------------------------
    n_q = sum(len(f["questions"]) for f in by_id.values())
    overlaps, zero = [], 0
    for f in by_id.values():
        mw = content_words(f["message"])
        for q in f["questions"]:
            qw = content_words(q)
            shared = qw & mw
            overlaps.append(len(shared) / len(qw) if qw else 0.0)
            zero += not shared
    print(f"file: {args.path}")
    print(f"user: {data['user']}")
    print(f"facts: {len(facts)} ({', '.join(f'{c} {n}' for c, n in per_cat.items())})")
    print(f"fact questions: {n_q}; answer keywords: {len(all_keywords)}")
    print(f"two_part: {len(tp)}; never_said: {len(ns)} ({near} near misses); "
          f"small_talk: {len(st)}; updates: {len(ups)}")
    if overlaps:
        print(f"paraphrase (info): questions share on average {sum(overlaps)/len(overlaps):.0%} "
              f"of their content words with the message; {zero}/{len(overlaps)} share none")
    print(f"LoCoMo check: {locomo_note}")
    if errors:
        for e in errors:
            print("ERROR:", e)
        print(f"FAILED: {len(errors)} violation(s)")
        return 1
    print("OK: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
