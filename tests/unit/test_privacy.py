"""Private on disk: a store's files are owner-only by default whatever the umask, a store
others can read is reported once, and the SQLite store is encrypted at rest on request
(SQLCipher) with every refusal clear and touching nothing."""

from __future__ import annotations

import hashlib
import logging
import os
import pickle
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from helpers import user
from llama_memory import ComposableMemory, EncryptionError, LlamaMemoryError, MemoryAdmin
from llama_memory.admin.cli import main as cli
from llama_memory.blocks import MemoryBlocks
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
    # Opened through the blocks, the advice names where they take the key too.
    with pytest.raises(EncryptionError, match=r"encryption_key= where it is opened \(.*MemoryBlocks\.open"):
        MemoryBlocks.open(user_id="u", path=encrypted, embed_model=embed_model).memory  # noqa: B018
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
    with pytest.raises(EncryptionError, match="is encrypted, and its key is never written"):  # as a missing key is
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
import time
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


#: A process that opens the plain store given as its argument, writes (so that its -wal
#: holds pages not yet in the database) and holds it until stdin closes.
HOLD_AND_WRITE = """
import sys
import time
from llama_memory.storage.sqlite import SQLiteStore
store = SQLiteStore(sys.argv[1])
store.set_meta("held by", "another process")
print("open", flush=True)
sys.stdin.read()
store.close()
"""


def test_encrypt_refuses_a_store_another_process_holds_before_touching_it(
    tmp_path: Path, embed_model, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    """Asked of SQLite's locks at once: a store another process has open is refused
    before anything is read, checkpointed or copied (its -wal keeps every byte), and
    the message says so truly."""
    store = tmp_path / "store"
    ComposableMemory.from_defaults(user_id="u", path=store, embed_model=embed_model).close()
    monkeypatch.setenv(ENCRYPTION_KEY_ENV, KEY)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_AND_WRITE, str(store)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        text=True, env={k: v for k, v in os.environ.items() if k != ENCRYPTION_KEY_ENV},
    )  # fmt: skip
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "open"
        before = snapshot(store)
        assert before["memory.sqlite3-wal"][0], "the holder's write is in its -wal"
        assert cli(["encrypt", "--store", str(store)]) == 1
        said = capsys.readouterr().err
        assert "in use by another process" in said and "nothing was read or changed" in said, said
        assert snapshot(store) == before  # the -wal untouched, no copy begun
    finally:
        holder.communicate("")
    assert cli(["encrypt", "--store", str(store)]) == 0  # once it is free
    from llama_memory.storage.sqlite.driver import SQLCipherDriver

    reopened = SQLiteStore(store, driver=SQLCipherDriver(KEY))
    assert reopened.get_meta("held by") == "another process"  # the holder's write, kept
    reopened.close()


@pytest.mark.parametrize("passphrase", ["", "   ", "\t\n"])
def test_empty_and_blank_passphrases_are_refused_with_a_value_error(
    tmp_path: Path, embed_model, monkeypatch: pytest.MonkeyPatch, capsys, passphrase: str
) -> None:
    store = tmp_path / "store"
    with pytest.raises(ValueError, match="encryption_key is (empty|blank)") as refused:
        ComposableMemory.from_defaults(user_id="u", path=store, embed_model=embed_model, encryption_key=passphrase)
    assert type(refused.value) is ValueError  # said plainly, not a validation dump
    with pytest.raises(ValueError, match="(empty|blank)"):
        MemoryAdmin(store, create=True, encryption_key=passphrase)
    assert not store.exists()
    if passphrase:  # an empty variable is an unset one; a blank one is a mistake
        monkeypatch.setenv(ENCRYPTION_KEY_ENV, passphrase)
        with pytest.raises(ValueError, match=f"{ENCRYPTION_KEY_ENV} environment variable is blank"):
            ComposableMemory.from_defaults(user_id="u", path=store, embed_model=embed_model)
        assert not store.exists()
        monkeypatch.delenv(ENCRYPTION_KEY_ENV)
        ComposableMemory.from_defaults(user_id="u", path=store, embed_model=embed_model).close()
        monkeypatch.setenv(ENCRYPTION_KEY_ENV, passphrase)
        for command in ("users", "encrypt"):
            assert cli([command, "--store", str(store)]) == 1
            assert f"{ENCRYPTION_KEY_ENV} environment variable is blank" in capsys.readouterr().err
        assert (store / "memory.sqlite3").read_bytes()[:16] == b"SQLite format 3\x00"


