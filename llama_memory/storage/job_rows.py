"""What the job queues of every backend share beyond SQL's dialect: the condition of
a failed job, a listed row as a :class:`~llama_memory.storage.ports.jobs.JobRow`, and
which jobs may be retried."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .ports.jobs import JobRow


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
    )  # fmt: skip


def check_retryable(row: Mapping[str, Any]) -> None:
    """ValueError unless the job of this row failed (dead, or queued for a retry)."""
    if row["state"] == "dead" or (row["state"] == "queued" and row["last_error"] is not None):
        return
    what = {"done": "is done", "running": "is running now", "queued": "is queued and has not failed"}
    raise ValueError(f"job {row['id']} {what.get(row['state'], 'is ' + str(row['state']))}: only a failed job can be retried")
