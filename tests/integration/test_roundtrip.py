"""Export, import and copy are lossless for any store content, on both backends.

A message is the k-th copy of its (session, time, content) in the file, whatever the
batch it falls in: one ``put_messages`` call gives all its messages the same time, so
"OK." said 600 times in one call is 600 messages, not one. The property test draws
sessions with repeated texts, shared times and sizes across the import's batch
boundary (the batch size is lowered so that examples stay small), and checks that
export -> import -> export gives the same rows, that importing again adds nothing, and
that ``copy`` into PostgreSQL holds the same rows.

``LLAMA_MEMORY_LONG_TESTS=1`` runs 200 examples per backend instead of 25.
"""

from __future__ import annotations

import itertools
import json
import os
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers import assistant, user
from llama_memory import ComposableMemory, MemoryAdmin, OfflineEmbedding
from llama_memory.admin.cli import main
from llama_memory.admin.copying import copy_store
from llama_memory.admin.memory_admin import EXPORT_FORMAT, EXPORT_VERSION
from llama_memory.storage.sqlite import DB_FILENAME

LONG = os.environ.get("LLAMA_MEMORY_LONG_TESTS") == "1"
EXAMPLES = settings(
    max_examples=200 if LONG else 25,
    deadline=None,
    derandomize=not LONG,  # make test: the same examples on every run
    # One store per test: each example writes to tenants of its own (see _tenant).
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
TEXTS = ("OK.", "yes", "question 1", "question 2", "Thanks!")
_tenants = itertools.count()


def _tenant() -> str:
    """A tenant no earlier example used: an empty store, within the test's store."""
    return f"t{next(_tenants)}"


def _pairs_store(path: Path, embed_model: OfflineEmbedding) -> None:
    """The finding: 600 pairs "question i" / "OK." in one put_messages call, and a
    second session."""
    memory = ComposableMemory.from_defaults(user_id="u", session_id="s1", path=path, embed_model=embed_model)
    memory.put_messages([m for i in range(600) for m in (user(f"question {i}"), assistant("OK."))])
    memory.close()
    memory = ComposableMemory.from_defaults(user_id="u", session_id="s2", path=path, embed_model=embed_model)
    memory.put_messages([user("another session")])
    memory.close()


def _messages(store: str, tenant: str = "default") -> list[tuple[str, int]]:
    with MemoryAdmin(store, tenant) as admin:
        return [(s.session_id, s.messages) for s in admin.sessions("u")]


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory, embed_model: OfflineEmbedding) -> Path:
    """The finding's store and its export (``u.jsonl`` beside it)."""
    base = tmp_path_factory.mktemp("pairs")
    _pairs_store(base / "memory", embed_model)
    assert main(["export", "u", "-o", str(base / "u.jsonl"), "--store", str(base / "memory")]) == 0
    return base


