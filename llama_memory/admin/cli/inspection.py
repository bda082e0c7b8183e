"""The commands that show and edit what a tenant remembers of its users: ``users``,
``sessions``, ``show``, ``records``, ``search``, ``explain``, ``delete``, ``forget``."""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from typing import Any

from ...core.text import counted
from .loading import CommandError, _open
from .output import _jsonable, _print_json, _print_record, _report, _short, _shown, _table, _when


def cmd_users(args: argparse.Namespace) -> None:
    with _open(args) as admin:
        users = admin.users()
        elsewhere = "" if users else admin.other_tenants()
    if args.json:
        return _print_json(users)
    if not users:
        print(f"no users in tenant {args.tenant or 'default'!r}{elsewhere}")
        return
    _table(
        [(u.user_id, u.sessions, u.messages, u.records, u.triples, u.profile_fields, _when(u.last_active)) for u in users],
        ("USER", "SESSIONS", "MESSAGES", "RECORDS", "TRIPLES", "PROFILE", "LAST ACTIVE (UTC)"),
    )


def cmd_sessions(args: argparse.Namespace) -> None:
    with _open(args) as admin:
        sessions = admin.sessions(args.user)
    if args.json:
        return _print_json(sessions)
    _table(
        [(s.session_id, s.messages, s.records, _when(s.first_at), _when(s.last_at)) for s in sessions],
        ("SESSION", "MESSAGES", "RECORDS", "FIRST (UTC)", "LAST (UTC)"),
    )


def cmd_show(args: argparse.Namespace) -> None:
    with _open(args) as admin:
        overview = admin.show(args.user, recent=args.recent)
    if args.json:
        return _print_json(overview)
    s = overview.summary
    print(f"user {_shown(s.user_id, 200)} (tenant {_shown(args.tenant or 'default')})")
    print(
        f"  {counted(s.sessions, 'session')}, {counted(s.messages, 'message')}, "
        f"{counted(s.records, 'record')}, {counted(s.triples, 'current triple')}, "
        f"{counted(s.profile_fields, 'profile field')}; last active {_when(s.last_active)} UTC"
    )
    profile = json.dumps(overview.profile, ensure_ascii=False, indent=2).splitlines() if overview.profile else []
    _section("profile", profile, "(empty)")
    _section("current triples", [f"{t.render()}  [{t.id}]" for t in overview.triples])
    _section("instructions", [f"{i.text}  [{i.id}, since {_when(i.created_at)}]" for i in overview.instructions])
    _section(
        f"recent records (newest first, up to {args.recent})",
        [f"{_when(r.event_time)}  [{r.source}] {_short(r.transcript, 80)}  [{r.id}]" for r in overview.recent],
    )


def _section(title: str, lines: list[str], empty: str = "(none)") -> None:
    """One part of ``show``: its title, then its lines indented (``empty`` when none)."""
    print(f"\n{title}:")
    for line in lines or [empty]:
        print(f"  {line}")


def cmd_records(args: argparse.Namespace) -> None:
    with _open(args) as admin:
        records = admin.records(
            args.user, session_id=args.session, source=args.source, since=args.since, until=args.until,
            limit=args.limit,
        )  # fmt: skip
        # A mistyped filter must not look like an empty memory: said on stderr, so that
        # the listing (and its exit status) stays what a script expects.
        unmatched = None if records else admin.unmatched_filter(args.user, session_id=args.session, source=args.source)
    if unmatched is not None:
        print(f"llama-memory records: note: {unmatched}", file=sys.stderr)
    if args.json:
        return _print_json(records)
    for record in records:
        _print_record(None, record)
    print(counted(len(records), "record"))


def cmd_search(args: argparse.Namespace) -> None:
    with _open(args) as admin:
        records = admin.search(args.user, args.query, args.k)
    if args.json:
        return _print_json(records)
    if not records:
        print("nothing found")
    for rank, record in enumerate(records, start=1):
        _print_record(rank, record)


def cmd_explain(args: argparse.Namespace) -> None:
    from ...read.compose import admission, relevance_text

    with _open(args) as admin:
        block = admin.explain(args.user, args.query, session_id=args.session)
    rules = [
        block.admitted[n] if n < len(block.admitted) else admission(record)
        for n, record in enumerate(block.records)
    ]
    # What was left out, counted by rule (its name and threshold), in the order the rules first apply.
    left = Counter((item.reason, item.rule) for item in block.left_out)
    if args.json:
        # "shown": the decision per record, with its relevance (0..1). A source's rank
        # score only orders that source's records and is on no common scale: left out.
        shown = [
            {"id": r.id, "source": r.source, "relevance": r.relevance, "admitted": rule}
            for r, rule in zip(block.records, rules)
        ]
        counts = [{"reason": reason, "rule": rule, "records": n} for (reason, rule), n in left.items()]
        data = _without_rank_scores(_jsonable(block))
        return _print_json({"query": args.query, "token_limit": block.token_limit, **data, "shown": shown, "left_out_by_rule": counts})
    print(block.text or "(nothing would be injected)")
    print(f"\n{counted(len(block.records), 'record')} shown, {block.token_count} of {block.token_limit} tokens "
          "(relevance: calibrated, 0..1):")
    for rank, (record, rule) in enumerate(zip(block.records, rules), start=1):
        _print_record(rank, record, relevance=True)
        print(f"     admitted: {rule}")
    print("\nleft out:")
    for line in [f"{counted(n, 'record')} {reason}: {rule}" for (reason, rule), n in left.items()] or ["nothing"]:
        print(f"  {line}")
    for item in block.left_out:
        print(f"  - {item.reason} ({item.detail}), relevance {relevance_text(item.record)}:")
        _print_record(None, item.record, indent="    ")


def _without_rank_scores(value: Any) -> Any:
    """``value`` (a block as JSON data) without its records' ``score``: a source's rank
    score, on no common scale (the relevance, 0..1, is what the block decides on)."""
    if isinstance(value, dict):
        is_record = "score" in value and "relevance" in value and "source" in value
        return {k: _without_rank_scores(v) for k, v in value.items() if not (is_record and k == "score")}
    if isinstance(value, list):
        return [_without_rank_scores(v) for v in value]
    return value


def cmd_delete(args: argparse.Namespace) -> None:
    with _open(args) as admin:
        source = admin.delete_record(args.user, args.record_id)
    _report(
        args.json, {"deleted": args.record_id, "source": source},
        f"deleted {_shown(args.record_id)} ({source}) of {_shown(args.user)}",
    )  # fmt: skip


def cmd_forget(args: argparse.Namespace) -> None:
    if not args.yes:
        raise CommandError(
            f"forget deletes everything remembered of {args.user!r} (chat history, records, "
            "profile, triples, vectors) for good: pass --yes to confirm"
        )
    with _open(args) as admin:
        admin.forget(args.user)
    _report(args.json, {"forgotten": args.user}, f"forgot {_shown(args.user)}")
