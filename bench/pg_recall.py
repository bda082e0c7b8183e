"""Recall and latency of per-user vector search on PostgreSQL: HNSW with iterative scan
against exact search.

It loads ``--rows`` synthetic vectors (384 dimensions, clustered like sentence
embeddings: each a random topic centre plus noise, normalised) into the dense index's
table with binary COPY, builds the HNSW index, then for each layout asks ``--queries``
queries (each a stored vector of the user plus noise) of one user through
:class:`~llama_memory.storage.postgres.PgVectorIndex` twice: forced through HNSW
(``hnsw_threshold=1``) and exact (a threshold above every user), and reports
recall@10 of the first against the second, the rows returned and both latencies.

Layouts: ``10pct``: one user holds 10% of the rows, 900 others the rest; ``all``: one
user holds every row. A sweep of exact search over user sizes measures where HNSW
starts to pay (the default ``HNSW_THRESHOLD``).

Run::

    .venv/bin/python -m bench.pg_recall                      # 100k rows, ~5 min on 2 cores
    .venv/bin/python -m bench.pg_recall --rows 20000 --json bench/results/pg_recall.json
    .venv/bin/python -m bench.pg_recall --url postgresql://...  # an existing server
    .venv/bin/python -m bench.pg_recall --data real --rows 20000 --sweep ''  # real embeddings

``--data real`` loads the offline model's vectors of real-looking texts instead
(:mod:`bench.real_texts`: LoCoMo sentences recombined, embedded once and cached) and
asks LoCoMo's questions; recall is then measured on what a deployment stores.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import struct
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

import numpy as np

from bench import real_texts
from llama_memory.storage.postgres import PgVectorIndex, PostgresStore

DIMENSION = 384
TENANT = "bench"
PREFIX = "recall"
K = 10


def clustered_vectors(
    n: int, rng: np.random.Generator, topics: int = 500, spread: float = 0.8, dimension: int = DIMENSION
) -> np.ndarray:
    """``n`` unit vectors around ``topics`` random centres (sentence embeddings are
    clustered by topic; uniform random vectors in 384 dimensions are all nearly
    equidistant, a case no approximate index is built for)."""
    centres = rng.standard_normal((topics, dimension)).astype(np.float32)
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    noise = rng.standard_normal((n, dimension)).astype(np.float32) * (spread / np.sqrt(dimension))
    vectors = centres[rng.integers(0, topics, n)] + noise
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors


def queries_near(vectors: np.ndarray, n: int, rng: np.random.Generator, noise: float = 0.5) -> np.ndarray:
    """``n`` queries, each one of ``vectors`` moved by some noise (a question about a
    stored fact is near it, not equal to it)."""
    picked = vectors[rng.integers(0, len(vectors), n)]
    moved = picked + rng.standard_normal(picked.shape).astype(np.float32) * (noise / np.sqrt(picked.shape[1]))
    return moved / np.linalg.norm(moved, axis=1, keepdims=True)


def _binary_copy(rows: Iterator[tuple[bytes, ...]]) -> Iterator[bytes]:
    """PostgreSQL's binary COPY stream of rows of already-encoded fields."""
    yield b"PGCOPY\n\xff\r\n\x00" + struct.pack(">ii", 0, 0)
    for row in rows:
        parts = [struct.pack(">h", len(row))]
        for field in row:
            parts.append(struct.pack(">i", len(field)))
            parts.append(field)
        yield b"".join(parts)
    yield struct.pack(">h", -1)


def vector_bytes(vector: np.ndarray) -> bytes:
    """pgvector's binary form of one vector (dimension, unused, big-endian float4s)."""
    return struct.pack(">hh", len(vector), 0) + vector.astype(">f4").tobytes()


