"""The commands on a whole store rather than one tenant: ``copy`` (SQLite into
PostgreSQL) and ``encrypt`` (SQLCipher at rest)."""

from __future__ import annotations

import argparse
import sys

from ...core.text import counted
from .loading import CommandError, _embed_model, _progress
from .output import _print_json, _print_replaced, _shown


def cmd_copy(args: argparse.Namespace) -> None:
    from ..copying import copy_store

    embed_model = _embed_model(args)  # loaded before the progress bar shows
    with _progress("copying") as progress:
        report = copy_store(
            args.source, args.target, tenant_id=args.tenant, skip_existing=args.skip_existing,
            chroma_url=args.chroma_url, progress=progress, **embed_model,
        )  # fmt: skip
    if args.json:
        return _print_json(report)
    for tenant, users in report.users.items():
        print(f"tenant {_shown(tenant)}: copied {counted(len(users), 'user')} ({', '.join(map(_shown, users))})")
    for tenant, users in report.skipped.items():
        print(
            f"tenant {_shown(tenant)}: skipped {counted(len(users), 'user')} already there "
            f"({', '.join(map(_shown, users))})"
        )
    print("rows: " + ", ".join(f"{kind} {n}" for kind, n in sorted(report.rows.items())))
    print(f"embedded {counted(report.embedded, 'record or triple', 'records and triples')} into pgvector")
    _print_replaced(report.replaced)


def cmd_encrypt(args: argparse.Namespace) -> None:
    from ...storage.privacy import ENCRYPTION_KEY_ENV, environment_key
    from ...storage.registry import backend_for

    key, source = environment_key(), f"the {ENCRYPTION_KEY_ENV} environment variable"
    if key is None:
        if not sys.stdin.isatty():
            raise CommandError(
                f"encrypt needs the key: set {ENCRYPTION_KEY_ENV} (the variable a memory reads it "
                "from too), or run it on a terminal to be asked for it"
            )
        import getpass

        key, source = getpass.getpass("encryption key: "), "the key typed"
        if not key or getpass.getpass("the same key again: ") != key:
            raise CommandError("the two keys typed differ (or are empty): nothing was changed")
    report = backend_for(args.store).encrypt(args.store, key, keep_backup=args.keep_backup, source=source)
    if args.json:
        return _print_json(report)
    print(
        f"encrypted {report.file}: {counted(report.tables, 'table')}, {counted(report.rows, 'row')} "
        "copied and checked"
    )
    if report.backup is not None:
        print(f"the plain copy is kept at {report.backup}: delete it once you no longer need it")
