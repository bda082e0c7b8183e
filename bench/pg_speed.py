"""SQLite and PostgreSQL side by side: ``python -m bench.speed
--backend sqlite,postgres`` runs this module (``bench.speed`` alone keeps its SQLite
comparison with LlamaIndex's memories).

For each backend, with the offline embedding model (its time included everywhere):

* ``get()`` and ``put()`` medians on a history of ``--sizes`` messages (one user, one
  session, built with ``put_messages`` and indexed), over ``--gets`` agent turns;
* total ``get()`` throughput of 1, 2 and 4 worker processes on that memory, each
  opening it itself (for PostgreSQL the same database, as app servers would), for
  ``--seconds`` each;

and for PostgreSQL only, ``get()`` and ``search(k=10)`` of one user among many records
bulk-loaded with COPY (synthetic clustered vectors, see :mod:`bench.pg_recall`; the
records' text is a generated sentence, the query is embedded by the offline model):
``--pg-records 100000`` (one user holding them all: the HNSW path) and ``--pg-users
1000 --pg-per-user 1000`` (1M records over 1,000 users: each searched exactly).

A throwaway PostgreSQL (bench/postgres_server.py) is started unless ``--url`` names one.
"""

from __future__ import annotations

import io
import json
import multiprocessing
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np

from bench import locomo, pg_recall, real_texts, speed
from llama_memory import ComposableMemory, default_embedding
from llama_memory.core.errors import StorageError
from llama_memory.embeddings.onnx_model import THREADS_VARIABLE
from llama_memory.embeddings.store_model import vector_cache
from llama_memory.retrieval.sync import encode
from llama_memory.storage.postgres import PgVectorIndex, PostgresStore
from llama_memory.storage.postgres.bundle import PostgresStoreAdmin

USER = "u"
SMOKE = {"sizes": (20,), "gets": 3, "seconds": 0.5, "workers": (1,), "pg_records": 300}


def open_memory(backend: str, where: str, user: str = USER) -> ComposableMemory:
    """The default memory of ``user`` on a SQLite directory or a PostgreSQL URL."""
    if backend == "sqlite":
        return ComposableMemory.from_defaults(user_id=user, path=where, embed_model=default_embedding())
    if backend == "postgres":
        return ComposableMemory.from_defaults(user_id=user, store=where, embed_model=default_embedding())
    raise ValueError(f"unknown backend {backend!r}: sqlite or postgres")


def turns(
    memory: ComposableMemory, size: int, gets: int, seed: int, settle: Optional[Callable[[], None]] = None
) -> dict[str, Any]:
    """Build a history of ``size`` messages, then (after ``settle``) time ``gets`` turns
    of put/get/put."""
    history, fresh = speed.make_workload(size, gets, seed)
    start = time.perf_counter()
    for i in range(0, len(history), 100):
        memory.put_messages(list(history[i:i + 100]))
    memory.flush()
    build_s = time.perf_counter() - start
    if settle is not None:
        settle()
    memory.get()  # warm-up
    get_ms, put_ms = [], []
    for user, reply in fresh:
        start = time.perf_counter()
        memory.put(user.model_copy(deep=True))
        put_ms.append(speed._ms(start))
        start = time.perf_counter()
        memory.get()
        get_ms.append(speed._ms(start))
        memory.put(reply.model_copy(deep=True))
    return {"messages": size, "build_s": build_s, "get_median_ms": speed.median(get_ms),
            "get_p95_ms": speed.p95(get_ms), "put_median_ms": speed.median(put_ms)}  # fmt: skip


def analyze(url: str) -> None:
    """ANALYZE the database at ``url``, as autovacuum does within a minute of a new
    table's first rows: a database in service has statistics. Timed in the minute
    before, a new one is planned blind (the user's rows walked where an index serves:
    the 2,000-message ratio to SQLite moved between 1.1 and 2.5 from run to run with
    whether autovacuum had come by)."""
    store = PostgresStore(url)
    try:
        PostgresStoreAdmin(store).refresh_statistics()  # as `llama-memory copy` ends
    finally:
        store.close()


