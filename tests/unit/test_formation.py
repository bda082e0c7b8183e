"""Memory formation off the hot path: passes queued by put() as jobs, run by a
worker thread or worker processes, applied once (persisted cursor, compare-and-set)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from helpers import assistant, user
from llama_memory import ComposableMemory, ExtractionError
from llama_memory.admin.memory_admin import MemoryAdmin
from llama_memory.sources.base import MemorySource
from llama_memory.testing import ScriptedLLM, ToolCallReply, pass_answer
from llama_memory.write.formation import FormationWorker
from llama_memory.write.formation.worker_process import run_worker

REPO = Path(__file__).resolve().parents[2]


def ops(*operations: dict) -> ToolCallReply:
    """What a function-calling LLM answers to a pass whose one part is the profile."""
    return pass_answer(profile=list(operations))


def likes(value: str) -> ToolCallReply:
    return ops({"op": "append", "path": "likes", "value": value})


def open_memory(path: Path, session: str = "s1", user_id: str = "alice", **kwargs: Any) -> ComposableMemory:
    """A memory with the profile source only (no embedding model needed)."""
    return ComposableMemory.from_defaults(
        user_id=user_id, session_id=session, path=path, secondary_memory_sources=[], profile=True, **kwargs
    )


def test_put_queues_a_pass_that_flush_waits_for(tmp_path: Path) -> None:
    llm = ScriptedLLM([likes("jazz")])
    memory = open_memory(tmp_path, llm=llm, extract_every=1)
    try:
        memory.put(user("I like jazz."))
        memory.flush()
        assert memory.profile.get_profile(memory.scope) == {"likes": ["jazz"]}
        assert MemoryAdmin(tmp_path).stats().jobs["done"] == 1
    finally:
        memory.close()


def test_reopening_does_not_extract_the_session_again(tmp_path: Path) -> None:
    memory = open_memory(tmp_path)
    memory.put_messages([user("I like jazz."), assistant("Noted.")])
    memory.extract(llm=ScriptedLLM([likes("jazz")]))
    memory.close()
    again = open_memory(tmp_path)
    try:
        # Nothing new since the persisted cursor: no LLM call (an empty script raises).
        again.extract(llm=ScriptedLLM([]))
        again.put(user("And Coltrane."))
        llm = ScriptedLLM([likes("Coltrane")])
        again.extract(llm=llm)
        assert "I like jazz." not in llm.calls[0].text()  # only what was new
        assert again.profile.get_profile(again.scope) == {"likes": ["jazz", "Coltrane"]}
        assert len(again.profile.history("likes", again.scope)) == 2
    finally:
        again.close()


def test_a_pass_is_applied_once_when_two_memories_race(tmp_path: Path) -> None:
    first, second = open_memory(tmp_path), open_memory(tmp_path)
    first.put(user("I like jazz."))

    def answer_after_the_other_applied(messages: list) -> ToolCallReply:
        # The other worker runs the same pass to the end while this one waits for its LLM.
        second.extract(llm=ScriptedLLM([likes("jazz")]))
        return likes("jazz")

    try:
        first.extract(llm=ScriptedLLM([answer_after_the_other_applied]))
        assert first.profile.get_profile(first.scope) == {"likes": ["jazz"]}
        assert len(first.profile.history("likes", first.scope)) == 1
    finally:
        first.close()
        second.close()


def test_two_workers_on_one_queue_run_each_job_once(tmp_path: Path) -> None:
    sessions = [f"s{i}" for i in range(6)]
    for session in sessions:  # the memories only queue: worker processes extract
        memory = open_memory(tmp_path, session, f"user-{session}", extract_in="worker", extract_every=1)
        memory.put(user(f"I like {session}."))
        memory.close()
    calls: list[str] = []

    def llm() -> ScriptedLLM:
        def reply(messages: list) -> ToolCallReply:
            text = str(messages[-1].content)
            found = next(s for s in sessions if f"I like {s}." in text)
            calls.append(found)
            time.sleep(0.05)  # so the two workers overlap
            return likes(found)

        return ScriptedLLM([reply] * len(sessions))

    ran: list[int] = []
    workers = [
        threading.Thread(target=lambda: ran.append(run_worker(tmp_path, llm(), once=True)))
        for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    assert sum(ran) == len(sessions) and sorted(calls) == sessions
    assert MemoryAdmin(tmp_path).stats().jobs == {"queued": 0, "running": 0, "done": 6, "dead": 0}
    for session in sessions:
        memory = open_memory(tmp_path, session, f"user-{session}")  # a profile is per user
        assert memory.profile.get_profile(memory.scope) == {"likes": [session]}
        memory.close()


def test_a_job_survives_the_kill_of_its_worker_process(tmp_path: Path) -> None:
    store = tmp_path / "memory"
    memory = open_memory(store, extract_in="worker", extract_every=1)
    memory.put(user("I like jazz."))
    memory.close()
    started = tmp_path / "started"
    (tmp_path / "hanging_llm.py").write_text(textwrap.dedent(f"""
        import time
        from llama_memory.testing import ScriptedLLM

        def hang(messages):
            open({str(started)!r}, "w").close()
            time.sleep(120)

        def make():
            return ScriptedLLM([hang])
    """))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    process = subprocess.Popen(
        [sys.executable, "-m", "llama_memory", "worker", "--store", str(store),
         "--llm", "hanging_llm:make", "--lease", "1"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while not started.exists():  # the worker is inside the pass's LLM call
            assert process.poll() is None, process.stderr.read() if process.stderr else ""
            assert time.monotonic() < deadline, "the worker process never called its LLM"
            time.sleep(0.05)
        os.kill(process.pid, signal.SIGKILL)
        process.wait(10)
    finally:
        if process.poll() is None:
            process.kill()
    assert MemoryAdmin(store).stats().jobs["running"] == 1  # held by the dead worker
    time.sleep(1.1)  # its lease runs out
    assert run_worker(store, ScriptedLLM([likes("jazz")]), once=True) == 1
    assert MemoryAdmin(store).stats().jobs == {"queued": 0, "running": 0, "done": 1, "dead": 0}
    reopened = open_memory(store)
    try:
        assert reopened.profile.get_profile(reopened.scope) == {"likes": ["jazz"]}
    finally:
        reopened.close()


def test_a_job_out_of_attempts_is_dead_with_its_error(tmp_path: Path) -> None:
    memory = open_memory(tmp_path)
    try:
        store = memory.runtime.store
        assert store is not None
        store.enqueue("extract", {"session_id": "s1"}, max_attempts=1)

        def fails(job: Any) -> None:
            raise RuntimeError("the LLM is down")

        assert FormationWorker(store, fails).run_once()
        assert MemoryAdmin(tmp_path).stats().jobs["dead"] == 1
    finally:
        memory.close()


def test_get_is_not_blocked_by_a_running_pass(tmp_path: Path) -> None:
    release = threading.Event()
    calling = threading.Event()

    def slow(messages: list) -> ToolCallReply:
        calling.set()
        release.wait(30)
        return likes("jazz")

    memory = open_memory(tmp_path, llm=ScriptedLLM([slow]), extract_every=1)
    try:
        memory.put(user("I like jazz."))  # returns while the pass waits for its LLM
        assert calling.wait(30)
        memory.put(assistant("Noted."))
        assert [m.content for m in memory.get()][-2:] == ["I like jazz.", "Noted."]
        release.set()
        memory.flush(timeout=30)
        assert memory.profile.get_profile(memory.scope) == {"likes": ["jazz"]}
    finally:
        release.set()
        memory.close()


def test_forget_deletes_the_users_extraction_cursors_and_no_one_elses(tmp_path: Path) -> None:
    from llama_memory.write.formation import cursor_key

    alice, bob = open_memory(tmp_path), open_memory(tmp_path, "s1", "bob")
    try:
        for memory in (alice, bob):
            memory.put(user("I like jazz."))
            memory.extract(llm=ScriptedLLM([likes("jazz")]))
        store = alice.runtime.store
        assert store is not None
        assert store.get_meta(cursor_key(alice.scope)) and store.get_meta(cursor_key(bob.scope))
        alice.forget()
        # The cursor (a count and a message hash) is the user's data too: forgotten with them.
        assert store.get_meta(cursor_key(alice.scope)) is None
        assert store.get_meta(cursor_key(bob.scope)) is not None
    finally:
        alice.close()
        bob.close()


# -- one structured LLM call per pass ------------------------------------


class Notes(MemorySource):
    """A part registered by the application: any source with the three pass methods."""

    name = "notes"

    def __init__(self) -> None:
        self.applied: list[Any] = []

    def retrieve(self, query: str, scope: Any, k: int) -> list:
        return []

    def add(self, messages: Any, scope: Any) -> None:
        pass

    def reset(self, scope: Any) -> None:
        pass

    pass_field = "notes"

    def pass_prompt(self, window: Any) -> str:
        return 'a list of short notes, e.g. ["likes jazz"].'

    def parse_pass(self, value: Any, window: Any) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"notes must be a list of strings, got {value!r}")
        return value

    def apply_pass(self, parsed: list[str], window: Any) -> None:
        self.applied.append((parsed, window.message_ids))


def full_memory(path: Path, embed_model: Any, *parts: Any, **kwargs: Any) -> ComposableMemory:
    """A memory with the profile and triple sources (and ``parts``), no past messages."""
    return ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", path=path, embed_model=embed_model,
        secondary_memory_sources=list(parts), profile=True, triples=True, **kwargs,
    )  # fmt: skip


def steak(*, new: tuple = (), retracted: tuple = (), profile: tuple = (), **parts: Any) -> ToolCallReply:
    def triple(t: tuple) -> dict:
        return dict(zip(("subject", "predicate", "object"), t))

    return pass_answer(
        triples={"new": [triple(t) for t in new], "retracted": [triple(t) for t in retracted]},
        profile=list(profile), **parts,
    )  # fmt: skip


def test_a_pass_asks_the_llm_once_for_every_part(tmp_path: Path, embed_model: Any) -> None:
    notes = Notes()
    llm = ScriptedLLM([steak(
        new=[("User", "likes", "steak")], profile=[{"op": "set", "path": "city", "value": "Porto"}],
        notes=["likes steak"],
    )])  # fmt: skip
    memory = full_memory(tmp_path, embed_model, notes, llm=llm, extract_every=1)  # notes joins the pass
    try:
        memory.put(user("I live in Porto and I love steak.", message_id="m1"))
        memory.flush()
        assert len(llm.calls) == 1 and llm.calls[0].tool_names == ["FormationPass"]
        prompt = llm.calls[0].text()
        assert all(f'"{key}":' in prompt for key in ("triples", "profile", "notes"))
        assert [t.text() for t in memory.triple_source.triples(memory.scope)] == ["User — likes — steak"]
        assert memory.profile.get_profile(memory.scope) == {"city": "Porto"}
        assert notes.applied == [(["likes steak"], ["m1"])]
    finally:
        memory.close()


def test_a_bad_answer_writes_nothing_and_the_job_is_retried(tmp_path: Path, embed_model: Any) -> None:
    memory = full_memory(tmp_path, embed_model, extract_in="worker", extract_every=1)
    memory.put(user("I love steak. Call me Al."))
    memory.close()
    # The triples are fine, the profile operation is not: the whole pass fails.
    bad = steak(new=[("User", "likes", "steak")], profile=[{"op": "upsert", "path": "name"}])
    assert run_worker(tmp_path, ScriptedLLM([bad]), once=True, embed_model=embed_model) == 1
    assert MemoryAdmin(tmp_path).stats().jobs == {"queued": 1, "running": 0, "done": 0, "dead": 0}
    again = full_memory(tmp_path, embed_model)
    try:
        assert again.triple_source.count(again.scope, include_history=True) == 0
        assert again.profile.get_profile(again.scope) == {}
        # The retry reads the same messages (the cursor did not move).
        llm = ScriptedLLM([steak(new=[("User", "likes", "steak")])])
        again.extract(llm=llm)
        assert "I love steak." in llm.calls[0].text()
        assert again.triple_source.count(again.scope) == 1
    finally:
        again.close()


def test_a_text_llm_answers_one_json_object_alone_fenced_or_in_prose(tmp_path: Path) -> None:
    memory = open_memory(tmp_path)
    try:
        memory.put(user("I like jazz."))
        wrong = {
            '{"profile": [], "extra": 1}': "unknown ['extra']",
            'Sure! {"profile": []} or maybe {"profile": [1]}': "2 JSON objects, not one",
            '["profile"]': "got list",
            "I have nothing {to} add.": "not JSON",
        }
        for answer, why in wrong.items():
            with pytest.raises(ExtractionError, match="pass's answer") as raised:
                memory.extract(llm=ScriptedLLM([answer], function_calling=False))
            assert why in str(raised.value) and repr(answer[:120]) in str(raised.value)
        answer = '```json\n{"profile": [{"op": "append", "path": "likes", "value": "jazz"}]}\n```'
        memory.extract(llm=ScriptedLLM([answer], function_calling=False))
        assert memory.profile.get_profile(memory.scope) == {"likes": ["jazz"]}
        memory.put(user("And Coltrane."))
        # A local model's way: prose (with braces of its own) around the one object.
        answer = (
            "Here is the update {as asked}: "
            '{"profile": [{"op": "append", "path": "likes", "value": "Coltrane"}]}. Let me know if you need more!'
        )
        memory.extract(llm=ScriptedLLM([answer], function_calling=False))
        assert memory.profile.get_profile(memory.scope) == {"likes": ["jazz", "Coltrane"]}
    finally:
        memory.close()


# -- retraction and conflict ----------------------------------------------


def test_a_retraction_ends_the_triple_and_keeps_its_history(tmp_path: Path, embed_model: Any) -> None:
    memory = full_memory(tmp_path, embed_model)
    try:
        triples = memory.triple_source
        memory.put(user("I love steak."))
        memory.extract(llm=ScriptedLLM([steak(new=[("User", "likes", "steak")])]))
        memory.put(user("I don't eat meat any more."))
        llm = ScriptedLLM([steak(retracted=[("User", "likes", "steak")])])
        memory.extract(llm=llm)
        assert '"object": "steak"' in llm.calls[0].text()  # the pass was shown the current facts
        assert triples.triples(memory.scope) == []
        [ended] = triples.history("User", "likes", memory.scope)
        assert ended.object == "steak" and ended.valid_to is not None and ended.superseded_by is None
        memory.get("What do I like to eat?")
        assert [r.text for r in memory.last_block.records if r.source == "triples"] == []
    finally:
        memory.close()


def test_a_pass_removes_a_profile_field_and_keeps_its_history(tmp_path: Path) -> None:
    memory = open_memory(tmp_path)
    try:
        memory.put(user("I am vegetarian."))
        memory.extract(llm=ScriptedLLM([ops({"op": "set", "path": "diet", "value": "vegetarian"})]))
        memory.put(user("Forget my diet, it changes all the time."))
        memory.extract(llm=ScriptedLLM([ops({"op": "remove", "path": "diet"})]))
        assert memory.profile.get_profile(memory.scope) == {}
        assert [(h.value, h.removed) for h in memory.profile.history("diet", memory.scope)] == [
            ("vegetarian", False), (None, True),
        ]
    finally:
        memory.close()


def test_the_block_shows_the_value_a_recent_change_replaced(tmp_path: Path, embed_model: Any) -> None:
    memory = full_memory(tmp_path, embed_model, min_relevance=0.0)
    try:
        for city in ("Porto", "Lisbon", "Madrid"):
            memory.put(user(f"I live in {city}."))
            memory.extract(llm=ScriptedLLM([steak(
                new=[("User", "lives in", city)], profile=[{"op": "set", "path": "city", "value": city}],
            )]))  # fmt: skip
        block = "\n".join(str(m.content) for m in memory.get("Where do I live?"))
        today = time.strftime("%Y-%m-%d", time.gmtime())
        assert f"User — lives in — Madrid (since {today}; before: Lisbon)" in block
        assert f"city: Madrid (since {today}; before: Lisbon)" in block
        assert "before: Porto" not in block  # never more than one value before
        # Outside the window (here: none), the block shows the current values alone.
        memory.triple_source.changed_within = memory.profile.changed_within = 0
        block = "\n".join(str(m.content) for m in memory.get("Where do I live now?"))
        assert "User — lives in — Madrid (since" in block and "before:" not in block
    finally:
        memory.close()


# -- debounce -----------------------------------------------------------


def test_a_burst_of_puts_makes_one_pass_after_the_quiet(tmp_path: Path) -> None:
    llm = ScriptedLLM([likes("jazz")])
    memory = open_memory(tmp_path, llm=llm, extract_after_quiet=0.6)
    try:
        assert memory.to_dict()["extract_after_quiet"] == 0.6
        for text in ("I like jazz.", "Especially Coltrane.", "And Miles."):
            memory.put(user(text))
            time.sleep(0.3)  # shorter than the quiet: each put pushes the pass back
        last_put = time.monotonic()
        assert llm.calls == []
        assert MemoryAdmin(tmp_path).stats().jobs["queued"] == 1  # one job per session
        deadline = time.monotonic() + 10
        while not llm.calls and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(llm.calls) == 1 and time.monotonic() - last_put >= 0.6
        assert "And Miles." in llm.calls[0].text() and "I like jazz." in llm.calls[0].text()
        memory.flush()
        assert memory.profile.get_profile(memory.scope) == {"likes": ["jazz"]}
    finally:
        memory.close()


def test_extract_every_brings_a_quiet_pass_forward(tmp_path: Path) -> None:
    llm = ScriptedLLM([likes("jazz")])
    memory = open_memory(tmp_path, llm=llm, extract_after_quiet=3600, extract_every=2)
    try:
        memory.put(user("I like jazz."))  # queued for an hour from now
        memory.put(user("Especially Coltrane."))  # two user turns: due now, whichever first
        deadline = time.monotonic() + 10
        while not llm.calls and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(llm.calls) == 1
        memory.flush()
        assert MemoryAdmin(tmp_path).stats().jobs["done"] == 1
    finally:
        memory.close()


def test_a_turn_put_while_its_sessions_pass_runs_gets_the_next_pass(tmp_path: Path) -> None:
    release, calling = threading.Event(), threading.Event()

    def slow(messages: list) -> ToolCallReply:
        calling.set()
        release.wait(30)
        return likes("jazz")

    llm = ScriptedLLM([slow, likes("Coltrane")])
    memory = open_memory(tmp_path, llm=llm, extract_every=1)
    try:
        memory.put(user("I like jazz."))
        assert calling.wait(30)
        memory.put(user("And Coltrane."))  # the pass is running: put queues nothing itself
        release.set()
        memory.flush(timeout=30)
        memory.flush(timeout=30)  # the follow-up pass, queued once the first was done
        assert len(llm.calls) == 2 and "And Coltrane." in llm.calls[1].text()
        assert "I like jazz." not in llm.calls[1].text()
        assert memory.profile.get_profile(memory.scope) == {"likes": ["jazz", "Coltrane"]}
    finally:
        release.set()
        memory.close()


def test_the_pass_writes_the_users_instructions_and_later_blocks_show_them(tmp_path: Path) -> None:
    llm = ScriptedLLM([pass_answer(instructions=[{"op": "add", "text": "Answer in French."}])])
    memory = open_memory(tmp_path, llm=llm, extract_every=1)
    try:
        memory.put(user("From now on, please answer in French."))
        memory.flush(timeout=30)
        assert '"instructions"' in llm.calls[0].text()  # the instructions are a part of the one call
        assert [i.text for i in memory.instructions.current()] == ["Answer in French."]
        assert "Answer in French." in memory.get("bonjour")[0].content
    finally:
        memory.close()


def test_the_pass_of_the_default_sources_writes_the_sessions_summary(tmp_path: Path, embed_model: Any) -> None:
    summary = "Alice said she plays the cello in a quartet on Thursdays."
    llm = ScriptedLLM([pass_answer(summary=summary)])
    memory = ComposableMemory.from_defaults(
        user_id="alice", session_id="s1", path=tmp_path, embed_model=embed_model, llm=llm, extract_every=1
    )
    try:
        memory.put(user("I play the cello in a quartet, every Thursday."))
        memory.flush(timeout=30)
        assert '"summary"' in llm.calls[0].text() and '"profile"' in llm.calls[0].text()  # one call
        current = memory.episodic.summary(memory.scope)
        assert current is not None and current.text == summary
        assert any(r.text == summary for r in memory.search("quartet cello"))  # found like a message
    finally:
        memory.close()


def test_the_names_users_imported_before_the_formation_package_still_import() -> None:
    """``llama_memory.write.formation`` is a package: every name imported from it before
    still is, as the same object, in a fresh process (an import cycle between the
    package's modules would show here)."""
    code = textwrap.dedent(
        """
        import llama_memory.write.formation as formation
        from llama_memory import ExtractionError
        from llama_memory.core.errors import ExtractionError as in_errors
        from llama_memory.write.formation.answer import structured_output
        from llama_memory.write.formation.worker_process import run_worker

        assert ExtractionError is in_errors is formation.ExtractionError
        assert structured_output is formation.structured_output and callable(run_worker)
        names = [
            "EXTRACT_JOB", "DEFAULT_LEASE", "RETRY_BASE", "MAX_ATTEMPTS", "POLL_SECONDS",
            "Proposing", "PassWindow", "PassPart", "PASS_ANSWER", "PASS_PROMPT", "JSON_ONLY",
            "pass_window", "conversation_lines", "pass_prompt", "ask_pass", "warm_up",
            "apply_pass", "parse_answer", "run_parts", "cursor_key", "job_key", "run_pass",
            "FormationDeferred", "JobOutcome", "retry_in", "FormationWorker",
        ]
        print([n for n in names if not hasattr(formation, n)])
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
