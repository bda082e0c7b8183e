"""A memory's formation passes, as functions of its
:class:`~llama_memory.memory.runtime.Runtime`: queued by a ``put``, run by the memory's
thread or a worker process, followed up when messages arrived while one ran, waited for
by ``flush``, or run at once by ``extract`` (docs/formation.md).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from functools import partial
from typing import Any, Optional

from llama_index.core.base.llms.types import ChatMessage

from ...core.errors import LlamaMemoryError
from ...core.types import Scope
from ...memory.runtime import Runtime
from ...storage.ports.jobs import Job
from .run import cursor_key, cursor_position, run_parts, run_pass
from .worker import EXTRACT_JOB, MAX_ATTEMPTS, FormationDeferred, FormationWorker, job_key

#: Seconds in a day: token budgets are per day, from midnight UTC.
DAY = 86400
#: Seconds between looks at the queue while flush() waits for worker processes.
FLUSH_POLL = 0.1


def job_payload(rt: Runtime) -> dict[str, Any]:
    """Whose formation pass a job is, and (for a worker process) how to open the
    memory: made once per scope (``to_dict()`` costs more than the rest of a put)."""
    memory, options = rt.facade, rt.settings
    key = (options.tenant_id, options.user_id, options.session_id)
    cached = rt.job_payload
    if cached is not None and cached[0] == key:
        return cached[1]
    payload = {
        "tenant_id": options.tenant_id,
        "user_id": options.user_id,
        "session_id": options.session_id,
        # A worker process rebuilds the sources from this (a memory on disk or in a
        # PostgreSQL store; an in-memory one has nothing a worker could open).
        "memory": memory.to_dict() if options.persistent else None,
    }
    rt.job_payload = (key, payload)
    return payload


def job_scope(job: Job) -> Scope:
    """Whose session a formation job (kind ``"extract"``) is for."""
    payload = job.payload
    return Scope(
        user_id=payload.get("user_id"), session_id=payload["session_id"],
        tenant_id=payload.get("tenant_id", "default"),
    )


def pass_running(rt: Runtime) -> bool:
    """Whether this memory's worker thread is running its session's pass now: a put then
    queues nothing (a write and a JSON payload for nothing), and the follow-up queues the
    next pass. Read under the memory's lock, which the follow-up takes."""
    running = rt.worker.running if rt.worker is not None else None
    return running is not None and job_scope(running) == rt.scope


def queue_pass(rt: Runtime, scope: Scope, payload: dict[str, Any], run_at: Optional[float] = None) -> None:
    """Queue the session's formation pass to run at ``run_at`` (default now) unless one
    is waiting or running; with ``extract_after_quiet``, a waiting one is moved to
    ``run_at`` instead (each put pushes it back, or brings it forward when due)."""
    store = rt.store
    assert store is not None
    key = job_key(scope)
    if rt.settings.extract_after_quiet > 0 and store.defer(key, time.time() if run_at is None else run_at):
        return
    store.enqueue(
        EXTRACT_JOB, payload, tenant_id=scope.tenant_id, user_id=scope.user_id,
        run_at=run_at, max_attempts=MAX_ATTEMPTS, dedup_key=key,
    )  # fmt: skip


# -- running a formation pass -------------------------------------------------------------


def formation_worker(rt: Runtime) -> FormationWorker:
    """The memory's worker thread, started on first use."""
    if rt.worker is None:
        assert rt.store is not None
        rt.worker = FormationWorker(rt.store, partial(run_job, rt), after=partial(follow_up, rt))
        rt.worker.start()
    return rt.worker


def run_job(rt: Runtime, job: Job) -> int:
    """Run one formation job, of any session of the store, with the memory's sources and LLM."""
    scope = job_scope(job)
    llm = rt.settings.llm
    if llm is None:
        raise LlamaMemoryError("this worker has no LLM to extract with: give the memory llm=")
    check_budget(rt, scope)
    return one_pass(rt, scope, llm)


def follow_up(rt: Runtime, job: Job) -> None:
    """After a formation pass is acknowledged: messages that arrived while it ran found
    it running (their put queued nothing), so queue the session's next pass for them."""
    scope = job_scope(job)
    history = conversation(rt, scope)
    assert rt.store is not None
    if cursor_position(history, rt.store.get_meta(cursor_key(scope))) < len(history):
        queue_pass(rt, scope, job.payload)


