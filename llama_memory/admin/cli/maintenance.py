"""The commands that keep a store in shape and count it: ``reindex``, ``reconcile``,
``purge-expired``, ``stats``."""

from __future__ import annotations

import argparse

from ...core.text import counted
from .loading import _open, _progress
from .output import _lines, _print_json, _report, _size


def cmd_reindex(args: argparse.Namespace) -> None:
    with _open(args) as admin, _progress("reindexing") as progress:
        count = admin.reindex(progress, reembed=args.reembed)
    _report(args.json, {"indexed": count}, f"reindexed {counted(count, 'record')}")


def cmd_reconcile(args: argparse.Namespace) -> None:
    with _open(args) as admin:
        reports = admin.reconcile()
    _report(
        args.json, reports,
        *(
            f"{name}: {counted(report.users, 'user')} compared; "
            f"{counted(report.missing, 'missing vector')} flagged for indexing, "
            f"{report.adopted} already in the index, "
            f"{counted(report.orphans, 'orphan vector')} deleted, "
            f"{counted(report.dropped_collections, 'empty collection')} dropped, "
            f"{counted(report.indexed, 'vector')} written"
            for name, report in reports.items()
        ),
    )  # fmt: skip


def cmd_purge_expired(args: argparse.Namespace) -> None:
    with _open(args) as admin:
        count = admin.purge_expired()
    _report(args.json, {"purged": count}, f"purged {counted(count, 'expired record')}")


def cmd_stats(args: argparse.Namespace) -> None:
    with _open(args) as admin:
        stats = admin.stats()
    if args.json:
        return _print_json(stats)
    c = stats.counts
    print(f"store {stats.location} (schema {stats.schema_version}), tenant {args.tenant or 'default'}")
    print(f"  users {c.users}, sessions {c.sessions}, messages {c.messages}")
    for source, n in c.records.items():
        print(f"  records [{source}] {n}")
    print(f"  triples {c.triples_current} current, {c.triples} with history")
    print(f"  profile {c.profile_fields} fields, {c.profile_rows} rows with history")
    pending = sum(c.pending.values())
    detail = ", ".join(f"{k} {v}" for k, v in c.pending.items() if v)
    print(f"  waiting for the dense index: {pending}" + (f" ({detail})" if detail else ""))
    print(f"  expired, not purged yet: {c.expired}")
    jobs = stats.jobs
    if any(jobs.values()):
        print("  extraction jobs: " + ", ".join(f"{state} {n}" for state, n in jobs.items()))
    if stats.formation:
        print("  extraction passes per user and day (UTC):")
        rows = [
            (d.day, d.user_id or "-", d.passes, d.failures, d.tokens_sent, d.tokens_received,
             f"{d.duration_ms / 1000:.1f}")
            for d in stats.formation
        ]  # fmt: skip
        for line in _lines(rows, ("DAY", "USER", "PASSES", "FAILED", "TOKENS SENT", "RECEIVED", "SECONDS")):
            print(f"    {line}")
    from ...storage.registry import backend_for

    print(f"  {backend_for(args.store).describe_sizes(stats.sizes, _size)}")
    if len(stats.tenants) > 1:
        print(f"  tenants in this store: {', '.join(stats.tenants)}")
