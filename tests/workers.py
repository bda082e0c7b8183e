"""Processes for the crash and concurrency tests, forked from a preloaded server.

:func:`forkserver` starts a multiprocessing *forkserver* that imports this module:
LlamaIndex, Chroma's bindings and tiktoken, and the offline embedding model loaded
single-threaded (``num_threads=1``: onnxruntime then starts no thread pool, so the
loaded session survives ``fork``). Every worker is forked from it and starts in
about 0.1 s instead of 10 s. Chroma is never opened in the server: its client
starts threads, which do not survive ``fork``.

The crash writer (:func:`writer`) first reopens the memory directory left by the
previous, killed, writer and checks it (:func:`check`), sends the findings, then
writes until it is killed, acknowledging every ``put``/``put_messages`` that
returned. :func:`concurrent_writer` writes a fixed workload beside other processes;
:func:`command_line` runs one ``llama-memory`` command as its own process would.
"""

from __future__ import annotations

import json
import multiprocessing
import multiprocessing.forkserver
import os
import random
import sqlite3
import time
import traceback
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, Callable, Optional

import chromadb.api.rust  # noqa: F401  (imported lazily by Chroma's client: preload it)
import pytest
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.utils import get_tokenizer

from helpers import message_texts
from llama_memory import ComposableMemory, OfflineEmbedding
from llama_memory.sources.vector import VectorSource
from llama_memory.storage.registry import backend_for
from llama_memory.storage.sqlite import DB_FILENAME

_PRELOAD = "LLAMA_MEMORY_TEST_FORKSERVER"
_MODEL: Optional[OfflineEmbedding] = None


def model() -> OfflineEmbedding:
    """The offline model, loaded single-threaded (once per process)."""
    global _MODEL
    if _MODEL is None:
        _MODEL = OfflineEmbedding(num_threads=1)
        _MODEL.get_text_embedding("warm up")
        get_tokenizer()("warm up")
    return _MODEL


if os.environ.get(_PRELOAD):  # in the forkserver: load before any worker is forked
    model()


def forkserver() -> Any:
    """The forkserver multiprocessing context, its server started with this module loaded."""
    here = Path(__file__).resolve().parent
    saved = {k: os.environ.get(k) for k in (_PRELOAD, "PYTHONPATH")}
    # The forkserver of Python < 3.12 ignores the parent's sys.path when it preloads:
    # it finds this module and the package through PYTHONPATH.
    os.environ[_PRELOAD] = "1"
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(here), str(here.parent), saved["PYTHONPATH"] or ""]
    )
    try:
        ctx = multiprocessing.get_context("forkserver")
        ctx.set_forkserver_preload(["workers"])
        multiprocessing.forkserver.ensure_running()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return ctx


def start(ctx: Any, target: Callable[..., None], *args: Any) -> tuple[Any, Connection]:
    """Fork ``target(conn, *args)``; return the process and the reading end of ``conn``."""
    reader, writer_end = ctx.Pipe(duplex=False)
    process = ctx.Process(target=target, args=(writer_end, *args), daemon=True)
    process.start()
    writer_end.close()  # so the reader sees EOF once the child is dead
    return process, reader


def receive(conn: Connection, timeout: float = 120.0) -> Any:
    """The next message from a child; fails the test instead of hanging."""
    if not conn.poll(timeout):
        pytest.fail(f"no message from the child process in {timeout} s")
    return conn.recv()


#: The (tenant, user) pairs the writer writes for: two users, one of them in two tenants.
SCOPES = (("t1", "alice"), ("t1", "bob"), ("t2", "alice"))
#: Operation kinds and their weights. "bulk" is a put_messages of 64 or more messages,
#: which embeds and writes to Chroma as it goes; "search" embeds pending records.
OPS = (("put", 4), ("batch", 3), ("bulk", 1), ("search", 2))
WORDS = (
    "garden tomato violin harbour lantern meadow copper falcon glacier orchard pepper "
    "river saddle thunder velvet walnut yellow zephyr anchor basalt cedar dune ember "
    "fjord granite hazel island juniper kettle lagoon marble nectar oasis prairie quartz"
).split()


def open_memories(path: str, session: str) -> dict[tuple[str, str], ComposableMemory]:
    """One memory per scope on ``path``, all in the conversation ``session``."""
    return {
        (tenant, user): ComposableMemory.from_defaults(
            user_id=user, tenant_id=tenant, session_id=session, path=path, embed_model=model()
        )
        for tenant, user in SCOPES
    }


