"""The rows of the job queue (durable work of background memory formation, leased to
one worker at a time)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

#: A job's states: waiting to run (or to be retried), claimed by a worker, done, or
#: failed for good (out of attempts).
JOB_STATES = ("queued", "running", "done", "dead")


@dataclass(frozen=True)
class Job:
    """One claimed job.

    Attributes:
        id: the queue's id of the job.
        kind: what to do (``"extract"``...); workers claim the kinds they know.
        payload: the job's arguments, plain JSON data.
        tenant_id, user_id: whose job (``None`` for store-wide work).
        attempts: how many times it has been claimed, this time included.
        max_attempts: after this many failed attempts it is dead.
        worker: who holds it now.
        lease_until: epoch seconds; past it, another worker may claim it again.
    """

    id: str
    kind: str
    payload: dict[str, Any] = field(compare=False)
    tenant_id: Optional[str]
    user_id: Optional[str]
    attempts: int
    max_attempts: int
    worker: str
    lease_until: float


@dataclass(frozen=True)
class PassCost:
    """What running a job cost: the LLM tokens it sent and received and its wall time.

    Attributes:
        tokens_sent: prompt tokens (as the LLM reported them, else counted).
        tokens_received: answer tokens (likewise).
        duration_ms: wall time of the run, in milliseconds.
    """

    tokens_sent: int = 0
    tokens_received: int = 0
    duration_ms: float = 0.0


@dataclass(frozen=True)
class JobRow:
    """A job as the queue holds it, for people looking at the queue (``llama-memory jobs``).

    Attributes:
        id, kind, state, tenant_id, user_id: as in :class:`Job`; ``state`` one of
            :data:`JOB_STATES`.
        session_id: the session of an extraction pass (from its payload; None otherwise).
        attempts, max_attempts: attempts made so far, and allowed.
        run_at: epoch seconds it runs (or is retried) at, when queued.
        last_error: the error of its last failed attempt (None: it never failed).
        created_at: epoch seconds it was queued.
        passes, failures: runs of the job that ended (done or failed), and of those
            that failed.
        tokens_sent, tokens_received, duration_ms: the total of its runs (:class:`PassCost`).
        finished_at: epoch seconds its last run ended (None: none ended yet).
    """

    id: str
    kind: str
    state: str
    tenant_id: Optional[str]
    user_id: Optional[str]
    session_id: Optional[str]
    attempts: int
    max_attempts: int
    run_at: float
    last_error: Optional[str]
    created_at: float
    passes: int = 0
    failures: int = 0
    tokens_sent: int = 0
    tokens_received: int = 0
    duration_ms: float = 0.0
    finished_at: Optional[float] = None

    @property
    def failed(self) -> bool:
        """Dead, or waiting for a retry after a failed attempt."""
        return self.state == "dead" or (self.state == "queued" and self.last_error is not None)


@dataclass(frozen=True)
class FormationDay:
    """What the jobs of one user cost on one day (UTC), by the day their runs ended.

    Attributes:
        tenant_id, user_id: whose jobs.
        day: ``"YYYY-MM-DD"`` (UTC).
        passes: runs that ended that day (done or failed).
        failures: of those, the failed ones.
        tokens_sent, tokens_received: LLM tokens of those runs.
        duration_ms: their wall time.
    """

    tenant_id: Optional[str]
    user_id: Optional[str]
    day: str
    passes: int
    failures: int
    tokens_sent: int
    tokens_received: int
    duration_ms: float
