"""The one ``backend`` fixture: every conformance test runs once per storage backend.

SQLite (``llama_memory.storage.sqlite`` + an in-process Chroma for the dense index), the
same with its file encrypted (``sqlite-encrypted``, SQLCipher, when the ``encrypted``
extra is installed) and PostgreSQL (``llama_memory.storage.postgres`` with pgvector, on the test server), the
latter twice: as sync calls run, and as async calls run (``postgres-bridged``: the test's
body inside ``run_bridged`` on an event loop, every statement awaited on the loop's
``AsyncConnectionPool``). Every port implementation under test (the ``Storage`` facade,
the dense index, the triple timeline, the profile rows) is the one the backend's bundle
gives (``llama_memory.storage.registry``), as a memory gets it. A new backend adds one
entry to :data:`BACKENDS` (how to open a store on a location) and must pass every test
of this directory unchanged: records, chat log, jobs, transactions, vector index,
triples, profile and instructions all take this fixture.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Optional

import pytest

from llama_memory.storage.backend import Location
from llama_memory.storage.ports import VectorIndex
from llama_memory.storage.registry import backend_of, open_backend
from llama_memory.storage.sql.profile import ProfileRows
from llama_memory.storage.sql.store import Storage
from llama_memory.storage.sql.triples import TripleTimeline


class Backend:
    """One storage backend under test: opens store objects on one location (several
    objects on one location stand for several processes), dense indexes, and the
    triple timeline and profile rows ports on a new store object each, all from the
    backend's bundle."""

    def __init__(self, name: str, open_store: Callable[[], Storage]) -> None:
        self.name = name
        self._open_store = open_store
        self._opened: list[Storage] = []
        self._index_store: Optional[Storage] = None

    def open(self) -> Storage:
        """A new store object on this backend's location (the same data each time)."""
        store = self._open_store()
        self._opened.append(store)
        return store

    def index(self) -> VectorIndex:
        """A dense index of its own (one store object serves the indexes; an index kept
        apart from the store is a private one in memory)."""
        if self._index_store is None:
            self._index_store = self.open()
        return backend_of(self._index_store).vector_index("conformance")

    def triples(self) -> TripleTimeline:
        """The triple timeline on a new store object (another connection, as another
        process would have)."""
        return backend_of(self.open()).triple_timeline()

    def profile_rows(self, document: str = "profile") -> ProfileRows:
        """The profile rows on a new store object (another connection); ``document``
        ``"instructions"``: the rows of the user's instructions."""
        return backend_of(self.open()).profile_rows(document)

    def close(self) -> None:
        """Close every store opened."""
        for store in self._opened:
            try:
                store.close()
            except Exception:
                pass


def _sqlite(location: Path) -> Backend:
    return Backend("sqlite", lambda: open_backend(Location(path=str(location))).store)


def _sqlite_encrypted(location: Path) -> Backend:
    """The SQLite backend with its file encrypted through SQLCipher (the ``encrypted``
    extra): every test runs unchanged on it."""
    from llama_memory.storage.sqlite import SQLiteStore
    from llama_memory.storage.sqlite.driver import SQLCipherDriver

    backend = _sqlite(location)
    backend.name = "sqlite-encrypted"
    backend._open_store = lambda: SQLiteStore(location, driver=SQLCipherDriver(ENCRYPTION_TEST_KEY))
    return backend


#: The key of the encrypted SQLite backend's stores: a raw 256-bit key (``x'<64 hex>'``),
#: which SQLCipher uses as is, so each of the many opens skips the passphrase's key
#: derivation (PBKDF2, about 0.15 s); tests/unit/test_privacy.py opens with passphrases.
ENCRYPTION_TEST_KEY = "x'" + "2b" * 32 + "'"


def _postgres(url: str) -> Backend:
    from llama_memory.storage.postgres import PostgresStore

    # Two connections per store object: a test opens several on one database server.
    return Backend("postgres", lambda: PostgresStore(url, max_size=2))


def _postgres_bridged(url: str) -> Backend:
    backend = _postgres(url)
    backend.name = BRIDGED
    return backend


#: The PostgreSQL backend with every test body run as an async call runs (``aget``,
#: ``aput``): inside :func:`~llama_memory.core.asyncbridge.run_bridged` on an event loop, so
#: each statement is awaited on the loop's ``AsyncConnectionPool`` through the bridged
#: connection (storage/postgres/bridged.py) instead of the sync pool.
BRIDGED = "postgres-bridged"

#: Every backend the suite runs on, by name, given its location: a directory for
#: SQLite, the URL of a new database on the test server for PostgreSQL.
BACKENDS: dict[str, Callable[[Any], Backend]] = {
    "sqlite": _sqlite,
    "postgres": _postgres,
    BRIDGED: _postgres_bridged,
}
if importlib.util.find_spec("sqlcipher3") is not None:  # the `encrypted` extra (dev installs it)
    BACKENDS["sqlite-encrypted"] = _sqlite_encrypted


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each backend in turn, on a fresh location (PostgreSQL: a new database on the
    session's server, started by the first test that needs it)."""
    on_server = request.param.startswith("postgres")
    location = request.getfixturevalue("postgres_url") if on_server else tmp_path / "store"
    made = BACKENDS[request.param](location)
    yield made
    made.close()


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Optional[bool]:
    """Run the body of a test on the bridged backend inside ``run_bridged`` on a new event
    loop (as ``asyncio.run`` in an app); threads the test starts run sync, as they would."""
    made = pyfuncitem.funcargs.get("backend")
    if not isinstance(made, Backend) or made.name != BRIDGED:
        return None
    from llama_memory.core.asyncbridge import run_bridged

    arguments = {name: pyfuncitem.funcargs[name] for name in inspect.signature(pyfuncitem.obj).parameters}
    asyncio.run(run_bridged(pyfuncitem.obj, **arguments))
    # The body's statements went through a loop's async pool (a store opens one on its
    # first bridged statement), not the sync pool.
    assert any(store._async_pools for store in made._opened), "no statement of the test ran bridged"  # type: ignore[attr-defined]
    return True
