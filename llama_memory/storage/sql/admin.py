"""Store-wide reads and writes for managing a memory, once for every SQL backend: the
:class:`~llama_memory.storage.sql.admin.AdminRows` port behind :mod:`llama_memory.admin.memory_admin`.

Everything here works on one store and returns plain rows (dataclasses and dicts),
never SQL: listing the users and sessions of a tenant, a user's records with filters,
deleting one record or triple, counting what the store holds and what the dense index
still has to catch up with, and reading the rows of an export (chat messages, records,
profile rows, triples with their mentions; writing them is :mod:`.admin_import`'s). The rows (and the
export format) are the same on every backend, so an export of one imports into another.

A backend subclass says what it does its own way: which of its tables exist
(:meth:`AdminRows._existing`: a SQLite file has the profile and triple tables only
once such a source was opened on it), the column that keeps the records' write order,
the columns a record row adds (:meth:`AdminRows._record_extras`), its triple
timeline (which writes and deletes a triple with its lexical entry) and refreshing the
planner's statistics.
"""

from __future__ import annotations

import json
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Optional

from ...core.types import MemoryRecord
from ..ports.admin import DOCUMENT_KINDS, SessionSummary, StoreCounts, UserSummary
from ..ports.base import user_meta_infix
from .admin_import import OWNER as _OWNER
from .admin_import import SQLImportRows
from .dialect import EXPIRED_SQL, given
from .records import to_record

__all__ = ["PROFILE_TABLE", "AdminRows"]

PROFILE_TABLE = DOCUMENT_KINDS["profile"]
_TRIPLE_COLUMNS = (
    "subject", "predicate", "object", "subject_key", "predicate_key", "object_key",
    "valid_from", "valid_to", "superseded_by", "ingested_at", "ttl", "expires_at",
)  # fmt: skip


def _count(condition: str) -> str:
    """SQL counting the rows of a group that meet ``condition``."""
    return f"count(CASE WHEN {condition} THEN 1 END)"


_EXPIRED = _count(EXPIRED_SQL)


def _is_user_key(key: str) -> bool:
    """Whether a meta key is a :func:`user_meta_key` (``kind:["tenant", "user", ...``)."""
    return ':["' in key


