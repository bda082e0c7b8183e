"""What formation costs: every queued pass records the LLM tokens it sent and received
(as the LLM reported them, else counted) and its time, on its job and on its
``MemoryExtractionEvent``; ``stats`` sums them per user and day; a per-user daily token
budget defers passes past it to the next day. On SQLite and PostgreSQL, and for stores
whose job table was written before these figures existed."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from llama_index.core.base.llms.types import ChatMessage, ChatResponse
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.llms.callbacks import llm_chat_callback

from helpers import user
from llama_memory import ComposableMemory, MemoryAdmin
from llama_memory.admin.cli import main
from llama_memory.core.instrumentation import MemoryExtractionEvent
from llama_memory.storage.ports import PassCost
from llama_memory.storage.postgres import MIGRATIONS, PostgresStore
from llama_memory.storage.sqlite import SQLiteStore
from llama_memory.storage.sqlite.schema import JOB_MIGRATIONS
from llama_memory.testing import ScriptedLLM, pass_answer
from llama_memory.write.formation import FormationDeferred
from llama_memory.write.formation.passes import DAY, check_budget


def likes(value: str) -> Any:
    return pass_answer(profile=[{"op": "append", "path": "likes", "value": value}])


class ReportingLLM(ScriptedLLM):
    """A scripted LLM whose responses carry usage as OpenAI's do (``raw.usage``)."""

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """The next scripted reply, reporting 800 prompt and 40 answer tokens."""
        message = self._next("chat", messages, kwargs)
        return ChatResponse(message=message, raw={"usage": {"prompt_tokens": 800, "completion_tokens": 40}})


class Events(BaseEventHandler):
    """Collects the extraction events."""

    seen: list[Any] = []

    def handle(self, event: Any, **kwargs: Any) -> None:
        if isinstance(event, MemoryExtractionEvent):
            self.seen.append(event)


@pytest.fixture
def events() -> Iterator[list[Any]]:
    handler = Events(seen=[])
    dispatcher = get_dispatcher()
    dispatcher.add_event_handler(handler)
    try:
        yield handler.seen
    finally:
        dispatcher.event_handlers.remove(handler)


@pytest.fixture(params=["sqlite", "postgres"])
def where(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    if request.param == "postgres":
        return {"store": request.getfixturevalue("postgres_url")}
    return {"path": tmp_path / "memory"}


def open_memory(where: dict[str, Any], llm: Any, **kwargs: Any) -> ComposableMemory:
    return ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", secondary_memory_sources=[], profile=True, llm=llm,
        extract_every=1, **where, **kwargs,
    )  # fmt: skip


def location(where: dict[str, Any]) -> Any:
    return where.get("store") or where["path"]


def test_a_pass_records_the_tokens_the_llm_reported_and_its_time(where: dict[str, Any], events: list[Any]) -> None:
    memory = open_memory(where, ReportingLLM([likes("jazz")]))
    try:
        memory.put(user("I like jazz."))
        memory.flush(timeout=60)
    finally:
        memory.close()
    with MemoryAdmin(location(where)) as admin:
        (job,) = admin.jobs(failed_only=False)
        assert (job.state, job.passes, job.failures, job.tokens_sent, job.tokens_received) == ("done", 1, 0, 800, 40)
        assert job.duration_ms > 0
        (day,) = admin.stats().formation
    today = time.strftime("%Y-%m-%d", time.gmtime())
    assert (day.user_id, day.day, day.passes, day.failures, day.tokens_sent, day.tokens_received) == (
        "alice", today, 1, 0, 800, 40
    )
    (event,) = [e for e in events if e.source.startswith("pass:")]
    assert (event.tokens_sent, event.tokens_received, event.llm_calls, event.error) == (800, 40, 1, None)


def test_tokens_are_counted_when_the_llm_reports_none_and_failures_count(tmp_path: Path, events: list[Any]) -> None:
    memory = open_memory({"path": tmp_path}, ScriptedLLM(["Sorry, no JSON today."], function_calling=False))
    try:
        memory.put(user("I like jazz, " * 50))
        memory.flush(timeout=60)  # the failed pass waits for its retry
    finally:
        memory.close()
    with MemoryAdmin(tmp_path) as admin:
        (job,) = admin.jobs()
        (event,) = [e for e in events if e.source.startswith("pass:")]
        # Counted with the tokenizer: the prompt holds the 150-word message, the answer 6 tokens.
        assert 150 < job.tokens_sent == event.tokens_sent and job.tokens_received == event.tokens_received == 6
        assert (job.passes, job.failures) == (1, 1) and "not JSON" in (event.error or "")
        assert [(d.passes, d.failures) for d in admin.stats().formation] == [(1, 1)]
    status = main(["stats", "--store", str(tmp_path)])
    assert status == 0


