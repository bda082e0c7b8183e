"""The system of record: one SQLite file (WAL mode) per memory directory.

Everything a memory knows is written here first and committed; the dense index
(Chroma) is derived from these rows and can be rebuilt from them. Two kinds of
rows live here:

- ``chat_messages``: each conversation's messages, losslessly as JSON, so a new
  process resumes a session where the last one stopped;
- ``records``: long-term memory records of every source, with provenance
  (tenant, user, session, message ids, event and ingestion time) and an
  ``indexed`` flag that says whether the dense index has caught up with them.

The schema version is kept in ``PRAGMA user_version``; :data:`MIGRATIONS` is the
ordered list of steps applied on open, so a store written by an older release
opens in a newer one.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple, Optional

from llama_index.core.base.llms.types import ChatMessage

from ..buffer import ChatLogChanges
from ..errors import StorageError
from ..expiry import ALIVE_SQL
from ..messages import dump_message, load_message
from ..types import MemoryRecord, Scope, now

#: File name of the system of record inside a memory directory.
DB_FILENAME = "memory.sqlite3"

# The event date in words, e.g. "8 May 2023", computed in SQL inside the FTS trigger
# (questions say "in May 2023", not "2023-05-08").
_EVENT_DATE_SQL = (
    "CASE WHEN new.event_time IS NULL THEN '' ELSE "
    "ltrim(strftime('%d', new.event_time, 'unixepoch'), '0') || ' ' || "
    "CASE strftime('%m', new.event_time, 'unixepoch') WHEN '01' THEN 'January' WHEN '02' THEN 'February' WHEN '03' THEN 'March' WHEN '04' THEN 'April' WHEN '05' THEN 'May' WHEN '06' THEN 'June' WHEN '07' THEN 'July' WHEN '08' THEN 'August' WHEN '09' THEN 'September' WHEN '10' THEN 'October' WHEN '11' THEN 'November' WHEN '12' THEN 'December' END || ' ' || "
    "strftime('%Y', new.event_time, 'unixepoch') END"
)

#: Ordered schema migrations; entry i brings the schema from version i to i + 1.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    CREATE TABLE chat_messages (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        message_json TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE INDEX chat_messages_by_session
        ON chat_messages (tenant_id, user_id, session_id, seq);
    CREATE TABLE records (
        id TEXT PRIMARY KEY,
        source TEXT NOT NULL,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        session_id TEXT,
        role TEXT,
        text TEXT NOT NULL,
        content_hash TEXT NOT NULL,
        message_ids TEXT NOT NULL,
        event_time REAL,
        ingested_at REAL NOT NULL,
        metadata TEXT NOT NULL DEFAULT '{}',
        indexed INTEGER NOT NULL DEFAULT 0
    );
    CREATE UNIQUE INDEX records_by_content
        ON records (source, tenant_id, user_id, content_hash);
    CREATE INDEX records_pending ON records (source, indexed);
    """,
    # 2: lexical search. Each record's text, and its event date in words ("8 May 2023"),
    # in an FTS5 index kept in step with the records table by triggers.
    f"""
    CREATE VIRTUAL TABLE records_fts USING fts5(text, event_date, tokenize = 'porter unicode61');
    CREATE TRIGGER records_fts_insert AFTER INSERT ON records BEGIN
        INSERT INTO records_fts (rowid, text, event_date) VALUES (new.rowid, new.text, {_EVENT_DATE_SQL});
    END;
    CREATE TRIGGER records_fts_delete AFTER DELETE ON records BEGIN
        DELETE FROM records_fts WHERE rowid = old.rowid;
    END;
    INSERT INTO records_fts (rowid, text, event_date)
        SELECT rowid, text, {_EVENT_DATE_SQL.replace("new.", "")} FROM records;
    """,
    # 3: expiry. A record's time to live (seconds, for refresh on read) and when it
    # expires (epoch seconds); NULL for both: kept until forgotten.
    """
    ALTER TABLE records ADD COLUMN ttl REAL;
    ALTER TABLE records ADD COLUMN expires_at REAL;
    CREATE INDEX records_expiring ON records (expires_at) WHERE expires_at IS NOT NULL;
    """,
    # 4: a copy of each indexed record's vector (as the source encodes it), so that a
    # search reads the vectors of its lexical candidates by primary key here instead of
    # asking the dense index for them (one more round trip per search). Deleting a record
    # deletes its copy.
    """
    CREATE TABLE record_vectors (id TEXT PRIMARY KEY, vector BLOB NOT NULL) WITHOUT ROWID;
    CREATE TRIGGER record_vectors_delete AFTER DELETE ON records BEGIN
        DELETE FROM record_vectors WHERE id = old.id;
    END;
    """,
)

#: Migrations of the index behind :meth:`SQLiteStore.session_neighbours` (records of one
#: session in the order written), kept apart from :data:`MIGRATIONS` as an optional part.
SESSION_ORDER_MIGRATIONS: tuple[str, ...] = (
    "CREATE INDEX IF NOT EXISTS records_by_session "
    "ON records (source, tenant_id, user_id, session_id)",
)

_WHITESPACE = re.compile(r"\s+")

# A database URL given as a path ("sqlite:///m.db", "postgresql://..."): a scheme of two
# characters or more, then ":/" (one letter is a Windows drive, "C:/..."; a Path made of
# "sqlite:///m.db" reads "sqlite:/m.db").
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+:/")

# Rows that belong to a user through a row of another table, with no trigger to delete
# them with it: deleted first when the user is (see SQLiteStore.delete_user).
_USER_DEPENDENTS: dict[str, tuple[str, ...]] = {
    "triples": (
        "DELETE FROM triples_fts WHERE rowid IN "
        "(SELECT seq FROM triples WHERE tenant_id = ? AND user_id = ?)",
        "DELETE FROM triple_mentions WHERE triple_seq IN "
        "(SELECT seq FROM triples WHERE tenant_id = ? AND user_id = ?)",
    ),
}