def message_ids_of(op_id: str, size: int) -> list[str]:
    """The ids of an operation's messages: ``<op>-n<size>-<i>``, so a check can tell
    from any one of them how many messages its batch had."""
    return [f"{op_id}-n{size}-{i}" for i in range(size)]


def batch_of(message_id: str) -> tuple[str, int]:
    """(operation id, batch size) of a message id made by :func:`message_ids_of`."""
    op_id, size, _ = message_id.rsplit("-", 2)
    return op_id, int(size[1:])


def writer(conn: Connection, path: str, generation: int, seed: int, acked: list[str]) -> None:
    """Reopen ``path``, check it against ``acked`` (every message id whose put returned
    in earlier generations), send ``("checked", findings)``, then write until killed."""
    memories = open_memories(path, f"g{generation}")
    conn.send(("checked", check(path, memories, acked)))
    rng = random.Random(seed)
    kinds, weights = zip(*OPS)
    op = 0
    while True:
        op += 1
        kind = rng.choices(kinds, weights)[0]
        scope = SCOPES[rng.randrange(len(SCOPES))]
        memory = memories[scope]
        conn.send(("start", kind))
        if kind == "search":
            memory.search(rng.choice(WORDS))
            continue
        size = {"put": 1, "batch": rng.randint(2, 12), "bulk": rng.randint(64, 80)}[kind]
        ids = message_ids_of(f"g{generation}-o{op}", size)
        messages = [
            ChatMessage(
                role="user" if i % 2 == 0 else "assistant",
                content=f"{scope[1]}@{scope[0]} note {mid}: "
                + " ".join(rng.choice(WORDS) for _ in range(6)),
                additional_kwargs={"message_id": mid},
            )
            for i, mid in enumerate(ids)
        ]
        if kind == "put":
            memory.put(messages[0])
        else:
            memory.put_messages(messages)
        conn.send(("ack", ids))


def checker(conn: Connection, path: str, acked: list[str]) -> None:
    """Only the check (the last reopening, after the last kill)."""
    memories = open_memories(path, "final")
    conn.send(("checked", check(path, memories, acked)))
    for memory in memories.values():
        memory.close()


def check(path: str, memories: dict[tuple[str, str], ComposableMemory], acked: list[str]) -> dict[str, Any]:
    """What reopening ``path`` shows, and every way it falls short ("problems")."""
    problems: list[str] = []
    db = sqlite3.connect(Path(path) / DB_FILENAME)
    try:
        found, unacknowledged = _check_sqlite(db, acked)
        problems += found
        record_ids = {
            (t, u): {row[0] for row in db.execute(
                "SELECT id FROM records WHERE tenant_id = ? AND user_id = ?", (t, u))}
            for t, u in SCOPES
        }
        indexed = {
            (t, u): {row[0] for row in db.execute(
                "SELECT id FROM records WHERE tenant_id = ? AND user_id = ? AND indexed = 1", (t, u))}
            for t, u in SCOPES
        }
        records = db.execute("SELECT COUNT(*) FROM records").fetchone()[0]
        chat = db.execute("SELECT COUNT(*) FROM chat_messages").fetchone()[0]
    finally:
        db.close()
    pending = 0
    for scope, memory in memories.items():
        source = memory.source("vector")
        assert isinstance(source, VectorSource)
        in_chroma = _chroma_ids(source, scope)
        stray = in_chroma - record_ids[scope]
        if stray:
            problems.append(f"{scope}: {len(stray)} Chroma ids without a record")
        missing = indexed[scope] - in_chroma
        if missing:
            problems.append(f"{scope}: {len(missing)} records flagged indexed are not in Chroma")
        pending += len(record_ids[scope] - in_chroma)
    # Reconcile: the records without a vector are embedded and written (as the first
    # search after a crash would do), after which the index matches the record exactly.
    for scope, memory in memories.items():
        source = memory.source("vector")
        assert isinstance(source, VectorSource)
        source.flush()
        if _chroma_ids(source, scope) != record_ids[scope]:
            problems.append(f"{scope}: the index does not match the record after flush")
        problems += _check_searchable(memory, source, scope, record_ids[scope])
    return {
        "problems": problems,
        "records": records,
        "chat_messages": chat,
        "unacknowledged": unacknowledged,  # committed, but the kill came before the ack
        "reindexed": pending,
    }


