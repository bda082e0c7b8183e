"""The embedded backend as one bundle: SQLite under a directory (or in memory) with its
dense index in Chroma (embedded beside it, on a given client, or on a server), and the
parts written once over SQL as SQLite keeps them (triples, profile rows, admin rows).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

from ...core.errors import LlamaMemoryError
from ...core.types import Scope
from ..backend import Backend, Location, OpenBackend
from ..chroma import (
    CHROMA_DIRNAME,
    OPEN_LOCK,
    DenseIndex,
    http_client,
    open_index,
    persistent_client,
    server_address,
)
from ..ports import ChatLog
from ..sql.admin import AdminRows
from ..sql.dialect import owner
from ..sql.profile import ProfileRows
from ..sql.store import Storage
from ..sql.triples import MentionLink, TripleTimeline
from .connection import DB_FILENAME, SQLITE, memory_path, store_exists
from .driver import sqlite_driver
from .schema import DOCUMENT_MIGRATIONS, TRIPLE_MIGRATIONS
from .store import SQLiteStore, fts_query


class SQLiteTripleTimeline(TripleTimeline):
    """The triple timeline on a :class:`SQLiteStore`: words in an FTS5 table keyed by the
    triple's ``seq``, which mentions point at (tables made or upgraded on construction)."""

    dialect = SQLITE
    mentions = MentionLink(columns="triple_seq", sources="seq", key=("triple_seq", "seq"), order="rowid", scoped=False)

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        store.ensure_schema("triples", TRIPLE_MIGRATIONS)

    def _insert_row(self, conn: Any, row: Mapping[str, Any], search_text: str) -> None:
        seq = self.dialect.insert(conn, "triples", row, returning="seq")
        conn.execute("INSERT INTO triples_fts (rowid, text) VALUES (?, ?)", (seq, search_text))

    def _delete_where(self, conn: Any, condition: str, params: Sequence[Any]) -> list[Any]:
        rows = conn.execute(f"SELECT seq, id, tenant_id, user_id FROM triples WHERE {condition}", params).fetchall()
        seqs = [(r["seq"],) for r in rows]
        conn.executemany("DELETE FROM triples_fts WHERE rowid = ?", seqs)
        conn.executemany("DELETE FROM triple_mentions WHERE triple_seq = ?", seqs)
        conn.executemany("DELETE FROM triples WHERE seq = ?", seqs)
        return rows

    def search_words(
        self, scope: Scope, query: str, k: int, include_history: bool
    ) -> list[tuple[str, float]]:
        """Scored by BM25, turned positive."""
        tenant_id, user_id = owner(scope, "the knowledge-triple store")
        match = fts_query(query)  # quoted words: user text is never read as FTS5 syntax
        if not match:
            return []
        current = "" if include_history else " AND t.valid_to IS NULL"
        rows = self.store.query(
            "search knowledge triples by words",
            "SELECT t.id AS id, -bm25(triples_fts) AS score FROM triples_fts "
            "JOIN triples AS t ON t.seq = triples_fts.rowid "
            f"WHERE triples_fts MATCH ? AND t.tenant_id = ? AND t.user_id = ?{current} "
            "ORDER BY score DESC LIMIT ?",
            (match, tenant_id, user_id, k),
        )
        return [(r["id"], float(r["score"])) for r in rows]


class SQLiteProfileRows(ProfileRows):
    """The profile (or instructions) rows of one :class:`SQLiteStore`; migrates the table."""

    dialect = SQLITE

    def __init__(self, store: SQLiteStore, document: str = "profile") -> None:
        if not isinstance(store, SQLiteStore):
            raise TypeError(
                "the profile is kept in a SQLiteStore (or any implementation of "
                f"llama_memory.storage.sql.profile.ProfileRows), not {type(store).__name__} "
                f"{store!r}: pass the memory's store, e.g. SQLiteProfileRows(SQLiteStore('./memory'))"
            )
        self._open(store, document)
        store.ensure_schema(document, DOCUMENT_MIGRATIONS[document])


