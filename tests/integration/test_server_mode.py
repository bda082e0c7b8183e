"""Server mode: the dense index on a real Chroma server on loopback, shared by processes.

SQLite under ``path`` stays the system of record. A server that is down gives a
StorageError naming its address (never an empty result), writes still land in
SQLite, and once the server is back ``reconcile()`` catches the index up.
"""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import chromadb
import pytest

from bench.chroma_server import ChromaServer, free_port
from helpers import assistant, message_texts, user
from llama_memory import ComposableMemory, LlamaMemoryError, StorageError
from llama_memory.memory.wiring import VECTOR_COLLECTION
from llama_memory.retrieval.excerpts import hit_of
from llama_memory.sources.vector import RESIDENT_LIMIT
from llama_memory.storage.reconcile import ReconcileReport
from llama_memory.storage.sqlite import DB_FILENAME

ROOT = Path(__file__).resolve().parents[2]


def open_memory(path: Path, server: ChromaServer, embed_model, user_id: str = "alice", **kw):
    return ComposableMemory.from_defaults(
        user_id=user_id, path=path, chroma_url=server.url, embed_model=embed_model, **kw
    )


def server_collections(server: ChromaServer) -> dict[str, int]:
    """Every collection on the server and its vector count, read with Chroma's own client."""
    client = chromadb.HttpClient(host="127.0.0.1", port=server.port)
    return {c.name: c.count() for c in client.list_collections()}


def sqlite_records(path: Path, user_id: str) -> list[str]:
    with sqlite3.connect(path / DB_FILENAME) as conn:
        return [r[0] for r in conn.execute("SELECT text FROM records WHERE user_id = ?", (user_id,))]


WRITER = textwrap.dedent(
    """
    import sys
    from llama_index.core.base.llms.types import ChatMessage
    from llama_memory import ComposableMemory
    path, url, user_id, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    memory = ComposableMemory.from_defaults(user_id=user_id, path=path, chroma_url=url)
    for i in range(count):
        memory.put(ChatMessage(role="user", content=f"{user_id} note {i}: my locker code is {user_id}-{i}"))
    memory.close()
    """
)


def test_processes_share_one_server_each_user_sees_only_their_own(
    tmp_path: Path, chroma_server: ChromaServer, embed_model
) -> None:
    path = tmp_path / "memory"
    # Two writers at once on one server and one memory directory: a child process
    # (dave) and this process (carol).
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), chroma_server.url, "dave", "5"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    carol = open_memory(path, chroma_server, embed_model, user_id="carol")
    try:
        for i in range(5):
            carol.put(user(f"carol note {i}: my locker code is carol-{i}"))
        carol.source("vector").flush()
        _, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err.decode()[-2000:]

        # Both processes' vectors reached the server, one collection per user (the server
        # is shared with other tests: count this store's collections only).
        prefix = carol.source("vector").index.prefix + "-"
        ours = {n: c for n, c in server_collections(chroma_server).items() if n.startswith(prefix)}
        assert sorted(ours.values()) == [5, 5]

        # This process reads what the other one wrote, found by meaning through Chroma...
        dave = open_memory(path, chroma_server, embed_model, user_id="dave")
        vector = dave.source("vector")
        assert vector.store.pending_records("vector", 100) == []  # everything is in Chroma
        dense = vector.index.query("default", "dave", embed_model.get_query_embedding("locker"), 10)
        assert len(dense) == 5
        hits = dave.search("what is the code of my locker?", k=10)
        assert len(message_texts(hits)) == 5 and {h.user_id for h in hits} == {"dave"}
        # ...and neither user sees the other's.
        assert all("dave" not in h.text for h in carol.search("what is the code of my locker?", k=10))
        assert dave.reconcile()["vector"] == ReconcileReport(users=2)
        dave.close()
    finally:
        carol.close()


def test_stores_sharing_a_server_keep_their_collections_apart(
    tmp_path: Path, chroma_server: ChromaServer, embed_model
) -> None:
    first = open_memory(tmp_path / "one", chroma_server, embed_model)
    second = open_memory(tmp_path / "two", chroma_server, embed_model)
    try:
        first.put(user("I keep bees on the roof"))
        second.put(user("I collect vintage typewriters"))
        first.source("vector").flush()
        second.source("vector").flush()
        # Same user id, two stores: two collections, and re-indexing one leaves the other.
        assert first.source("vector").index.prefix != second.source("vector").index.prefix
        assert first.reindex() == 1
        assert second.source("vector").index.count("default", "alice") == 1
        assert message_texts(second.search("hobby", k=5)) == ["I collect vintage typewriters"]
        # The configuration (server address included) reopens the same memory.
        data = first.to_dict()
        assert data["chroma_url"] == chroma_server.url
        again = ComposableMemory.from_dict(data, embed_model=embed_model)
        assert again.source("vector").index.prefix == first.source("vector").index.prefix
        assert message_texts(again.search("hobby", k=5)) == ["I keep bees on the roof"]
        again.close()
    finally:
        first.close()
        second.close()


def test_a_server_that_is_down_at_open_is_named(tmp_path: Path, embed_model) -> None:
    port = free_port()
    with pytest.raises(StorageError, match=f"127.0.0.1:{port}"):
        ComposableMemory.from_defaults(
            user_id="alice", path=tmp_path, chroma_host="127.0.0.1", chroma_port=port,
            embed_model=embed_model,
        )  # fmt: skip


