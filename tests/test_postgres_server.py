"""The throwaway PostgreSQL of the tests and of ``python -m bench.postgres_server``."""

from __future__ import annotations

import psycopg

from bench.postgres_server import PostgresServer


def test_the_test_server_is_utf8_with_pgvector_and_never_runs_as_root(postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as conn:
        assert conn.execute("SHOW server_encoding").fetchone() == ("UTF8",)
        (version,) = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()
        assert tuple(int(p) for p in version.split(".")[:2]) >= (0, 8)  # iterative HNSW scans


def test_the_server_process_is_not_root_nor_on_the_default_port(postgres_server: PostgresServer) -> None:
    import os

    assert postgres_server.process is not None
    with open(f"/proc/{postgres_server.process.pid}/status") as status:
        uid = next(int(line.split()[1]) for line in status if line.startswith("Uid:"))
    assert uid != 0 or os.geteuid() != 0
    assert postgres_server.port != 5432