def test_stats_prints_passes_and_tokens_per_user_and_day(tmp_path: Path, capsys: Any) -> None:
    memory = open_memory({"path": tmp_path}, ReportingLLM([likes("jazz")]))
    try:
        memory.put(user("I like jazz."))
        memory.flush(timeout=60)
    finally:
        memory.close()
    capsys.readouterr()
    assert main(["stats", "--store", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    lines = out[out.index("extraction passes per user and day (UTC):") :].splitlines()
    assert lines[1].split() == ["DAY", "USER", "PASSES", "FAILED", "TOKENS", "SENT", "RECEIVED", "SECONDS"]
    assert lines[2].split()[:6] == [time.strftime("%Y-%m-%d", time.gmtime()), "alice", "1", "0", "800", "40"]
    assert main(["stats", "--store", str(tmp_path), "--json"]) == 0
    (day,) = json.loads(capsys.readouterr().out)["formation"]
    assert (day["user_id"], day["tokens_sent"], day["tokens_received"]) == ("alice", 800, 40)


def test_passes_past_the_daily_token_budget_wait_for_the_next_day(where: dict[str, Any]) -> None:
    llm = ReportingLLM([likes("jazz"), likes("blues")])
    memory = open_memory(where, llm, formation_token_budget=1000)  # one pass costs 840
    try:
        memory.put(user("I like jazz."))
        memory.flush(timeout=60)  # 840 of 1000: the next pass may still start
        memory.put(user("I like blues too."))
        memory.flush(timeout=60)
        assert memory.profile.get_profile(memory.scope) == {"likes": ["jazz", "blues"]}
        memory.put(user("And some Coltrane."))
        memory.flush(timeout=60)  # 1680 of 1000: deferred, not waited for
        assert llm.remaining == 0 and len(llm.calls) == 2  # no third LLM call
        assert memory.to_dict()["formation_token_budget"] == 1000
        restored = ComposableMemory.from_dict(memory.to_dict(), llm=llm)
        assert restored.formation_token_budget == 1000
        restored.close()
    finally:
        memory.close()
    midnight = (time.time() // DAY + 1) * DAY
    with MemoryAdmin(location(where)) as admin:
        waiting = [j for j in admin.jobs(failed_only=False) if j.state == "queued"]
        assert [(j.run_at, j.attempts, j.last_error) for j in waiting] == [(midnight, 0, None)]  # not lost
        assert [(d.passes, d.tokens_sent + d.tokens_received) for d in admin.stats().formation] == [(2, 1680)]
        # Tomorrow it may run: the budget counts from midnight UTC.
        tomorrow = open_memory(where, ReportingLLM([]), formation_token_budget=1000)
        try:
            with pytest.raises(FormationDeferred, match="used 1680 of the 1000 formation tokens"):
                check_budget(tomorrow.runtime, tomorrow.scope)
            check_budget(tomorrow.runtime, tomorrow.scope, at=midnight)
        finally:
            tomorrow.close()


def test_a_worker_budget_overrides_the_memorys(tmp_path: Path) -> None:
    from llama_memory.write.formation.worker_process import run_worker

    memory = ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", secondary_memory_sources=[], profile=True, path=tmp_path,
        extract_in="worker", extract_every=1,
    )  # fmt: skip
    memory.put(user("I like jazz."))
    memory.put(user("I like blues."))  # the same session: one pass
    memory.close()
    reports: list[Any] = []
    assert run_worker(tmp_path, ReportingLLM([likes("jazz")]), once=True, report=reports.append) == 1
    second = ComposableMemory.from_defaults(
        user_id="alice", session_id="s2", secondary_memory_sources=[], profile=True, path=tmp_path,
        extract_in="worker", extract_every=1,
    )  # fmt: skip
    second.put(user("I like Coltrane."))
    second.close()
    run_worker(tmp_path, ReportingLLM([]), once=True, report=reports.append, formation_token_budget=500)
    assert [o.state for o in reports] == ["done", "deferred"]
    assert reports[0].cost.tokens_sent == 800 and reports[1].cost is None


def test_a_job_table_from_before_the_cost_columns_is_migrated_on_sqlite(tmp_path: Path) -> None:
    store = SQLiteStore(tmp_path)
    store.ensure_schema("jobs", JOB_MIGRATIONS[:1])  # the table as the previous release made it
    with store.transaction("an old job") as conn:
        conn.execute(
            "INSERT INTO jobs (id, kind, payload, tenant_id, user_id, state, run_at, attempts, max_attempts, "
            "created_at) VALUES ('old', 'extract', '{}', 'default', 'alice', 'done', 1, 1, 4, 1)"
        )
    store.close()
    migrated = SQLiteStore(tmp_path)
    try:
        (old,) = migrated.list_jobs()
        assert (old.id, old.state, old.passes, old.tokens_sent, old.finished_at) == ("old", "done", 0, 0, None)
        migrated.enqueue("extract", {}, tenant_id="default", user_id="alice")
        job = migrated.claim("w")
        assert job is not None and migrated.ack(job, PassCost(5, 6, 7.0))
        assert migrated.tokens_used("default", "alice", 0.0) == 11
        assert migrated.get_meta("schema:jobs") == str(len(JOB_MIGRATIONS))
    finally:
        migrated.close()


def test_a_job_table_from_before_the_cost_columns_is_migrated_on_postgres(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:  # the previous release's schema
        conn.execute(
            "CREATE TABLE llama_memory_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now())"
        )
        for version, statements in enumerate(MIGRATIONS[:7], start=1):
            for statement in statements:
                conn.execute(statement)
            conn.execute("INSERT INTO llama_memory_migrations (version) VALUES (%s)", (version,))
        conn.execute(
            "INSERT INTO jobs (id, kind, payload, tenant_id, user_id, state, run_at, attempts, max_attempts, "
            "created_at) VALUES ('old', 'extract', '{}', 'default', 'alice', 'done', 1, 1, 4, 1)"
        )
    store = PostgresStore(postgres_url)
    try:
        (old,) = store.list_jobs()
        assert (old.id, old.state, old.passes, old.tokens_sent, old.finished_at) == ("old", "done", 0, 0, None)
        store.enqueue("extract", {}, tenant_id="default", user_id="alice")
        job = store.claim("w")
        assert job is not None and store.ack(job, PassCost(5, 6, 7.0))
        assert store.tokens_used("default", "alice", 0.0) == 11
        assert [d.tokens_sent for d in store.formation_days()] == [5]
    finally:
        store.close()
