"""Formation passes run by a process of their own: ``llama-memory worker --store PATH``
claims the passes that memories built with ``extract_in="worker"`` queue, each once,
with the LLM it is given (docs/formation.md).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Callable, Optional, Union

from ...core.errors import LlamaMemoryError
from ...memory.composable import ComposableMemory
from ...storage.ports.jobs import Job
from ...storage.registry import open_existing
from .passes import follow_up, run_job
from .worker import DEFAULT_LEASE, POLL_SECONDS, FormationWorker, JobOutcome


def run_worker(
    path: Union[str, Path], llm: Any, *, once: bool = False, stop: Optional[threading.Event] = None,
    lease: float = DEFAULT_LEASE, poll: float = POLL_SECONDS, name: Optional[str] = None,
    report: Optional[Callable[[JobOutcome], Any]] = None, formation_token_budget: Optional[int] = None,
    **memory_kwargs: Any,
) -> int:  # fmt: skip
    """Run the formation passes queued in the store under ``path``; return how many
    jobs were run (done or failed).

    Args:
        path: the memory directory (``path=`` of the memories that queue the passes),
            or the ``postgresql://`` URL of their PostgreSQL store.
        llm: the LlamaIndex LLM the passes form memories with.
        once: run the jobs that may run now, then return; else run until ``stop``
            is set.
        stop: set it to stop after the job running now.
        lease: seconds a job is held before another worker may take it over.
        poll: seconds between looks at an empty queue.
        name: this worker's name in the queue (default a random one).
        report: called with each job's :class:`~llama_memory.write.formation.worker.JobOutcome`
            as it ends (``llama-memory worker`` prints one line per job with it).
        formation_token_budget: tokens a user's passes may use per day (UTC) (default:
            the queuing memory's; 0: none); a job past it is deferred to the next day.
        **memory_kwargs: what a job's memory configuration cannot carry, passed to
            :meth:`ComposableMemory.from_dict` (``embed_model=``, a profile
            ``schema``...).

    Each job carries its memory's ``to_dict()``: the worker opens one memory per
    configuration. A job of a memory with custom sources fails with ``from_dict``'s
    error (pass them in ``memory_kwargs``); an in-memory store's cannot reach a worker.
    """
    if llm is None:
        raise ValueError("run_worker() needs an LLM to extract with: pass llm=")
    queue = open_existing(os.fspath(path))  # a worker never creates an empty store
    memories: dict[str, ComposableMemory] = {}

    def run(job: Job) -> int:
        return run_job(memory_for(job).runtime, job)

    def memory_for(job: Job) -> ComposableMemory:
        config = job.payload.get("memory")
        if not isinstance(config, dict):
            raise LlamaMemoryError("this job carries no memory configuration (its memory is not on disk)")
        # One memory per configuration: the sources take the job's scope as an argument.
        key = json.dumps({k: v for k, v in config.items() if k not in ("user_id", "session_id")}, sort_keys=True)
        memory = memories.get(key)
        if memory is None:
            given = {**memory_kwargs, "llm": llm, "extract_in": "worker"}
            if formation_token_budget is not None:
                given["formation_token_budget"] = formation_token_budget
            memory = ComposableMemory.from_dict(config, **given)
            memories[key] = memory
        return memory

    worker = FormationWorker(
        queue, run, after=lambda job: follow_up(memory_for(job).runtime, job), name=name, lease=lease, poll=poll
    )
    stop = stop or threading.Event()
    ran = 0
    try:
        while not stop.is_set():
            outcome = worker.run_once()
            if outcome is not None:
                ran += 1
                if report is not None:
                    report(outcome)
            elif once:
                break
            else:
                stop.wait(poll)
    finally:
        for memory in memories.values():
            memory.close()
        queue.close()
    return ran
