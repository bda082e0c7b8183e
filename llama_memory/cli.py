"""The ``llama-memory`` command line: see and manage what a memory store remembers.

A thin layer over :class:`llama_memory.admin.MemoryAdmin`: every command opens the
memory directory given as ``--store`` (the ``path=`` of ``from_defaults``, or a
``postgresql://`` URL, the ``store=``) for one
``--tenant``, prints for people or, with ``--json``, for scripts, and exits non-zero
with a message on stderr when something is wrong.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

from .text import counted

DESCRIPTION = """\
See and manage what a llama-memory store remembers.

Every command but `demo`, `copy` and `encrypt` works on a memory directory (--store, the path=
given to ComposableMemory.from_defaults) or a PostgreSQL store (--store
postgresql://..., the store= of from_defaults) and one tenant (--tenant, default
"default").
--json prints JSON for scripts. A mistyped --store is an error: only `import`
creates a store (owner-only). An encrypted store is opened with the key in
LLAMA_MEMORY_ENCRYPTION_KEY.
"""

EPILOG = """\
examples:
  llama-memory users --store ./memory
  llama-memory show alice --store ./memory
  llama-memory search alice "where do I live?" --store ./memory
  llama-memory explain alice "where do I live?" --store ./memory
  llama-memory export --all -o backup.jsonl --store ./memory
  llama-memory import backup.jsonl --store ./other-memory
  llama-memory import chat_store.json --store ./memory     (a SimpleChatStore file)
  llama-memory stats --store postgresql://app@db:5432/memory
  llama-memory copy --from ./memory --to postgresql://app@db:5432/memory
  LLAMA_MEMORY_ENCRYPTION_KEY=... llama-memory encrypt --store ./memory
  llama-memory mcp --store ./memory --user alice      (an MCP server over stdio)
"""


class CommandError(Exception):
    """Bad input the command line reports in one line (exit status 1)."""


# --------------------------------------------------------------------------- output


def _jsonable(value: Any) -> Any:
    """Plain JSON data of the API's results (dataclasses, paths, counters...)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _print_json(value: Any) -> None:
    print(json.dumps(_jsonable(value), ensure_ascii=False, indent=2))


