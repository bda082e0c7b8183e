"""Shared fixtures: real storage in temporary directories, the real offline embedding."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench.chroma_server import ChromaServer
from bench.postgres_server import PostgresServer
from helpers import memory_factory
from llama_memory import OfflineEmbedding, default_embedding


@pytest.fixture(scope="session")
def embed_model() -> OfflineEmbedding:
    """The real offline MiniLM model, loaded once for the whole run."""
    return default_embedding()


@pytest.fixture
def memory_dir(tmp_path: Path) -> Path:
    """A fresh memory directory."""
    return tmp_path / "memory"


@pytest.fixture
def make_memory(memory_dir: Path, embed_model: OfflineEmbedding):
    """Build persistent memories on one directory; closes them at the end."""
    with memory_factory(embed_model, path=memory_dir) as make:
        yield make


@pytest.fixture(params=["sqlite", "postgres"])
def make_memory_on(request: pytest.FixtureRequest, memory_dir: Path, embed_model: OfflineEmbedding):
    """``make_memory`` on each backend in turn: a SQLite directory, then a database of
    the test PostgreSQL server."""
    where = {"store": request.getfixturevalue("postgres_url")} if request.param == "postgres" else {"path": memory_dir}
    with memory_factory(embed_model, **where) as make:
        yield make


@pytest.fixture(scope="session")
def chroma_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChromaServer]:
    """A real Chroma server on loopback for the whole run, started by the first test
    that asks for it (so only server-mode tests pay its start-up) and stopped at the end."""
    server = ChromaServer(tmp_path_factory.mktemp("chroma-server") / "data").start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """A real PostgreSQL with pgvector on a free loopback port for the whole run
    (bench/postgres_server.py), started by the first test that asks for it and stopped
    (its data deleted) at the end.

    Autovacuum is off: its ANALYZE of the earlier tests' databases commits transactions
    of its own, which the change token (server-wide transaction ids) must count as
    another's write, so a test of what moves the token would race it. Tests that need
    planner statistics run ANALYZE themselves, as the library's copy does."""
    server = PostgresServer(settings={"autovacuum": "off"}).start()
    yield server
    server.stop()


@pytest.fixture
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """The URL of a new, empty database (with the ``vector`` extension) on the test
    server: each test has its own. It is dropped after the test unless a connection
    is still open to it (a memory the test left open): the run's databases would
    otherwise pile up to gigabytes, written out to disk during the run and deleted
    at its end, which took minutes on a loaded machine."""
    _postgres_databases[0] += 1
    name = f"test_{_postgres_databases[0]}"
    yield postgres_server.create_database(name)
    _drop_unused_database(postgres_server, name)


def _drop_unused_database(server: PostgresServer, name: str) -> None:
    """Drop database ``name`` when no session is connected to it (DROP DATABASE would
    otherwise wait for them, then fail)."""
    import psycopg
    from psycopg import sql

    if server.process is None or server.process.poll() is not None:
        return  # a test stopped the server
    with psycopg.connect(server.url, autocommit=True) as conn:
        sessions = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,))
        if sessions.fetchone() == (0,):
            try:
                conn.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
            except psycopg.errors.ObjectInUse:
                pass  # a session came after all: the database stays, as it did before


_postgres_databases = [0]


@pytest.fixture
def postgres_statements(monkeypatch: pytest.MonkeyPatch) -> Counter[str]:
    """The PostgreSQL stores' statements while the test runs, counted by the action
    name the store gives each ("search vectors", "read pending records"...)."""
    from llama_memory.storage.postgres.connection import PostgresConnection  # the extra

    counted: Counter[str] = Counter()
    query = PostgresConnection.query

    def counting(self: PostgresConnection, action: str, *args: Any, **kwargs: Any) -> Any:
        counted[action] += 1
        return query(self, action, *args, **kwargs)

    monkeypatch.setattr(PostgresConnection, "query", counting)
    return counted


def pytest_sessionstart(session: pytest.Session) -> None:
    """A test file directly in tests/ would be run by no ``make test-<folder>`` and by
    no ``make test`` (pyproject's testpaths name the folders): refuse it, saying where
    it goes."""
    stray = sorted(path.name for path in Path(__file__).parent.glob("test_*.py"))
    if stray:
        raise pytest.UsageError(
            f"{', '.join(stray)} directly in tests/: move each into the folder of its kind "
            "(unit, conformance, integration, agents, docs, bench; tests/README.md)"
        )
