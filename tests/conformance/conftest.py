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


#: Every backend the suite runs on, by name.
BACKENDS: dict[str, Callable[[Path], Backend]] = {"sqlite": _sqlite}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """Each backend in turn, on a fresh location."""
    made = BACKENDS[request.param](tmp_path / "store")
    yield made
    made.close()
