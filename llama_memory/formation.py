"""Memory formation off the hot path (issue 17): extraction passes run as jobs.

When extraction falls due, ``put()`` queues an ``"extract"`` job in the same
transaction as the messages (the store's :class:`~llama_memory.storage.ports.jobs.JobQueue`).
A :class:`FormationWorker` (a thread of the memory, or ``llama-memory worker`` in
another process) claims it and runs one *pass*: the messages of the session after
its persisted cursor go to each extracting source's LLM call, outside any lock;
the answers are then applied, and the cursor moved, in one transaction, and only
if the cursor is still where the pass started. So a pass is applied once whatever
happens: a reopen, a worker killed mid-pass (its lease runs out and the job runs
again, finding nothing new), two workers on the same session.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import uuid
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Optional, Protocol, runtime_checkable

from llama_index.core.base.llms.types import ChatMessage

from .instrumentation import MemoryExtractionEvent, Stopwatch, dispatcher
from .messages import dump_message
from .sources.base import Extracting, Stored
from .storage.ports import Storage
from .storage.ports.base import user_meta_key
from .storage.ports.jobs import Job, JobQueue
from .types import Scope

logger = logging.getLogger(__name__)

#: The job kind of an extraction pass.
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


@runtime_checkable
class Proposing(Protocol):
    """An extracting source in two halves, so the LLM call holds no lock and the
    writes join the pass's transaction (the triple and profile sources)."""

    def propose(
        self, messages: Sequence[ChatMessage], llm: Any, scope: Scope
    ) -> Optional[Callable[[], Any]]:
        """Ask ``llm`` about ``messages`` without writing; return what writes the
        answer (joining an open transaction), or None when there is nothing to write."""
        ...


def cursor_key(scope: Scope) -> str:
    """The meta key of a session's extraction cursor (a user meta key: forgotten with
    the user)."""
    return user_meta_key("extraction_cursor", scope)


def job_key(scope: Scope) -> str:
    """The dedup key of a session's pass: one waits (or runs) at a time; it reads every
    message after the cursor when it runs, so the turns of a burst share one pass."""
    return "extract:" + json.dumps([scope.tenant_id, scope.user_id, scope.session_id])


def _fingerprint(message: ChatMessage) -> str:
    return hashlib.sha256(dump_message(message).encode()).hexdigest()[:16]


def unextracted_from(history: Sequence[ChatMessage], cursor: Optional[str]) -> int:
    """Where the messages not extracted from yet start in ``history``. The cursor
    holds a count and the last extracted message's fingerprint: when that message is
    not where the cursor says (the conversation was reset or replaced), start over."""
    if not cursor:
        return 0
    try:
        data = json.loads(cursor)
        upto, last = int(data["upto"]), str(data["last"])
    except (ValueError, KeyError, TypeError):
        logger.warning("unreadable extraction cursor %r: extracting the session from its start", cursor)
        return 0
    if 0 < upto <= len(history) and _fingerprint(history[upto - 1]) == last:
        return upto
    return 0


