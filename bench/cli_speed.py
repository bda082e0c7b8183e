"""How long the ``llama-memory`` command line takes to answer, per command.

Each command runs in a fresh process (``python -m llama_memory ...``, as the
``llama-memory`` script does), ``--runs`` times; the report gives the median wall time
and the peak resident memory of the child. The store is small and made once per run: two
users, a few messages each, written with the offline embedding model.

The commands that only read counts (``users``, ``stats``, ``sessions``) should answer
without importing LlamaIndex or loading the embedding model; ``search`` needs both.

    python -m bench.cli_speed                 # 5 runs of each command
    python -m bench.cli_speed --runs 9 --json
    python -m bench.cli_speed --checkout ../old-main   # another checkout's code, same store
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: What is timed: a label and the arguments after ``llama-memory``.
COMMANDS: list[tuple[str, list[str]]] = [
    ("--help", ["--help"]),
    ("--version", ["--version"]),
    ("users", ["users", "--store", "{store}"]),
    ("stats", ["stats", "--store", "{store}"]),
    ("sessions", ["sessions", "alice", "--store", "{store}"]),
    ("search", ["search", "alice", "cello", "--store", "{store}"]),
]


def make_store(path: "Path | str") -> None:
    """A small store: two users, one session each, a few messages."""
    from llama_index.core.base.llms.types import ChatMessage

    from llama_memory import ComposableMemory

    for user, texts in {
        "alice": ["I play the cello in a quartet.", "My sister lives in Porto."],
        "bob": ["I repaint old bicycles on weekends.", "I am allergic to cats."],
    }.items():
        memory = ComposableMemory.from_defaults(user_id=user, path=str(path))
        memory.put_messages(
            [m for t in texts for m in (ChatMessage(role="user", content=t), ChatMessage(role="assistant", content="Noted."))]
        )
        memory.close()


def time_command(argv: list[str], runs: int, code: Path = ROOT) -> dict[str, Any]:
    """Median and fastest wall time (s) and the largest peak RSS (MB) of ``runs`` runs."""
    times: list[float] = []
    peak_kb = 0
    env = {**os.environ, "PYTHONPATH": str(code)}
    for _ in range(runs):
        start = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, "-m", "llama_memory", *argv],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=code, env=env,
        )  # fmt: skip
        # wait4 gives this child's own resource use (its peak RSS), not all children's.
        _, status, usage = os.wait4(child.pid, 0)
        times.append(time.perf_counter() - start)
        child.returncode = os.waitstatus_to_exitcode(status)
        errors = child.stderr.read().decode() if child.stderr else ""
        if child.returncode != 0:
            raise RuntimeError(f"llama-memory {' '.join(argv)} failed: {errors.strip()}")
        peak_kb = max(peak_kb, usage.ru_maxrss)
    return {
        "median_s": round(statistics.median(times), 3),
        "min_s": round(min(times), 3),
        "peak_mb": round(peak_kb / 1024),
    }


def run(runs: int, code: Path = ROOT) -> dict[str, Any]:
    """Time every command of :data:`COMMANDS`, running the package in ``code`` (a
    checkout), on a new small store."""
    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store"
        # In a child: a child's peak RSS starts from its parent's at fork, and this
        # process must stay small for the figures to be the commands' own.
        subprocess.run(
            [sys.executable, "-c", f"from bench.cli_speed import make_store; make_store({str(store)!r})"],
            check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
        )  # fmt: skip
        report: dict[str, Any] = {"runs": runs, "commands": {}}
        for label, argv in COMMANDS:
            args = [a.replace("{store}", str(store)) for a in argv]
            report["commands"][label] = time_command(args, runs, code)
        return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs of each command (default 5)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument(
        "--checkout", type=Path, default=ROOT,
        help="the checkout whose llama_memory is timed (default: this one), for before/after",
    )  # fmt: skip
    args = parser.parse_args()
    report = run(args.runs, args.checkout.resolve())
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"llama-memory command line, median of {args.runs} runs in a fresh process")
    print("| command | median s | min s | peak MB |")
    print("| --- | ---: | ---: | ---: |")
    for label, row in report["commands"].items():
        print(f"| `{label}` | {row['median_s']:.2f} | {row['min_s']:.2f} | {row['peak_mb']} |")


if __name__ == "__main__":
    main()
