"""The job queue: claim, ack, retry, dead, leases, dedup, one worker per job."""

from __future__ import annotations

import threading

import pytest


def test_a_job_is_claimed_once_and_done_when_acknowledged(backend) -> None:
    queue = backend.open()
    job_id = queue.enqueue("extract", {"session": "s1"}, tenant_id="default", user_id="alice")
    job = queue.claim("w1")
    assert job is not None and (job.id, job.kind, job.payload, job.user_id, job.attempts) == (
        job_id, "extract", {"session": "s1"}, "alice", 1
    )
    assert backend.open().claim("w2") is None  # held by w1
    assert queue.ack(job)
    assert queue.counts() == {"queued": 0, "running": 0, "done": 1, "dead": 0}
    assert queue.claim("w2", now=1e12) is None


def test_jobs_come_out_in_the_order_they_may_run(backend) -> None:
    queue = backend.open()
    late = queue.enqueue("a", {}, run_at=50.0)
    first = queue.enqueue("a", {}, run_at=10.0)
    second = queue.enqueue("a", {}, run_at=10.0)
    claimed = [queue.claim("w", now=100.0) for _ in range(3)]
    assert [j.id for j in claimed if j] == [first, second, late]
    assert queue.enqueue("a", {}, run_at=500.0) and queue.claim("w", now=100.0) is None


def test_a_failed_job_is_retried_later_then_dead_when_out_of_attempts(backend) -> None:
    queue = backend.open()
    queue.enqueue("extract", {}, max_attempts=2, run_at=100.0)
    job = queue.claim("w", now=100.0)
    assert job is not None and queue.fail(job, "LLM timeout", retry_in=30.0, now=100.0) == "queued"
    assert queue.claim("w", now=120.0) is None  # not yet
    again = queue.claim("w", now=131.0)
    assert again is not None and again.attempts == 2
    assert queue.fail(again, "LLM timeout", now=131.0) == "dead"
    assert queue.claim("w", now=1e12) is None
    assert queue.counts()["dead"] == 1


def test_a_job_whose_worker_died_is_claimed_again_after_its_lease(backend) -> None:
    queue = backend.open()
    queue.enqueue("extract", {}, run_at=100.0)
    lost = queue.claim("dead-worker", lease=10.0, now=100.0)
    assert queue.claim("w2", now=105.0) is None
    taken = queue.claim("w2", lease=10.0, now=111.0)
    assert taken is not None and taken.attempts == 2
    assert lost is not None and not queue.ack(lost)  # its lease was lost
    assert queue.fail(lost, "late", now=112.0) == "lost"
    assert queue.ack(taken)


def test_a_job_out_of_attempts_whose_worker_died_is_dead_and_the_next_one_is_claimed(backend) -> None:
    queue = backend.open()
    doomed = queue.enqueue("extract", {}, max_attempts=1, run_at=100.0)
    waiting = queue.enqueue("extract", {}, run_at=101.0)
    held = queue.claim("dies", lease=10.0, now=102.0)
    assert held is not None and held.id == doomed
    nxt = queue.claim("w2", lease=10.0, now=200.0)  # doomed's lease is over; it had 1 attempt
    assert nxt is not None and nxt.id == waiting
    assert queue.counts()["dead"] == 1


def test_kinds_and_dedup_keys(backend) -> None:
    queue = backend.open()
    one = queue.enqueue("extract", {"n": 1}, dedup_key="extract:alice:s1")
    assert queue.enqueue("extract", {"n": 2}, dedup_key="extract:alice:s1") == one
    queue.enqueue("reindex", {})
    job = queue.claim("w", kinds=["reindex"], now=1e12)
    assert job is not None and job.kind == "reindex"
    extract = queue.claim("w", kinds=["extract"], now=1e12)
    assert extract is not None and queue.ack(extract)
    # Done: the key is free again.
    assert queue.enqueue("extract", {"n": 3}, dedup_key="extract:alice:s1") != one


def test_defer_moves_a_queued_job_never_a_running_one(backend) -> None:
    queue = backend.open()
    assert not queue.defer("extract:alice:s1", 200.0)  # nothing queued under that key
    one = queue.enqueue("extract", {}, dedup_key="extract:alice:s1", run_at=100.0)
    with queue.transaction("a put"):  # joins the caller's transaction
        assert queue.defer("extract:alice:s1", 200.0)
    assert queue.claim("w", now=150.0) is None  # pushed back
    job = queue.claim("w", now=200.0)
    assert job is not None and job.id == one
    assert not queue.defer("extract:alice:s1", 1e12)  # running: left alone
    assert queue.ack(job)


def test_concurrent_workers_never_share_a_job(backend) -> None:
    queue = backend.open()
    for n in range(20):
        queue.enqueue("extract", {"n": n})
    claimed: list[str] = []
    lock = threading.Lock()

    def work() -> None:
        store = backend.open()  # a connection of its own, as another process has
        while (job := store.claim(threading.current_thread().name, now=1e12)) is not None:
            with lock:
                claimed.append(job.id)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(claimed) == len(set(claimed)) == 20


def test_bad_input_is_refused_with_what_to_pass(backend) -> None:
    queue = backend.open()
    with pytest.raises(ValueError, match="kind"):
        queue.enqueue("", {})
    with pytest.raises(TypeError, match="JSON"):
        queue.enqueue("extract", {"when": object()})
    with pytest.raises(ValueError, match="max_attempts"):
        queue.enqueue("extract", {}, max_attempts=0)


