"""What opening a ``MemoryAdmin`` costs in a warm process, alone and beside another
admin already open on the same store (an MCP server's, a maintenance thread's), on a
plain and on an encrypted SQLite store (a passphrase: its key is derived on each real
open).

Each kind gets a new store holding one user. Timed: ``--opens`` times, an admin opened
and closed with no other open (every one a real open), then the same with a first
admin kept open the whole time. Reported: the median of each, in milliseconds.

    python -m bench.admin_open                 # 20 opens of each
    python -m bench.admin_open --opens 5 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any, Optional

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from llama_memory import ComposableMemory, MemoryAdmin
from llama_memory.embeddings.offline import default_embedding

#: The passphrase of the encrypted store (key derivation included, as a user's would be).
PASSPHRASE = "bench passphrase"


def timed_opens(path: Path, opens: int, key: Optional[str]) -> list[float]:
    """Milliseconds of each of ``opens`` admins opened (and closed) on ``path``."""
    times = []
    for _ in range(opens):
        started = time.perf_counter()
        admin = MemoryAdmin(path, encryption_key=key)
        admin.users()  # one read: the store is usable
        times.append((time.perf_counter() - started) * 1000)
        admin.close()
    return times


def run(opens: int) -> dict[str, dict[str, float]]:
    """For each kind of store, the median open alone and beside an open admin."""
    embed_model = default_embedding()
    results: dict[str, dict[str, float]] = {}
    for kind, key in (("plain", None), ("encrypted", PASSPHRASE)):
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "store"
            extra: dict[str, Any] = {"encryption_key": key} if key else {}
            memory = ComposableMemory.from_defaults(user_id="bench", path=path, embed_model=embed_model, **extra)
            memory.put(ChatMessage(role=MessageRole.USER, content="I moved to Lisbon last spring."))
            memory.close()
            timed_opens(path, 2, key)  # warm: imports, the page cache
            alone = timed_opens(path, opens, key)
            with MemoryAdmin(path, encryption_key=key):
                beside = timed_opens(path, opens, key)
            results[kind] = {"alone_ms": statistics.median(alone), "beside_an_open_one_ms": statistics.median(beside)}
    return results


def main(argv: Optional[list[str]] = None) -> None:
    """Run the benchmark and print a table (and write JSON with ``--json``)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--opens", type=int, default=20, help="admins opened of each kind and way (default 20)")
    parser.add_argument("--json", metavar="FILE", help="also write the figures as JSON")
    args = parser.parse_args(argv)
    results = run(args.opens)
    print(f"MemoryAdmin open, median of {args.opens} (load average {os.getloadavg()[0]:.1f})")
    print(f"{'store':<10} {'alone':>10} {'beside an open one':>20}")
    for kind, figures in results.items():
        print(f"{kind:<10} {figures['alone_ms']:>8.1f} ms {figures['beside_an_open_one_ms']:>17.1f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
