"""The dialect layer under the algorithms written once for both SQL backends
(``llama_memory/storage/sql/``): a statement written with ``?`` reaches each driver in
its own style, and id lists longer than one SQLite statement can bind are split.

The algorithms' behaviour is the conformance suite's (tests/conformance/, every
backend); here is what only the dialect decides.
"""

from __future__ import annotations

import sqlite3

import pytest

from llama_memory import Scope
from llama_memory.storage.ports.profile import ProfileValue, ProfileWrite
from llama_memory.storage.ports.triples import NewTriple, TripleMention
from llama_memory.storage.sqlite import SQLiteStore
from llama_memory.storage.sqlite.bundle import SQLiteProfileRows, SQLiteTripleTimeline
from llama_memory.storage.sqlite.connection import SQLITE

T0 = 1_700_000_000.0
ALICE = Scope(user_id="alice")
#: More ids than one statement binds under SQLite's default limit before 3.32 (999).
MANY = 5_000


def _store() -> SQLiteStore:
    """An in-memory store held to 999 parameters a statement (SQLite's default limit
    before 3.32, and what some builds still have; this machine's allows 250,000)."""
    if not hasattr(sqlite3.Connection, "setlimit"):  # Python 3.10
        pytest.skip("sqlite3.Connection.setlimit needs Python 3.11")
    store = SQLiteStore(None)
    store._conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, 999)
    return store


def test_a_statement_reaches_each_driver_in_its_placeholder_style() -> None:
    from llama_memory.storage.postgres.dialect import POSTGRES

    statement = "SELECT id FROM t WHERE name LIKE 'a%' AND id = ? AND n > ?"
    assert SQLITE.sql(statement) == statement
    # psycopg reads % as the start of a placeholder: a literal one is doubled.
    assert POSTGRES.sql(statement) == "SELECT id FROM t WHERE name LIKE 'a%%' AND id = %s AND n > %s"
    assert POSTGRES.in_list("id", ["a", "b"]) == ("id = ANY(?)", [["a", "b"]])
    assert SQLITE.in_list("id", ["a", "b"]) == ("id IN (?,?)", ["a", "b"])


def test_batches_keep_every_value_once_in_order() -> None:
    values = [str(i) for i in range(1_234)]
    batches = list(SQLITE.batches(values))
    assert [len(b) for b in batches] == [500, 500, 234]
    assert [v for b in batches for v in b] == values
    assert list(SQLITE.batches([])) == []


def _triple(id: str, at: float) -> NewTriple:
    return NewTriple(
        id=id, tenant_id="default", user_id="alice", subject="Alice", predicate="likes",
        object=id, subject_key="alice", predicate_key="likes", object_key=id, valid_from=at,
        valid_to=None, superseded_by=None, ttl=10.0, expires_at=at + 10.0,
        search_text=f"Alice likes {id}", mention=TripleMention("s1", ("m1",), at, at, "api"),
    )  # fmt: skip


@pytest.mark.parametrize("where", ["first", "last"])
def test_triple_writes_and_reads_take_more_ids_than_a_sqlite_statement_binds(where: str) -> None:
    store = _store()
    timeline = SQLiteTripleTimeline(store)
    for n in range(3):
        timeline.insert(_triple(f"t{n}", T0 + n))
    others = [f"missing-{i}" for i in range(MANY)]
    ids = ["t0", "t1", *others] if where == "first" else [*others, "t0", "t1"]

    timeline.mark_indexed(ids)
    assert timeline.index_flags(ALICE) == {("default", "alice"): {"t0": True, "t1": True, "t2": False}}
    assert timeline.current_ids(ALICE, ids) == {"t0", "t1"}
    timeline.refresh_expiry(ids, T0 + 100)
    alive = {t.id: t.expires_at for t in timeline.select(ALICE, T0 + 105)}
    assert alive == {"t0": T0 + 110, "t1": T0 + 110}  # t2 expired at T0 + 12
    timeline.end(ids, T0 + 106, None)
    assert timeline.current_ids(ALICE, ["t0", "t1", "t2"]) == {"t2"}
    store.close()


def test_profile_expiry_refresh_takes_more_ids_than_a_sqlite_statement_binds() -> None:
    store = _store()
    rows = SQLiteProfileRows(store)
    written = rows.update(
        ALICE,
        T0,
        lambda old: ProfileWrite(
            insert=(ProfileValue("diet", "set", "vegan"), ProfileValue("city", "set", "Paris")),
            written_at=T0, ttl=10.0, expires_at=T0 + 10.0,
        ),  # fmt: skip
    )
    ids = [*range(10_000, 10_000 + MANY), written[1].id]
    rows.refresh_expiry(ids, T0 + 100)
    assert [(r.path, r.value) for r in rows.current(ALICE, T0 + 105)] == [("city", "Paris")]
    store.close()