def run_pass(
    store: Storage,
    sources: Sequence[Any],
    scope: Scope,
    llm: Any,
    history: Sequence[ChatMessage],
    lock: Optional[AbstractContextManager[Any]] = None,
) -> int:
    """One extraction pass over the session's messages after its cursor; return how
    many messages it covered (0: nothing new, or another worker applied it first).

    Each :class:`Proposing` source asks the LLM first, holding no lock (one call per
    source for now; one structured call for every source is a later step of issue
    17). Then, under ``lock`` (the memory's: its sources' locks come after it), the
    answers are applied and the cursor moved in one transaction, only if the cursor
    has not moved meanwhile. A source with only ``extract`` writes on its own, under
    ``lock`` before that transaction: its LLM call does hold the lock.
    """
    key = cursor_key(scope)
    before = store.get_meta(key)
    todo = list(history[unextracted_from(history, before) :])
    if not todo:
        return 0
    event_scope: dict[str, Any] = {
        "tenant_id": scope.tenant_id, "user_id": scope.user_id, "session_id": scope.session_id,
    }

    def observed(source: Any, call: Callable[[], Any]) -> Any:
        watch, error = Stopwatch(), None
        try:
            return call()
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            dispatcher.event(MemoryExtractionEvent(
                **event_scope, source=getattr(source, "name", type(source).__name__),
                messages=len(todo), error=error, duration_ms=watch.elapsed_ms,
            ))  # fmt: skip

    def propose(source: Proposing) -> Optional[Callable[[], Any]]:
        return observed(source, lambda: source.propose(todo, llm, scope))

    applies = [(s, propose(s)) for s in sources if isinstance(s, Proposing)]
    others = [s for s in sources if isinstance(s, Extracting) and not isinstance(s, Proposing)]
    cursor = json.dumps({"upto": len(history), "last": _fingerprint(history[-1])})
    with lock or nullcontext():
        if store.get_meta(key) != before:
            return 0  # applied meanwhile by another worker: never twice
        for source in others:
            extract = source.extract
            observed(source, lambda: extract(todo, llm, scope))
        # A source on another store cannot join this transaction (its connection would
        # wait for this one's lock): it writes first, on its own, as in put().
        apart = [a for s, a in applies if a is not None and isinstance(s, Stored) and s.store is not store]
        for write in apart:
            write()
        with store.transaction("apply an extraction pass"):
            if store.get_meta(key) != before:
                return 0
            for _, apply in applies:
                if apply is not None and apply not in apart:
                    apply()
            store.set_meta(key, cursor)
    return len(todo)


def retry_in(attempts: int) -> float:
    """Seconds before a pass that failed ``attempts`` times runs again (backoff)."""
    return RETRY_BASE * 4 ** max(attempts - 1, 0)


class FormationWorker:
    """Runs the ``"extract"`` jobs of a queue in a thread: claim, run, acknowledge;
    a failure is retried with backoff (:func:`retry_in`), then kept as dead with its
    error. :meth:`flush` waits until no job may run now."""

    def __init__(
        self,
        queue: JobQueue,
        run: Callable[[Job], Any],
        *,
        after: Optional[Callable[[Job], Any]] = None,
        name: Optional[str] = None,
        lease: float = DEFAULT_LEASE,
        poll: float = POLL_SECONDS,
    ) -> None:
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

    def run_once(self) -> bool:
        """Claim and run one job; False when none may run now."""
        job = self.queue.claim(self.name, kinds=[EXTRACT_JOB], lease=self.lease)
        if job is None:
            return False
        try:
            self.run(job)
        except Exception as exc:
            state = self.queue.fail(job, f"{type(exc).__name__}: {exc}", retry_in=retry_in(job.attempts))
            logger.warning("extraction job %s failed (attempt %d, now %s): %s", job.id, job.attempts, state, exc)
        else:
            if not self.queue.ack(job):
                logger.warning("extraction job %s ran past its lease; another worker took it over", job.id)
            elif self.after is not None:
                self.after(job)
        return True

    def start(self) -> None:
        """Start the thread (once)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name=f"llama-memory {self.name}", daemon=True)
            self._thread.start()

    def wake(self) -> None:
        """Look at the queue now (a job was just queued)."""
        self._wake.set()

    def flush(self, timeout: Optional[float] = None) -> bool:
        """Wait until the queue holds no job that may run now (failed ones waiting for
        their retry and jobs held by other workers excepted); False on timeout."""
        self.start()
        with self._idle:
            self._asked += 1
            target = self._asked
            self._wake.set()
            return self._idle.wait_for(
                lambda: self._done >= target or self._stopping.is_set(), timeout
            )

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
                while not self._stopping.is_set() and self.run_once():
                    pass
            except Exception:  # the store failed (or closed): try again later
                logger.exception("extraction worker %s: the job queue failed", self.name)
            with self._idle:
                self._done = max(self._done, asked)
                self._idle.notify_all()
            self._wake.wait(self.poll)