def _when(epoch: Optional[float]) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _short(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


#: The widest a table cell (an id, a name) is shown; --json gives every value whole.
CELL_WIDTH = 40


def _shown(value: Any, width: int = CELL_WIDTH) -> str:
    """A value as one line of at most ``width`` characters: newlines and other control
    characters escaped (an id holding a newline must not break a table), the middle of
    a long value elided (ids usually differ at their start or end)."""
    text = "".join(
        c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(value)
    )
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> None:
    for line in _lines(rows, header):
        print(line)


def _lines(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> list[str]:
    """A table's lines: the header, then the rows, in aligned columns."""
    cells = [[str(c) for c in header]] + [[_shown(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]


def _print_record(rank: Optional[int], record: Any, indent: str = "", relevance: bool = False) -> None:
    head = f"{rank}. " if rank is not None else ""
    score = f"score {record.score:.3f}  " if rank is not None else ""
    if relevance:  # the calibrated relevance (0..1); the score is only a rank within a source
        from .compose import relevance_text

        score = f"relevance {relevance_text(record)}  rank score {record.score:.3f}  "
    print(
        f"{indent}{head}[{record.source}] {score}id {_shown(record.id or '-')}  "
        f"session {_shown(record.session_id or '-')}  at {_when(record.event_time)}"
    )
    for part in record.parts or [record]:
        ids = f"  (messages {', '.join(part.message_ids)})" if part.message_ids else ""
        print(f"{indent}     {_short(part.transcript)}{ids}")


# --------------------------------------------------------------------------- commands


def _open(args: argparse.Namespace, create: bool = False) -> Any:
    from .admin import MemoryAdmin

    tenant = args.tenant or "default"
    kwargs: dict[str, Any] = {}
    if getattr(args, "top_k", None) is not None:
        kwargs["top_k"] = args.top_k
    if getattr(args, "token_limit", None) is not None:
        kwargs["memory_token_limit"] = args.token_limit
    if args.embed_model is not None:
        kwargs["embed_model"] = _load_embedding(args.embed_model)
    # An encrypted store's key comes from LLAMA_MEMORY_ENCRYPTION_KEY, never from an
    # argument: other accounts can read arguments in the process list.
    return MemoryAdmin(
        args.store, tenant, create=create, chroma_url=args.chroma_url,
        owner_only=not getattr(args, "no_owner_only", False), **kwargs,
    )  # fmt: skip


def _load_embedding(spec: str) -> Any:
    """The embedding model named ``module:name``: a BaseEmbedding object, or a callable
    that returns one when called without arguments."""
    from llama_index.core.base.embeddings.base import BaseEmbedding

    found = _import_attribute(spec, "--embed-model", "myapp.memory:embed_model")
    model = found() if callable(found) and not isinstance(found, BaseEmbedding) else found
    if not isinstance(model, BaseEmbedding):
        raise CommandError(
            f"--embed-model {spec}: expected a LlamaIndex BaseEmbedding (or a function "
            f"returning one), got {type(model).__name__}"
        )
    return model


def _import_attribute(spec: str, option: str, example: str) -> Any:
    """The attribute ``name`` of the module ``module`` named by ``spec`` (``module:name``),
    the module found as ``python -m`` finds it: in the current directory first."""
    import importlib

    module_name, _, attribute = spec.partition(":")
    if not module_name or not attribute:
        raise CommandError(f"{option} takes module:name (e.g. {example}), got {spec!r}")
    # The console script's sys.path starts with its own directory, not the current one
    # (python -m puts the current directory first): a user's module beside them is found.
    here = os.getcwd()
    if not any(entry in ("", here) for entry in sys.path):
        sys.path.insert(0, here)
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as exc:
        raise CommandError(f"{option} {spec}: cannot load it: {exc}") from None


def _progress(label: str) -> Any:
    from .progress import Progress

    return Progress(label)  # draws on a terminal only


def cmd_users(args: argparse.Namespace) -> None:
    with _open(args) as admin:
        users = admin.users()
    if args.json:
        return _print_json(users)
    if not users:
        print(f"no users in tenant {args.tenant or 'default'!r}")
        return
    _table(
        [
            (u.user_id, u.sessions, u.messages, u.records, u.triples, u.profile_fields, _when(u.last_active))
            for u in users
        ],
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
    print("\nprofile:")
    if overview.profile:
        for line in json.dumps(overview.profile, ensure_ascii=False, indent=2).splitlines():
            print(f"  {line}")
    else:
        print("  (empty)")
    print("\ncurrent triples:")
    for triple in overview.triples:
        print(f"  {triple.render()}  [{triple.id}]")
    if not overview.triples:
        print("  (none)")
    print("\ninstructions:")
    for instruction in overview.instructions:
        print(f"  {instruction.text}  [{instruction.id}, since {_when(instruction.created_at)}]")
    if not overview.instructions:
        print("  (none)")
    print(f"\nrecent records (newest first, up to {args.recent}):")
    for record in overview.recent:
        print(f"  {_when(record.event_time)}  [{record.source}] {_short(record.transcript, 80)}  [{record.id}]")
    if not overview.recent:
        print("  (none)")


def cmd_records(args: argparse.Namespace) -> None:
    with _open(args) as admin:
        records = admin.records(
            args.user,
            session_id=args.session,
            source=args.source,
            since=args.since,
            until=args.until,
            limit=args.limit,
        )
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
    from .compose import admission, relevance_text

    with _open(args) as admin:
        block = admin.explain(args.user, args.query, session_id=args.session)
        limit = admin.memory_token_limit
    rules = [
        block.admitted[n] if n < len(block.admitted) else admission(record)
        for n, record in enumerate(block.records)
    ]
    if args.json:
        # "shown": the decision per record, the relevance on its 0..1 scale beside the
        # rank score (records[].score), which only orders one source's records.
        shown = [
            {"id": r.id, "source": r.source, "relevance": r.relevance, "rank_score": r.score, "admitted": rule}
            for r, rule in zip(block.records, rules)
        ]
        return _print_json({"query": args.query, "token_limit": limit, **_jsonable(block), "shown": shown})
    print(block.text or "(nothing would be injected)")
    print(f"\n{counted(len(block.records), 'record')} shown, {block.token_count} of {limit} tokens "
          "(relevance: calibrated, 0..1; rank score: the order within a source, not comparable):")
    for rank, (record, rule) in enumerate(zip(block.records, rules), start=1):
        _print_record(rank, record, relevance=True)
        print(f"     admitted: {rule}")
    print("\nleft out:")
    print(f"  {block.dropped_duplicates} as duplicates (already in the conversation window, or stated whole by another record)")
    print(f"  {block.dropped_irrelevant} as not relevant (relevance below min_relevance)")
    print(f"  {block.dropped_for_budget} for the token budget ({limit} tokens)")
    for item in block.left_out:
        print(f"  - {item.reason} ({item.detail}), relevance {relevance_text(item.record)}:")
        _print_record(None, item.record, indent="    ")


def cmd_delete(args: argparse.Namespace) -> None:
    with _open(args) as admin:
        source = admin.delete_record(args.user, args.record_id)
    if args.json:
        return _print_json({"deleted": args.record_id, "source": source})
    print(f"deleted {_shown(args.record_id)} ({source}) of {_shown(args.user)}")


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
    file = Path(args.file)
    if not file.is_file():
        raise CommandError(f"no file to import at {file}")
    if args.tenant is None:
        args.tenant = _file_tenant(file)
    from .storage.registry import backend_for

    # A failed import into a new store leaves no empty store behind.
    with backend_for(args.store).undo_failed_creation(args.store):
        with _open(args, create=True) as admin, _progress("importing") as progress:
            added = admin.import_file(file, user_id=args.user, progress=progress)
    _print_import(args, added)


def _print_import(args: argparse.Namespace, added: Any) -> None:
    replaced = dict(getattr(added, "replaced", {}))
    if args.json:
        return _print_json(
            {"tenant": args.tenant, "added": dict(added), **({"replaced": replaced} if replaced else {})}
        )
    names = {"profile": "profile row"}
    parts = ", ".join(counted(n, names.get(k, k)) for k, n in sorted(added.items())) or "nothing new"
    print(f"imported into tenant {args.tenant!r}: {parts}")
    _print_replaced({args.tenant: replaced} if replaced else {})


def _print_replaced(replaced: dict[str, dict[str, int]]) -> None:
    """Say, per user, what an import or a copy did to text no store can hold."""
    for tenant, users in replaced.items():
        for user, count in sorted(users.items()):
            print(
                f"tenant {tenant!r}, user {user!r}: {count} NUL or invalid characters "
                "replaced by U+FFFD (no store can hold them)"
            )


def _file_tenant(file: Path) -> str:
    """The tenant an export was taken from ("default" for other files)."""
    from .admin import EXPORT_FORMAT

    with open(file, encoding="utf-8") as stream:
        first = stream.readline()
    try:
        head = json.loads(first)
    except json.JSONDecodeError:
        return "default"
    if isinstance(head, dict) and head.get("format") == EXPORT_FORMAT:
        return str(head.get("tenant") or "default")
    return "default"


def cmd_forget(args: argparse.Namespace) -> None:
    if not args.yes:
        raise CommandError(
            f"forget deletes everything remembered of {args.user!r} (chat history, records, "
            "profile, triples, vectors) for good: pass --yes to confirm"
        )
    with _open(args) as admin:
        admin.forget(args.user)
    if args.json:
        return _print_json({"forgotten": args.user})
    print(f"forgot {_shown(args.user)}")


def cmd_reindex(args: argparse.Namespace) -> None:
    with _open(args) as admin, _progress("reindexing") as progress:
        count = admin.reindex(progress)
    if args.json:
        return _print_json({"indexed": count})
    print(f"reindexed {counted(count, 'record')}")


def cmd_reconcile(args: argparse.Namespace) -> None:
    with _open(args) as admin:
        reports = admin.reconcile()
    if args.json:
        return _print_json(reports)
    for name, report in reports.items():
        print(
            f"{name}: {counted(report.users, 'user')} compared; "
            f"{counted(report.missing, 'missing vector')} flagged for indexing, "
            f"{report.adopted} already in the index, "
            f"{counted(report.orphans, 'orphan vector')} deleted, "
            f"{counted(report.dropped_collections, 'empty collection')} dropped, "
            f"{counted(report.indexed, 'vector')} written"
        )


def cmd_purge_expired(args: argparse.Namespace) -> None:
    with _open(args) as admin:
        count = admin.purge_expired()
    if args.json:
        return _print_json({"purged": count})
    print(f"purged {counted(count, 'expired record')}")


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
    from .storage.registry import backend_for

    print(f"  {backend_for(args.store).describe_sizes(stats.sizes, _size)}")
    if len(stats.tenants) > 1:
        print(f"  tenants in this store: {', '.join(stats.tenants)}")


def cmd_worker(args: argparse.Namespace) -> int:
    import logging
    import signal
    import threading

    from .worker import run_worker

    llm = _load_object(args.llm, "--llm", "a LlamaIndex LLM (or a function returning one)")
    stop = threading.Event()
    # SIGTERM (a service manager stopping it) ends the loop after the running pass.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    kwargs: dict[str, Any] = {}
    if args.embed_model is not None:
        kwargs["embed_model"] = _load_embedding(args.embed_model)
    outcomes: list[Any] = []
    # Each job's line below says how it ended: the queue's own warning would repeat it.
    logging.getLogger("llama_memory.formation").setLevel(logging.ERROR)

    def report(outcome: Any) -> None:
        outcomes.append(outcome)
        if not args.json:
            print(_outcome_line(outcome), flush=True)

    try:
        run_worker(
            args.store, llm, once=args.once, stop=stop, lease=args.lease, report=report,
            formation_token_budget=args.token_budget, **kwargs,
        )  # fmt: skip
    except KeyboardInterrupt:
        pass
    failed = sum(o.failed for o in outcomes)
    if args.json:
        _print_json({
            "jobs": len(outcomes), "done": sum(o.state == "done" for o in outcomes), "failed": failed,
            "outcomes": [
                {"id": o.job.id, "user_id": o.job.user_id, "session_id": o.job.payload.get("session_id"),
                 "state": o.state, "attempts": o.job.attempts, "error": o.error, "retry_at": o.retry_at,
                 "reason": o.reason, "cost": o.cost}
                for o in outcomes
            ],
        })  # fmt: skip
    else:
        done = sum(o.state == "done" for o in outcomes)
        deferred = sum(o.state == "deferred" for o in outcomes)
        detail = f": {done} done, {failed} failed" if failed else ""
        if deferred:
            detail = (detail or f": {done} done") + f", {deferred} deferred"
        print(f"ran {counted(len(outcomes), 'extraction job')}{detail}")
    # --once is what scripts and cron run: a failed pass must not look like success.
    return 1 if args.once and failed else 0


def _outcome_line(outcome: Any) -> str:
    """One line of ``worker`` output for a job that ended."""
    job = outcome.job
    payload = job.payload if isinstance(job.payload, dict) else {}
    whose = f"user {job.user_id or '-'}, session {payload.get('session_id') or '-'}"
    head = f"job {job.id} ({whose}): "
    if outcome.state == "done":
        return head + "done"
    if outcome.state == "lost":
        return head + "ran past its lease; another worker took it over"
    if outcome.state == "deferred":
        return head + f"deferred to {_when(outcome.retry_at)} UTC: {outcome.reason}"
    error = _short(outcome.error or "", 300)
    if outcome.state == "queued":
        return head + f"failed (attempt {job.attempts} of {job.max_attempts}), retrying at {_when(outcome.retry_at)} UTC: {error}"
    return head + f"dead after {counted(job.attempts, 'attempt')}: {error}"


def _load_object(spec: str, option: str, what: str) -> Any:
    """The object named ``module:name`` (called when it is a function or class)."""
    found = _import_attribute(spec, option, f"{what}, e.g. myapp.llms:make_llm")
    return found() if callable(found) else found


def cmd_jobs(args: argparse.Namespace) -> int:
    if args.action == "retry":
        return _retry_jobs(args)
    if args.job_id is not None or args.all_dead:
        raise CommandError("a job id and --all-dead go with `jobs retry` (e.g. llama-memory jobs retry ID)")
    with _open(args) as admin:
        jobs = admin.jobs(failed_only=not args.all)
    if args.json:
        _print_json(jobs)
        return 0
    if not jobs:
        print(f"no {'' if args.all else 'failed '}jobs in tenant {args.tenant or 'default'!r}")
        return 0
    rows = [
        (j.id, j.user_id or "-", j.session_id or "-", "failed, retrying" if j.failed and j.state == "queued" else j.state,
         f"{j.attempts}/{j.max_attempts}", _when(j.run_at) if j.state == "queued" else "-")
        for j in jobs
    ]  # fmt: skip
    lines = _lines(rows, ("JOB", "USER", "SESSION", "STATE", "ATTEMPTS", "NEXT RUN (UTC)"))
    for index, line in enumerate(lines):
        print(line)
        if index and jobs[index - 1].last_error:
            print(f"    last error: {_short(jobs[index - 1].last_error or '', 300)}")
    return 0


def _retry_jobs(args: argparse.Namespace) -> int:
    if (args.job_id is None) == (not args.all_dead):
        raise CommandError("jobs retry takes a job ID (as `llama-memory jobs` lists it) or --all-dead")
    with _open(args) as admin:
        retried = admin.retry_dead_jobs() if args.all_dead else {args.job_id: admin.retry_job(args.job_id)}
    if args.json:
        _print_json({"retried": retried})
        return 0
    for old, new in retried.items():
        if old == new:
            print(f"job {old}: queued to run now")
        else:
            print(f"job {old}: its session's pass is already queued as job {new}, which covers the same messages")
    if args.all_dead:
        print(f"retried {counted(len(retried), 'dead job')}")
    return 0


def cmd_copy(args: argparse.Namespace) -> None:
    from .copying import copy_store

    kwargs: dict[str, Any] = {}
    if args.embed_model is not None:
        kwargs["embed_model"] = _load_embedding(args.embed_model)
    with _progress("copying") as progress:
        report = copy_store(
            args.source, args.target, tenant_id=args.tenant, skip_existing=args.skip_existing,
            chroma_url=args.chroma_url, progress=progress, **kwargs,
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
    from .storage.privacy import ENCRYPTION_KEY_ENV, environment_key
    from .storage.registry import backend_for

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


def cmd_mcp(args: argparse.Namespace) -> None:
    from .mcp_server import serve

    users = [*(args.user or []), *(u.strip() for u in (args.users or "").split(",") if u.strip())]
    kwargs: dict[str, Any] = {"chroma_url": args.chroma_url}
    if args.embed_model is not None:
        kwargs["embed_model"] = _load_embedding(args.embed_model)
    try:
        serve(
            args.store, users, tenant_id=args.tenant or "default", allow_delete=args.allow_delete,
            http=args.http, port=args.port, session_id=args.session, create=args.create, **kwargs,
        )  # fmt: skip
    except KeyboardInterrupt:
        return


def cmd_demo(args: argparse.Namespace) -> None:
    from .demo import run_demo

    run_demo(args.path)


# --------------------------------------------------------------------------- parser


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive whole number, got {text!r}")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number (0 or more), got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number (0 or more), got {text!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``llama-memory`` (every command and option)."""
    from . import __version__

    parser = argparse.ArgumentParser(
        prog="llama-memory",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"llama-memory {__version__}")
    # Options of every command that opens a store (the parents copy them: added first).
    options = argparse.ArgumentParser(add_help=False)
    options.add_argument(
        "--chroma-url", metavar="URL",
        help="server mode: the Chroma server holding the store's vectors (http://host:port)",
    )  # fmt: skip
    options.add_argument(
        "--embed-model", metavar="MODULE:NAME",
        help="the embedding model the store was built with, if not the offline default: "
        "a BaseEmbedding object (or a function returning one) importable as MODULE:NAME",
    )  # fmt: skip
    options.add_argument("--json", action="store_true", help="print JSON, for scripts")
    options.add_argument(
        "--no-owner-only", action="store_true",
        help="leave the modes of the files this command creates (a store, an export) to the "
        "umask, and do not warn about a store other accounts can read (default: owner-only)",
    )  # fmt: skip
    store = argparse.ArgumentParser(add_help=False, parents=[options])
    store.add_argument(
        "--store", required=True, metavar="PATH|URL",
        help="the memory directory (path= of ComposableMemory.from_defaults), or a "
        "postgresql:// URL (store= of from_defaults)",
    )  # fmt: skip
    store.add_argument(
        "--tenant", default=None,
        help='the tenant (default "default"; for import, the tenant the export was taken from)',
    )  # fmt: skip
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def add(name: str, run: Callable[[argparse.Namespace], None], help: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, parents=[store], help=help, description=help)
        sub.set_defaults(run=run, command_parser=sub)
        return sub

    add("users", cmd_users, "list the users of the tenant, with what is stored of each")
    add("sessions", cmd_sessions, "list a user's conversations").add_argument("user")
    show = add("show", cmd_show, "a user's profile, current triples, instructions, recent records and counts")
    show.add_argument("user")
    show.add_argument("--recent", type=_positive, default=10, help="records shown (default 10)")
    records = add("records", cmd_records, "list a user's long-term records, with filters")
    records.add_argument("user")
    records.add_argument("--session", help="only this session's")
    records.add_argument("--source", help='only this source\'s (e.g. "vector")')
    records.add_argument("--since", help="only from this time (ISO 8601 or epoch seconds)")
    records.add_argument("--until", help="only before this time (ISO 8601 or epoch seconds)")
    records.add_argument("--limit", type=_positive, help="at most this many")
    search = add("search", cmd_search, "search a user's long-term memory (scores, sources, provenance)")
    search.add_argument("user")
    search.add_argument("query")
    search.add_argument("-k", type=_positive, default=10, help="how many records (default 10)")
    explain = add(
        "explain", cmd_explain,
        "the memory block get() would inject for a query, with what was left out and why",
    )  # fmt: skip
    explain.add_argument("user")
    explain.add_argument("query")
    explain.add_argument("--session", help="as in this conversation (its window counts for deduplication)")
    explain.add_argument("--top-k", type=_positive, help="records per source (default 10, as from_defaults)")
    explain.add_argument("--token-limit", type=_positive, help="the block's token budget (default 1500)")
    delete = add("delete", cmd_delete, "delete one record or triple of a user, from every index")
    delete.add_argument("user")
    delete.add_argument("record_id", metavar="RECORD_ID")
    export = add("export", cmd_export, "export a user (or --all) to a JSON Lines file")
    export.add_argument("user", nargs="?")
    export.add_argument("--all", action="store_true", help="every user of the tenant")
    export.add_argument("-o", "--output", help="the file to write (default: standard output)")
    imp = add(
        "import", cmd_import,
        "import an export, or a LlamaIndex SimpleChatStore JSON file (idempotent)",
    )  # fmt: skip
    imp.add_argument("file", help="the file to import, or - to read it from standard input")
    imp.add_argument(
        "--user",
        help="SimpleChatStore files: make every chat-store key a session of this user "
        "(default: each key is a user, with one session of the same name)",
    )
    forget = add("forget", cmd_forget, "delete everything remembered of a user")
    forget.add_argument("user")
    forget.add_argument("--yes", action="store_true", help="confirm")
    add("reindex", cmd_reindex, "rebuild the dense indexes from the system of record")
    add("reconcile", cmd_reconcile, "bring the dense indexes in line with the system of record")
    add("purge-expired", cmd_purge_expired, "delete the records whose time to live is over")
    add("stats", cmd_stats, "counts, sizes on disk, pending index work, and extraction passes and tokens per user and day")
    worker = add("worker", cmd_worker, "run the extraction passes queued in the store (extract_every)")
    worker.add_argument(
        "--llm", required=True, metavar="MODULE:NAME",
        help="the LLM to extract with: a LlamaIndex LLM (or a function returning one) "
        "importable as MODULE:NAME",
    )  # fmt: skip
    worker.add_argument(
        "--once", action="store_true",
        help="run the jobs due now, then exit (status 1 when one of them failed)",
    )  # fmt: skip
    worker.add_argument(
        "--token-budget", type=_non_negative, default=None, metavar="TOKENS",
        help="LLM tokens a user's passes may use per day (UTC); passes past it wait for the next "
        "day (default: the budget of the memory that queued them, formation_token_budget=; 0: none)",
    )  # fmt: skip
    worker.add_argument(
        "--lease", type=float, default=300.0,
        help="seconds a job is held before another worker may take it over (default 300)",
    )  # fmt: skip
    jobs = add(
        "jobs", cmd_jobs,
        "list the failed extraction jobs (dead, or waiting for a retry) with their last error; "
        "`jobs retry ID` or `jobs retry --all-dead` queues them again",
    )  # fmt: skip
    jobs.add_argument("action", nargs="?", choices=["list", "retry"], default="list", help="default list")
    jobs.add_argument("job_id", nargs="?", metavar="ID", help="retry: the job to queue again")
    jobs.add_argument("--all", action="store_true", help="list every job, not only the failed ones")
    jobs.add_argument("--all-dead", action="store_true", help="retry: every dead job of the tenant")
    mcp = add("mcp", cmd_mcp, "serve a user's memory to MCP clients (stdio; --http for loopback HTTP)")
    mcp.add_argument(
        "--user", action="append", metavar="ID",
        help="the user served; repeat it for an allow-list (the tools then take a user_id)",
    )  # fmt: skip
    mcp.add_argument("--users", metavar="A,B", help="an allow-list of users, comma-separated")
    mcp.add_argument(
        "--allow-delete", action="store_true",
        help="offer the delete_memory and forget_user tools (off by default)",
    )  # fmt: skip
    mcp.add_argument("--http", action="store_true", help="streamable HTTP on 127.0.0.1 instead of stdio")
    mcp.add_argument("--port", type=_positive, default=8000, help="the --http port (default 8000)")
    mcp.add_argument("--session", default="mcp", help='the session added memories go to (default "mcp")')
    mcp.add_argument("--create", action="store_true", help="create the store when --store holds none")
    copy = commands.add_parser(
        "copy", parents=[options], help="copy a SQLite memory directory into PostgreSQL",
        description="Copy every user of a SQLite memory directory (chat logs, records, profile, "
        "triples, extraction cursors, waiting jobs) into a PostgreSQL store, one transaction per "
        "user, then embed the records and triples into pgvector. Refuses when the database "
        "already holds some of the users (see --skip-existing).",
    )  # fmt: skip
    copy.add_argument("--from", dest="source", required=True, metavar="PATH", help="the memory directory")
    copy.add_argument("--to", dest="target", required=True, metavar="URL", help="postgresql://user@host:5432/dbname")
    copy.add_argument("--tenant", default=None, help="copy this tenant only (default: every tenant)")
    copy.add_argument(
        "--skip-existing", action="store_true",
        help="leave out users the database already holds (resume a copy that stopped)",
    )  # fmt: skip
    copy.set_defaults(run=cmd_copy, command_parser=copy)
    encrypt = commands.add_parser(
        "encrypt", help="encrypt a SQLite memory directory's store at rest (SQLCipher)",
        description="Encrypt the SQLite store of a memory directory with the key in "
        "LLAMA_MEMORY_ENCRYPTION_KEY (asked for on a terminal when unset): the store is copied "
        "into an encrypted file, the copy checked row by row, then swapped in and checked again; "
        "the plain file is removed only after that (--keep-backup keeps it). Stop the processes "
        "using the store first. The Chroma index (vectors) stays unencrypted. Needs "
        "llama-memory[encrypted].",
    )  # fmt: skip
    encrypt.add_argument("--store", required=True, metavar="PATH", help="the memory directory")
    encrypt.add_argument(
        "--keep-backup", action="store_true",
        help="keep the plain file as memory.sqlite3.plain-backup (it is not encrypted)",
    )  # fmt: skip
    encrypt.add_argument("--json", action="store_true", help="print JSON, for scripts")
    encrypt.set_defaults(run=cmd_encrypt, command_parser=encrypt)
    demo = commands.add_parser("demo", help="run the offline two-conversation demo")
    demo.add_argument(
        "--path", type=Path, default=None, help="memory directory (default: a new temporary one)"
    )
    demo.set_defaults(run=cmd_demo, command_parser=demo)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Entry point of the ``llama-memory`` command; returns the exit status."""
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # reported with the command's own usage, which lists its options
        getattr(args, "command_parser", parser).error(f"unrecognized arguments: {' '.join(unknown)}")
    from .errors import EmbeddingDimensionError, LlamaMemoryError

    try:
        status = args.run(args)
    except BrokenPipeError:
        # Output piped into a reader that stopped (`| head`): not an error of ours.
        sys.stdout = open(os.devnull, "w")
        return 0
    except (CommandError, LlamaMemoryError, ValueError, KeyError, OSError, ImportError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        if isinstance(exc, EmbeddingDimensionError) or type(exc).__name__ == "EmbeddingMismatchError":
            message = f"{message} (pass it with --embed-model MODULE:NAME)"
        print(f"llama-memory {args.command}: error: {message}", file=sys.stderr)
        return 1
    return status if isinstance(status, int) else 0


if __name__ == "__main__":
    raise SystemExit(main())