class AdminRows(SQLImportRows, ABC):
    """Administrative reads and writes on one SQL store, for one tenant at a time."""

    #: The ``records`` column that keeps write order.
    record_order: ClassVar[str]
    #: Whether the tables of the optional sources are made when a source is first
    #: opened: then a triples table says the triple source is in use.
    tables_on_first_use: ClassVar[bool]

    # -- what a backend does its own way -------------------------------------------------

    def _existing(self, *tables: str) -> set[str]:
        """Which of ``tables`` exist (all of them where the schema is migrated on open)."""
        return set(tables)

    @abstractmethod
    def refresh_statistics(self) -> None:
        """Bring the planner's statistics up to date after a bulk import."""

    # -- plumbing -------------------------------------------------------------------------

    def _query(self, action: str, statement: str, params: Sequence[Any] = ()) -> Sequence[Any]:
        return self.store.query(action, self.dialect.sql(statement), params)

    def _one(self, action: str, statement: str, params: Sequence[Any] = ()) -> Any:
        return self._query(action, statement, params)[0]

    # -- what is there ----------------------------------------------------------------

    def has_triples(self) -> bool:
        """Whether the store holds any knowledge triple (of any tenant)."""
        return bool(self._existing("triples")) and bool(self._query("find triples", "SELECT 1 FROM triples LIMIT 1"))

    def tenants(self) -> list[str]:
        """Every tenant with chat history, records, triples or profile rows, sorted."""
        tables = ("chat_messages", "records", *sorted(self._existing("triples", PROFILE_TABLE)))
        rows = self._query(
            "list tenants", " UNION ".join(f"SELECT tenant_id FROM {t}" for t in tables) + " ORDER BY 1"
        )
        return [row["tenant_id"] for row in rows]

    def users(self, tenant_id: str) -> list[UserSummary]:
        """Every user of the tenant (anyone with chat history, records, triples or a
        profile), sorted by id. The anonymous buffer (no user) is left out."""
        tables = self._existing("triples", PROFILE_TABLE)
        queries = [
            ("messages", "SELECT user_id, count(*) AS n, count(DISTINCT session_id) AS sessions, "
             "max(created_at) AS last FROM chat_messages WHERE tenant_id = ? GROUP BY user_id"),
            ("records", "SELECT user_id, count(*) AS n, max(ingested_at) AS last FROM records "
             "WHERE tenant_id = ? GROUP BY user_id"),
        ]  # fmt: skip
        if "triples" in tables:
            queries.append(
                ("triples", f"SELECT user_id, {_count('valid_to IS NULL')} AS n, max(ingested_at) AS last "
                 "FROM triples WHERE tenant_id = ? GROUP BY user_id")
            )  # fmt: skip
        if PROFILE_TABLE in tables:
            queries.append(
                ("profile_fields", f"SELECT user_id, {_count('superseded_at IS NULL AND value_json IS NOT NULL')} "
                 f"AS n, max(created_at) AS last FROM {PROFILE_TABLE} WHERE tenant_id = ? GROUP BY user_id")
            )  # fmt: skip
        found: dict[str, dict[str, Any]] = {}
        for column, statement in queries:
            for row in self._query("list users", statement, (tenant_id,)):
                if row["user_id"] == "":
                    continue
                entry = found.setdefault(row["user_id"], {})
                entry[column] = int(row["n"])
                if row["last"] is not None:
                    entry["last_active"] = max(entry.get("last_active") or 0.0, row["last"])
                if column == "messages":
                    entry["sessions"] = int(row["sessions"])
        return [UserSummary(user_id=user, **found[user]) for user in sorted(found)]

    def sessions(self, tenant_id: str, user_id: str) -> list[SessionSummary]:
        """The user's sessions, in the order they began: those with chat history (by
        their first message), then those known only from long-term records."""
        owner = (tenant_id, user_id)
        chats = self._query(
            "list sessions",
            "SELECT session_id, count(*) AS n, min(created_at) AS first, max(created_at) AS last "
            f"FROM chat_messages {_OWNER} GROUP BY session_id ORDER BY min(seq)",
            owner,
        )
        records = self._query(
            "list sessions",
            f"SELECT session_id, count(*) AS n FROM records {_OWNER} AND session_id IS NOT NULL "
            f"GROUP BY session_id ORDER BY min({self.record_order})",
            owner,
        )
        per_session = {row["session_id"]: int(row["n"]) for row in records}
        out = [
            SessionSummary(
                row["session_id"], int(row["n"]), per_session.pop(row["session_id"], 0),
                row["first"], row["last"],
            )  # fmt: skip
            for row in chats
        ]
        return out + [SessionSummary(session, 0, n) for session, n in per_session.items()]

    def records(
        self,
        tenant_id: str,
        user_id: str,
        *,
        session_id: Optional[str] = None,
        source: Optional[str] = None,
        since: Optional[float] = None,
        until: Optional[float] = None,
        limit: Optional[int] = None,
        newest_first: bool = False,
        ids: Optional[Sequence[str]] = None,
    ) -> list[MemoryRecord]:
        """The user's long-term records, in the order written (or newest first), with
        filters: one session, one source, a time range ``[since, until)`` on when each
        happened (its event time, else when it was stored), these ids only (of any
        source: what a reader of one record by id asks). Expired records included."""
        where = ["tenant_id = ?", "user_id = ?"]
        params: list[Any] = [tenant_id, user_id]
        given(
            where, params,
            ("session_id = ?", session_id),
            ("source = ?", source),
            ("coalesce(event_time, ingested_at) >= ?", since),
            ("coalesce(event_time, ingested_at) < ?", until),
        )  # fmt: skip
        if ids is not None:
            if not ids:
                return []
            where.append(f"id IN ({', '.join('?' * len(ids))})")
            params.extend(ids)
        statement = f"SELECT * FROM records WHERE {' AND '.join(where)} ORDER BY {self.record_order}"
        if newest_first:
            statement += " DESC"
        if limit is not None:
            statement += " LIMIT ?"
            params.append(limit)
        return [to_record(row) for row in self._query("list records", statement, params)]

    def delete_record(self, tenant_id: str, user_id: str, record_id: str) -> Optional[str]:
        """Delete one of the user's records (its lexical entry and vector copy go with
        it); return its source's name, or None when the user has no such record."""
        with self.store.transaction("delete record") as conn:
            row = self.dialect.execute(
                conn, f"SELECT source FROM records {_OWNER} AND id = ?", (tenant_id, user_id, record_id)
            ).fetchone()
            if row is None:
                return None
            # Triggers (SQLite) or foreign keys (PostgreSQL) take its lexical entry and vector copy.
            self.dialect.execute(conn, "DELETE FROM records WHERE id = ?", (record_id,))
        return str(row["source"])

    def delete_triple(self, tenant_id: str, user_id: str, triple_id: str) -> bool:
        """Delete one of the user's knowledge triples with its lexical entry and
        provenance; False when the user has no such triple."""
        if not self._existing("triples"):
            return False
        timeline = self._timeline()
        with self.store.transaction("delete triple") as conn:
            gone = timeline._delete_where(
                conn, "id = ? AND tenant_id = ? AND user_id = ?", (triple_id, tenant_id, user_id)
            )
        return bool(gone)

    def counts(self, tenant_id: str, at: float) -> StoreCounts:
        """What the tenant has in the store (``at``: now, for what has expired)."""
        sessions = self._one(
            "count chat history",
            "SELECT count(*) AS n FROM (SELECT DISTINCT user_id, session_id FROM chat_messages "
            "WHERE tenant_id = ? AND user_id <> '') AS s",
            (tenant_id,),
        )["n"]
        messages = self._one(
            "count chat history", "SELECT count(*) AS n FROM chat_messages WHERE tenant_id = ? AND user_id <> ''",
            (tenant_id,),
        )["n"]  # fmt: skip
        counts = StoreCounts(users=len(self.users(tenant_id)), sessions=int(sessions), messages=int(messages))
        pending = _count(f"indexed = {self.dialect.false}")
        for row in self._query(
            "count records",
            f"SELECT source, count(*) AS n, {pending} AS pending, {_EXPIRED} AS expired "
            "FROM records WHERE tenant_id = ? GROUP BY source ORDER BY source",
            (at, tenant_id),
        ):
            counts.records[row["source"]] = int(row["n"])
            counts.pending[row["source"]] = int(row["pending"])
            counts.expired += int(row["expired"])
        tables = self._existing("triples", PROFILE_TABLE)
        if "triples" in tables:
            row = self._tally("count triples", "triples", "valid_to IS NULL", tenant_id, at, f", {pending} AS pending")
            counts.triples, counts.triples_current = int(row["n"]), int(row["current"])
            # Where the table is made on the source's first use, it says the source is in
            # use; where every table is always there, having triples does.
            if counts.triples or self.tables_on_first_use:
                counts.pending["triples"] = int(row["pending"])
            counts.expired += int(row["expired"])
        if PROFILE_TABLE in tables:
            row = self._tally(
                "count profile rows", PROFILE_TABLE, "superseded_at IS NULL AND value_json IS NOT NULL", tenant_id, at
            )
            counts.profile_rows, counts.profile_fields = int(row["n"]), int(row["current"])
            counts.expired += int(row["expired"])
        return counts

    def _tally(self, action: str, table: str, current: str, tenant_id: str, at: float, more: str = "") -> Any:
        """The tenant's rows of ``table``: how many (``n``), how many meet ``current``,
        how many expired at ``at``, and the ``more`` columns asked."""
        return self._one(
            action,
            f"SELECT count(*) AS n, {_count(current)} AS current{more}, {_EXPIRED} AS expired "
            f"FROM {table} WHERE tenant_id = ?",
            (at, tenant_id),
        )

    def index_backlog(self, source: str) -> tuple[int, int]:
        """Across every tenant: how many records of ``source`` and triples there are, and
        how many of them wait for the dense index (what a reindex has to embed)."""
        pending = _count(f"indexed = {self.dialect.false}")
        row = self._one(
            "count index work", f"SELECT count(*) AS n, {pending} AS pending FROM records WHERE source = ?", (source,)
        )
        total, waiting = int(row["n"]), int(row["pending"])
        if self._existing("triples"):
            row = self._one("count index work", f"SELECT count(*) AS n, {pending} AS pending FROM triples")
            total, waiting = total + int(row["n"]), waiting + int(row["pending"])
        return total, waiting

    # -- export -------------------------------------------------------------------------

    def count_export_rows(self, tenant_id: str, users: Sequence[str]) -> int:
        """How many rows :meth:`export_rows` yields for these users (for a progress bar)."""
        tables = ("chat_messages", "records", *sorted(self._existing(*DOCUMENT_KINDS.values(), "triples")))
        total = 0
        for batch in self.dialect.batches(users):
            condition, values = self.dialect.in_list("user_id", batch)
            for table in tables:
                total += int(
                    self._one("count", f"SELECT count(*) AS n FROM {table} WHERE tenant_id = ? AND {condition}",
                              (tenant_id, *values))["n"]
                )  # fmt: skip
        return total

    def export_rows(self, tenant_id: str, user_id: str) -> Iterator[dict[str, Any]]:
        """Everything the store holds of one user, as plain dicts in a fixed order: chat
        messages (in the order written), records, profile rows (history included), then
        triples (history included, each with its mentions). Derived data (vectors, index
        flags, lexical entries) is left out: an import rebuilds it."""
        owner = (tenant_id, user_id)
        json_value = self.dialect.json_value
        for row in self._query(
            "export chat history",
            f"SELECT session_id, message_json, created_at FROM chat_messages {_OWNER} ORDER BY seq",
            owner,
        ):
            yield {
                "kind": "message", "user": user_id, "session": row["session_id"],
                "created_at": row["created_at"], "message": json.loads(row["message_json"]),
            }  # fmt: skip
        for row in self._query(
            "export records", f"SELECT * FROM records {_OWNER} ORDER BY {self.record_order}", owner
        ):
            yield {
                "kind": "record", "user": user_id, "source": row["source"],
                "session": row["session_id"], "role": row["role"], "text": row["text"],
                "message_ids": list(json_value(row["message_ids"])), "event_time": row["event_time"],
                "ingested_at": row["ingested_at"], "metadata": json_value(row["metadata"]),
                "ttl": row["ttl"], "expires_at": row["expires_at"],
            }  # fmt: skip
        tables = self._existing(*DOCUMENT_KINDS.values(), "triples")
        for kind, table in DOCUMENT_KINDS.items():
            if table in tables:
                yield from self._document_rows(kind, table, owner)
        if "triples" in tables:
            yield from self.triple_rows(tenant_id, user_id)

    def _document_rows(self, kind: str, table: str, owner: tuple[str, str]) -> Iterator[dict[str, Any]]:
        """One user's rows of a document of profile rows (the profile, the instructions)."""
        for row in self._query(f"export {kind}", f"SELECT * FROM {table} {_OWNER} ORDER BY id", owner):
            removed = row["value_json"] is None
            yield {
                "kind": kind, "user": owner[1], "path": row["path"],
                "value": None if removed else json.loads(row["value_json"]), "removed": removed,
                "op": row["op"], "session": row["session_id"],
                "message_ids": list(self.dialect.json_value(row["message_ids"])), "created_at": row["created_at"],
                "superseded_at": row["superseded_at"], "ttl": row["ttl"], "expires_at": row["expires_at"],
            }  # fmt: skip

    def triple_rows(self, tenant_id: str, user_id: str) -> list[dict[str, Any]]:
        """The user's knowledge triples as export rows (each with its mentions), in the
        order written. (Reading triples as the API shows them goes through the triple
        timeline port.)"""
        if not self._existing("triples"):
            return []
        owner = (tenant_id, user_id)
        link = self.timeline_class.mentions
        mention_key, triple_key = link.key
        scoped = " AND m.tenant_id = ? AND m.user_id = ?" if link.scoped else ""
        mentions: dict[str, list[dict[str, Any]]] = {}
        for m in self._query(
            "read triple mentions",
            f"SELECT t.id AS triple, m.session_id, m.message_ids, m.event_time, m.ingested_at, m.origin "
            f"FROM triple_mentions AS m JOIN triples AS t ON t.{triple_key} = m.{mention_key} "
            f"WHERE t.tenant_id = ? AND t.user_id = ?{scoped} ORDER BY m.{link.order}",
            (*owner, *(owner if link.scoped else ())),
        ):
            mentions.setdefault(m["triple"], []).append(
                {
                    "session": m["session_id"], "message_ids": list(self.dialect.json_value(m["message_ids"])),
                    "event_time": m["event_time"], "ingested_at": m["ingested_at"], "origin": m["origin"],
                }  # fmt: skip
            )
        return [
            {
                "kind": "triple", "user": user_id, "id": row["id"],
                **{column: row[column] for column in _TRIPLE_COLUMNS},
                "mentions": mentions.get(row["id"], []),
            }  # fmt: skip
            for row in self._query("read triples", f"SELECT * FROM triples {_OWNER} ORDER BY seq", owner)
        ]

    def chat_messages(self, tenant_id: str, user_id: str, session_id: str) -> list[str]:
        """The stored JSON of one session's messages, oldest first (for imports that
        skip what a session already holds)."""
        rows = self._query(
            "read chat history",
            f"SELECT message_json FROM chat_messages {_OWNER} AND session_id = ? ORDER BY seq",
            (tenant_id, user_id, session_id),
        )
        return [row["message_json"] for row in rows]

    # -- what a copy to another store carries besides the export rows -----------------

    def user_meta(self, tenant_id: str, user_id: str) -> dict[str, str]:
        """The user's meta entries (per-session state such as extraction cursors)."""
        rows = self._query(
            "read user meta",
            f"SELECT key, value FROM meta WHERE {self.dialect.contains('key')} ORDER BY key",
            (user_meta_infix(tenant_id, user_id),),
        )
        return {row["key"]: row["value"] for row in rows}

    def store_meta(self) -> dict[str, str]:
        """The store-wide meta entries (the embedding fingerprints...), without any
        user's entries and without the store's own id."""
        rows = self._query("read meta", "SELECT key, value FROM meta ORDER BY key")
        return {r["key"]: r["value"] for r in rows if r["key"] != "store_id" and not _is_user_key(r["key"])}

    def user_jobs(self, tenant_id: str, user_id: str) -> list[dict[str, Any]]:
        """The user's jobs still to run (queued, or running under a lease), oldest first."""
        if not self._existing("jobs"):
            return []  # the queue's table is made when a memory first queues a job
        rows = self._query(
            "read jobs",
            "SELECT kind, payload, run_at, attempts, max_attempts, dedup_key, last_error, created_at "
            f"FROM jobs {_OWNER} AND state IN ('queued', 'running') ORDER BY seq",
            (tenant_id, user_id),
        )
        return [{**dict(row), "payload": self.dialect.json_value(row["payload"])} for row in rows]

    def add_meta(self, entries: dict[str, str]) -> None:
        """Write meta entries, keeping any value the store already has for a key."""
        with self.store.transaction("write meta") as conn:
            for key, value in entries.items():
                self.dialect.execute(
                    conn, "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO NOTHING", (key, value)
                )

    def add_jobs(self, tenant_id: str, user_id: str, jobs: Sequence[dict[str, Any]]) -> None:
        """Queue jobs (as :meth:`user_jobs` gives them) for the user, each queued again;
        one whose dedup key is already waiting is skipped (that pass covers it)."""
        with self.store.transaction("queue jobs") as conn:
            for job in jobs:
                self.dialect.execute(
                    conn,
                    "INSERT INTO jobs (id, kind, payload, tenant_id, user_id, run_at, attempts, "
                    "max_attempts, dedup_key, last_error, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                    (
                        uuid.uuid4().hex, job["kind"], self.dialect.json_param(job["payload"]), tenant_id, user_id,
                        job["run_at"], job["attempts"], job["max_attempts"], job["dedup_key"],
                        job["last_error"], job["created_at"],
                    ),
                )  # fmt: skip