def _check_sqlite(db: sqlite3.Connection, acked: list[str]) -> tuple[list[str], int]:
    problems = []
    integrity = db.execute("PRAGMA integrity_check").fetchone()[0]
    if integrity != "ok":
        problems.append(f"integrity_check: {integrity}")
    try:
        db.execute("INSERT INTO records_fts (records_fts) VALUES ('integrity-check')")
    except sqlite3.Error as exc:
        problems.append(f"FTS integrity-check: {exc}")
    fts, records = db.execute(
        "SELECT (SELECT COUNT(*) FROM records_fts), (SELECT COUNT(*) FROM records)"
    ).fetchone()
    unmatched = db.execute(
        "SELECT COUNT(*) FROM records r WHERE NOT EXISTS "
        "(SELECT 1 FROM records_fts f WHERE f.rowid = r.rowid)"
    ).fetchone()[0]
    if fts != records or unmatched:
        problems.append(f"FTS rows {fts} for {records} records ({unmatched} without one)")
    in_chat = Counter(
        json.loads(row[0])["additional_kwargs"]["message_id"]
        for row in db.execute("SELECT message_json FROM chat_messages")
    )
    in_records: Counter = Counter()
    for (ids,) in db.execute("SELECT message_ids FROM records"):
        in_records.update(json.loads(ids))
    duplicated = [m for m in in_chat | in_records if in_chat[m] > 1 or in_records[m] > 1]
    if duplicated:
        problems.append(f"messages stored more than once: {duplicated[:5]}")
    lost = [m for m in acked if not (in_chat[m] and in_records[m])]
    if lost:
        problems.append(f"{len(lost)} acknowledged messages lost: {lost[:5]}")
    # All or nothing: every batch has all its messages in both tables, or none anywhere.
    batches: dict[str, tuple[int, set[str], set[str]]] = {}
    for table, present in (("chat", in_chat), ("records", in_records)):
        for message_id in present:
            op_id, size = batch_of(message_id)
            entry = batches.setdefault(op_id, (size, set(), set()))
            entry[1 if table == "chat" else 2].add(message_id)
    for op_id, (size, chat_ids, record_ids) in batches.items():
        if not (len(chat_ids) == len(record_ids) == size):
            problems.append(
                f"half-written batch {op_id}: {len(chat_ids)} chat rows and "
                f"{len(record_ids)} records of {size} messages"
            )
    return problems, len(set(in_chat) - set(acked))


def _chroma_ids(source: VectorSource, scope: tuple[str, str]) -> set[str]:
    name = source.index.collection_name(*scope)
    existing = {getattr(c, "name", c) for c in source.index.client.list_collections()}
    if name not in existing:
        return set()
    return set(source.index.client.get_collection(name).get(include=[])["ids"])


def _check_searchable(
    memory: ComposableMemory, source: VectorSource, scope: tuple[str, str], ids: set[str], sample: int = 2
) -> list[str]:
    """A few records, found by their own vector in Chroma and by their text in search."""
    if not ids:
        return []
    chosen = random.Random(len(ids)).sample(sorted(ids), min(sample, len(ids)))
    rows = source.store.get_records(chosen, memory.scope, source.name)
    problems = []
    for record_id, record in rows.items():
        vector = model().get_text_embedding(record.text)
        nearest = [i for i, _ in source.index.query(*scope, vector, 3)]
        if record_id not in nearest:
            problems.append(f"{scope}: record {record_id} not found by its own vector")
        if record.text not in message_texts(memory.search(record.text, k=3)):
            problems.append(f"{scope}: record {record_id} not found by search")
    return problems


def concurrent_writer(
    conn: Connection, path: str, user: str, session: str, rounds: int, go: Any
) -> None:
    """Wait for ``go``, then write ``rounds`` rounds (a put, a batch of 5,
    a bulk import of 64 in the second) and read (get, search) beside other processes; send
    ``("done", message ids)`` or ``("error", traceback)``."""
    try:
        go.wait(60)
        memory = ComposableMemory.from_defaults(
            user_id=user, session_id=session, path=path, embed_model=model(), token_limit=10**6
        )
        sent: list[str] = []
        rng = random.Random(session)
        for r in range(rounds):
            for size in (1, 5, 64) if r == 1 else (1, 5):
                ids = message_ids_of(f"{session}-r{r}s{size}", size)
                memory.put_messages([
                    ChatMessage(
                        role="user", content=f"{user} {mid} " + " ".join(rng.sample(WORDS, 5)),
                        additional_kwargs={"message_id": mid},
                    )
                    for mid in ids
                ])
                sent += ids
            memory.get()
            memory.search(WORDS[r % len(WORDS)])
        memory.close()
        conn.send(("done", sent))
    except BaseException:
        conn.send(("error", traceback.format_exc()))


