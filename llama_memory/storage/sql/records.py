"""The records of every SQL backend (table ``records``): a record's id, a row as a
:class:`~llama_memory.core.types.MemoryRecord`, and :class:`RecordStore`, the reads and
writes written once; a backend keeps its session neighbours, vector copies and lexical
index its own way.
"""

from __future__ import annotations

import hashlib
import json
import threading
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from ...core.errors import StorageError
from ...core.text import content_hash
from ...core.types import MemoryRecord, Scope, is_alive, later_expiry, now
from ..ports.base import user_meta_infix
from ..ports.records import NewRecord, PendingRecord, more_important
from .dialect import ALIVE_SQL, EXPIRED_SQL, Dialect

__all__ = ["RECORD_COLUMNS", "RecordStore", "WordCountCache", "record_id", "to_record"]

#: The columns :func:`to_record` reads (not the lexical index's, nor a vector copy).
RECORD_COLUMNS = (
    "id, source, tenant_id, user_id, session_id, role, text, message_ids, event_time, "
    "ingested_at, metadata, expires_at, importance, last_used"
)
#: What a deleted record is returned as (:class:`PendingRecord`).
_GONE = "id, text, tenant_id, user_id"
#: A user's records of one source; parameters: tenant, user, source.
_OWNED = "tenant_id = ? AND user_id = ? AND source = ?"


def record_id(source: str, tenant: str, user: str, digest: str) -> str:
    """The id of the user's record of ``source`` with content hash ``digest``: the same on
    every backend and after a crash."""
    key = f"{source}\x1f{tenant}\x1f{user}\x1f{digest}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def _json(stored: Any) -> Any:  # JSON text (SQLite), or parsed by the driver (jsonb)
    return json.loads(stored) if isinstance(stored, str) else stored


def _metadata(stored: Any) -> Any:
    # Most records have none: a new empty dict, without the JSON decoder (a get() reads
    # about 40 records at 2,000 messages).
    return {} if stored == "{}" else _json(stored)


def _message_ids(stored: Any) -> list[str]:
    # Most records are one message: '["<id>"]' read without the JSON decoder when the id
    # holds no quote or escape (the decoder gives the same string then).
    if isinstance(stored, str) and stored[:2] == '["' and stored[-2:] == '"]':
        inner = stored[2:-2]
        if '"' not in inner and "\\" not in inner:
            return [inner]
    return list(_json(stored))


def to_record(row: Any) -> MemoryRecord:
    """A ``records`` row (read by column name) as a :class:`MemoryRecord`."""
    return MemoryRecord(
        id=row["id"],
        text=row["text"],
        source=row["source"],
        user_id=row["user_id"],
        session_id=row["session_id"],
        role=row["role"],
        message_ids=_message_ids(row["message_ids"]),
        event_time=row["event_time"],
        ingested_at=row["ingested_at"],
        metadata=_metadata(row["metadata"]),
        expires_at=row["expires_at"],
        importance=row["importance"],
        last_used=row["last_used"],
    )


def _gone(rows: Sequence[Any]) -> list[PendingRecord]:
    return [PendingRecord(r["id"], r["text"], r["tenant_id"], r["user_id"]) for r in rows]


