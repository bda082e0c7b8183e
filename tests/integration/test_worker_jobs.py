"""The worker and its jobs as a user runs them: ``llama-memory worker`` says how each
job ended and fails when one did, ``llama-memory jobs`` lists failed jobs with their
error and queues them again, ``--llm`` finds the user's module in the current
directory, and ``flush()`` of a worker-mode memory waits for the worker processes.

The commands run as the installed ``llama-memory`` console script in a process of
their own, from a directory holding the user's LLM module (no ``PYTHONPATH``: the
module is found as ``python -m`` would find it)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest

from helpers import user
from llama_memory import ComposableMemory
from llama_memory.admin.memory_admin import MemoryAdmin
from llama_memory.testing import ScriptedLLM, pass_answer
from llama_memory.write.formation import EXTRACT_JOB, job_key
from llama_memory.write.formation.passes import job_payload
from llama_memory.write.formation.worker_process import run_worker

SCRIPT = Path(sys.executable).parent / "llama-memory"

LLMS = """
from llama_memory.testing import ScriptedLLM, pass_answer

def garbage():
    return ScriptedLLM(["Sure, I can help with that!"] * 10, function_calling=False)

def jazz():
    return ScriptedLLM([pass_answer(profile=[{"op": "append", "path": "likes", "value": "jazz"}])] * 10)
"""


def likes_jazz() -> Any:
    return pass_answer(profile=[{"op": "append", "path": "likes", "value": "jazz"}])


def open_memory(where: dict[str, Any], session: str = "s1", **kwargs: Any) -> ComposableMemory:
    """A profile-only memory (no embedding model) whose passes worker processes run."""
    return ComposableMemory.from_defaults(
        user_id="alice", session_id=session, secondary_memory_sources=[], profile=True,
        extract_in="worker", **where, **kwargs,
    )  # fmt: skip


def llama_memory(cwd: Path, *args: Any) -> subprocess.CompletedProcess:
    """The console script, run from ``cwd`` with no PYTHONPATH."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [str(SCRIPT), *map(str, args)], capture_output=True, text=True, timeout=240, env=env, cwd=cwd
    )


@pytest.fixture
def app(tmp_path: Path) -> Path:
    """The user's project directory, with their LLM module in it."""
    (tmp_path / "my_llms.py").write_text(textwrap.dedent(LLMS))
    return tmp_path


def test_the_worker_reports_each_job_fails_on_a_failure_and_dead_jobs_can_be_retried(app: Path) -> None:
    store = app / "memory"
    doomed = open_memory({"path": store})  # its pass has one attempt: it goes dead
    doomed.put(user("I like jazz."))
    assert doomed.runtime.store is not None
    dead_id = doomed.runtime.store.enqueue(
        EXTRACT_JOB, job_payload(doomed.runtime), tenant_id="default", user_id="alice",
        max_attempts=1, dedup_key=job_key(doomed.scope),
    )  # fmt: skip
    doomed.close()
    retried = open_memory({"path": store}, "s2", extract_every=1)  # the usual 4 attempts
    retried.put(user("I also like blues."))
    retried.close()

    run = llama_memory(app, "worker", "--store", store, "--llm", "my_llms:garbage", "--once")
    assert run.returncode == 1, run.stderr
    lines = run.stdout.splitlines()
    assert len(lines) == 3, run.stdout
    assert lines[0].startswith(f"job {dead_id} (user alice, session s1): dead after 1 attempt: ExtractionError:")
    assert "Sure, I can help" in lines[0]  # the answer's start, in the error
    assert "(user alice, session s2): failed (attempt 1 of 4), retrying at 20" in lines[1]
    assert lines[1].split(" UTC: ")[1].startswith("ExtractionError: ")
    assert lines[2] == "ran 2 extraction jobs: 0 done, 2 failed"

    listed = llama_memory(app, "jobs", "--store", store)
    assert listed.returncode == 0, listed.stderr
    assert "dead" in listed.stdout and "failed, retrying" in listed.stdout
    assert listed.stdout.count("last error: ExtractionError:") == 2
    as_json = json.loads(llama_memory(app, "jobs", "--store", store, "--json").stdout)
    assert [(j["id"], j["state"], j["session_id"]) for j in as_json][0] == (dead_id, "dead", "s1")

    again = llama_memory(app, "jobs", "retry", "--all-dead", "--store", store)
    assert again.returncode == 0, again.stderr
    assert again.stdout.splitlines() == [f"job {dead_id}: queued to run now", "retried 1 dead job"]
    good = llama_memory(app, "worker", "--store", store, "--llm", "my_llms:jazz", "--once")
    assert good.returncode == 0, good.stderr
    lines = good.stdout.splitlines()
    assert f"job {dead_id} (user alice, session s1): done" in lines
    # s2's retry runs too when its 5 s have passed meanwhile (slow process starts).
    assert lines[-1] == ("ran 1 extraction job" if len(lines) == 2 else "ran 2 extraction jobs"), lines
    with MemoryAdmin(store) as admin:
        assert admin.profile("alice")["likes"][0] == "jazz"
        assert [j.session_id for j in admin.jobs()] == ([] if len(lines) == 3 else ["s2"])


