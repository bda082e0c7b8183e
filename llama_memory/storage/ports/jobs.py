"""The job queue port: durable work items (background memory formation),
claimed by one worker at a time under a lease, acknowledged or retried."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol, runtime_checkable

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


@runtime_checkable
class JobQueue(Protocol):
    """At-least-once delivery: a claimed job whose worker dies (its lease runs out) is
    claimed again; a job is done only once acknowledged by the worker holding it.

    Semantics every backend keeps (``tests/conformance/test_jobs.py``): a job is claimed
    by one worker at a time; jobs come out in the order they may run (``run_at``, then
    the order queued); ``dedup_key`` makes queuing idempotent while a job with that key
    is queued or running; ``defer`` moves a queued job's ``run_at`` (never a running
    one's); a failure retries after ``retry_in`` seconds until ``max_attempts`` is
    reached, then the job is dead; ``retry`` queues a failed job again.
    """

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
        """Queue a job (joining an open transaction); return its id (the existing
        job's id when ``dedup_key`` matches one queued or running)."""
        ...

    def defer(self, dedup_key: str, run_at: float) -> bool:
        """Move the queued job with this ``dedup_key`` (one not running) to run at
        ``run_at`` (joining an open transaction); False when no such job is queued.
        A debounce: each new message pushes its session's pass back."""
        ...

    def claim(
        self, worker: str, *, kinds: Optional[list[str]] = None, lease: float = 60.0, now: Optional[float] = None
    ) -> Optional[Job]:
        """The next job that may run now (of ``kinds`` when given), leased to ``worker``
        for ``lease`` seconds; None when there is none."""
        ...

    def ack(self, job: Job, cost: Optional[PassCost] = None) -> bool:
        """Mark the job done, adding ``cost`` to its totals; False when the lease was
        lost (another worker claimed it)."""
        ...

    def fail(
        self, job: Job, error: str, *, retry_in: float = 30.0, now: Optional[float] = None,
        cost: Optional[PassCost] = None,
    ) -> str:
        """Record a failed attempt (and its ``cost``): queued again after ``retry_in``
        seconds, or dead when out of attempts; return the new state (or ``"lost"`` when
        the lease was lost)."""
        ...

    def postpone(self, job: Job, run_at: float) -> bool:
        """Give a claimed job back, to run at ``run_at``, without counting the attempt
        (it did not run: e.g. its user is over the day's token budget); False when the
        lease was lost."""
        ...


    def list_jobs(
        self,
        *,
        states: Optional[Sequence[str]] = None,
        failed: bool = False,
        tenant_id: Optional[str] = None,
        dedup_key: Optional[str] = None,
        kind: Optional[str] = None,
    ) -> list[JobRow]:
        """The jobs in ``states`` (default every state), oldest first; ``failed``: only
        those that failed (dead, or queued for a retry); ``tenant_id``, ``dedup_key``,
        ``kind``: only those."""
        ...

    def retry(self, job_id: str, *, tenant_id: Optional[str] = None, now: Optional[float] = None) -> str:
        """Queue a dead job (or one waiting for its retry) to run now with its attempts
        counted from zero and its error cleared (it is no longer failed). Returns the id of the job that will run: ``job_id``, or the
        job of the same ``dedup_key`` already queued or running (it covers the same
        work; the dead one is left as it is). KeyError when the queue (of
        ``tenant_id``, when given) has no such job; ValueError when it is not dead or
        failed (done, running, or queued without a failure)."""
        ...

    def tokens_used(self, tenant_id: Optional[str], user_id: Optional[str], since: float) -> int:
        """Tokens (sent and received) of the user's job runs that ended at or after
        ``since`` (epoch seconds)."""
        ...

    def formation_days(self, *, tenant_id: Optional[str] = None, since: Optional[float] = None) -> list[FormationDay]:
        """Runs, failures, tokens and time of the jobs per user and per day (UTC) their
        runs ended, oldest day first (of ``tenant_id`` and from ``since`` when given)."""
        ...

    def counts(self, kind: Optional[str] = None) -> dict[str, int]:
        """How many jobs are in each state of :data:`JOB_STATES`."""
        ...