class RecordStore(ABC):
    """Long-term records of every source, keyed by a deterministic id, and what spans
    the store's tables (forgetting a user, purging what expired).

    A record whose normalised text (and role) the user already has in the source is
    stored once (its message ids grow, the later expiry wins, "forever" wins all);
    reads never return another user's records, nor (given ``alive_at``) expired ones.
    """

    dialect: ClassVar[Dialect]
    #: The column that keeps a user's records in the order they were written.
    write_order: ClassVar[str]
    #: ``records`` (as ``r``) beside each record's vector copy, and the copy's column
    #: (NULL where a record has none): a table of their own, or a column of ``records``.
    with_copies: ClassVar[str]
    copy_column: ClassVar[str]
    #: Per table, statements (parameters: tenant, user) deleting the user's rows that hang
    #: on a row of it with no cascade, run before its own rows go (see :meth:`delete_user`).
    user_dependents: ClassVar[Mapping[str, tuple[str, ...]]] = {}

    if TYPE_CHECKING:  # what the store this part belongs to provides
        _word_counts: WordCountCache

        def transaction(self, action: str) -> AbstractContextManager[Any]: ...

        def query(self, action: str, sql: str, params: Sequence[Any] = ()) -> Sequence[Any]: ...

    # -- what a backend does its own way ---------------------------------------------------

    @abstractmethod
    def session_neighbours(
        self, ids: Sequence[str], scope: Scope, source: str, radius: int
    ) -> dict[str, list[tuple[int, str]]]:
        """For each id of the user's in ``source``: its session's records from ``radius``
        before to ``radius`` after it, itself included, as (position, id) in write order.
        A standalone record (``metadata["standalone"]``) has itself alone, and is no
        other's neighbour. Unknown ids are left out."""

    def ensure_session_order(self) -> None:
        """Prepare what :meth:`session_neighbours` needs (nothing by default)."""

    @abstractmethod
    def mark_indexed(
        self, ids: Sequence[str], indexed: bool = True, vectors: Optional[Sequence[bytes]] = None
    ) -> None:
        """Record that the dense index holds (or no longer holds) these rows, keeping
        ``vectors`` (encoded, one per id) as their copies."""

    @abstractmethod
    def mark_all_unindexed(self, source: str) -> int:
        """Flag every row of ``source`` for re-indexing (copies dropped); return how many."""

    def _derived_columns(self, rec: NewRecord) -> dict[str, Any]:
        """Columns the backend's schema keeps beside a new record's own."""
        return {}

    def _record_rows(self, action: str, statement: str, params: Sequence[Any] = ()) -> Sequence[Any]:
        return self.query(action, self.dialect.sql(statement), params)

    def _by_ids(self, action: str, columns: str, ids: Sequence[str]) -> list[Any]:
        rows: list[Any] = []
        for batch in self.dialect.batches(ids):
            listed, values = self.dialect.in_list("id", batch)
            rows += self._record_rows(action, f"SELECT {columns} FROM records WHERE {listed}", values)
        return rows

    # -- writing ----------------------------------------------------------------------------

    def add_records(self, records: Sequence[NewRecord]) -> list[str]:
        """Write records in one transaction, deduplicated as the class says (concurrent
        writers meet on the unique key; the merge runs under the row's lock); their ids."""
        d = self.dialect
        ids: list[str] = []
        ingested = now()
        with self.transaction("add records") as conn:
            for rec in records:
                tenant, user = rec.scope.tenant_id, rec.scope.require_user(f"the {rec.source!r} memory source")
                digest = content_hash(rec.text, rec.role)
                new_id = record_id(rec.source, tenant, user, digest)
                values = {
                    "id": new_id, "source": rec.source, "tenant_id": tenant, "user_id": user,
                    "session_id": rec.scope.session_id, "role": rec.role, "text": rec.text,
                    "content_hash": digest, "message_ids": d.json_param(list(rec.message_ids)),
                    "event_time": rec.event_time, "ingested_at": ingested,
                    "metadata": d.json_param(rec.metadata or {}),
                    "ttl": rec.ttl if rec.expires_at is not None else None,
                    "expires_at": rec.expires_at, "importance": rec.importance,
                    **self._derived_columns(rec),
                }  # fmt: skip
                if d.insert_new(conn, "records", values):
                    ids.append(new_id)
                    continue
                existing = d.execute(
                    conn,
                    "SELECT id, message_ids, ttl, expires_at, importance FROM records "
                    f"WHERE {_OWNED} AND content_hash = ?{d.row_lock}",
                    (tenant, user, rec.source, digest),
                ).fetchone()
                if existing is None:  # another unique key refused it: never dropped in silence
                    raise StorageError(
                        f"record {new_id} of source {rec.source!r} was refused by the store "
                        "(another row holds its id) and no row of this user holds its content"
                    )
                key = (tenant, user, existing["id"])
                known = list(d.json_value(existing["message_ids"]))
                merged = known + [m for m in rec.message_ids if m not in known]
                lasting = later_expiry((existing["ttl"], existing["expires_at"]), (rec.ttl, rec.expires_at))
                if merged != known or lasting != (existing["ttl"], existing["expires_at"]):
                    d.execute(
                        conn,
                        "UPDATE records SET message_ids = ?, ttl = ?, expires_at = ? "
                        "WHERE tenant_id = ? AND user_id = ? AND id = ?",
                        (d.json_param(merged), *lasting, *key),
                    )
                if more_important(rec.importance, existing["importance"]):
                    d.execute(
                        conn,
                        "UPDATE records SET importance = ? WHERE tenant_id = ? AND user_id = ? AND id = ?",
                        (rec.importance, *key),
                    )
                ids.append(existing["id"])
        return ids

    def refresh_expiry(self, ids: Sequence[str], at: float) -> None:
        """Make records that have a time to live expire ``ttl`` seconds after ``at``."""
        self.dialect.update_ids(self.transaction, "refresh expiry", "records", "expires_at = ? + ttl", ids, "ttl IS NOT NULL", (at,))

    def mark_used(self, ids: Sequence[str], at: float) -> None:
        """Record that these records were shown at ``at`` (``last_used`` only moves
        forward; unknown ids are ignored). Callers batch it: it is a write."""
        self.dialect.update_ids(
            self.transaction, "mark records used", "records", "last_used = ?", ids, "(last_used IS NULL OR last_used < ?)", (at,), (at,)
        )

    # -- reading ----------------------------------------------------------------------------

    def get_records(
        self, ids: Sequence[str], scope: Scope, source: str, alive_at: Optional[float] = None
    ) -> dict[str, MemoryRecord]:
        """Records by id of the scope's user in ``source`` (given ``alive_at``, alive then)."""
        if not ids:
            return {}
        user = scope.require_user(f"the {source!r} memory source")
        # Look up by id only and check the scope here: with the scope columns in the
        # WHERE clause SQLite prefers the (source, tenant, user) index and scans the
        # user's rows (2 ms at 2,000 records instead of 0.2 ms).
        return {
            row["id"]: to_record(row)
            for row in self._by_ids("read records", RECORD_COLUMNS, ids)
            if (row["source"], row["tenant_id"], row["user_id"]) == (source, scope.tenant_id, user)
            and (alive_at is None or is_alive(row["expires_at"], alive_at))
        }

    def get_texts(
        self, ids: Sequence[str], scope: Scope, source: str
    ) -> dict[str, tuple[Optional[str], str]]:
        """The (role, text) of records by id as :meth:`get_records` (expired ones too)."""
        if not ids:
            return {}
        user = scope.require_user(f"the {source!r} memory source")
        return {
            row["id"]: (row["role"], row["text"])
            for row in self._by_ids("read record texts", "id, role, text, source, tenant_id, user_id", ids)
            if (row["source"], row["tenant_id"], row["user_id"]) == (source, scope.tenant_id, user)
        }

    def record_ids(
        self, texts: Sequence[str], roles: Sequence[Optional[str]], scope: Scope, source: str
    ) -> list[str]:
        """The ids the user's records of these ``texts`` (each role) have or would have (a
        hash: nothing is read)."""
        tenant, user = scope.tenant_id, scope.require_user(f"the {source!r} memory source")
        return [record_id(source, tenant, user, content_hash(text, role)) for text in texts for role in roles]

    def recent_records(
        self, scope: Scope, source: str, limit: int, span: Optional[tuple[float, float]] = None,
        alive_at: Optional[float] = None
    ) -> list[MemoryRecord]:
        """The user's latest ``limit`` records of ``source`` in ``span`` (else of the latest
        other session), oldest first."""
        user = scope.require_user(f"the {source!r} memory source")
        owned = (scope.tenant_id, user, source)
        alive, extra = ("", ()) if alive_at is None else (f" AND {ALIVE_SQL}", (alive_at,))
        # Records without an event time come after every dated one.
        latest_first = f"ORDER BY event_time DESC NULLS LAST, {self.write_order} DESC"
        session = self.dialect.same_as("session_id")
        args: tuple[Any, ...]
        if span is not None:
            where, args = "event_time >= ? AND event_time < ?", (span[0], span[1])
        else:
            latest = self._record_rows(
                "latest session",
                f"SELECT session_id FROM records WHERE {_OWNED} AND NOT ({session}){alive} {latest_first} LIMIT 1",
                (*owned, scope.session_id, *extra),
            )
            if not latest:
                return []
            where, args = session, (latest[0]["session_id"],)
        rows = self._record_rows(
            "recent records",
            f"SELECT {RECORD_COLUMNS} FROM records WHERE {_OWNED} AND {where}{alive} {latest_first} LIMIT ?",
            (*owned, *args, *extra, limit),
        )
        return [to_record(row) for row in reversed(rows)]

    def session_records(self, scope: Scope, source: str, limit: int) -> list[MemoryRecord]:
        """The first ``limit`` records of ``source`` in the scope's session."""
        user = scope.require_user(f"the {source!r} memory source")
        rows = self._record_rows(
            "session records",
            f"SELECT {RECORD_COLUMNS} FROM records WHERE {_OWNED} AND {self.dialect.same_as('session_id')} "
            f"ORDER BY {self.write_order} LIMIT ?",
            (scope.tenant_id, user, source, scope.session_id, limit),
        )
        return [to_record(row) for row in rows]

    def count_records(self, source: str, scope: Optional[Scope] = None) -> int:
        """How many records ``source`` holds (for one user when ``scope`` is given)."""
        if scope is None:
            rows = self._record_rows("count records", "SELECT count(*) AS n FROM records WHERE source = ?", (source,))
        else:
            rows = self._record_rows(
                "count records",
                f"SELECT count(*) AS n FROM records WHERE {_OWNED}",
                (scope.tenant_id, scope.require_user(), source),
            )
        return int(rows[0]["n"])

    # -- the dense index's bookkeeping --------------------------------------------------------

    def pending_records(self, source: str, limit: int) -> list[PendingRecord]:
        """Up to ``limit`` records the dense index has not caught up with, oldest first."""
        return _gone(
            self._record_rows(
                "read pending records",
                f"SELECT {_GONE} FROM records WHERE source = ? AND indexed = {self.dialect.false} "
                f"ORDER BY {self.write_order} LIMIT ?",
                (source, limit),
            )
        )

    def index_flags(
        self, source: str, owner: Optional[tuple[str, str]] = None
    ) -> dict[tuple[str, str], dict[str, bool]]:
        """Every record id of ``source`` (of ``owner``, or all) and whether the index has it."""
        params: tuple[str, ...]
        if owner is None:
            where, params = "source = ?", (source,)
        else:
            where, params = _OWNED, (*owner, source)
        flags: dict[tuple[str, str], dict[str, bool]] = {}
        for row in self._record_rows(
            "read index flags",
            f"SELECT id, tenant_id, user_id, indexed FROM records WHERE {where} ORDER BY {self.write_order}",
            params,
        ):
            flags.setdefault((row["tenant_id"], row["user_id"]), {})[row["id"]] = bool(row["indexed"])
        return flags

    def stored_vectors(self, ids: Sequence[str]) -> dict[str, bytes]:
        """The vector copies of these records, by id (those without one left out)."""
        found: dict[str, bytes] = {}
        for batch in self.dialect.batches(ids):
            listed, values = self.dialect.in_list("r.id", batch)
            for row in self._record_rows(
                "read record vectors",
                f"SELECT r.id AS id, {self.copy_column} AS vector FROM {self.with_copies} "
                f"WHERE {listed} AND {self.copy_column} IS NOT NULL",
                values,
            ):
                found[row["id"]] = bytes(row["vector"])
        return found

    def user_vectors(self, source: str, tenant_id: str, user_id: str, limit: int) -> Optional[dict[str, bytes]]:
        """One user's vector copies of ``source``; None beyond ``limit`` or if one is missing."""
        # One statement, so one snapshot: a count taken apart could disagree with the
        # rows when another process commits in between.
        rows = self._record_rows(
            "read user vectors",
            f"SELECT r.id AS id, {self.copy_column} AS vector FROM {self.with_copies} "
            f"WHERE r.tenant_id = ? AND r.user_id = ? AND r.source = ? AND r.indexed = {self.dialect.true} LIMIT ?",
            (tenant_id, user_id, source, limit + 1),
        )
        if len(rows) > limit or any(row["vector"] is None for row in rows):
            return None
        return {row["id"]: bytes(row["vector"]) for row in rows}

    # -- deleting -----------------------------------------------------------------------------

    def delete_records(self, ids: Sequence[str], scope: Scope, source: str) -> list[PendingRecord]:
        """Delete these records of the scope's user in ``source`` (others ignored); what was
        deleted, for the dense index."""
        if not ids:
            return []
        user = scope.require_user(f"the {source!r} memory source")
        gone: list[Any] = []
        with self.transaction("delete records") as conn:
            for batch in self.dialect.batches(ids):
                listed, values = self.dialect.in_list("id", batch)
                gone += self.dialect.delete(
                    conn, "records", f"{_OWNED} AND {listed}", (scope.tenant_id, user, source, *values), _GONE
                )
        return _gone(gone)

    def delete_expired(self, source: str, at: float) -> list[PendingRecord]:
        """Delete the records of ``source`` expired at ``at``; return them."""
        with self.transaction("purge expired records") as conn:
            return _gone(self.dialect.delete(conn, "records", f"source = ? AND {EXPIRED_SQL}", (source, at), _GONE))

    def purge_expired(self, at: float) -> list[PendingRecord]:
        """Delete every record expired at ``at``; return them (the caller drops vectors)."""
        with self.transaction("purge expired records") as conn:
            return _gone(self.dialect.delete(conn, "records", EXPIRED_SQL, (at,), _GONE))

    def delete_user(self, scope: Scope, source: Optional[str] = None) -> list[str]:
        """Delete one user's records of ``source``; their ids. Without ``source``, forget the
        user in every table with per-user rows and meta keys, in one transaction."""
        d = self.dialect
        owner = (scope.tenant_id, scope.require_user("forgetting a user"))
        params: tuple[str, ...]
        where, params = "tenant_id = ? AND user_id = ?", owner
        if source is not None:
            where, params = _OWNED, (*owner, source)
        with self.transaction("delete user") as conn:
            self._word_counts.clear()  # the counts shrink with the deleted rows
            rows = d.delete(conn, "records", where, params, "id")
            if source is None:
                for table in d.user_tables(conn):
                    for statement in self.user_dependents.get(table, ()):
                        d.execute(conn, statement, owner)
                    d.execute(conn, f'DELETE FROM "{table}" WHERE tenant_id = ? AND user_id = ?', owner)
                d.execute(conn, f"DELETE FROM meta WHERE {d.contains('key')}", (user_meta_infix(*owner),))
        return [row["id"] for row in rows]