def test_a_backup_of_repeated_messages_restores_every_message(
    pairs: Path, embed_model: OfflineEmbedding, capsys: pytest.CaptureFixture[str]
) -> None:
    """600 pairs with one created_at: the import used to take the "OK."s past its first
    batch of 500 rows as already held (850 of 1,200)."""
    new = pairs / "restored"
    assert main(["import", str(pairs / "u.jsonl"), "--store", str(new), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["added"]["message"] == 1201
    assert _messages(str(new)) == _messages(str(pairs / "memory")) == [("s1", 1200), ("s2", 1)]
    assert main(["import", str(pairs / "u.jsonl"), "--store", str(new), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["added"] == {}
    assert main(["export", "u", "-o", str(pairs / "again.jsonl"), "--store", str(new)]) == 0
    assert (pairs / "again.jsonl").read_text() == (pairs / "u.jsonl").read_text()


def test_a_backup_of_repeated_messages_restores_into_postgres(
    pairs: Path, postgres_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import", str(pairs / "u.jsonl"), "--store", postgres_url]) == 0
    assert "1201 messages" in capsys.readouterr().out
    assert _messages(postgres_url) == [("s1", 1200), ("s2", 1)]


# --------------------------------------------------------------------------- the property


@st.composite
def exports(draw: st.DrawFn) -> list[dict[str, Any]]:
    """An export's rows (the header first): one to two users, each with up to three
    sessions whose messages come in put calls (one time each) of repeated texts. The
    rows are in the order an export gives: by user (sorted), then as written."""
    users = sorted(draw(st.lists(st.sampled_from(["u1", "u2"]), min_size=1, max_size=2, unique=True)))
    rows: list[dict[str, Any]] = []
    clock = draw(st.sampled_from([1.0, 1700000000.25]))
    for user_id in users:
        calls = draw(
            st.lists(
                st.tuples(
                    st.sampled_from(["s1", "s2", "s3"]),
                    st.lists(st.tuples(st.sampled_from(TEXTS), st.booleans()), min_size=1, max_size=9),
                    st.booleans(),  # a new time, or the previous call's (a coarse clock)
                ),
                min_size=1,
                max_size=6,
            )
        )
        for session, messages, tick in calls:
            clock += 1.5 if tick else 0.0
            for text, by_user in messages:
                message = (user(text) if by_user else assistant(text)).model_dump(mode="json")
                rows.append(
                    {"kind": "message", "user": user_id, "session": session, "created_at": clock, "message": message}
                )
    header = {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "tenant": "x", "users": users}
    return [header, *rows]


def _round_trip(store: str, rows: list[dict[str, Any]], batch: int, embed_model: OfflineEmbedding) -> None:
    """Import ``rows`` into a new tenant of ``store`` in batches of ``batch``; export;
    import the export again (another batch size); export again."""
    tenant = _tenant()
    with MemoryAdmin(store, tenant, create=True, embed_model=embed_model) as admin:
        added = admin.import_rows(rows, batch_size=batch)
        assert added == {"message": len(rows) - 1}
        exported = list(admin.export_rows())
        assert exported[1:] == rows[1:]
        assert admin.import_rows(exported, batch_size=batch + 1) == {}
        assert admin.import_rows(exported[: len(exported) // 2 + 1], batch_size=1) == {}
        assert list(admin.export_rows()) == exported


@given(rows=exports(), batch=st.integers(min_value=1, max_value=7))
@EXAMPLES
def test_export_import_export_is_lossless_on_sqlite(
    tmp_path: Path, embed_model: OfflineEmbedding, rows: list[dict[str, Any]], batch: int
) -> None:
    _round_trip(str(tmp_path / "memory"), rows, batch, embed_model)


@given(rows=exports(), batch=st.integers(min_value=1, max_value=7))
@EXAMPLES
def test_export_import_export_is_lossless_on_postgres(
    postgres_url: str, embed_model: OfflineEmbedding, rows: list[dict[str, Any]], batch: int
) -> None:
    _round_trip(postgres_url, rows, batch, embed_model)


@given(rows=exports(), batch=st.integers(min_value=1, max_value=7))
@EXAMPLES
def test_copy_into_postgres_holds_the_same_rows(
    tmp_path: Path, postgres_url: str, embed_model: OfflineEmbedding, rows: list[dict[str, Any]], batch: int
) -> None:
    tenant = _tenant()
    directory = tmp_path / tenant
    with MemoryAdmin(directory, tenant, create=True) as admin:
        admin.import_rows(rows, batch_size=batch)
        exported = list(admin.export_rows())
        counts = admin.stats().counts
    copy_store(directory, postgres_url, tenant_id=tenant, embed_model=embed_model)
    with MemoryAdmin(postgres_url, tenant) as copied:
        assert list(copied.export_rows()) == exported
        assert (copied.stats().counts.sessions, copied.stats().counts.messages) == (counts.sessions, counts.messages)


# --------------------------------------------------------------------------- text no store can hold


def _store_with_nul(path: Path, embed_model: OfflineEmbedding) -> None:
    """A SQLite store holding a NUL in a message and in its record, as versions whose
    put() took NUL left it (written here behind the memory's back: put() refuses it)."""
    memory = ComposableMemory.from_defaults(user_id="alice", session_id="s1", path=path, embed_model=embed_model)
    memory.put_messages([user("my cello NULHERE case"), assistant("Noted.")])
    memory.close()
    with sqlite3.connect(path / DB_FILENAME) as conn:
        # In the chat log's JSON, NUL is the escape \u0000; in the record's text, itself.
        conn.execute("UPDATE chat_messages SET message_json = replace(message_json, 'NULHERE', '\\u0000')")
        conn.execute("UPDATE records SET text = replace(text, 'NULHERE', char(0))")
    with MemoryAdmin(path) as admin:
        assert [r.text for r in admin.records("alice")][0] == "my cello \x00 case"


def test_copy_and_import_of_a_store_holding_nul_replace_it_and_say_so(
    tmp_path: Path, postgres_url: str, embed_model: OfflineEmbedding, capsys: pytest.CaptureFixture[str]
) -> None:
    """Such a store used to stop `copy` at that user (PostgreSQL refuses NUL), and its
    export could not be imported into PostgreSQL."""
    directory = tmp_path / "memory"
    _store_with_nul(directory, embed_model)
    said = "user 'alice': 2 NUL or invalid characters replaced by U+FFFD"

    assert main(["copy", "--from", str(directory), "--to", postgres_url]) == 0
    assert said in capsys.readouterr().out
    assert main(["export", "alice", "-o", str(tmp_path / "a.jsonl"), "--store", str(directory)]) == 0
    assert main(["import", str(tmp_path / "a.jsonl"), "--store", postgres_url, "--tenant", "again"]) == 0
    assert said in capsys.readouterr().out
    assert main(["import", str(tmp_path / "a.jsonl"), "--store", str(tmp_path / "new"), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["replaced"] == {"alice": 2}

    for store, tenant in ((postgres_url, "default"), (postgres_url, "again"), (str(tmp_path / "new"), "default")):
        with MemoryAdmin(store, tenant, embed_model=embed_model) as admin:
            assert [r.text for r in admin.records("alice")][0] == "my cello \ufffd case"
            assert [m.content for m in admin.memory("alice", "s1").get_all()][0] == "my cello \ufffd case"
            assert "my cello \ufffd case" in admin.search("alice", "cello")[0].text
    # Imported again: the replaced text is what the store holds, so nothing is new.
    assert main(["import", str(tmp_path / "a.jsonl"), "--store", postgres_url, "--tenant", "again", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["added"] == {}
