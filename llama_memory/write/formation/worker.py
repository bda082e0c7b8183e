"""Formation passes as jobs: the ``"extract"`` job kind that ``put()`` queues, and the
:class:`FormationWorker` (a thread of the memory, or ``llama-memory worker``) that claims
and runs them.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Optional

from ...core.metering import metering
from ...core.types import Scope, Stopwatch
from ...storage.ports.jobs import Job, PassCost
from ...storage.sql.jobs import JobQueue

logger = logging.getLogger(__name__)

#: The job kind of a formation pass (stored in the jobs table: the name stays).
EXTRACT_JOB = "extract"
#: Seconds a worker holds a job before another may claim it again (its worker died).
DEFAULT_LEASE = 300.0
#: Seconds before the first retry of a failed pass; each further retry waits 4x longer.
RETRY_BASE = 5.0
#: Attempts of a pass before its job is kept as dead, with its last error.
MAX_ATTEMPTS = 4
#: Seconds an idle worker sleeps before looking at the queue again (jobs queued by
#: other processes, retries falling due); a put in this process wakes it at once.
POLL_SECONDS = 1.0


def job_key(scope: Scope) -> str:
    """The dedup key of a session's formation pass: one waits (or runs) at a time, so the
    turns of a burst share one pass. Stored (``"extract:..."``): its text stays."""
    return "extract:" + json.dumps([scope.tenant_id, scope.user_id, scope.session_id])


class FormationDeferred(Exception):
    """Raised by a job's run before any LLM call to give the job back until ``until``
    (epoch seconds) without counting an attempt (its user is over the day's token
    budget): not a failure."""

    def __init__(self, until: float, reason: str) -> None:
        super().__init__(reason)
        self.until, self.reason = until, reason


@dataclass(frozen=True)
class JobOutcome:
    """How one run of a job ended (:meth:`FormationWorker.run_once`).

    Attributes:
        job: the job as it was claimed.
        state: ``"done"``; ``"queued"`` (failed, retried at ``retry_at``); ``"dead"``
            (failed, out of attempts); ``"deferred"`` (did not run, see ``reason``; runs
            at ``retry_at``); ``"lost"`` (ran past its lease, taken over).
        error: why it failed (``"ExtractionError: ..."``), None when it did not.
        retry_at: epoch seconds of its next attempt, for ``"queued"`` and ``"deferred"``.
        cost: the LLM tokens and wall time of the run (None when deferred).
        reason: why it was deferred.
    """

    job: Job
    state: str
    error: Optional[str] = None
    retry_at: Optional[float] = None
    cost: Optional[PassCost] = None
    reason: Optional[str] = None

    @property
    def failed(self) -> bool:
        """Whether the run failed (retried later, or dead)."""
        return self.error is not None


def retry_in(attempts: int) -> float:
    """Seconds before a formation pass that failed ``attempts`` times runs again (backoff)."""
    return RETRY_BASE * 4 ** max(attempts - 1, 0)


class FormationWorker:
    """Runs the formation jobs of a queue in a thread: claim, run, acknowledge; a failure
    is retried with backoff (:func:`retry_in`), then kept as dead with its error."""

    def __init__(
        self, queue: JobQueue, run: Callable[[Job], Any], *, after: Optional[Callable[[Job], Any]] = None,
        name: Optional[str] = None, lease: float = DEFAULT_LEASE, poll: float = POLL_SECONDS,
    ) -> None:  # fmt: skip
        """``run(job)`` does a job's work; ``after(job)`` runs once it is acknowledged
        (a follow-up for what arrived meanwhile); ``lease``: seconds a job is held before
        another worker may take it over; ``poll``: seconds between looks at the queue."""
        if lease <= 0 or poll <= 0:
            raise ValueError(f"lease and poll must be positive seconds, got {lease} and {poll}")
        self.queue, self.run, self.after, self.lease, self.poll = queue, run, after, lease, poll
        self.name = name or f"worker-{uuid.uuid4().hex[:8]}"
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._idle = threading.Condition()
        self._asked = self._done = 0  # flush requests made / served
        self._thread: Optional[threading.Thread] = None
        #: The job running now (None between jobs): a put of its session queues nothing.
        self.running: Optional[Job] = None

    def run_once(self) -> Optional[JobOutcome]:
        """Claim and run one job and say how it ended; None when none may run now."""
        job = self.queue.claim(self.name, kinds=[EXTRACT_JOB], lease=self.lease)
        if job is None:
            return None
        self.running = job
        watch = Stopwatch()
        try:
            with metering() as meter:
                try:
                    self.run(job)
                finally:
                    cost = PassCost(meter.sent, meter.received, watch.elapsed_ms)
                    self.running = None  # before the follow-up reads what arrived meanwhile
        except FormationDeferred as deferred:
            self.queue.postpone(job, deferred.until)
            logger.info("extraction job %s deferred: %s", job.id, deferred.reason)
            return JobOutcome(job, "deferred", retry_at=deferred.until, reason=deferred.reason)
        except Exception as exc:
            error, wait = f"{type(exc).__name__}: {exc}", retry_in(job.attempts)
            failed_at = time.time()
            state = self.queue.fail(job, error, retry_in=wait, now=failed_at, cost=cost)
            logger.warning("extraction job %s failed (attempt %d, now %s): %s", job.id, job.attempts, state, exc)
            return JobOutcome(job, state, error, failed_at + wait if state == "queued" else None, cost)
        if not self.queue.ack(job, cost):
            logger.warning("extraction job %s ran past its lease; another worker took it over", job.id)
            return JobOutcome(job, "lost", cost=cost)
        if self.after is not None:
            self.after(job)
        return JobOutcome(job, "done", cost=cost)

    def start(self) -> None:
        """Start the thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=f"llama-memory {self.name}", daemon=True)
            self._thread.start()

    def wake(self) -> None:
        """Look at the queue now (a job was just queued)."""
        self._wake.set()

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Wait until the queue holds no job that may run now (not those waiting for a
        retry or held by other workers); False on timeout."""
        self.start()
        with self._idle:
            self._asked += 1
            target = self._asked
            self._wake.set()
            return self._idle.wait_for(lambda: self._done >= target or self._stopping.is_set(), timeout)

    def stop(self, timeout: Optional[float] = None) -> None:
        """Stop after the job running now (the others stay queued in the store)."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        with self._idle:
            self._idle.notify_all()

    def _loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.clear()  # before reading what was asked: a later ask sets it again
            with self._idle:
                asked = self._asked
            try:
                while not self._stopping.is_set() and self.run_once() is not None:
                    pass
            except Exception:  # the store failed (or closed): try again later
                logger.exception("extraction worker %s: the job queue failed", self.name)
            with self._idle:
                self._done = max(self._done, asked)
                self._idle.notify_all()
            self._wake.wait(self.poll)
