"""Long-term records in the SQLite system of record: write with dedup, read, session
order, index flags and expiry."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Optional

from ...text import content_hash
from ...types import MemoryRecord, Scope, now
from ..expiry import is_alive, later_expiry
from ..ports.records import NewRecord, PendingRecord, more_important
from ..sql.dialect import ALIVE_SQL
from ..sql.records import record_id as make_record_id
from ..sql.records import to_record
from .connection import SQLiteConnection
from .schema import SESSION_ORDER_MIGRATIONS


class RecordTables(SQLiteConnection):
    """The records part of the store (table ``records``)."""

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
                    "SELECT id, message_ids, ttl, expires_at, importance FROM records WHERE source = ? "
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
                    lasting = later_expiry(
                        (existing["ttl"], existing["expires_at"]), (rec.ttl, rec.expires_at)
                    )
                    if lasting != (existing["ttl"], existing["expires_at"]):
                        conn.execute(
                            "UPDATE records SET ttl = ?, expires_at = ? WHERE id = ?",
                            (*lasting, existing["id"]),
                        )
                    if more_important(rec.importance, existing["importance"]):
                        conn.execute(
                            "UPDATE records SET importance = ? WHERE id = ?",
                            (rec.importance, existing["id"]),
                        )
                    ids.append(existing["id"])
                    continue
                record_id = make_record_id(rec.source, rec.scope.tenant_id, user, digest)
                conn.execute(
                    "INSERT INTO records (id, source, tenant_id, user_id, session_id, role, text, "
                    "content_hash, message_ids, event_time, ingested_at, metadata, ttl, "
                    "expires_at, importance, indexed) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)",
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
                        rec.importance,
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
            row["id"]: to_record(row)
            for row in rows
            if (row["source"], row["tenant_id"], row["user_id"]) == (source, scope.tenant_id, user)
            and (alive_at is None or is_alive(row["expires_at"], alive_at))
        }

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

    def recent_records(
        self,
        scope: Scope,
        source: str,
        limit: int,
        span: Optional[tuple[float, float]] = None,
        alive_at: Optional[float] = None,
    ) -> list[MemoryRecord]:
        """The scope's user's latest records of ``source``, oldest first: at most
        ``limit`` of those whose event time is in ``span`` (start, end), or, without a
        span, of the latest session other than the scope's own (what "last time" means)."""
        user = scope.require_user(f"the {source!r} memory source")
        owner = (source, scope.tenant_id, user)
        alive = f"AND {ALIVE_SQL}" if alive_at is not None else ""
        extra: tuple = (alive_at,) if alive_at is not None else ()
        args: tuple[object, ...]
        if span is not None:
            where, args = "event_time >= ? AND event_time < ?", (span[0], span[1])
        else:
            latest = self.query(
                "latest session",
                "SELECT session_id FROM records WHERE source = ? AND tenant_id = ? AND user_id = ? "
                f"AND session_id IS NOT ? {alive} ORDER BY event_time DESC, rowid DESC LIMIT 1",
                (*owner, scope.session_id, *extra),
            )
            if not latest:
                return []
            where, args = "session_id IS ?", (latest[0]["session_id"],)
        rows = self.query(
            "recent records",
            f"SELECT * FROM records WHERE source = ? AND tenant_id = ? AND user_id = ? AND {where} "
            f"{alive} ORDER BY event_time DESC, rowid DESC LIMIT ?",
            (*owner, *args, *extra, limit),
        )
        return [to_record(row) for row in reversed(rows)]

    def session_records(self, scope: Scope, source: str, limit: int) -> list[MemoryRecord]:
        """The first ``limit`` records of ``source`` in the scope's session, in write order."""
        user = scope.require_user(f"the {source!r} memory source")
        rows = self.query(
            "session records",
            "SELECT * FROM records WHERE source = ? AND tenant_id = ? AND user_id = ? "
            "AND session_id IS ? ORDER BY rowid LIMIT ?",
            (source, scope.tenant_id, user, scope.session_id, limit),
        )
        return [to_record(row) for row in rows]

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

    def delete_records(self, ids: Sequence[str], scope: Scope, source: str) -> list[PendingRecord]:
        """Delete these records of the scope's user in ``source``; return what was
        deleted. Their lexical entries and vector copies go with them (triggers)."""
        if not ids:
            return []
        user = scope.require_user(f"the {source!r} memory source")
        marks = ",".join("?" * len(ids))
        with self.transaction("delete records") as conn:
            rows = conn.execute(
                f"SELECT id, text, tenant_id, user_id FROM records WHERE id IN ({marks}) "
                "AND source = ? AND tenant_id = ? AND user_id = ?",
                (*ids, source, scope.tenant_id, user),
            ).fetchall()
            conn.executemany("DELETE FROM records WHERE id = ?", [(r["id"],) for r in rows])
        return [PendingRecord(r["id"], r["text"], r["tenant_id"], r["user_id"]) for r in rows]

    def mark_used(self, ids: Sequence[str], at: float) -> None:
        """Record that these records were shown at ``at`` (``last_used`` only moves forward)."""
        if not ids:
            return
        with self.transaction("mark records used") as conn:
            conn.executemany(
                "UPDATE records SET last_used = ? WHERE id = ? "
                "AND (last_used IS NULL OR last_used < ?)",
                [(at, i, at) for i in ids],
            )
