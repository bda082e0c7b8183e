"""Cost of server mode's bookkeeping: opening a memory (which reconciles its own user) and
a full ``reconcile()`` (every user), against a real Chroma server on loopback.

    python -m bench.reconcile --stores 1x2000,200x10

For each store shape ``USERSxRECORDS``, every user's records are written through
``ComposableMemory`` (offline embedding, indexed on close); then the memory of
the first user is opened (timed), ``reconcile()`` is timed, and the median of 20
``search`` calls. Load averages are printed beside the figures: on a shared
machine they explain most of the spread.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

from llama_index.core.base.llms.types import ChatMessage

from bench.chroma_server import ChromaServer
from llama_memory import ComposableMemory, default_embedding


def _load() -> str:
    return f"{os.getloadavg()[0]:.2f}"


def run(shape: str, server: ChromaServer, root: Path, embed_model) -> str:
    """Build one store of ``USERSxRECORDS`` and time open, reconcile and search."""
    users, per_user = (int(n) for n in shape.lower().split("x"))
    path = root / shape
    for u in range(users):
        memory = ComposableMemory.from_defaults(
            user_id=f"u{u}", path=path, chroma_url=server.url, embed_model=embed_model, profile=False
        )
        memory.put_messages(
            [
                ChatMessage(role="user", content=f"user {u} note {i} about topic {i % 37}, item {i * 7}")
                for i in range(per_user)
            ]
        )
        memory.close()
    load = _load()
    start = time.perf_counter()
    memory = ComposableMemory.from_defaults(
        user_id="u0", path=path, chroma_url=server.url, embed_model=embed_model, profile=False
    )
    opened = time.perf_counter() - start
    start = time.perf_counter()
    report = memory.reconcile()["vector"]
    reconciled = time.perf_counter() - start
    searches = []
    for i in range(20):
        start = time.perf_counter()
        memory.search(f"note {i} topic")
        searches.append(time.perf_counter() - start)
    memory.close()
    return (
        f"{users:>5} x {per_user:<6} open {opened * 1000:7.0f} ms   reconcile() {reconciled * 1000:7.0f} ms"
        f"   search median {statistics.median(searches) * 1000:5.1f} ms   load {load}->{_load()}"
        f"   ({report.users} users, {report.missing} missing, {report.orphans} orphans)"
    )


def main(argv: list[str] | None = None) -> None:
    """Command line: ``python -m bench.reconcile [--stores 1x2000,200x10]``."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default="1x2000,200x10", help="USERSxRECORDS, comma-separated")
    args = parser.parse_args(argv)
    embed_model = default_embedding()
    with tempfile.TemporaryDirectory() as tmp:
        server = ChromaServer(Path(tmp) / "server").start()
        try:
            for shape in args.stores.split(","):
                print(run(shape, server, Path(tmp), embed_model), flush=True)
        finally:
            server.stop()


if __name__ == "__main__":
    main()