def test_jobs_retry_says_what_was_wrong(app: Path) -> None:
    store = app / "memory"
    memory = open_memory({"path": store}, extract_every=1)
    memory.put(user("I like jazz."))
    memory.close()
    (job,) = MemoryAdmin(store).jobs(failed_only=False)
    refused = llama_memory(app, "jobs", "retry", job.id, "--store", store)
    assert refused.returncode == 1
    assert "is queued and has not failed: only a failed job can be retried" in refused.stderr
    unknown = llama_memory(app, "jobs", "retry", "nope", "--store", store)
    assert unknown.returncode == 1 and "no job 'nope'" in unknown.stderr
    neither = llama_memory(app, "jobs", "retry", "--store", store)
    assert neither.returncode == 1 and "a job ID" in neither.stderr


def test_flush_of_a_worker_mode_memory_waits_for_the_worker_process(app: Path) -> None:
    store = app / "memory"
    memory = open_memory({"path": store}, extract_every=1)
    try:
        memory.put(user("I like jazz."))
        with pytest.raises(TimeoutError, match="llama-memory worker --store"):
            memory.flush(timeout=0.3)  # no worker runs yet
        worker = subprocess.Popen(
            [str(SCRIPT), "worker", "--store", str(store), "--llm", "my_llms:jazz"],
            cwd=app, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        )  # fmt: skip
        try:
            memory.flush(timeout=120)
            assert memory.profile.get_profile(memory.scope) == {"likes": ["jazz"]}
        finally:
            worker.send_signal(signal.SIGTERM)
            out, err = worker.communicate(timeout=60)
        assert worker.returncode == 0, err
        assert out.splitlines()[-2:] == [
            f"job {MemoryAdmin(store).jobs(failed_only=False)[0].id} (user alice, session s1): done",
            "ran 1 extraction job",
        ]
    finally:
        memory.close()


def test_flush_waits_for_a_worker_on_postgres_and_failed_jobs_are_retried(postgres_url: str) -> None:
    memory = open_memory({"store": postgres_url}, extract_every=1)
    try:
        memory.put(user("I like jazz."))
        assert run_worker(postgres_url, ScriptedLLM(["not JSON"], function_calling=False), once=True) == 1
        memory.flush(timeout=5)  # the failed pass waits for its retry: not waited for
        with MemoryAdmin(postgres_url) as admin:
            (failed,) = admin.jobs()
            assert failed.state == "queued" and "not JSON" in (failed.last_error or "")
            assert admin.retry_job(failed.id) == failed.id
        stop = threading.Event()
        worker = threading.Thread(
            target=run_worker, args=(postgres_url, ScriptedLLM([likes_jazz()])), kwargs={"stop": stop, "poll": 0.05}
        )
        worker.start()
        try:
            memory.flush(timeout=60)
            assert memory.profile.get_profile(memory.scope) == {"likes": ["jazz"]}
        finally:
            stop.set()
            worker.join(30)
        with MemoryAdmin(postgres_url) as admin:
            assert admin.jobs() == [] and admin.retry_dead_jobs() == {}
    finally:
        memory.close()