def copy_vectors(
    index: PgVectorIndex, owners: Sequence[str], ids: Sequence[str], vectors: np.ndarray, tenant_id: str = TENANT
) -> None:
    """Bulk load vectors of many users of ``index`` with binary COPY, and set their counts
    (what :meth:`PgVectorIndex.upsert` keeps, row by row)."""
    names = {user: index.collection_name(tenant_id, user).encode() for user in set(owners)}
    tenant = tenant_id.encode()
    rows = (
        (tenant, user.encode(), names[user], i.encode(), vector_bytes(v))
        for user, i, v in zip(owners, ids, vectors)
    )
    with index.store.transaction("bench: copy vectors") as conn:
        with conn.cursor().copy(
            "COPY record_embeddings (tenant_id, user_id, collection, id, embedding) FROM STDIN (FORMAT BINARY)"
        ) as copy:
            batch: list[bytes] = []
            for chunk in _binary_copy(rows):
                batch.append(chunk)
                if len(batch) >= 2000:
                    copy.write(b"".join(batch))
                    batch = []
            copy.write(b"".join(batch))
        conn.execute(
            "INSERT INTO vector_counts (tenant_id, user_id, collection, n) SELECT tenant_id, user_id, "
            "collection, count(*) FROM record_embeddings WHERE tenant_id = %s AND user_id = ANY(%s) "
            "GROUP BY 1, 2, 3 ON CONFLICT (tenant_id, user_id, collection) DO UPDATE SET n = excluded.n",
            (tenant_id, list(set(owners))),
        )


def build_hnsw(index: PgVectorIndex) -> float:
    """Build the HNSW index of the loaded vectors (with the memory PostgreSQL allows for
    it); return the seconds it took."""
    start = time.perf_counter()
    with index.store.transaction("bench: build hnsw") as conn:
        conn.execute("SET LOCAL maintenance_work_mem = '1GB'")
        index.ensure_hnsw(DIMENSION)  # joins this transaction, so the setting holds
    index.store.query("bench: analyze", "ANALYZE record_embeddings")
    return time.perf_counter() - start


def layout(name: str, rows: int) -> list[str]:
    """The owner of each row: ``10pct`` (user ``big`` every 10th row, 900 others the
    rest) or ``all`` (``big`` every row)."""
    if name == "all":
        return ["big"] * rows
    if name == "10pct":
        return ["big" if i % 10 == 0 else f"u{i % 900}" for i in range(rows)]
    raise ValueError(f"unknown layout {name!r}: 10pct or all")


def recall_at(found: Sequence[str], truth: Sequence[str]) -> float:
    """How many of the true nearest the search found, as a fraction."""
    return len(set(found) & set(truth)) / len(truth) if truth else 1.0


def measure(store: PostgresStore, user: str, queries: np.ndarray, k: int = K, ef_search: int = 100) -> dict[str, Any]:
    """Recall@k of the HNSW path against the exact one for one user, and their latencies."""
    approximate = PgVectorIndex(store, PREFIX, hnsw_threshold=1, ef_search=ef_search)
    exact = PgVectorIndex(store, PREFIX, hnsw_threshold=10**12)
    recalls, returned, hnsw_ms, exact_ms = [], [], [], []
    for q in queries:
        vector = q.tolist()
        start = time.perf_counter()
        truth = [i for i, _ in exact.query(TENANT, user, vector, k)]
        exact_ms.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        found = [i for i, _ in approximate.query(TENANT, user, vector, k)]
        hnsw_ms.append((time.perf_counter() - start) * 1000)
        recalls.append(recall_at(found, truth))
        returned.append(len(found))
    return {
        "user_rows": exact.count(TENANT, user),
        "recall_mean": statistics.mean(recalls),
        "recall_min": min(recalls),
        "returned_min": min(returned),
        "hnsw_median_ms": statistics.median(hnsw_ms),
        "exact_median_ms": statistics.median(exact_ms),
    }


def exact_sweep(store: PostgresStore, rng: np.random.Generator, sizes: Sequence[int], queries: int) -> list[dict[str, Any]]:
    """Median exact-search latency for users of each size (loaded as users ``s<size>``)."""
    index = PgVectorIndex(store, PREFIX, hnsw_threshold=10**12)
    out = []
    for size in sizes:
        user = f"s{size}"
        vectors = clustered_vectors(size, rng)
        copy_vectors(index, [user] * size, [f"{user}-{i}" for i in range(size)], vectors)
        times = []
        for q in queries_near(vectors, queries, rng):
            start = time.perf_counter()
            index.query(TENANT, user, q.tolist(), K)
            times.append((time.perf_counter() - start) * 1000)
        out.append({"user_rows": size, "exact_median_ms": statistics.median(times)})
    return out


@contextmanager
def database(url: Optional[str]) -> Iterator[str]:
    """A PostgreSQL URL: ``url`` as given, else a throwaway server's (stopped after)."""
    if url:
        yield url
        return
    from bench.postgres_server import PostgresServer

    server = PostgresServer().start()
    try:
        yield server.url
    finally:
        server.stop()


