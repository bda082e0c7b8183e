"""The throwaway PostgreSQL of the tests and of ``python -m bench.postgres_server``."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

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


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_the_throwaway_server_stops_on_a_signal_even_in_the_background(signum: int) -> None:
    # A background job of a non-interactive shell starts with SIGINT ignored: so does
    # this process, as `python -m bench.postgres_server &` in a script would.
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.postgres_server"],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE, text=True,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )  # fmt: skip
    try:
        assert process.stdout is not None
        url = process.stdout.readline().strip()
        data = Path(process.stdout.readline().split()[2].rstrip(";"))
        with psycopg.connect(url) as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        assert data.is_dir()
        process.send_signal(signum)
        assert process.wait(timeout=30) == 0
        assert not data.exists()  # its data deleted
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(url, connect_timeout=2)
    finally:
        if process.poll() is None:  # it ignored the signal: stop it as the old code could be
            process.terminate()
            process.wait(timeout=30)
