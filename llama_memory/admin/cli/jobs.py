"""The commands of the background formation passes: ``worker`` runs them, ``jobs``
lists the failed ones and queues them again."""

from __future__ import annotations

import argparse
from typing import Any

from ...core.text import counted
from .loading import CommandError, _embed_model, _load_llm, _open
from .output import _lines, _print_json, _short, _when


def cmd_worker(args: argparse.Namespace) -> int:
    import logging
    import signal
    import threading

    from ...write.formation.worker_process import run_worker

    llm = _load_llm(args.llm)
    stop = threading.Event()
    # SIGTERM (a service manager stopping it) ends the loop after the running pass.
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    outcomes: list[Any] = []
    # Each job's line below says how it ended: the queue's own warning would repeat it.
    logging.getLogger("llama_memory.write.formation").setLevel(logging.ERROR)

    def report(outcome: Any) -> None:
        outcomes.append(outcome)
        if not args.json:
            print(_outcome_line(outcome), flush=True)

    try:
        run_worker(
            args.store, llm, once=args.once, stop=stop, lease=args.lease, report=report,
            formation_token_budget=args.token_budget, **_embed_model(args),
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