def conversation(rt: Runtime, scope: Scope) -> list[ChatMessage]:
    """The scope's conversation: the memory's own, or one from the store."""
    assert rt.store is not None
    if scope == rt.scope:
        with rt.lock:
            rt.check_open()
            return rt.primary.get_all()
    return rt.store.chat_log(scope).load()


def check_budget(rt: Runtime, scope: Scope, at: Optional[float] = None) -> None:
    """:class:`~llama_memory.write.formation.worker.FormationDeferred` to the next day (UTC)
    when the user's passes have used ``formation_token_budget`` tokens today."""
    budget = rt.settings.formation_token_budget
    if not budget:
        return
    assert rt.store is not None
    at = time.time() if at is None else at
    day = int(at // DAY) * DAY
    used = rt.store.tokens_used(scope.tenant_id, scope.user_id, day)
    if used >= budget:
        raise FormationDeferred(
            day + DAY, f"user {scope.user_id!r} used {used} of the {budget} formation tokens of the day"
        )


def one_pass(rt: Runtime, scope: Scope, llm: Any) -> int:
    """One formation pass of the scope's session (see
    :func:`~llama_memory.write.formation.run.run_pass`)."""
    assert rt.store is not None
    history = conversation(rt, scope)
    return run_pass(rt.store, rt.pass_parts(), scope, llm, history, lock=rt.lock)


def extract(rt: Runtime, messages: Optional[Sequence[ChatMessage]], llm: Any) -> None:
    """The body of :meth:`ComposableMemory.extract`: the session's pass now, in the
    calling thread, or a pass over the ``messages`` given, with no cursor."""
    llm = llm or rt.settings.llm
    if llm is None:
        raise ValueError("extract() needs an LLM: pass llm=, or build the memory with llm=")
    rt.check_open()
    if messages is None and rt.store is not None:
        one_pass(rt, rt.scope, llm)
        return
    with rt.lock:
        rt.check_open()
        history = rt.primary.get_all()
        automatic = messages is None
        if messages is None:
            messages = history[min(rt.formed_upto, len(history)) :]
        run_parts(rt.pass_parts(), rt.scope, llm, messages)
        # Advance only once every source succeeded: a failed pass is retried.
        if automatic:
            rt.formed_upto = len(history)


# -- waiting for the formation passes -----------------------------------------------------


def flush(rt: Runtime, timeout: Optional[float]) -> None:
    """The body of :meth:`ComposableMemory.flush`."""
    rt.check_open()
    options = rt.settings
    if rt.usage is not None:
        with rt.lock:
            rt.usage.write()
    if rt.store is None or (options.llm is None and options.extract_in == "thread"):
        return
    if options.extract_after_quiet > 0:  # flush does not wait for the quiet: the pass is due now
        rt.store.defer(job_key(rt.scope), time.time())
    if options.extract_in == "worker":
        wait_for_workers(rt, timeout)
    elif not formation_worker(rt).flush(timeout):
        raise TimeoutError(f"flush(): extraction passes still running after {timeout} s")


def wait_for_workers(rt: Runtime, timeout: Optional[float]) -> None:
    """Wait until worker processes have run this session's passes that may run now (not
    a failed one waiting for its retry, nor one deferred); TimeoutError past
    ``timeout`` seconds, naming what still waits."""
    assert rt.store is not None
    key = job_key(rt.scope)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        waiting = [
            job for job in rt.store.list_jobs(states=["queued", "running"], dedup_key=key)
            if job.state == "running" or job.run_at <= time.time()
        ]
        if not waiting:
            return
        if deadline is not None and time.monotonic() >= deadline:
            where = rt.settings.path or "postgresql://..."
            raise TimeoutError(
                f"flush(): this session's extraction pass (job {waiting[0].id}, {waiting[0].state}) "
                f"was not run by a worker within {timeout} s: is `llama-memory worker --store "
                f"{where} --llm MODULE:NAME` running?"
            )
        time.sleep(FLUSH_POLL if deadline is None else max(0.0, min(FLUSH_POLL, deadline - time.monotonic())))