def memory_path(path: object) -> Path:
    """``path`` as a directory ``Path``; TypeError for what is not a path, ValueError
    for a database URL (a memory's path is a directory; URLs are not supported yet)."""
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(
            f"path takes a directory as a str or pathlib.Path, not {type(path).__name__} "
            f"{path!r}: pass e.g. path='./memory'"
        )
    text = str(os.fspath(path))
    if _URL.match(text):
        raise ValueError(
            f"path={text!r} looks like a database URL, but path is a directory where "
            "llama-memory keeps its SQLite file and Chroma index (e.g. path='./memory'); "
            "database URLs are not supported yet"
        )
    return Path(text)


@lru_cache(maxsize=8192)  # the window's texts are normalised again on every get()
def normalize_text(text: str) -> str:
    """Case- and whitespace-insensitive form of a text, used for exact dedup."""
    return _WHITESPACE.sub(" ", text).strip().casefold()


# Words too common to help a lexical query; dropping them keeps FTS5 from scoring every row.
_STOPWORDS = frozenset(
    "a an and are as at be been but by did do does for from had has have he her hers him his how "
    "i if in into is it its me my of on or our she so than that the their them then there these "
    "they this to was we were what when where which who whom why will with would you your".split()
)
_WORD = re.compile(r"\w+", re.UNICODE)


def sql_statements(script: str) -> list[str]:
    """Split an SQL script into complete statements (a trigger body's ``;`` included)."""
    statements, current = [], ""
    for piece in script.split(";"):
        current += piece + ";"
        if sqlite3.complete_statement(current):
            if current.strip(" \n\t;"):
                statements.append(current.strip())
            current = ""
    if current.strip(" \n\t;"):
        raise ValueError(f"incomplete SQL statement: {current.strip()!r}")
    return statements


#: In a large store, a query word found in more than this share of the indexed records is
#: left out of lexical search: BM25 gives it little weight (log(3) against about 7 for a
#: rare word), and scoring its matches is most of what lexical search costs (a word in 40%
#: of 30,000 records: 30 of 45 ms).
MAX_TERM_SHARE = 0.25
#: Below this many indexed records every word is kept: counting costs more than it saves.
PRUNE_FROM_RECORDS = 2000
#: In a large store, lexical search scores at most about this many matches (rows x
#: words), the rarest words first: BM25 costs a few microseconds per match, and a
#: word of 100,000 records would otherwise cost more than the rest of a get().
LEXICAL_POSTINGS_BUDGET = 1000
#: How many words' match counts are remembered (see :meth:`SQLiteStore._word_count`).
_WORD_COUNTS_CACHED = 4096
#: search_text first takes this many times ``limit`` of the index's best matches and
#: keeps the user's; only if too few are theirs does it join every match to its record.
_OWNER_OVERFETCH = 2


def fts_words(text: str) -> list[str]:
    """The distinct non-stopwords of a text, lower-cased, in order."""
    return list(dict.fromkeys(w for w in _WORD.findall(text.casefold()) if w not in _STOPWORDS))


def fts_query(text: str) -> str:
    """An FTS5 MATCH expression for free text: its distinct non-stopwords, OR-ed and quoted
    (so that no user text is read as FTS5 syntax). '' when nothing is left."""
    return _match_any(fts_words(text))


def _match_any(words: Sequence[str]) -> str:
    return " OR ".join(f'"{w}"' for w in words)


def content_hash(text: str, role: Optional[str] = None) -> str:
    """Stable hash of a record's normalised text (and role): identical records share it."""
    key = f"{role or ''}\x1f{normalize_text(text)}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class NewRecord:
    """A record to be written by :meth:`SQLiteStore.add_records`."""

    source: str
    scope: Scope
    text: str
    message_ids: tuple[str, ...]
    event_time: Optional[float]
    role: Optional[str] = None
    metadata: Optional[dict] = None
    #: Time to live in seconds and expiry time (epoch seconds); None: kept forever.
    ttl: Optional[float] = None
    expires_at: Optional[float] = None


class ChatRows(NamedTuple):
    """Messages of one conversation and its bounds: the sequence numbers of its first
    (None when it is empty) and last (0 when empty) stored messages."""

    messages: list[ChatMessage]
    first: Optional[int]
    last: int


class PendingRecord(NamedTuple):
    """A record waiting for its vector: what the dense index needs to add it."""

    id: str
    text: str
    tenant_id: str
    user_id: str


def store_exists(path: Path | str) -> bool:
    """Whether ``path`` is a memory directory holding a store (its database file)."""
    return (Path(path) / DB_FILENAME).is_file()


