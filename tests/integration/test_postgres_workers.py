"""Many workers on one PostgreSQL memory: four processes with no
shared local file (each its own working directory, ``store=URL`` only) serve, as four
app servers behind a load balancer without sticky sessions, interleaved turns of the
same users and sessions. Then: every acknowledged message is stored exactly once, each
session's window is the same from every worker, and no user ever sees another's records.

``LLAMA_MEMORY_LONG_TESTS=1`` runs 5 users x 3 sessions x 12 turns instead of
3 x 2 x 4. The counts are printed (``pytest -s``) for the issue's closing note.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from multiprocessing.connection import wait
from pathlib import Path
from typing import Any

import psycopg

import workers

LONG = os.environ.get("LLAMA_MEMORY_LONG_TESTS") == "1"
USERS = ("alice", "bob", "carol", "dave", "erin")[: 5 if LONG else 3]
SESSIONS = ("s1", "s2", "s3")[: 3 if LONG else 2]
TURNS = 12 if LONG else 4
WORKERS = 4


def _ask(conn: Any, request: tuple[Any, ...]) -> Any:
    conn.send(request)
    answer = workers.receive(conn, timeout=60)
    assert answer[0] == "ok", answer[1]
    return answer


def test_four_app_servers_serve_interleaved_turns_of_the_same_sessions(postgres_url: str, tmp_path: Path) -> None:
    ctx = workers.forkserver()
    servers = []
    for i in range(WORKERS):
        home = tmp_path / f"worker-{i}"
        home.mkdir()
        mine, theirs = ctx.Pipe()
        process = ctx.Process(target=workers.app_server, args=(theirs, postgres_url, str(home)), daemon=True)
        process.start()
        theirs.close()
        servers.append((process, mine))
    rng = random.Random(15)
    sessions = [(u, s) for u in USERS for s in SESSIONS]
    next_turn = dict.fromkeys(sessions, 0)
    busy: dict[Any, tuple[str, str]] = {}  # a request in flight: its worker's pipe -> session
    acked: list[str] = []
    foreign: list[tuple[str, list[str]]] = []
    served_by: Counter[int] = Counter()
    try:
        # The load balancer: each session has at most one request in flight (its user
        # waits for the answer), sent to a random worker, busy or not.
        while any(n < TURNS for n in next_turn.values()) or busy:
            in_flight = set(busy.values())
            for session in sessions:
                if session in in_flight or next_turn[session] >= TURNS:
                    continue
                free = [i for i, (_, c) in enumerate(servers) if c not in busy]
                if not free:
                    break
                index = rng.choice(free)
                conn = servers[index][1]
                conn.send(("turn", *session, next_turn[session]))
                busy[conn] = session
                served_by[index] += 1
                next_turn[session] += 1
                in_flight.add(session)
            ready = wait(list(busy), timeout=60)
            assert ready, "no worker answered in 60 s"
            for conn in ready:
                answer = conn.recv()
                assert answer[0] == "ok", answer[1]
                acked += answer[1]
                if answer[2]:
                    foreign.append((busy[conn][0], answer[2]))
                del busy[conn]

        # Every worker sees the same window of every session.
        differing = []
        for session in sessions:
            views = [_ask(conn, ("window", *session))[1:] for _, conn in servers]
            if any(view != views[0] for view in views):
                differing.append((session, views))
            history = views[0][0]
            expected = [f"{session[0]}-{session[1]}-t{n}-{r}" for n in range(TURNS) for r in "ua"]
            assert history == expected, session  # in turn order: turns of a session never overlap
        for _, conn in servers:
            conn.send(None)
    finally:
        for process, _ in servers:
            process.join(10)
            if process.is_alive():
                process.kill()

    with psycopg.connect(postgres_url) as db:
        chat = Counter(
            row[0] for row in db.execute(
                "SELECT message_json::jsonb -> 'additional_kwargs' ->> 'message_id' FROM chat_messages"
            )
        )
        records = Counter(
            row[0] for row in db.execute(
                "SELECT jsonb_array_elements_text(message_ids) FROM records WHERE source = 'vector'"
            )
        )  # fmt: skip
    lost = [m for m in acked if not (chat[m] and records[m])]
    doubled = [m for m in chat | records if chat[m] != 1 or records[m] != 1]
    print(
        f"\n{WORKERS} workers, {len(USERS)} users x {len(SESSIONS)} sessions x {TURNS} turns "
        f"(served {dict(sorted(served_by.items()))}): {len(acked)} messages acknowledged, "
        f"{len(acked) - len(lost)} found, {len(doubled)} duplicated, {len(chat) - len(acked)} unacknowledged, "
        f"{len(differing)} sessions whose window differs between workers, {len(foreign)} cross-user hits"
    )
    assert len(acked) == len(sessions) * TURNS * 2
    assert lost == [] and doubled == [] and set(chat) == set(acked)
    assert differing == []
    assert foreign == []
    assert len(served_by) == WORKERS  # every worker served turns