def worker_threads(mode: str, workers: int) -> Optional[int]:
    """The offline model's threads in each of ``workers`` processes for an
    ``--embed-threads`` mode: ``share`` the cores among them (at least 1 each), ``cores``
    None (each process a thread per core, the model's default), or a number."""
    if mode == "share":
        return max(1, len(os.sched_getaffinity(0)) // workers)
    if mode == "cores":
        return None
    if mode.isdigit() and int(mode) >= 1:
        return int(mode)
    raise ValueError(f"--embed-threads takes share, cores or a number of threads, not {mode!r}")


def _worker(
    backend: str, where: str, seconds: float, index: int, ready: Any, go: Any, out: Any, threads: Optional[int]
) -> None:
    """One app server: open the memory, wait for the others, then for ``seconds`` call
    ``get(input=...)`` with a new question each time (an agent's call after a tool
    round: retrieval and its query embedding run every time). ``threads``: the offline
    model's, set as an app would, through the environment (None: the model's default)."""
    if threads is None:
        os.environ.pop(THREADS_VARIABLE, None)
    else:
        os.environ[THREADS_VARIABLE] = str(threads)
    try:
        memory = open_memory(backend, where)
        questions = [u.content or "" for u, _ in speed.make_workload(0, 1000, 100 + index)[1]]
        memory.get()
        ready.put(True)
        go.wait()
        done, end = 0, time.perf_counter() + seconds
        while time.perf_counter() < end:
            memory.get(input=questions[done % len(questions)])
            done += 1
        memory.close()
        out.put(done)
    except Exception as exc:  # reported, not hidden: the run says which backend failed
        ready.put(False)
        out.put(f"{type(exc).__name__}: {exc}")


def throughput(backend: str, where: str, workers: int, seconds: float, mode: str = "share") -> dict[str, Any]:
    """Total ``get(input=...)`` calls per second of ``workers`` processes on one memory
    (the same user and session: the worst case for contention), the offline model's
    threads in each given by ``mode`` (:func:`worker_threads`)."""
    threads = worker_threads(mode, workers)
    ctx = multiprocessing.get_context("spawn")
    ready, out, go = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [ctx.Process(target=_worker, args=(backend, where, seconds, i, ready, go, out, threads))
             for i in range(workers)]  # fmt: skip
    for p in procs:
        p.start()
    oks = [ready.get(timeout=300) for _ in procs]
    go.set()
    results = [out.get(timeout=300 + seconds) for _ in procs]
    for p in procs:
        p.join(timeout=60)
    errors = [r for r in results if isinstance(r, str)]
    shown = {"workers": workers, "embed_threads": mode, "threads_per_worker": threads}
    if errors or not all(oks):
        return {**shown, "status": "error", "error": errors[0] if errors else "a worker failed"}
    total = sum(int(r) for r in results)
    return {**shown, "status": "ok", "gets": total, "gets_per_s": total / seconds}


#: How many distinct texts the bulk records' texts are drawn from (``--pg-texts real``).
REAL_TEXTS = 50_000


def copy_records(
    store: PostgresStore,
    users: Sequence[str],
    per_user: int,
    seed: int,
    texts: str = "real",
    data: Optional[Path] = None,
    copies: bool = False,
) -> float:
    """Bulk load ``per_user`` indexed records (text and vector) for each of ``users`` with
    COPY, as the vector source would hold them; return the seconds it took.

    ``copies``: each record keeps its vector's copy too (the ``vector`` column), as the
    library writes it (:func:`llama_memory.retrieval.sync.encode`): a user of up to
    ``resident_limit`` records is then searched in memory, as a library-written store
    is. Without them (the figures before the fifth speed round), every search goes to
    pgvector and each record's vector is read from the dense index.

    ``texts``: ``real``, each record one or two LoCoMo sentences recombined
    (:func:`bench.real_texts.texts`: a question's words match some of a user's records,
    as in a real memory); ``words``, the earlier synthetic text of 5 of 16 words, which
    every record shares with any question naming one of them. The vectors are synthetic
    either way (clustered, :mod:`bench.pg_recall`)."""
    if texts not in ("real", "words"):
        raise ValueError(f"texts must be 'real' or 'words', not {texts!r}")
    # ``data``: the LoCoMo file the texts come from (default: the shared dev split).
    pool = real_texts.texts(min(REAL_TEXTS, len(users) * per_user), seed, data) if texts == "real" else []
    rng = np.random.default_rng(seed)
    index = PgVectorIndex(store, "llama_memory_vector")
    start = time.perf_counter()
    for first in range(0, len(users), max(1, 100_000 // per_user)):
        chunk = users[first:first + max(1, 100_000 // per_user)]
        owners = [u for u in chunk for _ in range(per_user)]
        ids = [f"{u}-{i:07d}" for u in chunk for i in range(per_user)]
        vectors = pg_recall.clustered_vectors(len(ids), rng)
        buf = io.StringIO()
        for n, (user, rid) in enumerate(zip(owners, ids), start=first * per_user):
            if pool:  # spread over the pool: a user's records are distinct texts
                text = pool[(n * 7919) % len(pool)].replace("\\", " ").replace("\t", " ").replace("\n", " ")
            else:
                text = f"note {rid} about {pg_recall_words(rid)}"
            row = ["default", user, "vector", rid, "s", "user", text, "", rid, "[]",
                   "1700000000", "1700000000", "{}", "t"]  # fmt: skip
            if copies:  # bytea in COPY's text format: \\x and the hex digits
                row.append("\\\\x" + encode(vectors[n - first * per_user]).hex())
            buf.write("\t".join(row) + "\n")
        columns = ("tenant_id, user_id, source, id, session_id, role, text, event_date, content_hash, "
                   "message_ids, event_time, ingested_at, metadata, indexed" + (", vector" if copies else ""))
        with store.transaction("bench: copy records") as conn:
            with conn.cursor().copy(f"COPY records ({columns}) FROM STDIN") as copy:
                copy.write(buf.getvalue())
        pg_recall.copy_vectors(index, owners, ids, vectors, "default")
    return time.perf_counter() - start


_WORDS = ("hiking", "ramen", "Lisbon", "report", "sister", "dog", "knee", "Spanish", "risotto", "Kyoto",
          "migration", "marathon", "cat", "Berlin", "holidays", "manager")  # fmt: skip


def pg_recall_words(rid: str) -> str:
    """A few words of a synthetic record, chosen by its id."""
    h = abs(hash(rid))
    return " ".join(_WORDS[(h >> (4 * i)) % len(_WORDS)] for i in range(5))


def bulk(
    url: str, users: int, per_user: int, gets: int, seed: int, texts: str = "real", data: Optional[Path] = None,
    copies: bool = False,
) -> dict[str, Any]:
    """get(input=...) and search() of one user among ``users`` x ``per_user`` records
    bulk-loaded by COPY (``copies``: with the records' vector copies, see
    :func:`copy_records`), then vacuumed and analysed. The HNSW index is built after the
    load (at once, faster than row by row) when the user is above the threshold; below
    it, the search is exact and the index is not built (building it over 1M rows takes
    far longer than the run)."""
    names = [USER] + [f"user{i}" for i in range(1, users)]
    memory = open_memory("postgres", url)
    memory.put_messages(speed.make_workload(4, 0, seed)[0])  # records the model in the store
    memory.flush()
    memory.close()
    store = PostgresStore(url)
    index = PgVectorIndex(store, "llama_memory_vector")
    hnsw = per_user >= index.hnsw_threshold
    try:
        with store.transaction("bench: drop hnsw") as conn:  # rebuilt below, after the load
            conn.execute(f"DROP INDEX IF EXISTS {index.hnsw_index_name(pg_recall.DIMENSION)}")
        load_s = copy_records(store, names, per_user, seed, texts, data, copies)
        start = time.perf_counter()
        if hnsw:
            with store.transaction("bench: build hnsw") as conn:
                conn.execute("SET LOCAL maintenance_work_mem = '1GB'")
                index.ensure_hnsw(pg_recall.DIMENSION)
        # VACUUM as well as ANALYZE: a table in service has been vacuumed (autovacuum
        # follows inserts); one just loaded by COPY has no visibility map yet, so every
        # count reads the rows, and autovacuum would start on it during the timing.
        store.query("bench: vacuum and analyze", "VACUUM ANALYZE")
        # And the load's dirty pages written now: otherwise the checkpointer spreads
        # writing them (gigabytes at 1M rows) over the minutes the timing runs in.
        try:
            store.query("bench: checkpoint", "CHECKPOINT")
        except StorageError:  # a server where this role may not: timed while it writes
            pass
        index_s = time.perf_counter() - start
    finally:
        store.close()
    # Timed as an app server would serve the loaded database: a memory opened on it.
    memory = open_memory("postgres", url)
    # Every load is timed with the same questions: the model's vectors of an earlier
    # load's (kept by the process's vector cache) would spare this one its embeddings.
    vector_cache(memory.embed_model).clear()
    questions = [u.content or "" for u, _ in speed.make_workload(0, 2 * gets, seed + 1)[1]]
    memory.get(input=questions[-1])  # warm-up
    get_ms, search_ms, found = [], [], 0
    for question in questions[:gets]:
        start = time.perf_counter()
        memory.get(input=question)
        get_ms.append(speed._ms(start))
    for question in questions[gets:]:
        start = time.perf_counter()
        found = len(memory.search(question, k=10))
        search_ms.append(speed._ms(start))
    memory.close()
    return {"records": users * per_user, "users": users, "texts": texts, "vector_copies": copies,
            "load_s": load_s, "hnsw": hnsw,
            "index_s": index_s,
            "get_median_ms": speed.median(get_ms), "get_p95_ms": speed.p95(get_ms),
            "search_median_ms": speed.median(search_ms), "search_p95_ms": speed.p95(search_ms),
            "search_found": found}  # fmt: skip


def run(args: Any, url: str, new_database: Any) -> dict[str, Any]:
    """Every measurement for every backend named; the report."""
    backends = [b for b in args.backend.split(",") if b]
    report: dict[str, Any] = {"load_average_before": os.getloadavg(), "turns": [], "throughput": [], "bulk": []}
    for backend in backends:
        for size in args.size_list:
            workdir = tempfile.mkdtemp(prefix="llama-memory-pgspeed-")
            where = str(Path(workdir) / "memory") if backend == "sqlite" else new_database()
            try:
                memory = open_memory(backend, where)
                settle = (lambda: analyze(where)) if backend == "postgres" else None
                row = {"backend": backend, **turns(memory, size, args.gets, args.seed, settle)}
                memory.close()
                report["turns"].append(row)
                print(f"{backend:8} {size:>6} msgs: get {row['get_median_ms']:.1f} ms, put {row['put_median_ms']:.1f} ms", flush=True)
                if size == args.size_list[-1]:
                    for n in args.worker_list:
                        for mode in args.thread_modes:  # back to back: the same load for each
                            t = {"backend": backend, "messages": size,
                                 **throughput(backend, where, n, args.seconds, mode)}  # fmt: skip
                            report["throughput"].append(t)
                            print(f"{backend:8} {n} workers, embed threads {mode}: "
                                  f"{t.get('gets_per_s', t.get('error'))}", flush=True)  # fmt: skip
            finally:
                shutil.rmtree(workdir, ignore_errors=True)
    if "postgres" in backends:
        for users, per_user in args.bulk_list:
            for copies in args.copies_list:
                # --smoke runs anywhere: the texts come from the tests' tiny LoCoMo file.
                data = locomo.SMOKE_DATA if args.smoke else None
                row = bulk(new_database(), users, per_user, args.gets, args.seed, args.pg_texts, data, copies)
                report["bulk"].append(row)
                print(f"postgres {row['records']} records / {users} users, vector copies "
                      f"{'with' if copies else 'without'}: get {row['get_median_ms']:.1f} ms, search "
                      f"{row['search_median_ms']:.1f} ms (load {row['load_s']:.0f} s, HNSW {row['index_s']:.0f} s)",
                      flush=True)  # fmt: skip
    # Part of every get() above; timed apart so a reader can tell it from the store's share.
    texts = [u.content or "" for u, _ in speed.make_workload(0, 20, args.seed + 2)[1]]
    report["query_embedding"] = speed.time_query_embedding(default_embedding(), texts)
    report["load_average_after"] = os.getloadavg()
    for backend in backends:
        rows = [r for r in report["turns"] if r["backend"] == backend]
        report.setdefault("get_median_ms", {})[backend] = rows[-1]["get_median_ms"] if rows else None
    if {"sqlite", "postgres"} <= set(backends) and report["get_median_ms"]["sqlite"]:
        report["get_postgres_over_sqlite"] = report["get_median_ms"]["postgres"] / report["get_median_ms"]["sqlite"]
    return report


def plot(report: dict[str, Any], path: Path) -> Path:
    """A PNG: get() median by backend and size, and throughput by worker count."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for backend in sorted({r["backend"] for r in report["turns"]}):
        rows = [r for r in report["turns"] if r["backend"] == backend]
        left.plot([r["messages"] for r in rows], [r["get_median_ms"] for r in rows], "o-", label=backend)
        for mode in dict.fromkeys(r.get("embed_threads", "cores") for r in report["throughput"]):
            t = [r for r in report["throughput"] if r["backend"] == backend and r["status"] == "ok"
                 and r.get("embed_threads", "cores") == mode]  # fmt: skip
            right.plot([r["workers"] for r in t], [r["gets_per_s"] for r in t], "o-",
                       label=f"{backend}, embed threads: {mode}")  # fmt: skip
    left.set(xlabel="messages of history", ylabel="get() median, ms", title="get() latency")
    right.set(xlabel="worker processes", ylabel="get() / s, total", title="get() throughput")
    left.legend()
    right.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def vector_copies_modes(modes: str) -> list[bool]:
    """``--pg-vector-copies``: ``without`` and/or ``with``, comma-separated, each a load
    of its own (True: the records keep their vector copies)."""
    chosen = [m for m in modes.split(",") if m]
    wrong = [m for m in chosen if m not in ("without", "with")]
    if wrong or not chosen:
        raise ValueError(f"--pg-vector-copies takes without, with or both (without,with), not {modes!r}")
    return [m == "with" for m in chosen]


def main(args: Any) -> dict[str, Any]:
    """Run with ``bench.speed``'s parsed arguments (``--backend`` and the PostgreSQL ones)."""
    if args.smoke:
        args.size_list, args.gets, args.seconds = list(SMOKE["sizes"]), SMOKE["gets"], SMOKE["seconds"]
        args.worker_list, args.bulk_list = list(SMOKE["workers"]), [(1, SMOKE["pg_records"])]
    else:
        args.size_list = [max(args.sizes)] if args.sizes else []  # --sizes 0: records only
        args.worker_list = [int(s) for s in args.workers.split(",") if s]
        args.bulk_list = [(1, n) for n in (int(s) for s in args.pg_records.split(",") if s)]
        if args.pg_users:
            args.bulk_list.append((args.pg_users, args.pg_per_user))
    args.thread_modes = [m for m in args.embed_threads.split(",") if m]
    # --smoke: one load, without copies (tests/bench/test_pg_copies.py loads with them).
    args.copies_list = [False] if args.smoke else vector_copies_modes(args.pg_vector_copies)
    for mode in args.thread_modes:
        worker_threads(mode, 1)  # a bad mode says so before any load
    with pg_recall.database(args.url) as url:
        made = [0]

        def new_database() -> str:
            made[0] += 1
            store = PostgresStore(url)  # the server's URL: create a database beside it
            try:
                name = f"bench_{os.getpid()}_{made[0]}"
                store.query("bench: create database", f"CREATE DATABASE {name}")
            finally:
                store.close()
            return url.rsplit("/", 1)[0] + "/" + name

        report = run(args, url, new_database)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2, default=str))
    if args.plot:
        plot(report, args.plot)
    return report
