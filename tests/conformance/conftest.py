"""The one ``backend`` fixture: every conformance test runs once per storage backend.

Today the SQLite backend (``llama_memory.storage.sqlite`` + an in-process Chroma for
the dense index). A new backend (PostgreSQL, issue 15) adds a :class:`Backend` to
:data:`BACKENDS`, giving every port implementation (the ``Storage`` facade, the dense
index, the triple timeline, the profile rows), and must pass every test of this
directory unchanged: records, chat log, jobs, transactions, vector index, triples and
profile all take this fixture.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from llama_memory.storage.ports import ProfileRows, Storage, VectorIndex
from llama_memory.storage.ports.triples import TripleTimeline


class Backend:
    """One storage backend under test: opens store objects on one location (several
    objects on one location stand for several processes), dense indexes, and the
    triple timeline and profile rows ports on a new store object each."""

    def __init__(
        self,
        name: str,
        open_store: Callable[[], Storage],
        open_index: Callable[[], VectorIndex],
        triples_on: Callable[[Storage], TripleTimeline],
        profile_on: Callable[[Storage], ProfileRows],
    ) -> None:
        self.name = name
        self._open_store = open_store
        self._open_index = open_index
        self._triples_on = triples_on
        self._profile_on = profile_on
        self._opened: list[Storage] = []

    def open(self) -> Storage:
        """A new store object on this backend's location (the same data each time)."""
        store = self._open_store()
        self._opened.append(store)
        return store

    def index(self) -> VectorIndex:
        """A dense index of its own."""
        return self._open_index()

    def triples(self) -> TripleTimeline:
        """The triple timeline on a new store object (another connection, as another
        process would have)."""
        return self._triples_on(self.open())

    def profile_rows(self) -> ProfileRows:
        """The profile rows on a new store object (another connection)."""
        return self._profile_on(self.open())

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
    from llama_memory.storage.sqlite.profile import SQLiteProfileRows
    from llama_memory.storage.sqlite.triples import SQLiteTripleTimeline

    def sqlite_store(store: Storage) -> SQLiteStore:
        assert isinstance(store, SQLiteStore)
        return store

    return Backend(
        "sqlite",
        lambda: SQLiteStore(location),
        lambda: DenseIndex(ephemeral_client(), DenseIndex.unique_prefix("conformance")),
        lambda store: SQLiteTripleTimeline(sqlite_store(store)),
        lambda store: SQLiteProfileRows(sqlite_store(store)),
    )


#: Every backend the suite runs on, by name.
BACKENDS: dict[str, Callable[[Path], Backend]] = {"sqlite": _sqlite}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each backend in turn, on a fresh location."""
    made = BACKENDS[request.param](tmp_path / "store")
    yield made
    made.close()
