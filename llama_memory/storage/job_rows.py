"""What the job queues of every backend share beyond SQL's dialect: the condition of
a failed job, a run's totals, listed rows as :class:`~llama_memory.storage.ports.jobs.JobRow`
and :class:`~llama_memory.storage.ports.jobs.FormationDay`, and which jobs may be retried."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

from .ports.jobs import FormationDay, JobRow, PassCost


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