def open_as_unprivileged(conn: Connection, path: str) -> None:
    """Open the memory at ``path`` as an unprivileged user (root ignores file modes, so a
    root test run drops to ``nobody`` first); send ``("opened", texts searched)`` or
    ``("error", exception class name, message)``."""
    try:
        if os.geteuid() == 0:
            # What the open loads on first use is loaded first: the unprivileged user may
            # not read the checkout (a clone in a private temporary directory).
            backend_for(path)
            os.setgid(65534)
            os.setuid(65534)
        memory = ComposableMemory.from_defaults(
            user_id="alice", session_id="ro", path=path, embed_model=model()
        )
        conn.send(("opened", message_texts(memory.search("harbour", k=10))))
    except Exception as exc:
        conn.send(("error", type(exc).__name__, str(exc)))


def turn_taker(
    conn: Connection, path: str, me: int, plan: list[tuple[str, list[str]]], turn: Any, changed: Any
) -> None:
    """Take every other turn of ``plan`` (``me`` is 0 or 1) in the one conversation
    ``"shared"`` of ``path``, beside the other process. Before each of its turns, note
    ``(turn, history ids, window ids)``; a turn is ``("put", ids)`` (one user and one
    assistant message per pair of ids), ``("set", ids)`` or ``("reset", [])``. Send
    ``("done", notes)`` (the last note taken after every turn) or ``("error", traceback)``."""
    try:
        memory = ComposableMemory.from_defaults(
            user_id="alice", session_id="shared", path=path, embed_model=model(), token_limit=60
        )
        notes: list[tuple[int, list[str], list[str]]] = []

        def note(t: int) -> None:
            window = [m for m in memory.get() if m.role != "system"]
            ids = [m.additional_kwargs["message_id"] for m in memory.get_all()]
            notes.append((t, ids, [m.additional_kwargs["message_id"] for m in window]))

        def say(mid: str) -> ChatMessage:
            role = "user" if mid.endswith("u") else "assistant"
            return ChatMessage(role=role, content=f"{role} says {mid}", additional_kwargs={"message_id": mid})

        for t, (action, ids) in enumerate(plan):
            if t % 2 != me:
                continue
            with changed:
                if not changed.wait_for(lambda: turn.value == t, timeout=120):
                    raise TimeoutError(f"turn {t} never came")
            note(t)
            if action == "put":
                memory.put_messages([say(mid) for mid in ids])
            elif action == "set":
                memory.set([say(mid) for mid in ids])
            else:
                memory.reset()
            with changed:
                turn.value = t + 1
                changed.notify_all()
        with changed:
            if not changed.wait_for(lambda: turn.value == len(plan), timeout=120):
                raise TimeoutError("the other process never finished")
        note(len(plan))
        memory.close()
        conn.send(("done", notes))
    except BaseException:
        conn.send(("error", traceback.format_exc()))


def postgres_recaller(conn: Connection, url: str, user: str, session: str, query: str) -> None:
    """Open a memory of ``user`` on the PostgreSQL database ``url`` (another process, no
    shared local file: as another app server would) and send what it retrieves for
    ``query``, as texts, then the block a ``get`` injects."""
    try:
        memory = ComposableMemory.from_defaults(
            user_id=user, session_id=session, store=url, embed_model=model()
        )
        try:
            texts = [r.text for r in memory.search(query)]
            block = memory.get(query)[0].content
            conn.send(("ok", texts, block))
        finally:
            memory.close()
    except BaseException:
        conn.send(("error", traceback.format_exc(), ""))


def postgres_bulk_writer(conn: Connection, url: str, user: str, size: int, hold: bool) -> None:
    """Write batches of ``size`` messages of ``user`` to the PostgreSQL database ``url``
    until killed, sending ``("ack", ids)`` after each put_messages returned. With
    ``hold``: one batch inside an explicit ``store.transaction()`` that is never left
    (the process sleeps in it, to be killed there)."""
    from helpers import WordHashEmbedding

    try:
        memory = ComposableMemory.from_defaults(
            user_id=user, session_id="bulk", store=url, embed_model=WordHashEmbedding()
        )
        for batch in range(10**6):
            ids = message_ids_of(f"{user}-b{batch}", size)
            messages = [
                ChatMessage(role="user", content=f"{user} bulk note {mid}", additional_kwargs={"message_id": mid})
                for mid in ids
            ]
            if hold:
                store = memory.runtime.store
                assert store is not None
                with store.transaction("held by a client about to be killed"):
                    memory.put_messages(messages)
                    conn.send(("inside", ids))
                    while True:
                        time.sleep(1)
            memory.put_messages(messages)
            conn.send(("ack", ids))
    except BaseException:
        conn.send(("error", traceback.format_exc()))


