"""The speed benchmark runs end to end (``bench.speed --smoke``, in-process)."""

from __future__ import annotations

import json
import multiprocessing
import os
from pathlib import Path

import pytest

import workers
from bench import speed  # importable: pyproject sets pytest's pythonpath to the repo root


def _memories() -> tuple[str, ...]:
    """The memories a run compares: LlamaIndex's Memory only with its Chroma store installed."""
    if speed.ChromaVectorStore is None or speed.LlamaIndexMemory is None:
        return (speed.OURS, speed.STOCK)
    return (speed.OURS, speed.STOCK, speed.LLAMA_MEMORY)


def test_speed_smoke_reports_figures_for_every_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "speed.json"
    plot = tmp_path / "get-latency.png"

    report = speed.main(["--smoke", "--json", str(out), "--plot", str(plot)])

    printed = capsys.readouterr().out
    assert json.loads(out.read_text()) == json.loads(json.dumps(report))
    results = report["results"]
    for memory in _memories():
        assert memory in printed
        runs = [r for r in results if r["memory"] == memory]
        assert {r["embedding"] for r in runs} == {"offline", "fake"}
        for r in runs:
            assert r["status"] == "ok", r
            assert len(r["get_ms"]) == speed.SMOKE_GETS
            for key in ("build_s", "get_median_ms", "get_p95_ms", "put_user_median_ms",
                        "put_assistant_median_ms", "get_input_median_ms", "peak_rss_mb"):
                assert r[key] is not None and r[key] > 0, (memory, r["embedding"], key, r[key])
            assert r["peak_rss_delta_mb"] is not None and r["peak_rss_delta_mb"] >= 0
    assert {(q["embedding"], q["size"]) for q in report["ratios"]} == {
        ("offline", speed.SMOKE_SIZES[0]), ("fake", speed.SMOKE_SIZES[0])
    }
    assert all(q["get_median_ms_stock_over_ours"] > 0 for q in report["ratios"])

    # --records: get()/search() latency of ours with N long-term records
    records = report["records"]
    assert [r["records"] for r in records["rows"]] == list(speed.SMOKE_RECORDS)
    for r in records["rows"]:
        for key in ("ingest_s", "ingest_msgs_per_s", "get_median_ms", "get_p95_ms",
                    "search_median_ms", "search_p95_ms", "put_median_ms",
                    "get_offline_estimate_ms", "peak_rss_mb"):
            assert r[key] is not None and r[key] > 0, ("records", key, r[key])
        assert r["search_found"] > 0
    for model in ("offline", "fake"):
        assert records["query_embedding"][model]["median_ms"] > 0
    assert "--records" in printed

    # --bulk: import rate of every memory
    bulk = report["bulk"]
    assert {r["memory"] for r in bulk} == set(_memories())
    for r in bulk:
        assert r["status"] == "ok", r
        assert r["done"] == speed.SMOKE_BULK
        for key in ("seconds", "msgs_per_s", "peak_rss_mb"):
            assert r[key] is not None and r[key] > 0, ("bulk", r["memory"], key, r[key])
    assert "--bulk" in printed

    # --plot: a PNG
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_triple_benchmark_runs_and_score_fusion_keeps_its_lead() -> None:
    """``bench.triples`` runs end to end, and the fusion the triple source uses by default
    (chosen by it, docs/benchmarks.md) still finds the answer first more often."""
    from bench import triples

    results = triples.run(hops=(1,))
    scores, rrf = results["runs"]["scores hops=1"], results["runs"]["rrf hops=1"]
    assert results["data_version"] == triples.DATA_VERSION
    assert scores["hit@1"] > rrf["hit@1"] and scores["mrr@5"] > rrf["mrr@5"]
    assert "scores hops=1" in triples.report(results)


def test_backend_benchmark_smoke_reports_sqlite_and_postgres_side_by_side(
    postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``bench.speed --backend sqlite,postgres --smoke`` (bench/pg_speed.py) runs end to
    end on the test server: history turns and throughput for both backends, and the
    COPY-loaded records of PostgreSQL."""
    # The throughput's app servers (a "spawn" process each) are forked from the tests'
    # preloaded server instead: processes all the same, their arguments pickled all the
    # same, without four new interpreters importing LlamaIndex (most of the test's time).
    preloaded, get_context = workers.forkserver(), multiprocessing.get_context
    monkeypatch.setattr(
        multiprocessing, "get_context", lambda method=None: preloaded if method == "spawn" else get_context(method)
    )
    plot = tmp_path / "pg-speed.png"
    report = speed.main(["--backend", "sqlite,postgres", "--smoke", "--url", postgres_url, "--plot", str(plot),
                         "--embed-threads", "share,cores"])  # fmt: skip

    assert {r["backend"] for r in report["turns"]} == {"sqlite", "postgres"}
    for r in report["turns"]:
        assert r["get_median_ms"] > 0 and r["put_median_ms"] > 0, r
    assert {(t["backend"], t["status"], t["embed_threads"]) for t in report["throughput"]} == {
        (backend, "ok", mode) for backend in ("sqlite", "postgres") for mode in ("share", "cores")
    }
    # One worker shares the cores with nobody: its threads are the CPUs it may use.
    assert {t["threads_per_worker"] for t in report["throughput"]} == {len(os.sched_getaffinity(0)), None}
    assert all(t["gets_per_s"] > 0 for t in report["throughput"])
    [loaded] = report["bulk"]
    assert loaded["records"] == 300 and loaded["search_found"] == 10 and loaded["get_median_ms"] > 0
    assert loaded["texts"] == "real"  # LoCoMo sentences, not the 16 words of before
    assert report["get_postgres_over_sqlite"] > 0 and report["query_embedding"]["median_ms"] > 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_many_users_benchmark_smoke_counts_each_ways_connections(postgres_url: str) -> None:
    """``bench.pg_many_users`` on the test server, small: memories opened from the URL
    hold a connection each; on the shared pool, at most the pool's."""
    from bench import pg_many_users

    rows = pg_many_users.run(postgres_url, users=5, requests=3, rounds=1)
    by_way = {r["way"]: r for r in rows}
    assert set(by_way) == {"url", "pool"}
    assert by_way["url"]["connections"] >= 5
    assert 1 <= by_way["pool"]["connections"] <= 4
    assert all(r["request_ms"] > 0 and r["gather_ms"] > 0 for r in rows)


def test_encryption_bench_compares_plain_and_encrypted_in_one_run(capsys: pytest.CaptureFixture[str]) -> None:
    from bench import encryption

    report = encryption.main(["--messages", "6", "--gets", "2", "--rounds", "1"])
    assert set(report["summary"]) == {"plain", "encrypted"}
    assert all(v > 0 for row in report["summary"].values() for v in row.values())
    assert report["ratios"]["put_median_ms"] == pytest.approx(
        report["summary"]["encrypted"]["put_median_ms"] / report["summary"]["plain"]["put_median_ms"]
    )
    assert "ratio" in capsys.readouterr().out
