"""How a :class:`~llama_memory.memory.ComposableMemory` takes messages in: ``put`` and
``set`` batches written to the chat buffer and every source in one transaction, and the
extraction passes they queue, run and follow up (:mod:`llama_memory.formation` runs the
jobs; see docs/formation.md).

Functions of one memory; the memory's ``put_messages``, ``set``, ``extract`` and
``flush`` call them, and its worker thread runs :func:`run_job` and :func:`follow_up`.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from typing import TYPE_CHECKING, Any, Optional

from llama_index.core.base.llms.types import ChatMessage

from .arguments import messages_arg
from .errors import LlamaMemoryError
from .formation import (
    EXTRACT_JOB,
    MAX_ATTEMPTS,
    FormationDeferred,
    FormationWorker,
    cursor_key,
    job_key,
    run_parts,
    run_pass,
    unextracted_from,
)
from .instrumentation import MemoryPutEvent, Stopwatch, dispatcher
from .messages import (
    check_storable,
    dump_message,
    message_id,
    message_text,
    message_time,
    role_name,
)
from .settings import check_formation as check_formation  # its old home
from .sources.base import Stored
from .storage.ports.jobs import Job
from .types import Scope, StoredMessage, now

if TYPE_CHECKING:
    from .memory import ComposableMemory

#: Seconds in a day: token budgets are per day, from midnight UTC.
DAY = 86400

# The memory's own logger: what it logs keeps the name applications filter on.
logger = logging.getLogger("llama_memory.memory")


def put_messages(memory: ComposableMemory, messages: list[ChatMessage]) -> None:
    """The body of :meth:`ComposableMemory.put_messages`."""
    messages = messages_arg(messages, "put_messages()")
    if not messages:
        return
    watch = Stopwatch()
    stored = stored_messages(messages)  # validates (e.g. timestamps) before anything is written
    with memory._lock:
        memory._check_open()
        turns = memory._user_turns_pending + sum(m.role == "user" for m in stored)
        extracting = memory.llm is not None or memory.extract_in == "worker"
        due = extracting and 0 < memory.extract_every <= turns
        # Debounce: the session's pass falls due once it has been quiet long enough.
        later = extracting and not due and memory.extract_after_quiet > 0 and memory._store is not None
        with one_write(memory, "put messages"):
            add_to_sources(memory, stored)
            memory.primary_memory.put_messages(list(messages))
            if memory._usage is not None and memory._usage.pending:
                memory._usage.write()  # the blocks' notes ride on this commit
            if (due or later) and memory._store is not None and not pass_running(memory):
                # In the messages' transaction: a crash cannot keep them and lose the pass.
                run_at = time.time() + memory.extract_after_quiet if later else None
                queue_pass(memory, memory.scope, job_payload(memory), run_at)
        dispatcher.event(
            MemoryPutEvent(
                **memory._event_scope(),
                messages=len(stored),
                roles=[m.role for m in stored],
                message_ids=[m.message_id for m in stored],
                duration_ms=watch.elapsed_ms,
            )
        )
        memory._user_turns_pending = 0 if due else turns
        if later and memory.extract_in == "thread":
            formation_worker(memory)  # started, not woken: the pass is not due yet
        if not due:
            return
        if memory._store is None:  # built by hand, without a store: no queue
            try:
                memory.extract()
            except LlamaMemoryError as exc:
                logger.warning("automatic extraction failed, will retry: %s", exc)
            return
        if memory.extract_in == "thread":
            formation_worker(memory).wake()


def set_messages(memory: ComposableMemory, messages: list[ChatMessage]) -> None:
    """The body of :meth:`ComposableMemory.set`."""
    messages = messages_arg(messages, "set()")
    with memory._lock:
        memory._check_open()
        stored = stored_messages(new_messages(memory.primary_memory.get_all(), messages))
        with one_write(memory, "set messages"):
            add_to_sources(memory, stored)
            memory.primary_memory.set(list(messages))


def one_write(memory: ComposableMemory, action: str) -> AbstractContextManager[Any]:
    """One transaction of the memory's store for the chat history and the sources'
    records, so a crash or an error keeps all of a batch or none of it. The sources
    write first: the in-memory buffer changes last, once nothing else can fail but
    the commit.

    Every writer that writes to a store (:class:`~llama_memory.sources.base.Stored`)
    must write to this one: a writer on another store (another connection to the
    same file would wait for this transaction's lock forever) makes the batch
    non-atomic, which is logged once.
    """
    if memory._store is None:
        return nullcontext()
    log = getattr(memory.primary_memory, "chat_log", None)  # a ChatBuffer's; others have none
    others = [
        w for w in [log, *memory._sources] if isinstance(w, Stored) and w.store is not memory._store
    ]
    if others:
        if not memory._warned_not_atomic:
            memory._warned_not_atomic = True
            logger.warning(
                "writes of this memory are not atomic: %s use another store than the "
                "memory's; build them on the memory's store for all-or-nothing batches",
                [getattr(w, "name", type(w).__name__) for w in others],
            )
        return nullcontext()
    return memory._store.transaction(action)


def stored_messages(messages: Sequence[ChatMessage]) -> list[StoredMessage]:
    """The messages with id, text and event time, as sources receive them."""
    received = now()
    for position, message in enumerate(messages):
        check_storable(message, position)
    return [
        StoredMessage(
            message_id=message_id(m),
            role=role_name(m),
            text=message_text(m),
            event_time=message_time(m, default=received),
            message=m,
        )
        for m in messages
    ]


def add_to_sources(memory: ComposableMemory, stored: Sequence[StoredMessage]) -> None:
    """Give a batch of stored messages to every source."""
    if not stored:
        return
    scope = memory.scope
    for source in memory._sources:
        source.add(stored, scope)


def new_messages(before: Sequence[ChatMessage], messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """The messages not already in ``before``: by identity, else by serialised content
    (linear; comparing pydantic messages pairwise is quadratic)."""
    same_object = {id(m) for m in before}
    candidates = [m for m in messages if id(m) not in same_object]
    if not candidates:
        return []
    known = {dump_message(m) for m in before}
    return [m for m in candidates if dump_message(m) not in known]


# -- extraction passes ------------------------------------------------------------------


def job_payload(memory: ComposableMemory) -> dict[str, Any]:
    """Whose pass a job is, and (for a worker process) how to open the memory: made
    once per scope (``to_dict()`` costs more than the rest of a put)."""
    key = (memory.tenant_id, memory.user_id, memory.session_id)
    cached = memory._job_payload
    if cached is not None and cached[0] == key:
        return cached[1]
    payload = {
        "tenant_id": memory.tenant_id,
        "user_id": memory.user_id,
        "session_id": memory.session_id,
        # A worker process rebuilds the sources from this (a memory on disk or in a
        # PostgreSQL store; an in-memory one has nothing a worker could open).
        "memory": memory.to_dict() if memory.settings.persistent else None,
    }
    memory._job_payload = (key, payload)
    return payload


def pass_running(memory: ComposableMemory) -> bool:
    """Whether this memory's worker thread is running its session's pass now: a put
    then queues nothing (the queue would find that job and return it: a write and a
    JSON payload for nothing), and the follow-up queues the next pass once it is done.
    Read under the memory's lock, which the follow-up takes to read the conversation."""
    running = memory._worker.running if memory._worker is not None else None
    return running is not None and job_scope(running) == memory.scope


def queue_pass(
    memory: ComposableMemory, scope: Scope, payload: dict[str, Any], run_at: Optional[float] = None
) -> None:
    """Queue the session's pass to run at ``run_at`` (default now) unless one is waiting
    or running already. With ``extract_after_quiet``, a waiting one is moved to
    ``run_at`` instead: each put pushes it back, or brings it forward when
    ``extract_every`` makes it due now."""
    store = memory._store
    assert store is not None
    key = job_key(scope)
    if memory.extract_after_quiet > 0 and store.defer(key, time.time() if run_at is None else run_at):
        return
    store.enqueue(
        EXTRACT_JOB, payload, tenant_id=scope.tenant_id, user_id=scope.user_id,
        run_at=run_at, max_attempts=MAX_ATTEMPTS, dedup_key=key,
    )  # fmt: skip


def follow_up(memory: ComposableMemory, job: Job) -> None:
    """After a pass is acknowledged: messages that arrived while it ran found it
    running (their put queued nothing), so queue the session's next pass for them."""
    scope = job_scope(job)
    history = conversation(memory, scope)
    assert memory._store is not None
    if unextracted_from(history, memory._store.get_meta(cursor_key(scope))) < len(history):
        queue_pass(memory, scope, job.payload)


def conversation(memory: ComposableMemory, scope: Scope) -> list[ChatMessage]:
    """The scope's conversation: the memory's own, or one from the store."""
    assert memory._store is not None
    if scope == memory.scope:
        with memory._lock:
            memory._check_open()
            return memory.primary_memory.get_all()
    return memory._store.chat_log(scope).load()


def formation_worker(memory: ComposableMemory) -> FormationWorker:
    """The memory's worker thread, started on first use."""
    if memory._worker is None:
        assert memory._store is not None
        memory._worker = FormationWorker(memory._store, partial(run_job, memory), after=partial(follow_up, memory))
        memory._worker.start()
    return memory._worker


def run_job(memory: ComposableMemory, job: Job) -> int:
    """Run one ``extract`` job with the memory's sources and LLM (any session of
    the store: the sources take the scope as an argument)."""
    scope = job_scope(job)
    if memory.llm is None:
        raise LlamaMemoryError("this worker has no LLM to extract with: give the memory llm=")
    check_budget(memory, scope)
    return one_pass(memory, scope, memory.llm)


def check_budget(memory: ComposableMemory, scope: Scope, at: Optional[float] = None) -> None:
    """:class:`~llama_memory.formation.FormationDeferred` to the next day (UTC) when the
    user's queued passes have used ``formation_token_budget`` tokens today."""
    budget = memory.formation_token_budget
    if not budget:
        return
    assert memory._store is not None
    at = time.time() if at is None else at
    day = int(at // DAY) * DAY
    used = memory._store.tokens_used(scope.tenant_id, scope.user_id, day)
    if used >= budget:
        raise FormationDeferred(
            day + DAY, f"user {scope.user_id!r} used {used} of the {budget} formation tokens of the day"
        )


def one_pass(memory: ComposableMemory, scope: Scope, llm: Any) -> int:
    """One extraction pass of the scope's session (see :func:`~llama_memory.formation.run_pass`)."""
    assert memory._store is not None
    history = conversation(memory, scope)
    return run_pass(memory._store, memory._pass_parts(), scope, llm, history, lock=memory._lock)


def flush(memory: ComposableMemory, timeout: Optional[float]) -> None:
    """The body of :meth:`ComposableMemory.flush`."""
    memory._check_open()
    if memory._usage is not None:
        with memory._lock:
            memory._usage.write()
    if memory._store is None or (memory.llm is None and memory.extract_in == "thread"):
        return
    if memory.extract_after_quiet > 0:  # flush does not wait for the quiet: the pass is due now
        memory._store.defer(job_key(memory.scope), time.time())
    if memory.extract_in == "worker":
        wait_for_workers(memory, timeout)
    elif not formation_worker(memory).flush(timeout):
        raise TimeoutError(f"flush(): extraction passes still running after {timeout} s")


#: Seconds between looks at the queue while flush() waits for worker processes.
FLUSH_POLL = 0.1


def wait_for_workers(memory: ComposableMemory, timeout: Optional[float]) -> None:
    """Wait until worker processes have run this session's passes that may run now: no
    job of the session is running, or queued and due (a failed one waiting for its
    retry, or one deferred to later, is not waited for, as in a memory's own thread).
    TimeoutError past ``timeout`` seconds, naming what still waits."""
    assert memory._store is not None
    key = job_key(memory.scope)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        waiting = [
            job for job in memory._store.list_jobs(states=["queued", "running"], dedup_key=key)
            if job.state == "running" or job.run_at <= time.time()
        ]
        if not waiting:
            return
        if deadline is not None and time.monotonic() >= deadline:
            where = memory.path or "postgresql://..."
            raise TimeoutError(
                f"flush(): this session's extraction pass (job {waiting[0].id}, {waiting[0].state}) "
                f"was not run by a worker within {timeout} s: is `llama-memory worker --store "
                f"{where} --llm MODULE:NAME` running?"
            )
        time.sleep(FLUSH_POLL if deadline is None else max(0.0, min(FLUSH_POLL, deadline - time.monotonic())))


def extract(memory: ComposableMemory, messages: Optional[Sequence[ChatMessage]], llm: Any) -> None:
    """The body of :meth:`ComposableMemory.extract`: the session's pass (one LLM call
    for every part), or a pass over the ``messages`` given, with no cursor."""
    llm = llm or memory.llm
    if llm is None:
        raise ValueError("extract() needs an LLM: pass llm=, or build the memory with llm=")
    memory._check_open()
    if messages is None and memory._store is not None:
        one_pass(memory, memory.scope, llm)
        return
    with memory._lock:
        memory._check_open()
        history = memory.primary_memory.get_all()
        automatic = messages is None
        if messages is None:
            messages = history[min(memory._extracted_upto, len(history)) :]
        run_parts(memory._pass_parts(), memory.scope, llm, messages)
        # Advance only once every source succeeded: a failed extraction is retried.
        if automatic:
            memory._extracted_upto = len(history)


def job_scope(job: Job) -> Scope:
    """Whose session an ``extract`` job is for."""
    payload = job.payload
    return Scope(
        user_id=payload.get("user_id"), session_id=payload["session_id"],
        tenant_id=payload.get("tenant_id", "default"),
    )