def app_server(conn: Connection, url: str, home: str) -> None:
    """One of several app servers behind a load balancer, on the PostgreSQL database
    ``url`` only (its own working directory ``home``, no shared local file). Serves
    requests from ``conn`` until ``None``:

    - ``("turn", user, session, n)``: ``get()`` then ``put`` the user's message and the
      assistant's, as one turn of an agent; answers ``("ok", ids, foreign)`` with the
      acknowledged message ids and any marker of another user seen in what ``get()``
      and ``search()`` returned;
    - ``("window", user, session)``: answers ``("ok", ids of get_all(), ids of get()'s
      window)``.
    """
    import re

    from helpers import WordHashEmbedding

    os.chdir(home)
    memories: dict[tuple[str, str], ComposableMemory] = {}
    marker = re.compile(r"MARK-(\w+?)-")

    def memory_of(user: str, session: str) -> ComposableMemory:
        if (user, session) not in memories:
            memories[user, session] = ComposableMemory.from_defaults(
                user_id=user, session_id=session, store=url, embed_model=WordHashEmbedding(), token_limit=200
            )
        return memories[user, session]

    def ids_of(messages: list[ChatMessage]) -> list[str]:
        return [m.additional_kwargs["message_id"] for m in messages if m.role != "system"]

    try:
        while (request := conn.recv()) is not None:
            kind, user, session, *rest = request
            memory = memory_of(user, session)
            if kind == "window":
                conn.send(("ok", ids_of(memory.get_all()), ids_of(memory.get())))
                continue
            (n,) = rest
            seen = [m.content or "" for m in memory.get(f"what did {user} say about topic {n}?")]
            seen += [r.text for r in memory.search(f"topic {n} note")]
            foreign = sorted({u for text in seen for u in marker.findall(text) if u != user})
            ids = [f"{user}-{session}-t{n}-u", f"{user}-{session}-t{n}-a"]
            memory.put(ChatMessage(
                role="user", content=f"MARK-{user}- {user} says topic {n} note {WORDS[n % len(WORDS)]}",
                additional_kwargs={"message_id": ids[0]},
            ))
            memory.put(ChatMessage(
                role="assistant", content=f"MARK-{user}- noted topic {n} for {user}",
                additional_kwargs={"message_id": ids[1]},
            ))
            conn.send(("ok", ids, foreign))
        for memory in memories.values():
            memory.close()
    except BaseException:
        conn.send(("error", traceback.format_exc(), []))


def pickled_writer(conn: Connection, memory: ComposableMemory, text: str) -> None:
    """Put ``text`` through ``memory``, which came pickled from the parent process (as
    ``multiprocessing`` sends a ``Process``'s arguments); send what it is built of."""
    try:
        memory.put(ChatMessage(role="user", content=text))
        conn.send({"sources": [s.name for s in memory.sources], "history": len(memory.get_all())})
        memory.close()
    except BaseException:
        conn.send({"error": traceback.format_exc()})


def command_line(conn: Connection, argv: list[str], stdout: str, stderr: str, cwd: str) -> None:
    """Run ``llama-memory argv`` in this process as ``python -m llama_memory`` runs it
    (``main``, its status the exit code), its file descriptors 1 and 2 written to the
    files ``stdout`` and ``stderr``, in the directory ``cwd``: a new process for each
    command without paying the imports again. Nothing is sent on ``conn``.

    The exit status is also written to the file ``status`` beside ``stdout``: Python
    3.11's forkserver, which passes a child's status back over a pipe, can lose it and
    report 255 (``popen_forkserver.Popen.poll``); the file cannot."""
    import sys

    from llama_memory.admin.cli import main

    conn.close()
    os.chdir(cwd)
    for fd, name in ((1, stdout), (2, stderr)):
        target = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(target, fd)
        os.close(target)
    sys.stdout = open(1, "w", closefd=False)
    sys.stderr = open(2, "w", closefd=False)
    try:
        code = main(argv)
    except SystemExit as stop:  # argparse's errors, --help, --version
        code = stop.code
    status = 0 if code is None else code if isinstance(code, int) else 1
    Path(stdout).with_name("status").write_text(str(status))
    raise SystemExit(code)
