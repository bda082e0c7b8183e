"""The job queue over SQL, once for every SQL backend (table ``jobs``), with the helpers
the queues share: a failed job's condition, a run's totals, listed rows, retries. A claim
reads and leases the next runnable row in one transaction; the dialect's
:attr:`~.dialect.Dialect.skip_locked` keeps two workers from holding one job.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from ...core.errors import StorageError
from ..ports.jobs import JOB_STATES, FormationDay, Job, JobRow, PassCost
from .dialect import Dialect, given

__all__ = ["JobQueue"]


def failed_clause() -> str:
    """The SQL condition of a failed job: dead, or queued again after a failed attempt."""
    return "(state = 'dead' OR (state = 'queued' AND last_error IS NOT NULL))"


def job_row(row: Mapping[str, Any]) -> JobRow:
    """A :class:`JobRow` from a row of the ``jobs`` table (its payload already decoded)."""
    payload = row["payload"] if isinstance(row["payload"], dict) else {}
    session = payload.get("session_id")
    return JobRow(
        id=row["id"], kind=row["kind"], state=row["state"], tenant_id=row["tenant_id"],
        user_id=row["user_id"], session_id=session if isinstance(session, str) else None,
        attempts=int(row["attempts"]), max_attempts=int(row["max_attempts"]), run_at=float(row["run_at"]),
        last_error=row["last_error"], created_at=float(row["created_at"]),
        passes=int(row.get("passes") or 0), failures=int(row.get("failures") or 0),
        tokens_sent=int(row.get("tokens_sent") or 0), tokens_received=int(row.get("tokens_received") or 0),
        duration_ms=float(row.get("duration_ms") or 0.0),
        finished_at=None if row.get("finished_at") is None else float(row["finished_at"]),
    )  # fmt: skip


def cost_values(cost: Optional[PassCost]) -> tuple[int, int, float]:
    """``(tokens sent, tokens received, milliseconds)`` of a run (zeros when unknown)."""
    if cost is None:
        return 0, 0, 0.0
    return int(cost.tokens_sent), int(cost.tokens_received), float(cost.duration_ms)


def formation_day(row: Mapping[str, Any]) -> FormationDay:
    """A :class:`FormationDay` from a row of the per-user, per-day sums."""
    return FormationDay(
        tenant_id=row["tenant_id"], user_id=row["user_id"], day=str(row["day"]),
        passes=int(row["passes"] or 0), failures=int(row["failures"] or 0),
        tokens_sent=int(row["tokens_sent"] or 0), tokens_received=int(row["tokens_received"] or 0),
        duration_ms=float(row["duration_ms"] or 0.0),
    )  # fmt: skip


#: What a run that ended adds to its job's totals (the parameters: tokens sent, tokens
#: received, milliseconds, the time it ended); a failed run adds to ``failures`` as well.
RUN_TOTALS = (
    "passes = passes + 1, tokens_sent = tokens_sent + {p}, tokens_received = tokens_received + {p}, "
    "duration_ms = duration_ms + {p}, finished_at = {p}"
)


def check_retryable(row: Mapping[str, Any]) -> None:
    """ValueError unless the job of this row failed (dead, or queued for a retry)."""
    if row["state"] == "dead" or (row["state"] == "queued" and row["last_error"] is not None):
        return
    what = {"done": "is done", "running": "is running now", "queued": "is queued and has not failed"}
    raise ValueError(f"job {row['id']} {what.get(row['state'], 'is ' + str(row['state']))}: only a failed job can be retried")


#: The live holder of a dedup key: a job waiting or running.
_LIVE = "state IN ('queued', 'running')"
#: A statement's condition that the caller's ``job`` still holds its lease.
_HELD = "id = ? AND state = 'running' AND worker = ? AND attempts = ?"


def _held(job: Job) -> tuple[Any, ...]:
    return job.id, job.worker, job.attempts


class JobQueue:
    """The job queue over a SQL store (a part of the store): at-least-once delivery.

    Semantics every backend keeps (``tests/conformance/test_jobs.py``): a job is claimed
    by one worker at a time and is done once acknowledged by it; a lease that runs out
    makes it claimable again; jobs come out by ``run_at``, then queue order;
    ``dedup_key`` makes queuing idempotent while a job with that key waits or runs;
    ``defer`` moves a queued job's ``run_at``; a failure retries after ``retry_in``
    seconds until ``max_attempts``, then the job is dead; ``retry`` queues it again.
    """

    dialect: ClassVar[Dialect]

    if TYPE_CHECKING:  # what the store this part belongs to provides

        @property
        def location(self) -> str: ...

        def transaction(self, action: str) -> AbstractContextManager[Any]: ...

        def query(self, action: str, sql: str, params: Sequence[Any] = ()) -> Sequence[Any]: ...

    def _jobs_table(self) -> None:
        """Make sure the ``jobs`` table exists (nothing where the schema is migrated)."""

    def _read(self, action: str, statement: str, params: Sequence[Any] = ()) -> Sequence[Any]:
        self._jobs_table()
        return self.query(action, self.dialect.sql(statement), params)

    def _write(self, action: str, statement: str, params: Sequence[Any]) -> int:
        """Run one write statement in a transaction; how many rows it changed."""
        self._jobs_table()
        with self.transaction(action) as conn:
            return int(self.dialect.execute(conn, statement, params).rowcount)

    def enqueue(
        self, kind: str, payload: dict[str, Any], *, tenant_id: Optional[str] = None, user_id: Optional[str] = None,
        run_at: Optional[float] = None, max_attempts: int = 3, dedup_key: Optional[str] = None
    ) -> str:
        """Queue a job (joining an open transaction); its id, or the id of the job queued or
        running under ``dedup_key``."""
        if not kind:
            raise ValueError("enqueue() needs a job kind, e.g. kind='extract'")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be 1 or more, got {max_attempts}")
        try:
            json.dumps(payload)
        except TypeError as exc:
            raise TypeError(f"a job's payload must be JSON data (dicts, lists, str, numbers): {exc}") from exc
        self._jobs_table()
        created = time.time()
        dialect = self.dialect
        with self.transaction("queue a job") as conn:
            while True:
                job_id = uuid.uuid4().hex
                inserted = dialect.execute(
                    conn,
                    "INSERT INTO jobs (id, kind, payload, tenant_id, user_id, run_at, max_attempts, "
                    "dedup_key, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
                    f"ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL AND {_LIVE} DO NOTHING",
                    (job_id, kind, dialect.json_param(payload), tenant_id, user_id,
                     run_at if run_at is not None else created, max_attempts, dedup_key, created),
                ).rowcount  # fmt: skip
                if inserted == 1:
                    return job_id
                existing = dialect.execute(
                    conn, f"SELECT id FROM jobs WHERE dedup_key = ? AND {_LIVE}", (dedup_key,)
                ).fetchone()
                if existing is not None:
                    return str(existing["id"])
                # The holder of the key finished between the two statements: queue again.

    def claim(
        self, worker: str, *, kinds: Optional[list[str]] = None, lease: float = 60.0, now: Optional[float] = None
    ) -> Optional[Job]:
        """The next job that may run now (of ``kinds``), leased to ``worker`` for ``lease`` s;
        None if none."""
        if lease <= 0:
            raise ValueError(f"lease must be positive seconds, got {lease}")
        self._jobs_table()
        at = time.time() if now is None else now
        dialect = self.dialect
        kind_clause, kind_params = dialect.in_list("kind", kinds) if kinds else ("", [])
        with self.transaction("claim a job") as conn:
            while True:
                # A running job whose lease ran out is runnable again (its worker died).
                row = dialect.execute(
                    conn,
                    "SELECT * FROM jobs WHERE ((state = 'queued' AND run_at <= ?) OR "
                    "(state = 'running' AND lease_until <= ?))" + (f" AND {kind_clause}" if kinds else "")
                    + " ORDER BY run_at, seq LIMIT 1" + dialect.skip_locked,
                    (at, at, *kind_params),
                ).fetchone()
                if row is None:
                    return None
                if row["attempts"] < row["max_attempts"]:
                    break
                # Its last worker died holding it: out of attempts, dead; look further.
                dialect.execute(
                    conn,
                    "UPDATE jobs SET state = 'dead', worker = NULL, lease_until = NULL, "
                    "last_error = coalesce(last_error, 'lease expired') WHERE id = ?",
                    (row["id"],),
                )
            dialect.execute(
                conn,
                "UPDATE jobs SET state = 'running', worker = ?, lease_until = ?, "
                "attempts = attempts + 1 WHERE id = ?",
                (worker, at + lease, row["id"]),
            )
        return Job(
            id=row["id"], kind=row["kind"], payload=dialect.json_value(row["payload"]),
            tenant_id=row["tenant_id"], user_id=row["user_id"], attempts=row["attempts"] + 1,
            max_attempts=row["max_attempts"], worker=worker, lease_until=at + lease,
        )  # fmt: skip

    def defer(self, dedup_key: str, run_at: float) -> bool:
        """Move the queued (not running) job of ``dedup_key`` to ``run_at``; False if none."""
        return self._write(
            "defer a job", "UPDATE jobs SET run_at = ? WHERE dedup_key = ? AND state = 'queued'", (run_at, dedup_key)
        ) > 0  # fmt: skip

    def ack(self, job: Job, cost: Optional[PassCost] = None) -> bool:
        """Mark the job done, adding ``cost`` to its totals; False when the lease was lost."""
        return self._write(
            "acknowledge a job",
            "UPDATE jobs SET state = 'done', lease_until = NULL, " + RUN_TOTALS.format(p="?") + f" WHERE {_HELD}",
            (*cost_values(cost), time.time(), *_held(job)),
        ) == 1  # fmt: skip

    def fail(
        self, job: Job, error: str, *, retry_in: float = 30.0, now: Optional[float] = None,
        cost: Optional[PassCost] = None,
    ) -> str:
        """Record a failed attempt (and its ``cost``): queued again after ``retry_in`` s, or
        dead when out of attempts; the new state (``"lost"`` when the lease was lost)."""
        if retry_in < 0:
            raise ValueError(f"retry_in must be zero or more seconds, got {retry_in}")
        at = time.time() if now is None else now
        state = "dead" if job.attempts >= job.max_attempts else "queued"
        changed = self._write(
            "fail a job",
            "UPDATE jobs SET state = ?, worker = NULL, lease_until = NULL, run_at = ?, last_error = ?, "
            "failures = failures + 1, " + RUN_TOTALS.format(p="?") + f" WHERE {_HELD}",
            (state, at + retry_in, error, *cost_values(cost), at, *_held(job)),
        )
        return state if changed == 1 else "lost"

    def postpone(self, job: Job, run_at: float) -> bool:
        """Requeue a claimed job for ``run_at``, the attempt uncounted; False if lease lost."""
        return self._write(
            "postpone a job",
            "UPDATE jobs SET state = 'queued', worker = NULL, lease_until = NULL, run_at = ?, "
            f"attempts = attempts - 1 WHERE {_HELD}",
            (run_at, *_held(job)),
        ) == 1  # fmt: skip

    def tokens_used(self, tenant_id: Optional[str], user_id: Optional[str], since: float) -> int:
        """Tokens of the user's job runs that ended at or after ``since``."""
        same = self.dialect.same_as
        rows = self._read(
            "count a user's tokens",
            "SELECT coalesce(sum(tokens_sent + tokens_received), 0) AS n FROM jobs "
            f"WHERE {same('tenant_id')} AND {same('user_id')} AND finished_at >= ?",
            (tenant_id, user_id, since),
        )
        return int(rows[0]["n"])

    def formation_days(self, *, tenant_id: Optional[str] = None, since: Optional[float] = None) -> list[FormationDay]:
        """Runs, failures, tokens and time per user and UTC day, oldest day first."""
        where, params = ["finished_at IS NOT NULL"], []  # type: tuple[list[str], list[Any]]
        given(where, params, ("tenant_id = ?", tenant_id), ("finished_at >= ?", since))
        rows = self._read(
            "sum the jobs' costs per user and day",
            f"SELECT tenant_id, user_id, {self.dialect.utc_day('finished_at')} AS day, sum(passes) AS passes, "
            "sum(failures) AS failures, sum(tokens_sent) AS tokens_sent, "
            "sum(tokens_received) AS tokens_received, sum(duration_ms) AS duration_ms FROM jobs WHERE "
            + " AND ".join(where) + " GROUP BY tenant_id, user_id, day ORDER BY day, tenant_id, user_id",
            params,
        )
        return [formation_day(dict(row)) for row in rows]

    def list_jobs(
        self, *, states: Optional[Sequence[str]] = None, failed: bool = False, tenant_id: Optional[str] = None,
        dedup_key: Optional[str] = None, kind: Optional[str] = None
    ) -> list[JobRow]:
        """The jobs in ``states`` (default all), oldest first, filtered by the rest."""
        where, params = ["1 = 1"], []  # type: tuple[list[str], list[Any]]
        if states is not None:
            condition, values = self.dialect.in_list("state", states) if states else ("0 = 1", [])
            where.append(condition)
            params += values
        if failed:
            where.append(failed_clause())
        given(where, params, ("tenant_id = ?", tenant_id), ("dedup_key = ?", dedup_key), ("kind = ?", kind))
        rows = self._read("list jobs", "SELECT * FROM jobs WHERE " + " AND ".join(where) + " ORDER BY seq", params)
        return [job_row({**dict(row), "payload": self.dialect.json_value(row["payload"])}) for row in rows]

    def retry(self, job_id: str, *, tenant_id: Optional[str] = None, now: Optional[float] = None) -> str:
        """Queue a failed job to run now, attempts and error cleared; the id of the job that
        will run (``job_id``, or the one waiting under its ``dedup_key``). KeyError for no
        such job (of ``tenant_id``); ValueError when it did not fail."""
        self._jobs_table()
        at = time.time() if now is None else now
        dialect = self.dialect
        with self.transaction("retry a job") as conn:
            row = dialect.execute(conn, "SELECT * FROM jobs WHERE id = ?" + dialect.row_lock, (job_id,)).fetchone()
            if row is None or (tenant_id is not None and row["tenant_id"] != tenant_id):
                raise KeyError(f"no job {job_id!r} in the queue of {self.location}")
            check_retryable(row)
            if row["dedup_key"] is not None and row["state"] == "dead":
                live = dialect.execute(
                    conn, f"SELECT id FROM jobs WHERE dedup_key = ? AND {_LIVE}", (row["dedup_key"],)
                ).fetchone()
                if live is not None:
                    return str(live["id"])
            dialect.execute(
                conn,
                "UPDATE jobs SET state = 'queued', run_at = ?, attempts = 0, worker = NULL, "
                "lease_until = NULL, last_error = NULL WHERE id = ?",
                (at, job_id),
            )
        return job_id

    def counts(self, kind: Optional[str] = None) -> dict[str, int]:
        """How many jobs are in each state of :data:`JOB_STATES`."""
        where, params = (" WHERE kind = ?", (kind,)) if kind is not None else ("", ())
        rows = self._read("count jobs", "SELECT state, count(*) AS n FROM jobs" + where + " GROUP BY state", params)
        found = {row["state"]: int(row["n"]) for row in rows}
        unknown = set(found) - set(JOB_STATES)
        if unknown:
            raise StorageError(f"job queue {self.location}: unknown job states {sorted(unknown)}")
        return {state: found.get(state, 0) for state in JOB_STATES}