class StoreAdmin(AdminRows):
    """The admin rows of one SQLite store: a missing table (a source never opened) is empty."""

    dialect = SQLITE
    record_order = "rowid"
    tables_on_first_use = True
    timeline_class = SQLiteTripleTimeline

    def tables(self) -> set[str]:
        """The names of the tables (and views) in the file."""
        rows = self.store.query("list tables", "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
        return {row["name"] for row in rows}

    def _existing(self, *tables: str) -> set[str]:
        return set(tables) & self.tables()


class EmbeddedStore(OpenBackend):
    """The embedded backend's parts on one opened :class:`SQLiteStore`: the dense index
    under ``path`` (None: in memory), or on ``client`` / the Chroma ``server``
    ``(host, port, ssl)``, connected on first use."""

    timeline_type = SQLiteTripleTimeline
    profile_type = SQLiteProfileRows
    admin_type = StoreAdmin

    def __init__(
        self, store: SQLiteStore, path: Optional[str] = None, client: Any = None,
        server: Optional[tuple[str, int, bool]] = None, for_admin: bool = False
    ) -> None:
        self.store: Storage = store
        self._sqlite = store
        self.path = path
        self._client = client
        self._server = server
        self._for_admin = for_admin
        self.index_drifts = client is not None or server is not None

    @property
    def location(self) -> str:
        """The store's directory (``"."`` for a store in memory)."""
        return str(Path(self.path if self.path is not None else "."))

    @property
    def settings(self) -> dict[str, Any]:
        """The absolute path (a restore elsewhere reopens this store), and a Chroma server
        by its URL."""
        opened: dict[str, Any] = {"path": self.path}
        if self._server is not None:
            host, port, ssl = self._server
            opened.update(chroma_host=None, chroma_port=8000, chroma_url=f"{'https' if ssl else 'http'}://{host}:{port}")
        return opened

    def chat_log(self, scope: Scope) -> Optional[ChatLog]:
        """The conversation's log; None in memory (the buffer keeps the messages)."""
        return self._sqlite.chat_log(scope) if self.path is not None else None

    def vector_index(self, collection: str) -> DenseIndex:
        """On the client (named after the store's id), else under the directory, else in memory."""
        client = self._chroma()
        namespace = self._sqlite.store_id if client is not None else None
        return open_index(collection, self.path, client, namespace)

    def sizes(self) -> dict[str, int]:
        """Bytes on disk: ``sqlite`` (with its WAL), ``chroma`` and ``total``."""
        where = Path(self.location)
        sqlite = sum(_size(where / (DB_FILENAME + suffix)) for suffix in ("", "-wal", "-shm"))
        chroma = _size(where / CHROMA_DIRNAME)
        return {"sqlite": sqlite, "chroma": chroma, "total": sqlite + chroma}

    def drop_dense(self, owner: tuple[str, str], collections: Sequence[str]) -> None:
        """On the store's Chroma, of every kind (a source the memory was not opened with may
        have written some)."""
        client = self._chroma()
        namespace = self._sqlite.store_id if client is not None else None
        if client is None:
            if self.path is None or not (Path(self.path) / CHROMA_DIRNAME).is_dir():
                return  # no Chroma index was ever created beside this store
            client = persistent_client(self.path)
        for prefix in collections:
            open_index(prefix, None, client, namespace).drop(*owner)

    def _chroma(self) -> Any:
        """The Chroma client (None: embedded); a server's is connected on first use."""
        if self._client is None and self._server is not None:
            self._client = http_client(*self._server)
        if (
            self._client is None
            and self.path is not None
            and self._sqlite.get_meta("store_id") is not None
            and not (Path(self.location) / CHROMA_DIRNAME).exists()
        ):
            # A store id is given to a store used with a Chroma client (server mode),
            # and such a store has no embedded index of its own: a memory opened without
            # the server would start one beside it and its vectors would never reach the server.
            address = (
                "--chroma-url http://host:port, or MemoryAdmin(..., chroma_url=...)" if self._for_admin
                else "from_defaults(..., chroma_url='http://host:port'), or the same chroma_client="
            )
            raise LlamaMemoryError(
                f"the store at {self.location} keeps its vectors on a Chroma server: pass its address ({address})"
            )
        return self._client


class EmbeddedBackend(Backend):
    """SQLite + Chroma under a directory: the default backend (see :class:`EmbeddedStore`)."""

    name = "SQLite"
    copy_target = False
    store_type = SQLiteStore

    def open(self, location: Location, *, for_admin: bool = False) -> EmbeddedStore:
        """Without a path, in memory. ``for_admin``: the path as given, Chroma connected later."""
        path = location.path
        if path is not None:
            memory_path(path)  # a URL fails here, before anything is created
            if not for_admin:
                # Absolute at creation: a saved dict (a workflow Context) restored from
                # another working directory must reopen this store, not a new one there.
                path = os.path.abspath(os.path.expanduser(path))
        server = _server(location, for_admin)
        client = location.chroma_client
        if server is not None and not for_admin:
            # Reached now, before the store is created: a memory on an unreachable
            # server fails to open. A tool connects when a command first needs it.
            client = http_client(*server)
        store = (
            SQLiteStore(None) if path is None
            else SQLiteStore(path, driver=sqlite_driver(location.encryption_key, owner_only=location.owner_only))
        )  # fmt: skip
        return EmbeddedStore(store, None if path is None else str(path), client, server, for_admin)

    def on(self, store: Storage, location: Location = Location()) -> EmbeddedStore:
        """The dense index under ``location.path`` (None: in memory) or on its client."""
        if not isinstance(store, SQLiteStore):
            raise TypeError(f"the embedded backend's parts need a SQLiteStore, not {type(store).__name__}")
        path = None if location.path is None else os.fspath(location.path)
        return EmbeddedStore(store, path, location.chroma_client)

    def missing(self, where: Any) -> Optional[str]:
        if store_exists(where):
            return None
        return "does not exist" if not Path(where).exists() else f"holds no {DB_FILENAME}"

    def describe_sizes(self, sizes: dict[str, int], size: Any) -> str:
        return f"on disk: {size(sizes['total'])} (SQLite {size(sizes['sqlite'])}, Chroma {size(sizes['chroma'])})"

    def encrypt(self, where: Any, key: str, *, keep_backup: bool = False, source: str = "the key given") -> Any:
        """Encrypt the plain store under ``where`` (:func:`~.encrypt.encrypt_store`)."""
        from .encrypt import encrypt_store

        return encrypt_store(where, key, keep_backup=keep_backup, source=source)

    @contextmanager
    def undo_failed_creation(self, where: Any) -> Iterator[None]:
        """Removes the directory if the body created it, else the store files it created."""
        directory = Path(where)
        created = [
            directory / name
            for name in (DB_FILENAME, f"{DB_FILENAME}-wal", f"{DB_FILENAME}-shm", CHROMA_DIRNAME, OPEN_LOCK)
            if not (directory / name).exists()
        ]
        new_store = not directory.exists()
        try:
            yield
        except BaseException:
            if new_store:
                shutil.rmtree(directory, ignore_errors=True)
            elif not (directory / DB_FILENAME).exists() or DB_FILENAME in {p.name for p in created}:
                for path in created:
                    if path.is_dir():
                        shutil.rmtree(path, ignore_errors=True)
                    elif path.exists():
                        path.unlink()
            raise


def _server(location: Location, for_admin: bool) -> Optional[tuple[str, int, bool]]:
    """``(host, port, ssl)`` of the location's Chroma server, or None; ValueError on a clash."""
    host, url = location.chroma_host, location.chroma_url
    if for_admin:  # the admin takes a URL or a client (it checked they are not both)
        return server_address(url) if url is not None else None
    if host is None and url is None:
        return None
    if host is not None and url is not None:
        raise ValueError("pass chroma_host (and chroma_port) or chroma_url, not both")
    if location.chroma_client is not None:
        raise ValueError("pass chroma_client or a Chroma server address, not both")
    if location.path is None:
        raise ValueError(
            "server mode needs path=: SQLite under path is the system of record, and "
            "vectors on a shared server must not outlive an in-memory store"
        )
    if url is not None:
        return server_address(url)
    assert host is not None  # one of the two was given
    return host, int(location.chroma_port), False


def _size(path: Path) -> int:
    """Bytes of a file, or of every file under a directory (0 when missing)."""
    if path.is_file():
        return path.stat().st_size
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:  # removed meanwhile
                pass
    return total


#: The bundle the registry hands out for a directory.
BACKEND = EmbeddedBackend()
