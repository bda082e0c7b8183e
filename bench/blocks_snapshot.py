"""The records of every block of three workloads, written to JSON, and two such files
compared: a check that a change of retrieval's cost left what comes back as it was.

Workloads: ``bench.speed``'s 2,000-message conversation with the fake model (20 turns,
``get()`` then ``get(input)``); the everyday development set's facts, one session each,
asked with the offline model in a new session each (put then ``get()``, and
``get(question)``); and 60 of its questions asked one after another in one session (the
window growing).

Run (each tree on its own ``PYTHONPATH``)::

    .venv/bin/python -m bench.blocks_snapshot write before.json    # on the old code
    .venv/bin/python -m bench.blocks_snapshot write after.json     # on the new code
    .venv/bin/python -m bench.blocks_snapshot compare before.json after.json
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from bench.speed import build_ours, make_embeddings, make_ours, make_workload
from llama_memory import ComposableMemory

EVERYDAY = Path(__file__).resolve().parents[2] / "shared" / "data" / "everyday" / "everyday_dev.json"


def _records(memory: ComposableMemory) -> list[list[Any]]:
    return [[r.id, [p.text[:60] for p in (r.parts or [r])], None if r.relevance is None else round(r.relevance, 6)]
            for r in memory.last_block.records]


def write(path: Path) -> None:
    """Write the blocks of the three workloads to ``path``."""
    out: dict[str, Any] = {}
    fake = make_embeddings(["fake"])["fake"]
    history, fresh = make_workload(2000, 20, 0)
    work = Path(tempfile.mkdtemp())
    memory = make_ours(fake, work / "m")
    build_ours(memory, history, 100, time.perf_counter() + 3600)
    memory.get()
    rows = []
    for question, reply in fresh:
        memory.put(question)
        memory.get()
        rows.append(_records(memory))
        memory.get(question.content)
        rows.append(_records(memory))
        memory.put(reply)
    out["speed2000"] = rows
    memory.close()
    shutil.rmtree(work)

    offline = make_embeddings(["offline"])["offline"]
    data = json.loads(EVERYDAY.read_text())
    work = Path(tempfile.mkdtemp())

    def make(session: str) -> ComposableMemory:
        return ComposableMemory.from_defaults(path=work / "m", user_id="dev-user", session_id=session,
                                              embed_model=offline)

    for n, fact in enumerate(data["facts"]):
        memory = make(f"fact-{n}")
        memory.put(ChatMessage(role=MessageRole.USER, content=fact["message"]))
        memory.put(ChatMessage(role=MessageRole.ASSISTANT, content=fact["reply"]))
        memory.close()
    questions = ([f["questions"][0] for f in data["facts"]] + [x["question"] for x in data["never_said"][:20]]
                 + [x["question"] for x in data["two_part"][:10]])
    rows = []
    for n, question in enumerate(questions):
        memory = make(f"ask-{n}")
        memory.put(ChatMessage(role=MessageRole.USER, content=question))
        memory.get()
        agent = _records(memory)
        memory.get(question)
        rows.append([question, agent, _records(memory)])
        memory.close()
    out["everyday"] = rows
    memory = make("long")
    rows = []
    for question in questions[:60]:
        memory.put(ChatMessage(role=MessageRole.USER, content=question))
        memory.get()
        rows.append([question, _records(memory)])
        memory.put(ChatMessage(role=MessageRole.ASSISTANT, content="I see. " + question.replace("?", ".")))
    memory.close()
    out["everyday_long"] = rows
    shutil.rmtree(work)
    path.write_text(json.dumps(out))
    print("wrote", path, {k: len(v) for k, v in out.items()})


def compare(before: Path, after: Path) -> None:
    """Print, per workload, how many blocks hold the same records (and relevance)."""
    a, b = json.loads(before.read_text()), json.loads(after.read_text())
    for key in a:
        blocks = same = same_relevance = 0
        for x, y in zip(a[key], b[key]):
            pairs = [(x, y)] if key == "speed2000" else list(zip(x[1:], y[1:]))
            for old, new in pairs:
                blocks += 1
                if [r[0] for r in old] == [r[0] for r in new]:
                    same += 1
                    same_relevance += all(p[2] == q[2] for p, q in zip(old, new))
                else:
                    print(f"  {key}: {x[0] if key != 'speed2000' else ''!r} {len(old)} -> {len(new)} records")
        print(f"{key}: {blocks} blocks, {same} with the same records, {same_relevance} with the same relevance too")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "write":
        write(Path(sys.argv[2]))
    elif len(sys.argv) == 4 and sys.argv[1] == "compare":
        compare(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        raise SystemExit(__doc__)