def test_the_command_line_names_the_environment_variable_not_python_arguments(
    tmp_path: Path, embed_model, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    encrypted, plain = tmp_path / "encrypted", tmp_path / "plain"
    ComposableMemory.from_defaults(user_id="u", path=encrypted, embed_model=embed_model, encryption_key=KEY).close()
    ComposableMemory.from_defaults(user_id="u", path=plain, embed_model=embed_model).close()
    monkeypatch.delenv(ENCRYPTION_KEY_ENV, raising=False)
    assert cli(["users", "--store", str(encrypted)]) == 1
    said = capsys.readouterr().err
    assert f"set {ENCRYPTION_KEY_ENV} to its key" in said, said
    monkeypatch.setenv(ENCRYPTION_KEY_ENV, KEY)
    assert cli(["users", "--store", str(plain)]) == 1
    said_too = capsys.readouterr().err
    assert f"unset {ENCRYPTION_KEY_ENV}" in said_too, said_too
    monkeypatch.setenv(ENCRYPTION_KEY_ENV, "not the key")
    assert cli(["users", "--store", str(encrypted)]) == 1
    wrong = capsys.readouterr().err
    assert "wrong key" in wrong and ENCRYPTION_KEY_ENV in wrong
    for message in (said, said_too, wrong):
        assert "encryption_key=" not in message and "from_defaults" not in message and "MemoryAdmin" not in message
    # From Python, the same refusal names the argument.
    monkeypatch.delenv(ENCRYPTION_KEY_ENV)
    with pytest.raises(EncryptionError, match="pass encryption_key="):
        MemoryAdmin(encrypted)


def _opening(store: Path, driver: SQLiteDriver, times: int = 5) -> float:
    """The fastest of ``times`` opens (and closes) of the SQLite store, in seconds."""
    best = float("inf")
    for _ in range(times):
        started = time.perf_counter()
        SQLiteStore(store, driver=driver).close()
        best = min(best, time.perf_counter() - started)
    return best


def test_an_encrypted_reopen_costs_about_a_plain_open_and_its_key_stays_off_disk(tmp_path: Path) -> None:
    """The passphrase's key is derived once per store in a process: a reopen in a warm
    process costs at most about twice a plain open (the derivation alone costs ten
    times one). The derived key is SQLCipher's own (the store opens with the passphrase
    in SQLCipher, in another process) and is written nowhere."""
    from llama_memory.storage.sqlite.driver import SQLCipherDriver

    encrypted, plain = tmp_path / "encrypted", tmp_path / "plain"
    SQLiteStore(encrypted, driver=SQLCipherDriver(KEY)).close()
    SQLiteStore(plain, driver=SQLiteDriver()).close()
    warm_plain = _opening(plain, SQLiteDriver())
    warm_encrypted = _opening(encrypted, SQLCipherDriver(KEY))  # a new driver each time, as a new memory has
    assert warm_encrypted <= 2 * warm_plain + 0.010, (warm_encrypted, warm_plain)

    salt = (encrypted / "memory.sqlite3").read_bytes()[:16]
    derived = hashlib.pbkdf2_hmac("sha512", KEY.encode(), salt, 256_000, 32)
    for file in encrypted.rglob("*"):
        if file.is_file():
            content = file.read_bytes()
            assert derived not in content and derived.hex().encode() not in content, file
    with pytest.raises(EncryptionError, match="wrong key"):
        SQLiteStore(encrypted, driver=SQLCipherDriver("not the key"))
    opened_by_sqlcipher = subprocess.run(
        [sys.executable, "-c", (
            "import sys; from sqlcipher3 import dbapi2 as s; c = s.connect(sys.argv[1]); "
            "c.execute(\"PRAGMA key = '" + KEY + "'\"); print(c.execute('PRAGMA user_version').fetchone()[0])"
        ), str(encrypted / "memory.sqlite3")],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert int(opened_by_sqlcipher.stdout) > 0


def test_encrypt_takes_a_store_a_crashed_process_left_with_its_wal(tmp_path: Path) -> None:
    """A process that died with the store open leaves its -wal (with its last writes)
    and -shm behind, and holds no lock: encrypt takes the store, losing nothing."""
    from llama_memory.storage.sqlite.driver import SQLCipherDriver
    from llama_memory.storage.sqlite.encrypt import encrypt_store

    store = tmp_path / "store"
    SQLiteStore(store).close()
    crash = (
        "import os, sys; from llama_memory.storage.sqlite import SQLiteStore; "
        "SQLiteStore(sys.argv[1]).set_meta('last words', 'kept'); os._exit(0)"
    )
    subprocess.run([sys.executable, "-c", crash, str(store)], check=True)
    assert (store / "memory.sqlite3-wal").stat().st_size > 0 and (store / "memory.sqlite3-shm").exists()
    encrypt_store(store, KEY)
    assert sorted(p.name for p in store.iterdir()) == ["memory.sqlite3"]
    reopened = SQLiteStore(store, driver=SQLCipherDriver(KEY))
    assert reopened.get_meta("last words") == "kept"
    reopened.close()