def test_a_memory_opened_without_the_server_of_its_store_is_refused(
    tmp_path: Path, chroma_server: ChromaServer, embed_model
) -> None:
    with open_memory(tmp_path, chroma_server, embed_model) as memory:
        memory.put(user("I am training for the Berlin marathon."))
    with pytest.raises(LlamaMemoryError, match=r"keeps its vectors on a Chroma server: .*chroma_url="):
        ComposableMemory.from_defaults(user_id="alice", path=tmp_path, embed_model=embed_model)
    assert not (tmp_path / "chroma").exists()  # no embedded index started beside it
    with open_memory(tmp_path, chroma_server, embed_model, session_id="s2") as memory:
        assert "Berlin marathon" in message_texts(memory.search("which race?", k=1))[0]


def test_server_mode_needs_a_path_and_one_address(chroma_server: ChromaServer) -> None:
    with pytest.raises(ValueError, match="path"):
        ComposableMemory.from_defaults(user_id="alice", chroma_url=chroma_server.url)
    with pytest.raises(ValueError, match="not both"):
        ComposableMemory.from_defaults(
            user_id="alice", path="x", chroma_url=chroma_server.url, chroma_host="127.0.0.1"
        )
    with pytest.raises(ValueError, match="http://host:port"):
        ComposableMemory.from_defaults(user_id="alice", path="x", chroma_url="ftp://h:1")


def test_server_down_mid_run_loses_nothing_and_the_index_catches_up(
    tmp_path: Path, embed_model
) -> None:
    server = ChromaServer(tmp_path / "server").start()
    path = tmp_path / "memory"
    memory = open_memory(path, server, embed_model)
    bob = open_memory(path, server, embed_model, user_id="bob")
    try:
        memory.put_messages([user("My sister Ada lives in Lisbon"), assistant("Lisbon is lovely")])
        bob.put(user("Bob's secret: he is afraid of geese"))
        assert memory.reconcile()["vector"].indexed == 3  # both users' vectors are on the server
        assert hit_of(memory.search("where does my sister live?", k=1)[0]).text.startswith("My sister")

        server.kill()  # --- the server is gone
        address = f"127.0.0.1:{server.port}"
        # Alice's vectors are held in memory, from their copies in the system of record:
        # her reads need no server.
        vectors = memory.source("vector")
        assert hit_of(memory.search("where does my sister live?", k=1)[0]).text.startswith("My sister")
        # A read that has to ask the server says it is gone: an error, never an empty list.
        vectors.resident_limit = 0
        with pytest.raises(StorageError, match=address):
            memory.search("sister")
        with pytest.raises(StorageError, match=address):
            memory.get(input="sister")
        vectors.resident_limit = RESIDENT_LIMIT
        # Writes still land in the system of record (indexing is deferred), even a bulk one.
        memory.put(user("I adopted a cat named Miso"))
        memory.put_messages([user(f"reading list item {i}: a novel about the sea") for i in range(70)])
        assert len(sqlite_records(path, "alice")) == 2 + 1 + 70
        # Forgetting bob cleans the record now and says the index is behind.
        with pytest.raises(StorageError, match="reconcile"):
            bob.forget()
        assert sqlite_records(path, "bob") == []

        server.start()  # --- back, same data directory and port
        # Opening a memory reconciles its user's index: bob's vectors go.
        bob_collection = bob.source("vector").index.collection_name("default", "bob")
        assert bob_collection in server_collections(server)
        open_memory(path, server, embed_model, user_id="bob").close()
        assert bob_collection not in server_collections(server)
        # reconcile() covers every user, and catches up what was written meanwhile (part of
        # it was already written by bob's memory on close: flushing is store-wide).
        report = memory.reconcile()
        assert report["vector"].dropped_collections == 0
        assert memory.source("vector").store.pending_records("vector", 1000) == []
        assert memory.source("vector").index.count("default", "alice") == 73
        assert hit_of(memory.search("what is my cat called?", k=1)[0]).text == "I adopted a cat named Miso"
        assert bob.search("geese") == []

        server.kill()  # --- lost for good: a new, empty server on the same address
        server.path = tmp_path / "server-wiped"
        server.start()
        # A new process just opens the memory: its user's vectors are all found missing...
        reopened = open_memory(path, server, embed_model)
        assert len(reopened.source("vector").store.pending_records("vector", 1000)) == 2 + 1 + 70
        # ...and rebuilt from the record alone, by reconcile() or by the first read.
        report = memory.reconcile()
        assert (report["vector"].missing, report["vector"].indexed) == (0, 73)
        for reader in (memory, reopened):
            assert hit_of(reader.search("where does my sister live?", k=1)[0]).text.startswith("My sister")
        reopened.close()
        vectors = {n: c for n, c in server_collections(server).items() if n.startswith(VECTOR_COLLECTION)}
        assert list(vectors.values()) == [73]
    finally:
        memory.close()
        bob.close()
        server.stop()


def test_reconcile_fixes_each_kind_of_drift(make_memory, embed_model) -> None:
    memory = make_memory()  # embedded: reconcile works on any dense index
    memory.put_messages([user("I play the oboe"), user("I grow tomatoes"), user("I fear spiders")])
    vector = memory.source("vector")
    assert vector.flush() == 3
    ids = sorted(vector.index.ids("default", "alice"))
    vector.index.upsert("default", "alice", ["ghost"], [embed_model.get_text_embedding("boo")])
    vector.index.delete("default", "alice", ids[:1])  # a vector lost
    vector.store.mark_indexed(ids[1:2], False)  # a vector there, but its row says waiting
    vector.index.upsert("default", "mallory", ["stray"], [embed_model.get_text_embedding("x")])

    report = memory.reconcile()["vector"]
    assert report == ReconcileReport(
        users=1, missing=1, adopted=1, orphans=1, dropped_collections=1, indexed=1
    )
    assert vector.index.ids("default", "alice") == set(ids)
    assert vector.index.count("default", "mallory") == 0
    assert memory.reconcile()["vector"] == ReconcileReport(users=1)  # nothing left to fix
