"""The ``backend`` fixture: every conformance test runs once per storage backend.

Today the SQLite backend (``llama_memory.storage.sqlite`` + an in-process Chroma for
the dense index). A new backend (PostgreSQL, issue 15) adds a :class:`Backend` to
:data:`BACKENDS` and must pass every test here unchanged.

Where the rest goes: the triple timeline's conformance tests (issue 14, part T) go in
``test_triples.py`` and the profile rows' (part P) in ``test_profile.py`` of this
directory, using ``backend.open()`` and building their port implementation on it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from llama_memory.storage.ports import Storage, VectorIndex


class Backend:
    """One storage backend under test: opens store objects on one location (several
    objects on one location stand for several processes) and dense indexes."""

    def __init__(
        self,
        name: str,
        open_store: Callable[[], Storage],
        open_index: Callable[[], VectorIndex],
    ) -> None:
        self.name = name
        self._open_store = open_store
        self._open_index = open_index
        self._opened: list[Storage] = []

    def open(self) -> Storage:
        """A new store object on this backend's location (the same data each time)."""
        store = self._open_store()
        self._opened.append(store)
        return store

    def index(self) -> VectorIndex:
        """A dense index of its own."""
        return self._open_index()

    def close(self) -> None:
        """Close every store opened."""
        for store in self._opened:
            try:
                store.close()
            except Exception:
                pass


def _sqlite(location: Path) -> Backend:
    from llama_memory.storage.chroma import DenseIndex, ephemeral_client
    from llama_memory.storage.sqlite import SQLiteStore

    return Backend(
        "sqlite",
        lambda: SQLiteStore(location),
        lambda: DenseIndex(ephemeral_client(), DenseIndex.unique_prefix("conformance")),
    )


def _postgres(url: str) -> Backend:
    from llama_memory.storage.postgres import PgVectorIndex, PostgresStore

    index_store: list[PostgresStore] = []

    def open_index() -> VectorIndex:
        if not index_store:  # one store object serves the indexes; closed with the rest
            index_store.append(backend.open())
        return PgVectorIndex(index_store[0], "conformance")

    backend = Backend("postgres", lambda: PostgresStore(url, max_size=2), open_index)
    return backend


#: Every backend the suite runs on, by name, given its location: a directory for
#: SQLite, the URL of a new database on the test server for PostgreSQL.
BACKENDS: dict[str, Callable[[Any], Backend]] = {"sqlite": _sqlite, "postgres": _postgres}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each backend in turn, on a fresh location (PostgreSQL: a new database on the
    session's server, started by the first test that needs it)."""
    location = request.getfixturevalue("postgres_url") if request.param == "postgres" else tmp_path / "store"
    made = BACKENDS[request.param](location)
    yield made
    made.close()