class SQLiteStore:
    """A thread-safe SQLite system of record.

    Args:
        path: directory of the memory (the file :data:`DB_FILENAME` is created in
            it), or ``None`` for a private in-memory database.

    One connection is shared by all threads behind a lock; WAL mode and a busy
    timeout let several processes use one file. Every ``sqlite3.Error`` is
    re-raised as :class:`~llama_memory.errors.StorageError` naming the file.
    """

    def __init__(self, path: Optional[Path | str] = None, *, timeout: float = 30.0) -> None:
        self._lock = threading.RLock()
        self._depth = 0  # how many transaction() blocks are open (nested ones join)
        self._after_commit: list[Callable[[], object]] = []
        self._word_counts: OrderedDict[str, tuple[int, int]] = OrderedDict()
        # Commits of this connection: PRAGMA data_version only counts other connections'.
        self._commits = 0
        if path is None:
            self.file: Optional[Path] = None
            target = ":memory:"
        else:
            directory = memory_path(path)
            if directory.exists() and not directory.is_dir():
                raise StorageError(f"memory path {directory} exists and is not a directory")
            try:
                directory.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StorageError(f"cannot create memory directory {directory}: {exc}") from exc
            self.file = directory / DB_FILENAME
            target = str(self.file)
            for part in (directory, self.file):
                # Said at once: SQLite would open a read-only file and fail on the first put.
                if part.exists() and not os.access(part, os.W_OK):
                    raise StorageError(
                        f"memory path {part} is read-only: llama-memory writes every message "
                        "there; make it writable, or open a copy of the directory"
                    )
        with self._errors("open"):
            self._conn = sqlite3.connect(
                target, timeout=timeout, check_same_thread=False, isolation_level=None
            )
            self._conn.row_factory = sqlite3.Row
            if self.file is not None:
                _switch_to_wal(self._conn, timeout)
                self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.execute("PRAGMA foreign_keys=ON")
            self._migrate()

    # -- plumbing -----------------------------------------------------------------

    @property
    def location(self) -> str:
        """The database file, or ``":memory:"``; used in error messages."""
        return str(self.file) if self.file is not None else ":memory:"

    @contextmanager
    def _errors(self, action: str) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise StorageError(f"SQLite store {self.location}: {action} failed: {exc}") from exc

    @contextmanager
    def transaction(self, action: str) -> Iterator[sqlite3.Connection]:
        """One atomic write: committed on success, rolled back (and raised) on failure.

        Yields the connection; ``action`` names the write in a :class:`StorageError`.
        A transaction opened inside another one (in the same thread) joins it: its
        writes commit or roll back with the outer one, so a memory can write a
        message to the chat history and to every source all or nothing.
        """
        with self._lock:
            if self._depth:
                self._depth += 1
                try:
                    yield self._conn
                finally:
                    self._depth -= 1
                return
            with self._errors(action):
                self._conn.execute("BEGIN IMMEDIATE")
                self._depth = 1
                try:
                    yield self._conn
                    self._conn.execute("COMMIT")
                    self._commits += 1
                except BaseException:
                    self._after_commit.clear()
                    if self._conn.in_transaction:
                        self._conn.execute("ROLLBACK")
                    raise
                finally:
                    self._depth = 0
            callbacks, self._after_commit = self._after_commit, []
        # Outside the lock: a callback (indexing) takes its source's lock, and sources
        # take that lock before this one.
        for callback in callbacks:
            callback()

    def after_commit(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` once the open transaction commits (at once when none is
        open); it is dropped if the transaction rolls back. Work that must not run
        inside a write (embedding, writing Chroma) waits for the commit this way."""
        with self._lock:
            if self._depth:
                self._after_commit.append(callback)
                return
        callback()

    def query(self, action: str, sql: str, params: Sequence = ()) -> list[sqlite3.Row]:
        """Run one read statement; ``action`` names it in a :class:`StorageError`."""
        with self._lock, self._errors(action):
            return self._conn.execute(sql, params).fetchall()

    def _migrate(self) -> None:
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if version > len(MIGRATIONS):
            raise StorageError(
                f"SQLite store {self.location} has schema version {version}, newer than this "
                f"release of llama-memory understands ({len(MIGRATIONS)}): upgrade llama-memory"
            )
        for step in range(version, len(MIGRATIONS)):
            with self.transaction(f"migration to schema version {step + 1}") as conn:
                # Read again under the write lock: another process opening the same new
                # directory at the same moment may have applied this step already.
                if conn.execute("PRAGMA user_version").fetchone()[0] > step:
                    continue
                for statement in sql_statements(MIGRATIONS[step]):
                    conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {step + 1}")

    def ensure_schema(self, component: str, migrations: Sequence[str]) -> None:
        """Apply a component's own ordered migrations (its tables live in this file too).

        A source that keeps more than records (triples, a profile) owns its schema:
        its version is kept in the meta table under ``schema:<component>``, and
        entry i of ``migrations`` brings it from version i to i + 1, on open.
        """
        key = f"schema:{component}"
        with self._lock:
            rows = self.query("read schema version", "SELECT value FROM meta WHERE key = ?", (key,))
            version = int(rows[0]["value"]) if rows else 0
            if version > len(migrations):
                raise StorageError(
                    f"SQLite store {self.location}: the {component!r} schema is at version "
                    f"{version}, newer than this release understands ({len(migrations)}): "
                    "upgrade llama-memory"
                )
            for step in range(version, len(migrations)):
                with self.transaction(f"{component} migration to version {step + 1}") as conn:
                    done = conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
                    if done is not None and int(done[0]) > step:
                        continue  # applied meanwhile by another process (see _migrate)
                    for statement in sql_statements(migrations[step]):
                        conn.execute(statement)
                    conn.execute(
                        "INSERT INTO meta (key, value) VALUES (?, ?) "
                        "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                        (key, str(step + 1)),
                    )

    @property
    def schema_version(self) -> int:
        """The schema version of the open database."""
        return int(self.query("read schema version", "PRAGMA user_version")[0][0])

    def close(self) -> None:
        """Close the connection (further calls raise StorageError)."""
        with self._lock:
            self._conn.close()

    # -- meta ---------------------------------------------------------------------

    def get_meta(self, key: str) -> Optional[str]:
        """The value stored under ``key`` in the meta table, or None."""
        rows = self.query("read meta", "SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0]["value"] if rows else None

    def set_meta(self, key: str, value: str) -> None:
        """Store ``value`` under ``key`` in the meta table."""
        with self.transaction("write meta") as conn:
            conn.execute(
                "INSERT INTO meta (key, value) VALUES (?, ?) "
                "ON CONFLICT(key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def set_meta_once(self, key: str, value: str) -> str:
        """Store ``value`` under ``key`` unless a value is there already; return the value
        kept (atomic: of two processes recording at once, both see the first one's)."""
        with self.transaction("write meta") as conn:
            conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)", (key, value))
            return str(conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()[0])

    def delete_meta(self, keys: Sequence[str]) -> None:
        """Remove ``keys`` from the meta table (absent ones are ignored)."""
        with self.transaction("delete meta") as conn:
            conn.executemany("DELETE FROM meta WHERE key = ?", [(k,) for k in keys])

    # -- chat history ---------------------------------------------------------------

    def load_chat(self, scope: Scope) -> list[ChatMessage]:
        """The stored messages of one conversation, oldest first."""
        rows = self.query(
            "load chat history",
            "SELECT message_json FROM chat_messages "
            "WHERE tenant_id = ? AND user_id = ? AND session_id = ? ORDER BY seq",
            _session_key(scope),
        )
        return [load_message(row["message_json"]) for row in rows]

    def append_chat(self, scope: Scope, messages: Sequence[ChatMessage]) -> None:
        """Append messages to one conversation, in one transaction."""
        with self.transaction("append chat history") as conn:
            self._insert_chat(conn, scope, messages)

    def replace_chat(self, scope: Scope, messages: Sequence[ChatMessage]) -> None:
        """Replace one conversation's messages, atomically."""
        with self.transaction("replace chat history") as conn:
            conn.execute(
                "DELETE FROM chat_messages WHERE tenant_id = ? AND user_id = ? AND session_id = ?",
                _session_key(scope),
            )
            self._insert_chat(conn, scope, messages)

    def change_stamp(self, wait: bool = True) -> Optional[tuple[int, int]]:
        """A value that changes whenever anything is committed to the file, by this
        connection or another (another memory object, another process): equal stamps
        mean nothing changed in between. Costs no read of any table. With
        ``wait=False``, None instead of waiting while another thread writes through
        this connection."""
        if not self._lock.acquire(blocking=wait):
            return None
        try:
            return self.data_version(), self._commits
        finally:
            self._lock.release()

    def _stamp_after_commit(self) -> tuple[int, int]:
        """Inside a write: the :meth:`change_stamp` once it commits. Nothing else can
        commit before it (it holds the write lock), and its commit is this connection's
        next one; if it fails, the stamp is simply stale and the next check reads."""
        with self._lock:
            return self.data_version(), self._commits + 1

    def chat_since(self, scope: Scope, after: int) -> ChatRows:
        """One conversation's messages stored after sequence number ``after``, with its
        first and last sequence numbers, read in one snapshot. Both use the session
        index: the cost follows the new rows, not the length of the conversation."""
        with self._lock, self._errors("read new chat history"):
            own = not self._conn.in_transaction
            if own:  # one snapshot: the rows and the bounds must agree
                self._conn.execute("BEGIN")
            try:
                return self._chat_since(self._conn, scope, after)
            finally:
                if own:
                    self._conn.execute("COMMIT")

    def append_chat_after(
        self, scope: Scope, after: int, messages: Sequence[ChatMessage]
    ) -> tuple[ChatRows, ChatRows, tuple[int, int]]:
        """Append messages to one conversation and say what was committed before them.

        Returns, read under the write lock (nothing else can commit meanwhile): the
        conversation as :meth:`chat_since` ``after`` saw it before the append, its
        bounds after the append (no rows), and the :meth:`change_stamp` once the
        append is committed.
        """
        with self.transaction("append chat history") as conn:
            stamp = self._stamp_after_commit()
            before = self._chat_since(conn, scope, after)
            self._insert_chat(conn, scope, messages)
            after_append = self._chat_bounds(conn, scope)
        return before, after_append, stamp

    def replace_chat_bounds(
        self, scope: Scope, messages: Sequence[ChatMessage]
    ) -> tuple[ChatRows, tuple[int, int]]:
        """:meth:`replace_chat`, returning the new bounds and the stamp once committed."""
        with self.transaction("replace chat history") as conn:
            stamp = self._stamp_after_commit()
            conn.execute(
                "DELETE FROM chat_messages WHERE tenant_id = ? AND user_id = ? AND session_id = ?",
                _session_key(scope),
            )
            self._insert_chat(conn, scope, messages)
            bounds = self._chat_bounds(conn, scope)
        return bounds, stamp

    @staticmethod
    def _chat_bounds(conn: sqlite3.Connection, scope: Scope) -> ChatRows:
        # Two queries: SQLite answers a lone MIN or MAX from the index in one step, but
        # scans the session's rows for both in one query.
        key = _session_key(scope)
        where = "FROM chat_messages WHERE tenant_id = ? AND user_id = ? AND session_id = ?"
        first = conn.execute(f"SELECT MIN(seq) {where}", key).fetchone()[0]
        last = conn.execute(f"SELECT MAX(seq) {where}", key).fetchone()[0]
        return ChatRows([], first, last or 0)

    @classmethod
    def _chat_since(cls, conn: sqlite3.Connection, scope: Scope, after: int) -> ChatRows:
        rows = conn.execute(
            "SELECT seq, message_json FROM chat_messages "
            "WHERE tenant_id = ? AND user_id = ? AND session_id = ? AND seq > ? ORDER BY seq",
            (*_session_key(scope), after),
        ).fetchall()
        bounds = cls._chat_bounds(conn, scope)
        return ChatRows([load_message(row["message_json"]) for row in rows], bounds.first, bounds.last)

    def sessions(self, scope: Scope) -> list[str]:
        """The session ids with stored chat history for the scope's user, oldest first."""
        rows = self.query(
            "list sessions",
            "SELECT session_id, MIN(seq) AS first FROM chat_messages "
            "WHERE tenant_id = ? AND user_id = ? GROUP BY session_id ORDER BY first",
            (scope.tenant_id, _user_key(scope)),
        )
        return [row["session_id"] for row in rows]

    @staticmethod
    def _insert_chat(
        conn: sqlite3.Connection, scope: Scope, messages: Sequence[ChatMessage]
    ) -> None:
        created = now()
        key = _session_key(scope)
        conn.executemany(
            "INSERT INTO chat_messages (tenant_id, user_id, session_id, message_json, created_at) "
            "VALUES (?, ?, ?, ?, ?)",
            [(*key, dump_message(m), created) for m in messages],
        )

    # -- long-term records ----------------------------------------------------------------

    def add_records(self, records: Sequence[NewRecord]) -> list[str]:
        """Write records in one transaction; return their ids.

        A record whose normalised text (and role) the same user already has in the
        same source is not stored twice: the existing row's ``message_ids`` grow
        instead, and its id is returned.
        """
        ids: list[str] = []
        ingested = now()
        with self.transaction("add records") as conn:
            for rec in records:
                user = rec.scope.require_user(f"the {rec.source!r} memory source")
                digest = content_hash(rec.text, rec.role)
                existing = conn.execute(
                    "SELECT id, message_ids, ttl, expires_at FROM records WHERE source = ? "
                    "AND tenant_id = ? AND user_id = ? AND content_hash = ?",
                    (rec.source, rec.scope.tenant_id, user, digest),
                ).fetchone()
                if existing is not None:
                    known = json.loads(existing["message_ids"])
                    merged = known + [m for m in rec.message_ids if m not in known]
                    if merged != known:
                        conn.execute(
                            "UPDATE records SET message_ids = ? WHERE id = ?",
                            (json.dumps(merged), existing["id"]),
                        )
                    # Saying it again renews it: the later expiry wins, "forever" wins all.
                    lasting = _later_expiry(existing, rec)
                    if lasting != (existing["ttl"], existing["expires_at"]):
                        conn.execute(
                            "UPDATE records SET ttl = ?, expires_at = ? WHERE id = ?",
                            (*lasting, existing["id"]),
                        )
                    ids.append(existing["id"])
                    continue
                record_id = _record_id(rec.source, rec.scope.tenant_id, user, digest)
                conn.execute(
                    "INSERT INTO records (id, source, tenant_id, user_id, session_id, role, text, "
                    "content_hash, message_ids, event_time, ingested_at, metadata, ttl, "
                    "expires_at, indexed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)",
                    (
                        record_id,
                        rec.source,
                        rec.scope.tenant_id,
                        user,
                        rec.scope.session_id,
                        rec.role,
                        rec.text,
                        digest,
                        json.dumps(list(rec.message_ids)),
                        rec.event_time,
                        ingested,
                        json.dumps(rec.metadata or {}),
                        rec.ttl if rec.expires_at is not None else None,
                        rec.expires_at,
                    ),
                )
                ids.append(record_id)
        return ids

    def get_records(
        self, ids: Sequence[str], scope: Scope, source: str, alive_at: Optional[float] = None
    ) -> dict[str, MemoryRecord]:
        """Records by id, restricted to the scope's tenant and user and to ``source``
        (and, given ``alive_at``, to those not expired at that time)."""
        if not ids:
            return {}
        user = scope.require_user(f"the {source!r} memory source")
        marks = ",".join("?" * len(ids))
        # Look up by primary key only and check the scope here: with the scope columns in
        # the WHERE clause SQLite prefers the (source, tenant, user) index and scans the
        # user's rows (2 ms at 2,000 records instead of 0.2 ms).
        rows = self.query(
            "read records", f"SELECT * FROM records WHERE id IN ({marks})", tuple(ids)
        )
        return {
            row["id"]: _to_record(row)
            for row in rows
            if (row["source"], row["tenant_id"], row["user_id"]) == (source, scope.tenant_id, user)
            and (alive_at is None or row["expires_at"] is None or row["expires_at"] > alive_at)
        }

    def search_text(self, query: str, scope: Scope, source: str, limit: int) -> list[tuple[str, float]]:
        """Records of the scope's user whose text (or event date) shares words with
        ``query``, best first, as (id, score) with BM25 scores turned positive."""
        user = scope.require_user(f"the {source!r} memory source")
        words = fts_words(query)
        if not words or limit <= 0:
            return []
        owner = (source, scope.tenant_id, user)
        with self._lock:
            match = _match_any(self._selective_words(words))
            # First the best matches of the whole index, without the join to records: a
            # store usually holds one user's records, and then these are the answer.
            # Only when too few of them are the user's does the join run (exact either way:
            # the user's top ``limit`` are the first ``limit`` of theirs in the global order).
            fetch = limit * _OWNER_OVERFETCH
            top = self.query(
                "search text",
                "SELECT rowid, -bm25(records_fts, 1.0, 0.5) AS score FROM records_fts "
                "WHERE records_fts MATCH ? ORDER BY score DESC LIMIT ?",
                (match, fetch),
            )
            ids = self._ids_of_owner([row["rowid"] for row in top], owner)
            found = [(ids[row["rowid"]], float(row["score"])) for row in top if row["rowid"] in ids]
            if len(found) >= limit or len(top) < fetch:
                return found[:limit]
            # ORDER BY the alias: repeating bm25(...) there would score every row twice.
            rows = self.query(
                "search text",
                "SELECT r.id AS id, -bm25(records_fts, 1.0, 0.5) AS score FROM records_fts "
                "JOIN records r ON r.rowid = records_fts.rowid "
                "WHERE records_fts MATCH ? AND r.source = ? AND r.tenant_id = ? AND r.user_id = ? "
                "ORDER BY score DESC LIMIT ?",
                (match, *owner, limit),
            )
        return [(row["id"], float(row["score"])) for row in rows]

    def _ids_of_owner(self, rowids: Sequence[int], owner: tuple[str, str, str]) -> dict[int, str]:
        """The record ids of those ``rowids`` whose (source, tenant, user) is ``owner``."""
        if not rowids:
            return {}
        rows = self.query(
            "search text",
            "SELECT rowid, id, source, tenant_id, user_id FROM records "
            f"WHERE rowid IN ({','.join('?' * len(rowids))})",
            tuple(rowids),
        )
        return {
            row["rowid"]: row["id"]
            for row in rows
            if (row["source"], row["tenant_id"], row["user_id"]) == owner
        }

    def _selective_words(self, words: list[str]) -> list[str]:
        """The words worth scoring. In a large store (from :data:`PRUNE_FROM_RECORDS`
        indexed records) a word found in more than :data:`MAX_TERM_SHARE` of them is
        dropped, and the rest are kept rarest first while their matches add up to at most
        :data:`LEXICAL_POSTINGS_BUDGET` (the rarest always kept): BM25 scores every
        matching row before it can sort, so this bounds a search's cost by a constant
        instead of by the store's size. Small stores keep every word."""
        if len(words) < 2:
            return words
        # max(rowid) is instant and close to the row count (deletions only make it larger,
        # which keeps more words: the safe side).
        total = self.query("size lexical index", "SELECT max(rowid) FROM records_fts")[0][0] or 0
        if total < PRUNE_FROM_RECORDS:
            return words
        counts = {word: self._word_count(word, total) for word in words}
        common = [w for w in words if counts[w] > MAX_TERM_SHARE * total]
        kept: list[str] = []
        postings = 0
        for word in sorted((w for w in words if w not in common), key=counts.__getitem__):
            if kept and postings + counts[word] > LEXICAL_POSTINGS_BUDGET:
                break
            kept.append(word)
            postings += counts[word]
        return kept or [min(words, key=counts.__getitem__)]

    def _word_count(self, word: str, total: int) -> int:
        """How many indexed records match ``word``; counted again only once the index
        has grown by a tenth since (a count walks the word's whole posting list)."""
        cached = self._word_counts.get(word)
        if cached is not None and total <= cached[1] * 1.1:
            self._word_counts.move_to_end(word)
            return cached[0]
        count = int(self.query(
            "count word matches",
            "SELECT count(*) FROM records_fts WHERE records_fts MATCH ?",
            (_match_any([word]),),
        )[0][0])
        self._word_counts[word] = (count, total)
        self._word_counts.move_to_end(word)
        while len(self._word_counts) > _WORD_COUNTS_CACHED:
            self._word_counts.popitem(last=False)
        return count

    def session_neighbours(
        self, ids: Sequence[str], scope: Scope, source: str, radius: int
    ) -> dict[str, list[tuple[int, str]]]:
        """For each record id of the scope's user in ``source``: the ids of the records
        of its session from ``radius`` before it to ``radius`` after it, itself
        included, as (position, id) in the order they were written. Ids not found (or
        another user's) are left out.

        Call :meth:`ensure_session_order` once first, or each lookup scans the user's
        records.
        """
        if not ids or radius < 0:
            return {}
        user = scope.require_user(f"the {source!r} memory source")
        marks = ",".join("?" * len(ids))
        hits = [
            row
            for row in self.query(
                "read record positions",
                f"SELECT id, rowid AS pos, session_id, source, tenant_id, user_id FROM records "
                f"WHERE id IN ({marks})",
                tuple(ids),
            )
            if (row["source"], row["tenant_id"], row["user_id"]) == (source, scope.tenant_id, user)
        ]
        if not hits:
            return {}
        # One statement for all hits: per hit, the rows up to it and the rows after it
        # in its session, each read backwards or forwards along records_by_session.
        same = "source = ? AND tenant_id = ? AND user_id = ? AND session_id IS ?"
        parts, params = [], []
        for n, hit in enumerate(hits):
            key = (source, scope.tenant_id, user, hit["session_id"])
            parts.append(
                f"SELECT * FROM (SELECT {n} AS hit, rowid AS pos, id FROM records WHERE {same} "
                f"AND rowid <= ? ORDER BY rowid DESC LIMIT ?)"
            )
            parts.append(
                f"SELECT * FROM (SELECT {n} AS hit, rowid AS pos, id FROM records WHERE {same} "
                f"AND rowid > ? ORDER BY rowid LIMIT ?)"
            )
            params += [*key, hit["pos"], radius + 1, *key, hit["pos"], radius]
        rows = self.query("read session neighbours", " UNION ALL ".join(parts), params)
        found: dict[str, list[tuple[int, str]]] = {hit["id"]: [] for hit in hits}
        for row in rows:
            found[hits[row["hit"]]["id"]].append((row["pos"], row["id"]))
        return {hit: sorted(around) for hit, around in found.items()}

    def ensure_session_order(self) -> None:
        """Create the index that finds a record's session neighbours (once per file)."""
        self.ensure_schema("session-order", SESSION_ORDER_MIGRATIONS)

    def pending_records(self, source: str, limit: int) -> list[PendingRecord]:
        """Up to ``limit`` records the dense index has not caught up with, oldest first."""
        rows = self.query(
            "read pending records",
            "SELECT id, text, tenant_id, user_id FROM records "
            "WHERE source = ? AND indexed = 0 ORDER BY rowid LIMIT ?",
            (source, limit),
        )
        return [PendingRecord(r["id"], r["text"], r["tenant_id"], r["user_id"]) for r in rows]

    def mark_indexed(
        self, ids: Sequence[str], indexed: bool = True, vectors: Optional[Sequence[bytes]] = None
    ) -> None:
        """Record that the dense index holds (or no longer holds) these records.

        ``vectors`` (one encoded vector per id) keeps a copy of each record's vector
        (:meth:`stored_vectors`); un-indexing a record drops its copy.
        """
        if vectors is not None and len(vectors) != len(ids):
            raise ValueError(f"{len(ids)} record ids but {len(vectors)} vectors")
        with self.transaction("mark records indexed") as conn:
            conn.executemany(
                "UPDATE records SET indexed = ? WHERE id = ?", [(int(indexed), i) for i in ids]
            )
            if not indexed:
                conn.executemany("DELETE FROM record_vectors WHERE id = ?", [(i,) for i in ids])
            elif vectors is not None:
                conn.executemany(
                    "INSERT OR REPLACE INTO record_vectors (id, vector) "
                    "SELECT id, ? FROM records WHERE id = ?",  # a record deleted meanwhile: none
                    [(v, i) for i, v in zip(ids, vectors)],
                )

    def stored_vectors(self, ids: Sequence[str]) -> dict[str, bytes]:
        """The vector copies kept by :meth:`mark_indexed` of these records, by id (ids
        without one are left out)."""
        if not ids:
            return {}
        rows = self.query(
            "read record vectors",
            f"SELECT id, vector FROM record_vectors WHERE id IN ({','.join('?' * len(ids))})",
            tuple(ids),
        )
        return {row["id"]: bytes(row["vector"]) for row in rows}

    def user_vectors(
        self, source: str, tenant_id: str, user_id: str, limit: int
    ) -> Optional[dict[str, bytes]]:
        """Every vector copy of one user's indexed records of ``source``, by id; None
        when the user has more than ``limit`` indexed records or some have no copy
        (indexed before copies were kept): then only the dense index holds them all."""
        # One statement, so one snapshot: a count taken apart could disagree with the
        # rows when another process commits in between.
        rows = self.query(
            "read user vectors",
            "SELECT r.id AS id, v.vector AS vector FROM records r "
            "LEFT JOIN record_vectors v ON v.id = r.id "
            "WHERE r.source = ? AND r.tenant_id = ? AND r.user_id = ? AND r.indexed = 1 LIMIT ?",
            (source, tenant_id, user_id, limit + 1),
        )
        if len(rows) > limit or any(row["vector"] is None for row in rows):
            return None
        return {row["id"]: bytes(row["vector"]) for row in rows}

    def data_version(self) -> int:
        """A number that changes whenever another connection (another memory on this
        file, another process) commits a change; this one's own commits leave it."""
        return int(self.query("read data version", "PRAGMA data_version")[0][0])

    def mark_all_unindexed(self, source: str) -> int:
        """Flag every record of ``source`` for re-indexing (their vector copies are
        dropped: the model may have changed); return how many."""
        with self.transaction("reset index flags") as conn:
            conn.execute(
                "DELETE FROM record_vectors WHERE id IN (SELECT id FROM records WHERE source = ?)",
                (source,),
            )
            cur = conn.execute("UPDATE records SET indexed = 0 WHERE source = ?", (source,))
            return cur.rowcount

    def count_records(self, source: str, scope: Optional[Scope] = None) -> int:
        """How many records ``source`` holds (for one user when ``scope`` is given)."""
        sql = "SELECT COUNT(*) FROM records WHERE source = ?"
        params: tuple[str, ...] = (source,)
        if scope is not None:
            sql += " AND tenant_id = ? AND user_id = ?"
            params += (scope.tenant_id, scope.require_user())
        return int(self.query("count records", sql, params)[0][0])

    def delete_user(self, scope: Scope, source: Optional[str] = None) -> list[str]:
        """Delete one user's records of ``source``; return their ids.

        Without ``source``: the user from every table of the file, whichever sources
        the caller has open (the right to be forgotten): records (their lexical index
        rows and vector copies go with them, by trigger), chat history of every
        session, and every other table with per-user rows (triples with their
        mentions and lexical index, profile fields and their history). Returns the
        deleted record ids.
        """
        user = scope.require_user("forgetting a user")
        source_clause, params = ("", ()) if source is None else (" AND source = ?", (source,))
        owner = (scope.tenant_id, user)
        with self.transaction("delete user") as conn:
            self._word_counts.clear()  # the counts shrink with the deleted rows
            rows = conn.execute(
                "SELECT id FROM records WHERE tenant_id = ? AND user_id = ?" + source_clause,
                (*owner, *params),
            ).fetchall()
            conn.execute(
                "DELETE FROM records WHERE tenant_id = ? AND user_id = ?" + source_clause,
                (*owner, *params),
            )
            if source is None:
                for table in _user_tables(conn):
                    for statement in _USER_DEPENDENTS.get(table, ()):
                        conn.execute(statement, owner)
                    conn.execute(f'DELETE FROM "{table}" WHERE tenant_id = ? AND user_id = ?', owner)
        return [row["id"] for row in rows]

    # -- identity, expiry and reconciliation ------------------------------------------------

    @property
    def store_id(self) -> str:
        """A random id given to this store when first asked, kept in the meta table: it
        keeps the collections of different stores apart on a shared Chroma server."""
        with self.transaction("read store id") as conn:
            conn.execute(
                "INSERT OR IGNORE INTO meta (key, value) VALUES ('store_id', ?)",
                (uuid.uuid4().hex[:12],),
            )
            return str(conn.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()[0])

    def index_flags(
        self, source: str, owner: Optional[tuple[str, str]] = None
    ) -> dict[tuple[str, str], dict[str, bool]]:
        """Every record id of ``source`` (of one (tenant, user) ``owner``, or all) and
        whether the dense index holds it, per (tenant, user): what reconciling the
        index compares Chroma with."""
        where = " AND tenant_id = ? AND user_id = ?" if owner is not None else ""
        flags: dict[tuple[str, str], dict[str, bool]] = {}
        for row in self.query(
            "read index flags",
            "SELECT id, tenant_id, user_id, indexed FROM records WHERE source = ?" + where,
            (source, *(owner or ())),
        ):
            flags.setdefault((row["tenant_id"], row["user_id"]), {})[row["id"]] = bool(row["indexed"])
        return flags

    def refresh_expiry(self, ids: Sequence[str], at: float) -> None:
        """Make records that have a time to live expire ``ttl`` seconds after ``at``."""
        with self.transaction("refresh expiry") as conn:
            conn.executemany(
                "UPDATE records SET expires_at = ? + ttl WHERE id = ? AND ttl IS NOT NULL",
                [(at, i) for i in ids],
            )

    def delete_expired(self, source: str, at: float) -> list[PendingRecord]:
        """Delete the records of ``source`` expired at ``at``; return what was deleted
        (ids and owners, for the dense index)."""
        with self.transaction("purge expired records") as conn:
            rows = conn.execute(
                "SELECT id, text, tenant_id, user_id FROM records "
                f"WHERE source = ? AND NOT {ALIVE_SQL}",
                (source, at),
            ).fetchall()
            conn.executemany("DELETE FROM records WHERE id = ?", [(r["id"],) for r in rows])
        return [PendingRecord(r["id"], r["text"], r["tenant_id"], r["user_id"]) for r in rows]


class ChatCursor(NamedTuple):
    """How far a reader of a :class:`SQLiteChatLog` has read: the store's
    :meth:`~SQLiteStore.change_stamp` then, and the bounds of the conversation it saw
    (see :class:`ChatRows`)."""

    stamp: tuple[int, int]
    first: Optional[int]
    last: int


class SQLiteChatLog:
    """One conversation's persisted messages: the :class:`~llama_memory.buffer.ChatLog` of a buffer.

    It is a :class:`~llama_memory.buffer.SharedChatLog`: every buffer on the same
    file and session (threads, processes) sees the messages the others commit, in
    commit order. Sequence numbers only grow (``AUTOINCREMENT``), so a conversation
    whose first sequence number changed was replaced or cleared by another writer.
    """

    def __init__(self, store: SQLiteStore, scope: Scope) -> None:
        self.store = store
        self.scope = scope

    def load(self) -> list[ChatMessage]:
        """The conversation's messages, oldest first."""
        return self.store.load_chat(self.scope)

    def append(self, messages: Sequence[ChatMessage]) -> None:
        """Append messages."""
        self.store.append_chat(self.scope, messages)

    def replace(self, messages: Sequence[ChatMessage]) -> None:
        """Replace all messages."""
        self.store.replace_chat(self.scope, messages)

    def clear(self) -> None:
        """Remove all messages."""
        self.store.replace_chat(self.scope, [])

    def changes(self, cursor: Optional[ChatCursor]) -> Optional[ChatLogChanges]:
        """What was committed since ``cursor`` (everything when it is None), or None
        when nothing at all was committed to the file since (one ``PRAGMA``), or
        when another thread is writing through this store right now."""
        # Read before the rows: a commit after it shows next time. A reader never waits
        # for another thread's write through this store: it learns the news next time.
        stamp = self.store.change_stamp(wait=cursor is None)
        if stamp is None or (cursor is not None and cursor.stamp == stamp):
            return None
        rows = self.store.chat_since(self.scope, cursor.last if cursor is not None else 0)
        return ChatLogChanges(
            rows.messages, _replaced(cursor, rows.first), ChatCursor(stamp, rows.first, rows.last)
        )

    def append_after(
        self, cursor: Optional[ChatCursor], messages: Sequence[ChatMessage]
    ) -> ChatLogChanges:
        """Append ``messages`` after whatever was committed since ``cursor``, which is
        returned (the cursor returned is after ``messages``)."""
        before, bounds, stamp = self.store.append_chat_after(
            self.scope, cursor.last if cursor is not None else 0, messages
        )
        return ChatLogChanges(
            before.messages, _replaced(cursor, before.first), ChatCursor(stamp, bounds.first, bounds.last)
        )

    def replace_all(self, messages: Sequence[ChatMessage]) -> ChatCursor:
        """Make ``messages`` the whole conversation; return the cursor after them."""
        bounds, stamp = self.store.replace_chat_bounds(self.scope, messages)
        return ChatCursor(stamp, bounds.first, bounds.last)


def _replaced(cursor: Optional[ChatCursor], first: Optional[int]) -> bool:
    """Whether the rows read after ``cursor`` are the whole conversation rather than
    an addition: nothing was read before, or the first message the reader saw is gone
    (another writer replaced or cleared the conversation; its new rows all come after
    the cursor). A reader that saw an empty conversation takes every row as new."""
    return cursor is None or (cursor.first is not None and first != cursor.first)


def _switch_to_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """Put the file in WAL mode. Processes that open a new file at the same moment race
    for the change, and SQLite reports the loser's "database is locked" at once, without
    waiting its busy timeout: so try again, for up to ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _user_tables(conn: sqlite3.Connection) -> list[str]:
    """The tables of the file that hold per-user rows (a ``tenant_id`` and a ``user_id``
    column), whichever component created them."""
    names = [
        row[0]
        for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
        if not row[0].startswith("sqlite_")
    ]
    return [
        name
        for name in names
        if {"tenant_id", "user_id"} <= {col[1] for col in conn.execute(f'PRAGMA table_info("{name}")')}
    ]


def _user_key(scope: Scope) -> str:
    # The buffer of an anonymous memory is still persisted, under the empty user.
    return scope.user_id or ""


def _session_key(scope: Scope) -> tuple[str, str, str]:
    return (scope.tenant_id, _user_key(scope), scope.session_id or "")


def _record_id(source: str, tenant: str, user: str, digest: str) -> str:
    # Deterministic, so a record re-written after a crash gets the same id in both stores.
    key = f"{source}\x1f{tenant}\x1f{user}\x1f{digest}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def _later_expiry(existing: sqlite3.Row, rec: NewRecord) -> tuple[Optional[float], Optional[float]]:
    """(ttl, expires_at) of a record stated again: the later expiry; never if either is."""
    if existing["expires_at"] is None or rec.expires_at is None:
        return None, None
    if rec.expires_at > existing["expires_at"]:
        return rec.ttl, rec.expires_at
    return existing["ttl"], existing["expires_at"]


def _to_record(row: sqlite3.Row) -> MemoryRecord:
    return MemoryRecord(
        id=row["id"],
        text=row["text"],
        source=row["source"],
        user_id=row["user_id"],
        session_id=row["session_id"],
        role=row["role"],
        message_ids=json.loads(row["message_ids"]),
        event_time=row["event_time"],
        ingested_at=row["ingested_at"],
        metadata=json.loads(row["metadata"]),
        expires_at=row["expires_at"],
    )