def fresh(url: str) -> PostgresStore:
    """A store on ``url`` with no vectors of this benchmark left from an earlier run."""
    store = PostgresStore(url)
    PgVectorIndex(store, PREFIX).clear()
    with store.transaction("bench: drop hnsw") as conn:
        conn.execute(f"DROP INDEX IF EXISTS {PgVectorIndex.hnsw_index_name(DIMENSION)}")
    return store


def run(
    url: str, rows: int, queries: int, layouts: Sequence[str], sweep: Sequence[int], seed: int = 7,
    topics: int = 500, spread: float = 0.8, ef_searches: Sequence[int] = (100,), data: str = "synthetic",
) -> dict[str, Any]:
    """Every layout at ``rows`` rows, then the exact-search sweep; the report. ``data``:
    ``synthetic`` (clustered vectors, queries near stored ones) or ``real`` (the offline
    model's vectors of :mod:`bench.real_texts`, queries LoCoMo's questions)."""
    if data not in ("synthetic", "real"):
        raise ValueError(f"unknown data {data!r}: synthetic or real")
    rng = np.random.default_rng(seed)
    real = real_texts.cached_vectors(rows, seed) if data == "real" else None
    report: dict[str, Any] = {"rows": rows, "k": K, "dimension": DIMENSION, "layouts": {}, "data": data,
                              "topics": topics, "spread": spread,
                              "load_average_before": os.getloadavg()[0]}  # fmt: skip
    for name in layouts:
        store = fresh(url)
        try:
            owners = layout(name, rows)
            vectors = real if real is not None else clustered_vectors(rows, rng, topics=topics, spread=spread)
            start = time.perf_counter()
            copy_vectors(PgVectorIndex(store, PREFIX), owners, [f"r{i}" for i in range(rows)], vectors)
            copy_s = time.perf_counter() - start
            build_s = build_hnsw(PgVectorIndex(store, PREFIX))
            mine = vectors[np.array([o == "big" for o in owners])]
            asked = (real_texts.embed(real_texts.questions(queries, seed)) if real is not None
                     else queries_near(mine, queries, rng))  # fmt: skip
            for ef in ef_searches:
                result = measure(store, "big", asked, ef_search=ef)
                result.update(copy_s=copy_s, hnsw_build_s=build_s, ef_search=ef)
                label = name if ef == ef_searches[0] else f"{name} ef_search={ef}"
                report["layouts"][label] = result
                print(f"{label}: {json.dumps(result)}", flush=True)
        finally:
            store.close()
    if sweep:
        store = fresh(url)
        try:
            report["exact_sweep"] = exact_sweep(store, rng, sweep, queries)
            print(f"exact sweep: {json.dumps(report['exact_sweep'])}", flush=True)
        finally:
            store.close()
    report["load_average_after"] = os.getloadavg()[0]
    return report


def main(argv: Optional[Sequence[str]] = None) -> dict[str, Any]:
    """Parse arguments, run, print and optionally save the report."""
    parser = argparse.ArgumentParser(prog="python -m bench.pg_recall", description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=100_000, help="vectors in the table per layout")
    parser.add_argument("--queries", type=int, default=50, help="queries per layout")
    parser.add_argument("--layouts", default="10pct,all", help="10pct and/or all")
    parser.add_argument("--sweep", default="1000,5000,10000,20000,50000",
                        help="user sizes of the exact-search sweep ('' for none)")
    parser.add_argument("--topics", type=int, default=500,
                        help="clusters of the synthetic vectors (more: fewer near neighbours, harder)")
    parser.add_argument("--spread", type=float, default=0.8, help="noise around each cluster centre")
    parser.add_argument("--ef-search", default="100",
                        help="hnsw.ef_search values to measure, comma-separated (the first is the default's)")
    parser.add_argument("--data", default="synthetic", choices=("synthetic", "real"),
                        help="real: the offline model's vectors of LoCoMo-based texts (bench.real_texts), "
                             "cached under /tmp/llama-memory-bench; queries are LoCoMo's questions")
    parser.add_argument("--url", default=None, help="an existing server (default: a throwaway one)")
    parser.add_argument("--json", type=Path, default=None, help="also write the report here")
    args = parser.parse_args(argv)
    sweep = [int(s) for s in args.sweep.split(",") if s]
    with database(args.url) as url:
        report = run(url, args.rows, args.queries, args.layouts.split(","), sweep,
                     topics=args.topics, spread=args.spread,
                     ef_searches=[int(e) for e in args.ef_search.split(",") if e], data=args.data)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
