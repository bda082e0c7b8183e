"""The commands that move a tenant's users in and out of a store: ``export`` (JSON
Lines) and ``import`` (an export, or a LlamaIndex ``SimpleChatStore`` file)."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from ...core.text import counted
from .loading import CommandError, _open, _progress
from .output import _print_json, _print_replaced


def cmd_export(args: argparse.Namespace) -> None:
    if not args.all and not args.user:
        raise CommandError("export needs a USER, or --all for every user of the tenant")
    if args.all and args.user:
        raise CommandError("export takes a USER or --all, not both")
    with _open(args) as admin:
        users = None if args.all else [args.user]
        to_stdout = args.output in (None, "-")
        with _progress("exporting") as progress:
            rows = admin.export(sys.stdout if to_stdout else args.output, users, progress)
    if not to_stdout:
        summary = {"rows": rows, "file": str(args.output)}
        if args.json:
            return _print_json(summary)
        print(f"exported {counted(rows, 'row')} to {args.output}")


def cmd_import(args: argparse.Namespace) -> None:
    if args.file == "-":  # `llama-memory export u --store a | llama-memory import - --store b`
        import tempfile

        with tempfile.TemporaryDirectory() as folder:  # private: the export holds a user's data
            args.file = str(Path(folder) / "stdin.jsonl")
            with open(args.file, "w", encoding="utf-8") as copy:
                shutil.copyfileobj(sys.stdin, copy)
            return cmd_import(args)
    from ..transfer import export_header

    file = Path(args.file)
    if not file.is_file():
        raise CommandError(f"no file to import at {file}")
    if args.tenant is None:  # the tenant an export was taken from ("default" for other files)
        head = export_header(file)
        args.tenant = "default" if head is None else str(head.get("tenant") or "default")
    from ...storage.registry import backend_for

    with backend_for(args.store).undo_failed_creation(args.store):
        with _open(args, create=True) as admin, _progress("importing") as progress:
            added = admin.import_file(file, user_id=args.user, progress=progress)
    replaced = dict(getattr(added, "replaced", {}))
    if args.json:
        return _print_json(
            {"tenant": args.tenant, "added": dict(added), **({"replaced": replaced} if replaced else {})}
        )
    names = {"profile": "profile row"}
    parts = ", ".join(counted(n, names.get(k, k)) for k, n in sorted(added.items())) or "nothing new"
    print(f"imported into tenant {args.tenant!r}: {parts}")
    _print_replaced({args.tenant: replaced} if replaced else {})
