"""Private on disk: a store's files are owner-only by default whatever the umask, a store
others can read is reported once, and the SQLite store is encrypted at rest on request
(SQLCipher) with every refusal clear and touching nothing."""

from __future__ import annotations

import logging
import os
import pickle
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import user
from llama_memory import ComposableMemory, EncryptionError, LlamaMemoryError, MemoryAdmin
from llama_memory.admin.cli import main as cli
from llama_memory.storage.privacy import ENCRYPTION_KEY_ENV
from llama_memory.storage.sqlite import SQLiteStore
from llama_memory.storage.sqlite.driver import SQLiteDriver

KEY = "correct horse battery staple"


def mode(path: Path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def snapshot(directory: Path) -> dict[str, tuple[bytes, int]]:
    """Every file under ``directory`` by name: its bytes and modification time."""
    return {
        str(p.relative_to(directory)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual umask, under which files are created world-readable."""
    previous = os.umask(0o022)
    yield
    os.umask(previous)


@pytest.fixture(autouse=True)
def no_environment_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENCRYPTION_KEY_ENV, raising=False)


# -- owner-only files -------------------------------------------------------------------------


def test_a_new_store_is_owner_only_whatever_the_umask(tmp_path: Path, embed_model, umask_022) -> None:
    store = tmp_path / "store"
    memory = ComposableMemory.from_defaults(user_id="u", path=store, embed_model=embed_model, triples=True)
    memory.put(user("I live in Paris and my sister is called Ana"))
    memory.get("where do I live?")
    # While it is open: the WAL files exist, made by SQLite after the database.
    files = ["memory.sqlite3", "memory.sqlite3-wal", "memory.sqlite3-shm", "chroma.lock", "chroma/chroma.sqlite3"]
    assert {name: oct(mode(store / name)) for name in files} == {name: oct(0o600) for name in files}
    assert (mode(store), mode(store / "chroma")) == (0o700, 0o700)
    memory.close()
    # Chroma writes its index segments under the umask; they are tightened when it opens.
    ComposableMemory.from_defaults(user_id="u", path=store, embed_model=embed_model, triples=True).close()
    shared = [p for p in store.rglob("*") if mode(p) & 0o077 and p.parent != store / "chroma" / p.parent.name]
    segments = [p for p in (store / "chroma").iterdir() if p.is_dir()]
    assert segments and all(mode(p) == 0o700 for p in segments)
    assert shared == []


def test_owner_only_false_leaves_the_modes_to_the_umask(tmp_path: Path, embed_model, umask_022, caplog) -> None:
    store = tmp_path / "store"
    memory = ComposableMemory.from_defaults(user_id="u", path=store, embed_model=embed_model, owner_only=False)
    memory.put(user("hello"))
    assert (mode(store), mode(store / "memory.sqlite3"), mode(store / "chroma")) == (0o755, 0o644, 0o755)
    memory.close()
    with caplog.at_level(logging.WARNING):
        ComposableMemory.from_defaults(user_id="u", path=store, embed_model=embed_model, owner_only=False).close()
    assert "other accounts" not in caplog.text


def test_a_store_others_can_read_logs_one_warning_with_the_command(tmp_path: Path, embed_model, caplog) -> None:
    store = tmp_path / "old"
    ComposableMemory.from_defaults(user_id="u", path=store, embed_model=embed_model).close()
    os.chmod(store, 0o755)
    os.chmod(store / "memory.sqlite3", 0o644)
    with caplog.at_level(logging.WARNING, logger="llama_memory"):
        for _ in range(2):
            ComposableMemory.from_defaults(user_id="u", path=store, embed_model=embed_model).close()
    warnings = [r.getMessage() for r in caplog.records if "other accounts" in r.getMessage()]
    assert len(warnings) == 1
    assert f"chmod go-rwx {store} && chmod -R go-rwx {store / 'memory.sqlite3'}" in warnings[0]
    assert "memory.sqlite3 (-rw-r--r--)" in warnings[0]
    assert mode(store / "memory.sqlite3") == 0o644  # reported, not changed behind the user's back
    assert os.system(warnings[0].split("owner-only with: ")[1].split(" (or pass")[0]) == 0  # the one-liner it gives
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="llama_memory"):
        MemoryAdmin(store).close()
    assert "other accounts" not in caplog.text


def test_exports_and_imported_stores_are_owner_only(tmp_path: Path, embed_model, umask_022, capsys) -> None:
    store = tmp_path / "store"
    memory = ComposableMemory.from_defaults(user_id="u", path=store, embed_model=embed_model)
    memory.put(user("my passport number is 123"))
    memory.close()
    export = tmp_path / "backup.jsonl"
    export.write_text("")
    os.chmod(export, 0o644)  # an existing file is tightened before the data goes in
    assert cli(["export", "--all", "-o", str(export), "--store", str(store)]) == 0
    assert mode(export) == 0o600 and "passport" in export.read_text()
    target = tmp_path / "imported"
    assert cli(["import", str(export), "--store", str(target)]) == 0
    assert (mode(target), mode(target / "memory.sqlite3")) == (0o700, 0o600)
    loose = tmp_path / "loose.jsonl"
    assert cli(["export", "--all", "-o", str(loose), "--store", str(store), "--no-owner-only"]) == 0
    assert mode(loose) == 0o644


# -- encryption at rest -----------------------------------------------------------------------


def test_an_encrypted_store_works_as_before_and_holds_no_plain_text(tmp_path: Path, embed_model) -> None:
    store = tmp_path / "store"
    memory = ComposableMemory.from_defaults(
        user_id="u", session_id="s", path=store, embed_model=embed_model, encryption_key=KEY
    )
    memory.put(user("My dentist appointment is on Tuesday in Lyon"))
    files = [store / n for n in ("memory.sqlite3", "memory.sqlite3-wal") if (store / n).exists()]
    assert files and not any(b"dentist" in f.read_bytes() for f in files)
    assert (store / "memory.sqlite3").read_bytes()[:16] != b"SQLite format 3\x00"
    memory.close()
    reopened = ComposableMemory.from_defaults(
        user_id="u", session_id="s", path=store, embed_model=embed_model, encryption_key=KEY
    )
    assert [m.content for m in reopened.get_all()] == ["My dentist appointment is on Tuesday in Lyon"]
    assert len(reopened.runtime.store.search_text("dentist Lyon", reopened.scope, "vector", 5)) == 1  # FTS5
    assert "dentist" in str(reopened.get("when is my dentist appointment?")[0].content)
    assert "correct horse" not in repr(reopened.settings) + str(reopened.to_dict())
    reopened.close()


def test_wrong_or_missing_keys_are_refused_saying_which_and_touch_nothing(tmp_path: Path, embed_model) -> None:
    encrypted, plain = tmp_path / "encrypted", tmp_path / "plain"
    ComposableMemory.from_defaults(user_id="u", path=encrypted, embed_model=embed_model, encryption_key=KEY).close()
    ComposableMemory.from_defaults(user_id="u", path=plain, embed_model=embed_model).close()
    before = {p: snapshot(p) for p in (encrypted, plain)}
    cases = [
        (encrypted, {"encryption_key": "not the key"}, "wrong key"),
        (encrypted, {}, "is encrypted"),
        (plain, {"encryption_key": KEY}, "is not encrypted"),
    ]
    for path, key, said in cases:
        with pytest.raises(EncryptionError, match=said):
            ComposableMemory.from_defaults(user_id="u", path=path, embed_model=embed_model, **key)
    assert {p: snapshot(p) for p in (encrypted, plain)} == before
    with pytest.raises(ValueError, match="in-memory"):
        ComposableMemory.from_defaults(user_id="u", embed_model=embed_model, encryption_key=KEY)


def test_the_key_is_never_written_and_comes_back_from_the_environment(
    tmp_path: Path, embed_model, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENCRYPTION_KEY_ENV, KEY)
    memory = ComposableMemory.from_defaults(user_id="u", session_id="s", path=tmp_path / "m", embed_model=embed_model)
    memory.put(user("remember the blue door"))
    data = memory.to_dict()
    pickled = pickle.dumps(memory)
    memory.close()
    assert data["encryption_key"] == {"required": True, "environment_variable": ENCRYPTION_KEY_ENV}
    assert KEY.encode() not in pickled and KEY not in str(data)
    monkeypatch.delenv(ENCRYPTION_KEY_ENV)
    with pytest.raises(LlamaMemoryError, match="encryption_key="):
        ComposableMemory.from_dict(data, embed_model=embed_model)
    with pytest.raises(LlamaMemoryError, match=ENCRYPTION_KEY_ENV):
        pickle.loads(pickled)
    restored = ComposableMemory.from_dict(data, embed_model=embed_model, encryption_key=KEY)
    assert [m.content for m in restored.get_all()] == ["remember the blue door"]
    restored.close()
    monkeypatch.setenv(ENCRYPTION_KEY_ENV, KEY)
    again = pickle.loads(pickled)
    assert [m.content for m in again.get_all()] == ["remember the blue door"]
    again.close()


#: A process that opens the store given as its argument and holds it until stdin closes.
HOLD_STORE = """
import sys
from llama_memory.storage.sqlite import SQLiteStore
store = SQLiteStore(sys.argv[1])
store.get_meta("x")
print("open", flush=True)
sys.stdin.read()
store.close()
"""


def test_encrypt_turns_a_plain_store_into_an_encrypted_one_losing_nothing(
    tmp_path: Path, embed_model, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    store = tmp_path / "store"
    memory = ComposableMemory.from_defaults(user_id="u", session_id="s", path=store, embed_model=embed_model)
    for i in range(12):
        memory.put(user(f"fact {i}: my locker number is {1000 + i}"))
    found = memory.runtime.store.search_text("locker", memory.scope, "vector", 50)
    # A gap in the records' rowids: the lexical index must keep pointing at the right rows.
    admin = MemoryAdmin(store)
    admin.delete_record("u", sorted(found)[3][0])
    admin.close()
    before = [m.content for m in memory.get_all()]
    memory.close()
    monkeypatch.setenv(ENCRYPTION_KEY_ENV, KEY)
    # In use, by another process or in this one: refused, nothing changed.
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_STORE, str(store)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, env={k: v for k, v in os.environ.items() if k != ENCRYPTION_KEY_ENV},
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        unchanged = snapshot(store)
        assert cli(["encrypt", "--store", str(store)]) == 1
        assert "in use" in capsys.readouterr().err
    finally:
        holder.communicate("")
    here = SQLiteStore(store, driver=SQLiteDriver())
    assert cli(["encrypt", "--store", str(store)]) == 1
    assert "open in this process" in capsys.readouterr().err
    here.close()
    assert (store / "memory.sqlite3").read_bytes()[:16] == b"SQLite format 3\x00"
    assert sorted(snapshot(store)) == sorted(k for k in unchanged if not k.endswith(("-wal", "-shm")))

    assert cli(["encrypt", "--store", str(store)]) == 0
    assert "copied and checked" in capsys.readouterr().out
    assert sorted(p.name for p in store.iterdir()) == ["chroma", "chroma.lock", "memory.sqlite3"]  # no backup left
    assert mode(store / "memory.sqlite3") == 0o600
    reopened = ComposableMemory.from_defaults(user_id="u", session_id="s", path=store, embed_model=embed_model)
    assert [m.content for m in reopened.get_all()] == before
    hits = reopened.runtime.store.search_text("1011", reopened.scope, "vector", 3)
    found_again = reopened.runtime.store.get_records([hits[0][0]], reopened.scope, "vector")
    assert [r.text for r in found_again.values()] == ["fact 11: my locker number is 1011"]
    reopened.close()
    assert cli(["encrypt", "--store", str(store)]) == 1
    assert "encrypted already" in capsys.readouterr().err
    monkeypatch.delenv(ENCRYPTION_KEY_ENV)
    assert cli(["users", "--store", str(store)]) == 1
    assert "is encrypted" in capsys.readouterr().err
