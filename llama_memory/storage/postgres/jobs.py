"""The job queue in PostgreSQL (table ``jobs``): a claim takes the next runnable row
with ``FOR UPDATE SKIP LOCKED``, so workers on many machines never hold one job and
never wait for each other."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence
from typing import Any, Optional

from psycopg.types.json import Jsonb

from ...errors import StorageError
from ..job_rows import (
    RUN_TOTALS,
    check_retryable,
    cost_values,
    failed_clause,
    formation_day,
    job_row,
)
from ..ports.jobs import JOB_STATES, FormationDay, Job, JobRow, PassCost
from .connection import PostgresConnection


class JobTables(PostgresConnection):
    """The job queue part of the store."""

    def enqueue(
        self,
        kind: str,
        payload: dict[str, Any],
        *,
        tenant_id: Optional[str] = None,
        user_id: Optional[str] = None,
        run_at: Optional[float] = None,
        max_attempts: int = 3,
        dedup_key: Optional[str] = None,
    ) -> str:
        """Queue a job; see :meth:`~llama_memory.storage.ports.jobs.JobQueue.enqueue`."""
        if not kind:
            raise ValueError("enqueue() needs a job kind, e.g. kind='extract'")
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be 1 or more, got {max_attempts}")
        try:
            json.dumps(payload)
        except TypeError as exc:
            raise TypeError(f"a job's payload must be JSON data (dicts, lists, str, numbers): {exc}") from exc
        created = time.time()
        with self.transaction("queue a job") as conn:
            while True:
                job_id = uuid.uuid4().hex
                row = conn.execute(
                    "INSERT INTO jobs (id, kind, payload, tenant_id, user_id, run_at, max_attempts, "
                    "dedup_key, created_at) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) "
                    "ON CONFLICT (dedup_key) WHERE dedup_key IS NOT NULL AND state IN ('queued', 'running') "
                    "DO NOTHING RETURNING id",
                    (job_id, kind, Jsonb(payload), tenant_id, user_id,
                     run_at if run_at is not None else created, max_attempts, dedup_key, created),
                ).fetchone()  # fmt: skip
                if row is not None:
                    return job_id
                existing = conn.execute(
                    "SELECT id FROM jobs WHERE dedup_key = %s AND state IN ('queued', 'running')",
                    (dedup_key,),
                ).fetchone()
                if existing is not None:
                    return str(existing["id"])
                # The holder of the key finished between the two statements: queue again.

    def claim(
        self, worker: str, *, kinds: Optional[list[str]] = None, lease: float = 60.0, now: Optional[float] = None
    ) -> Optional[Job]:
        """The next runnable job, leased to ``worker``; see the port."""
        if lease <= 0:
            raise ValueError(f"lease must be positive seconds, got {lease}")
        at = time.time() if now is None else now
        kind_clause = " AND kind = ANY(%s)" if kinds else ""
        with self.transaction("claim a job") as conn:
            while True:
                # A running job whose lease ran out is runnable again (its worker died).
                row = conn.execute(
                    "SELECT * FROM jobs WHERE ((state = 'queued' AND run_at <= %s) OR "
                    "(state = 'running' AND lease_until <= %s))" + kind_clause
                    + " ORDER BY run_at, seq LIMIT 1 FOR UPDATE SKIP LOCKED",
                    (at, at, *((list(kinds),) if kinds else ())),
                ).fetchone()
                if row is None:
                    return None
                if row["attempts"] < row["max_attempts"]:
                    break
                # Its last worker died holding it: out of attempts, dead; look further.
                conn.execute(
                    "UPDATE jobs SET state = 'dead', worker = NULL, lease_until = NULL, "
                    "last_error = coalesce(last_error, 'lease expired') WHERE id = %s",
                    (row["id"],),
                )
            conn.execute(
                "UPDATE jobs SET state = 'running', worker = %s, lease_until = %s, "
                "attempts = attempts + 1 WHERE id = %s",
                (worker, at + lease, row["id"]),
            )
        return Job(
            id=row["id"],
            kind=row["kind"],
            payload=row["payload"],
            tenant_id=row["tenant_id"],
            user_id=row["user_id"],
            attempts=row["attempts"] + 1,
            max_attempts=row["max_attempts"],
            worker=worker,
            lease_until=at + lease,
        )

    def defer(self, dedup_key: str, run_at: float) -> bool:
        """Move the queued job with ``dedup_key`` to ``run_at``; see the port."""
        with self.transaction("defer a job") as conn:
            cur = conn.execute(
                "UPDATE jobs SET run_at = %s WHERE dedup_key = %s AND state = 'queued'", (run_at, dedup_key)
            )
            return cur.rowcount > 0

    def ack(self, job: Job, cost: Optional[PassCost] = None) -> bool:
        """Mark ``job`` done (with its run's cost); False when its lease was lost."""
        with self.transaction("acknowledge a job") as conn:
            cur = conn.execute(
                "UPDATE jobs SET state = 'done', lease_until = NULL, " + RUN_TOTALS.format(p="%s")
                + " WHERE id = %s AND state = 'running' AND worker = %s AND attempts = %s",
                (*cost_values(cost), time.time(), job.id, job.worker, job.attempts),
            )
            return cur.rowcount == 1

    def fail(
        self, job: Job, error: str, *, retry_in: float = 30.0, now: Optional[float] = None,
        cost: Optional[PassCost] = None,
    ) -> str:
        """Record a failed attempt of ``job`` (and its cost); return its new state (or ``"lost"``)."""
        if retry_in < 0:
            raise ValueError(f"retry_in must be zero or more seconds, got {retry_in}")
        at = time.time() if now is None else now
        state = "dead" if job.attempts >= job.max_attempts else "queued"
        with self.transaction("fail a job") as conn:
            cur = conn.execute(
                "UPDATE jobs SET state = %s, worker = NULL, lease_until = NULL, run_at = %s, last_error = %s, "
                "failures = failures + 1, " + RUN_TOTALS.format(p="%s")
                + " WHERE id = %s AND state = 'running' AND worker = %s AND attempts = %s",
                (state, at + retry_in, error, *cost_values(cost), at, job.id, job.worker, job.attempts),
            )
            return state if cur.rowcount == 1 else "lost"

    def postpone(self, job: Job, run_at: float) -> bool:
        """Give ``job`` back to run at ``run_at``, its attempt not counted; see the port."""
        with self.transaction("postpone a job") as conn:
            cur = conn.execute(
                "UPDATE jobs SET state = 'queued', worker = NULL, lease_until = NULL, run_at = %s, "
                "attempts = attempts - 1 WHERE id = %s AND state = 'running' AND worker = %s AND attempts = %s",
                (run_at, job.id, job.worker, job.attempts),
            )
            return cur.rowcount == 1

    def tokens_used(self, tenant_id: Optional[str], user_id: Optional[str], since: float) -> int:
        """Tokens of the user's job runs that ended since ``since``; see the port."""
        rows = self.query(
            "count a user's tokens",
            "SELECT coalesce(sum(tokens_sent + tokens_received), 0) AS n FROM jobs "
            "WHERE tenant_id IS NOT DISTINCT FROM %s AND user_id IS NOT DISTINCT FROM %s AND finished_at >= %s",
            (tenant_id, user_id, since),
        )
        return int(rows[0]["n"])

    def formation_days(self, *, tenant_id: Optional[str] = None, since: Optional[float] = None) -> list[FormationDay]:
        """Per user and per day (UTC), what the job runs cost; see the port."""
        where, params = ["finished_at IS NOT NULL"], []  # type: tuple[list[str], list[Any]]
        if tenant_id is not None:
            where.append("tenant_id = %s")
            params.append(tenant_id)
        if since is not None:
            where.append("finished_at >= %s")
            params.append(since)
        rows = self.query(
            "sum the jobs' costs per user and day",
            "SELECT tenant_id, user_id, to_char(to_timestamp(finished_at) AT TIME ZONE 'UTC', 'YYYY-MM-DD') AS day, "
            "sum(passes) AS passes, sum(failures) AS failures, sum(tokens_sent) AS tokens_sent, "
            "sum(tokens_received) AS tokens_received, sum(duration_ms) AS duration_ms FROM jobs WHERE "
            + " AND ".join(where) + " GROUP BY tenant_id, user_id, day ORDER BY day, tenant_id, user_id",
            params,
        )
        return [formation_day(row) for row in rows]

    def list_jobs(
        self,
        *,
        states: Optional[Sequence[str]] = None,
        failed: bool = False,
        tenant_id: Optional[str] = None,
        dedup_key: Optional[str] = None,
        kind: Optional[str] = None,
    ) -> list[JobRow]:
        """The jobs asked for, oldest first; see the port."""
        where, params = ["true"], []  # type: tuple[list[str], list[Any]]
        if states is not None:
            where.append("state = ANY(%s)")
            params.append(list(states))
        if failed:
            where.append(failed_clause())
        for column, value in (("tenant_id", tenant_id), ("dedup_key", dedup_key), ("kind", kind)):
            if value is not None:
                where.append(f"{column} = %s")
                params.append(value)
        rows = self.query("list jobs", "SELECT * FROM jobs WHERE " + " AND ".join(where) + " ORDER BY seq", params)
        return [job_row(dict(row)) for row in rows]

    def retry(self, job_id: str, *, tenant_id: Optional[str] = None, now: Optional[float] = None) -> str:
        """Queue a failed job again, to run now; see the port."""
        at = time.time() if now is None else now
        with self.transaction("retry a job") as conn:
            row = conn.execute("SELECT * FROM jobs WHERE id = %s FOR UPDATE", (job_id,)).fetchone()
            if row is None or (tenant_id is not None and row["tenant_id"] != tenant_id):
                raise KeyError(f"no job {job_id!r} in the queue of {self.location}")
            check_retryable(row)
            if row["dedup_key"] is not None and row["state"] == "dead":
                live = conn.execute(
                    "SELECT id FROM jobs WHERE dedup_key = %s AND state IN ('queued', 'running')",
                    (row["dedup_key"],),
                ).fetchone()
                if live is not None:
                    return str(live["id"])
            conn.execute(
                "UPDATE jobs SET state = 'queued', run_at = %s, attempts = 0, worker = NULL, "
                "lease_until = NULL, last_error = NULL WHERE id = %s",
                (at, job_id),
            )
        return job_id

    def counts(self, kind: Optional[str] = None) -> dict[str, int]:
        """How many jobs are in each state."""
        where, params = (" WHERE kind = %s", (kind,)) if kind is not None else ("", ())
        rows = self.query("count jobs", "SELECT state, count(*) AS n FROM jobs" + where + " GROUP BY state", params)
        found = {row["state"]: int(row["n"]) for row in rows}
        unknown = set(found) - set(JOB_STATES)
        if unknown:
            raise StorageError(f"job queue {self.location}: unknown job states {sorted(unknown)}")
        return {state: found.get(state, 0) for state in JOB_STATES}
