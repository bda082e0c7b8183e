"""Crash safety: a writer killed with SIGKILL at random points of a bulk ingest loses nothing.

Each round forks a writer (see workers.py) that reopens the memory directory
the previous writer was killed on, checks it, then writes (``put``, ``put_messages``
of 2-12 and of 64-96 messages, searches) for three scopes with the real offline
embedding and the real embedded Chroma, acknowledging every write that returned.
The test kills it after a random number of acknowledgements plus a random delay,
so kills land inside SQLite commits, embedding batches and Chroma writes.

After every kill the reopened directory must show every acknowledged message (in
the chat history and as a record), no half-written batch (a ``put_messages`` is
in both tables whole or not at all), an FTS index in step with the records, no
Chroma vector without a record, every record flagged as indexed really in Chroma,
and, once the pending records are embedded, an index equal to the record.

``LLAMA_MEMORY_LONG_TESTS=1`` runs 200 kills instead of 24.
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pytest

import workers

LONG = os.environ.get("LLAMA_MEMORY_LONG_TESTS") == "1"
KILLS = int(os.environ.get("LLAMA_MEMORY_CRASH_KILLS", 200 if LONG else 24))
SEED = int(os.environ.get("LLAMA_MEMORY_CRASH_SEED", "7"))
#: A writer is killed after 0..MAX_ACKS acknowledged writes plus 0..MAX_DELAY seconds.
MAX_ACKS = 3
MAX_DELAY = 0.4


def checked(conn: Connection) -> dict[str, Any]:
    kind, report = workers.receive(conn)
    assert kind == "checked"
    assert report["problems"] == [], report["problems"]
    return report


@pytest.mark.timeout(3600 if LONG else 300)
def _noted(kind: str, payload: Any, acked: list[str]) -> tuple[int, str]:
    """One message from the writer: an acknowledgement (its message ids join ``acked``)
    or what it is doing. Returns (1 for an acknowledgement, else 0; what it is doing)."""
    if kind == "ack":
        acked.extend(payload)
        return 1, "between operations"
    return 0, payload


def test_sigkill_during_ingest_loses_nothing(tmp_path: Path) -> None:
    ctx = workers.forkserver()
    path = str(tmp_path / "memory")
    rng = random.Random(SEED)
    acked: list[str] = []  # every message id whose put/put_messages returned
    landed: Counter = Counter()  # what the writer was doing when it was killed
    operations = 0
    reindexed = 0
    began = time.monotonic()
    for generation in range(KILLS):
        process, conn = workers.start(ctx, workers.writer, path, generation, rng.randrange(2**32), acked)
        reindexed += checked(conn)["reindexed"]
        wanted, acks, doing = rng.randint(0, MAX_ACKS), 0, "before its first write"
        while acks < wanted:
            ack, doing = _noted(*workers.receive(conn), acked)
            acks += ack
        # Half the kills come at once (inside the next write, often a short one), half
        # after a while (inside a bulk import's embedding or Chroma write, or a search).
        time.sleep(rng.choice((0.002, MAX_DELAY)) * rng.random())
        os.kill(process.pid, signal.SIGKILL)
        # What the writer acknowledged before it died is still in the pipe.
        while True:
            try:
                kind, payload = conn.recv()
            except (EOFError, OSError):
                break
            ack, doing = _noted(kind, payload, acked)
            operations += ack
        operations += acks
        process.join(30)
        assert process.exitcode == -signal.SIGKILL
        landed[doing] += 1
        conn.close()
    process, conn = workers.start(ctx, workers.checker, path, acked)
    final = checked(conn)
    process.join(60)
    assert process.exitcode == 0
    # One record per message (every text is unique), and nothing stored twice.
    assert final["chat_messages"] == final["records"] == len(set(acked)) + final["unacknowledged"]
    print(
        f"\ncrash test: {KILLS} SIGKILLs in {time.monotonic() - began:.1f} s; "
        f"{operations} writes ({len(acked)} messages) acknowledged, all found after reopening; "
        f"{final['records']} records ({final['unacknowledged']} committed but killed before "
        f"the acknowledgement); {reindexed} records re-embedded on reopening; "
        f"kills landed: {dict(landed)}"
    )
    assert len(acked) > KILLS, "the writers acknowledged too little to test anything"