#: How many words' counts are remembered by default.
CACHED_WORDS = 4096
#: A count is counted again once the index has grown by this share since.
STALE_GROWTH = 0.1


class WordCountCache:
    """Remembered match counts of words in a lexical index (a key is a word, or (tenant,
    user, word)), given back until the index has grown by :data:`STALE_GROWTH`; the least
    recently used dropped beyond ``size`` words. Thread-safe."""

    def __init__(self, size: int = CACHED_WORDS) -> None:
        if size < 1:
            raise ValueError(f"size must be at least 1, got {size}")
        self.size = size
        self._counts: OrderedDict[Hashable, tuple[int, int]] = OrderedDict()
        self._lock = threading.Lock()

    def holds(self, word: Hashable) -> bool:
        """Whether a count of ``word`` is remembered, fresh or not."""
        with self._lock:
            return word in self._counts

    def peek(self, word: Hashable) -> Optional[int]:
        """The remembered count of ``word``, fresh or not (not counted as a use)."""
        with self._lock:
            cached = self._counts.get(word)
            return None if cached is None else cached[0]

    def get(self, word: Hashable, total: int) -> Optional[int]:
        """The remembered count of ``word`` if fresh for ``total`` records, else None."""
        with self._lock:
            cached = self._counts.get(word)
            if cached is None or total > cached[1] * (1 + STALE_GROWTH):
                return None
            self._counts.move_to_end(word)
            return cached[0]

    def put(self, word: Hashable, count: int, total: int) -> None:
        """Remember that ``count`` records of an index of ``total`` hold ``word``."""
        with self._lock:
            self._counts[word] = (count, total)
            self._counts.move_to_end(word)
            while len(self._counts) > self.size:
                self._counts.popitem(last=False)

    def clear(self) -> None:
        """Forget every count."""
        with self._lock:
            self._counts.clear()