def test_failed_jobs_are_listed_with_their_last_error_and_retried(backend) -> None:
    queue = backend.open()
    dead = queue.enqueue("extract", {"session_id": "s1"}, tenant_id="t1", user_id="alice", max_attempts=1, run_at=100.0)
    retrying = queue.enqueue("extract", {"session_id": "s2"}, tenant_id="t1", user_id="bob", run_at=100.0)
    waiting = queue.enqueue("extract", {"session_id": "s3"}, tenant_id="t2", user_id="carol", run_at=100.0)
    for _ in range(2):
        job = queue.claim("w", now=100.0)
        assert job is not None
        queue.fail(job, f"ExtractionError: bad answer of {job.user_id}", retry_in=50.0, now=100.0)
    failed = queue.list_jobs(failed=True)
    assert [(j.id, j.state, j.user_id, j.session_id, j.attempts, j.last_error) for j in failed] == [
        (dead, "dead", "alice", "s1", 1, "ExtractionError: bad answer of alice"),
        (retrying, "queued", "bob", "s2", 1, "ExtractionError: bad answer of bob"),
    ]
    assert all(j.failed for j in failed) and failed[1].run_at == 150.0
    assert [j.id for j in queue.list_jobs()] == [dead, retrying, waiting]
    assert [j.id for j in queue.list_jobs(states=["queued"], tenant_id="t1")] == [retrying]
    assert queue.list_jobs(states=[]) == []
    assert not queue.list_jobs(tenant_id="t2", failed=True)

    assert queue.retry(dead, tenant_id="t1", now=100.0) == dead
    job = queue.claim("w", now=100.0)
    assert job is not None and (job.id, job.attempts) == (dead, 1)  # its attempts start again
    assert queue.ack(job)
    assert queue.retry(retrying, now=100.0) == retrying  # a retry brought forward
    assert queue.claim("w", now=100.0).id == retrying  # type: ignore[union-attr]
    with pytest.raises(KeyError, match="no job"):
        queue.retry("nope")
    with pytest.raises(KeyError, match="no job"):
        queue.retry(waiting, tenant_id="t1")  # another tenant's
    with pytest.raises(ValueError, match="is done"):
        queue.retry(dead)
    with pytest.raises(ValueError, match="has not failed"):
        queue.retry(waiting)


def test_a_dead_jobs_retry_gives_way_to_its_sessions_queued_pass(backend) -> None:
    queue = backend.open()
    key = "extract:alice:s1"
    dead = queue.enqueue("extract", {}, dedup_key=key, max_attempts=1, run_at=100.0)
    job = queue.claim("w", now=100.0)
    assert job is not None and queue.fail(job, "LLM down", now=100.0) == "dead"
    live = queue.enqueue("extract", {}, dedup_key=key, run_at=100.0)  # the session's next turn
    assert live != dead
    assert queue.retry(dead, now=100.0) == live  # the queued pass covers the dead one's messages
    assert [j.id for j in queue.list_jobs(states=["dead"])] == [dead]
    assert [j.id for j in queue.list_jobs(dedup_key=key, states=["queued"])] == [live]


def test_a_jobs_runs_add_up_their_cost_per_user_and_day(backend) -> None:
    from llama_memory.storage.ports import PassCost

    queue = backend.open()
    day = 1_700_000_000.0 - 1_700_000_000.0 % 86400  # a midnight UTC
    first = queue.enqueue("extract", {"session_id": "s1"}, tenant_id="t", user_id="alice", run_at=day)
    job = queue.claim("w", now=day + 10)
    assert job is not None
    queue.fail(job, "bad answer", retry_in=5.0, now=day + 11, cost=PassCost(100, 20, 1500.0))
    again = queue.claim("w", now=day + 20)
    assert again is not None and queue.ack(again, PassCost(110, 30, 500.0))
    row = queue.list_jobs()[0]
    assert (row.id, row.passes, row.failures, row.tokens_sent, row.tokens_received, row.duration_ms) == (
        first, 2, 1, 210, 50, 2000.0
    )
    assert row.finished_at is not None and row.finished_at > day  # the ack's own clock
    other = queue.enqueue("extract", {"session_id": "s9"}, tenant_id="t", user_id="bob", run_at=day)
    bobs = queue.claim("w", now=day + 30)
    assert bobs is not None and bobs.id == other
    assert queue.fail(bobs, "LLM down", now=day + 31, cost=PassCost(7, 0, 10.0)) == "queued"
    days = queue.formation_days(tenant_id="t", since=day)
    assert [d.user_id for d in days] == ["bob", "alice"]  # oldest day first: alice's ack ran today
    bob_day = days[0]
    assert (bob_day.user_id, bob_day.day, bob_day.passes, bob_day.failures, bob_day.tokens_sent) == (
        "bob", "2023-11-14", 1, 1, 7
    )
    assert queue.tokens_used("t", "bob", day) == 7
    assert queue.tokens_used("t", "bob", day + 86400) == 0
    assert queue.tokens_used("t", "alice", 0.0) == 260
    assert [(d.user_id, d.passes) for d in queue.formation_days(tenant_id="t") if d.user_id == "alice"] == [
        ("alice", 2)
    ]
    assert queue.formation_days(tenant_id="nobody") == []


def test_a_postponed_job_keeps_its_attempts_and_runs_later(backend) -> None:
    queue = backend.open()
    queue.enqueue("extract", {}, max_attempts=1, run_at=100.0)
    job = queue.claim("w", now=100.0)
    assert job is not None and queue.postpone(job, 500.0)
    assert queue.claim("w", now=400.0) is None  # not before its time
    again = queue.claim("w2", now=500.0)
    assert again is not None and again.attempts == 1  # the postponed claim did not count
    assert not queue.postpone(job, 600.0)  # that claim's lease is gone
    assert queue.ack(again)
