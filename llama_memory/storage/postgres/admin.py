"""Store-wide reads and writes for managing a memory on PostgreSQL: the twin of
:mod:`llama_memory.storage.admin` (SQLite) behind the same port,
:class:`~llama_memory.storage.ports.admin.AdminRows`.

The rows (and the export format) are the SQLite side's, so an export of one backend
imports into the other, and ``llama-memory copy`` moves a SQLite directory in. Every
table exists from the first migration on, so nothing here checks for tables.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Optional, Union

from psycopg.types.json import Jsonb

from ...text import content_hash
from ...types import MemoryRecord
from ..chat_import import MessageRanks, import_message
from ..ports.admin import DOCUMENT_KINDS, SessionSummary, StoreCounts, UserSummary
from ..ports.base import user_meta_infix
from .connection import Connection
from .records import _event_date, _record_id, _to_record
from .store import PostgresStore

#: Tables whose size :meth:`PostgresStoreAdmin.size_bytes` adds up (with their indexes).
TABLES = (
    "chat_messages", "records", "record_embeddings", "profile_fields", "instruction_fields",
    "triples", "triple_mentions", "jobs", "meta",
)  # fmt: skip
_OWNER = "WHERE tenant_id = %s AND user_id = %s"


class PostgresStoreAdmin:
    """Administrative reads and writes on one PostgreSQL store, for one tenant at a time
    (the SQLite implementation, :class:`~llama_memory.storage.admin.StoreAdmin`,
    documents each method; this one keeps its behaviour)."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    def _one(self, action: str, sql: str, params: Union[Sequence[Any], Mapping[str, Any]] = ()) -> dict[str, Any]:
        return self.store.query(action, sql, params)[0]

    # -- what is there ----------------------------------------------------------------

    def has_triples(self) -> bool:
        """Whether the database holds any knowledge triple (of any tenant)."""
        return bool(self.store.query("find triples", "SELECT 1 FROM triples LIMIT 1"))

    def has_profile(self) -> bool:
        """Whether the database holds any profile row (of any tenant)."""
        return bool(self.store.query("find profile rows", "SELECT 1 FROM profile_fields LIMIT 1"))

    def tenants(self) -> list[str]:
        """Every tenant with chat history, records, triples or profile rows, sorted."""
        rows = self.store.query(
            "list tenants",
            "SELECT tenant_id FROM chat_messages UNION SELECT tenant_id FROM records UNION "
            "SELECT tenant_id FROM triples UNION SELECT tenant_id FROM profile_fields ORDER BY 1",
        )
        return [row["tenant_id"] for row in rows]

    def users(self, tenant_id: str) -> list[UserSummary]:
        """Every user of the tenant, sorted by id (the anonymous buffer left out)."""
        found: dict[str, dict[str, Any]] = {}
        queries = (
            ("messages", "SELECT user_id, count(*) AS n, count(DISTINCT session_id) AS sessions, "
             "max(created_at) AS last FROM chat_messages WHERE tenant_id = %s GROUP BY user_id"),
            ("records", "SELECT user_id, count(*) AS n, max(ingested_at) AS last FROM records "
             "WHERE tenant_id = %s GROUP BY user_id"),
            ("triples", "SELECT user_id, count(*) FILTER (WHERE valid_to IS NULL) AS n, "
             "max(ingested_at) AS last FROM triples WHERE tenant_id = %s GROUP BY user_id"),
            ("profile_fields", "SELECT user_id, count(*) FILTER (WHERE superseded_at IS NULL AND "
             "value_json IS NOT NULL) AS n, max(created_at) AS last FROM profile_fields "
             "WHERE tenant_id = %s GROUP BY user_id"),
        )  # fmt: skip
        for column, sql in queries:
            for row in self.store.query("list users", sql, (tenant_id,)):
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
        """The user's sessions in the order they began (chat history first)."""
        owner = (tenant_id, user_id)
        chats = self.store.query(
            "list sessions",
            "SELECT session_id, count(*) AS n, min(created_at) AS first, max(created_at) AS last "
            f"FROM chat_messages {_OWNER} GROUP BY session_id ORDER BY min(seq)",
            owner,
        )
        records = self.store.query(
            "list sessions",
            f"SELECT session_id, count(*) AS n FROM records {_OWNER} AND session_id IS NOT NULL "
            "GROUP BY session_id ORDER BY min(seq)",
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
    ) -> list[MemoryRecord]:
        """The user's long-term records in the order written (or newest first), with filters."""
        where = ["tenant_id = %s", "user_id = %s"]
        params: list[Any] = [tenant_id, user_id]
        for condition, value in (
            ("session_id = %s", session_id),
            ("source = %s", source),
            ("coalesce(event_time, ingested_at) >= %s", since),
            ("coalesce(event_time, ingested_at) < %s", until),
        ):
            if value is not None:
                where.append(condition)
                params.append(value)
        sql = f"SELECT * FROM records WHERE {' AND '.join(where)} ORDER BY seq"
        if newest_first:
            sql += " DESC"
        if limit is not None:
            sql += " LIMIT %s"
            params.append(limit)
        return [_to_record(row) for row in self.store.query("list records", sql, params)]

    def delete_record(self, tenant_id: str, user_id: str, record_id: str) -> Optional[str]:
        """Delete one of the user's records (its full-text entry is a column of the row);
        its source's name, or None when the user has no such record."""
        with self.store.transaction("delete record") as conn:
            row = conn.execute(
                f"DELETE FROM records {_OWNER} AND id = %s RETURNING source",
                (tenant_id, user_id, record_id),
            ).fetchone()
        return None if row is None else str(row["source"])

    def delete_triple(self, tenant_id: str, user_id: str, triple_id: str) -> bool:
        """Delete one of the user's triples (its mentions go with it: ON DELETE CASCADE)."""
        with self.store.transaction("delete triple") as conn:
            row = conn.execute(
                f"DELETE FROM triples {_OWNER} AND id = %s RETURNING id", (tenant_id, user_id, triple_id)
            ).fetchone()
        return row is not None

    def counts(self, tenant_id: str, at: float) -> StoreCounts:
        """What the tenant has in the store (``at``: now, for what has expired)."""
        chat = self._one(
            "count chat history",
            "SELECT count(DISTINCT user_id) AS users, count(DISTINCT (user_id, session_id)) AS sessions, "
            "count(*) AS n FROM chat_messages WHERE tenant_id = %s AND user_id <> ''",
            (tenant_id,),
        )
        counts = StoreCounts(
            users=len(self.users(tenant_id)), sessions=int(chat["sessions"]), messages=int(chat["n"])
        )
        expired = "count(*) FILTER (WHERE expires_at IS NOT NULL AND expires_at <= %s) AS expired"
        for row in self.store.query(
            "count records",
            f"SELECT source, count(*) AS n, count(*) FILTER (WHERE NOT indexed) AS pending, {expired} "
            "FROM records WHERE tenant_id = %s GROUP BY source ORDER BY source",
            (at, tenant_id),
        ):
            counts.records[row["source"]] = int(row["n"])
            counts.pending[row["source"]] = int(row["pending"])
            counts.expired += int(row["expired"])
        row = self._one(
            "count triples",
            "SELECT count(*) AS n, count(*) FILTER (WHERE valid_to IS NULL) AS current, "
            f"count(*) FILTER (WHERE NOT indexed) AS pending, {expired} FROM triples WHERE tenant_id = %s",
            (at, tenant_id),
        )
        counts.triples, counts.triples_current = int(row["n"]), int(row["current"])
        if counts.triples:
            counts.pending["triples"] = int(row["pending"])
        counts.expired += int(row["expired"])
        row = self._one(
            "count profile rows",
            "SELECT count(*) AS n, count(*) FILTER (WHERE superseded_at IS NULL AND value_json IS NOT NULL) "
            f"AS current, {expired} FROM profile_fields WHERE tenant_id = %s",
            (at, tenant_id),
        )
        counts.profile_rows, counts.profile_fields = int(row["n"]), int(row["current"])
        counts.expired += int(row["expired"])
        return counts

    def index_backlog(self, source: str) -> tuple[int, int]:
        """Across every tenant: records of ``source`` plus triples, and how many of them
        wait for the dense index."""
        row = self._one(
            "count index work",
            "SELECT (SELECT count(*) FROM records WHERE source = %s) + (SELECT count(*) FROM triples) AS n, "
            "(SELECT count(*) FROM records WHERE source = %s AND NOT indexed) + "
            "(SELECT count(*) FROM triples WHERE NOT indexed) AS pending",
            (source, source),
        )
        return int(row["n"]), int(row["pending"])

    def size_bytes(self) -> int:
        """Bytes the llama-memory tables take in the database, indexes included."""
        row = self._one(
            "measure tables",
            "SELECT coalesce(sum(pg_total_relation_size(to_regclass(t))), 0) AS n FROM unnest(%s::text[]) AS t",
            (list(TABLES),),
        )
        return int(row["n"])

    # -- export -------------------------------------------------------------------------

    def count_export_rows(self, tenant_id: str, users: Sequence[str]) -> int:
        """How many rows :meth:`export_rows` yields for these users."""
        row = self._one(
            "count",
            "SELECT " + " + ".join(
                f"(SELECT count(*) FROM {table} WHERE tenant_id = %(t)s AND user_id = ANY(%(u)s))"
                for table in ("chat_messages", "records", *DOCUMENT_KINDS.values(), "triples")
            ) + " AS n",
            {"t": tenant_id, "u": list(users)},
        )
        return int(row["n"])

    def export_rows(self, tenant_id: str, user_id: str) -> Iterator[dict[str, Any]]:
        """Everything of one user as export rows, in the SQLite side's order and shape."""
        owner = (tenant_id, user_id)
        for row in self.store.query(
            "export chat history",
            f"SELECT session_id, message_json, created_at FROM chat_messages {_OWNER} ORDER BY seq",
            owner,
        ):
            yield {
                "kind": "message", "user": user_id, "session": row["session_id"],
                "created_at": row["created_at"], "message": json.loads(row["message_json"]),
            }  # fmt: skip
        for row in self.store.query("export records", f"SELECT * FROM records {_OWNER} ORDER BY seq", owner):
            yield {
                "kind": "record", "user": user_id, "source": row["source"],
                "session": row["session_id"], "role": row["role"], "text": row["text"],
                "message_ids": list(row["message_ids"]), "event_time": row["event_time"],
                "ingested_at": row["ingested_at"], "metadata": row["metadata"],
                "ttl": row["ttl"], "expires_at": row["expires_at"],
            }  # fmt: skip
        for kind, table in DOCUMENT_KINDS.items():
            yield from self._document_rows(kind, table, owner)
        yield from self.triple_rows(tenant_id, user_id)

    def _document_rows(self, kind: str, table: str, owner: tuple[str, str]) -> Iterator[dict[str, Any]]:
        """One user's rows of a document of profile rows (the profile, the instructions)."""
        for row in self.store.query(f"export {kind} rows", f"SELECT * FROM {table} {_OWNER} ORDER BY id", owner):
            removed = row["value_json"] is None
            yield {
                "kind": kind, "user": owner[1], "path": row["path"],
                "value": None if removed else json.loads(row["value_json"]), "removed": removed,
                "op": row["op"], "session": row["session_id"],
                "message_ids": list(row["message_ids"]), "created_at": row["created_at"],
                "superseded_at": row["superseded_at"], "ttl": row["ttl"], "expires_at": row["expires_at"],
            }  # fmt: skip

    def triple_rows(self, tenant_id: str, user_id: str) -> list[dict[str, Any]]:
        """The user's knowledge triples as export rows (each with its mentions), in the
        order written."""
        owner = (tenant_id, user_id)
        mentions: dict[str, list[dict[str, Any]]] = {}
        for m in self.store.query(
            "read triple mentions", f"SELECT * FROM triple_mentions {_OWNER} ORDER BY seq", owner
        ):
            mentions.setdefault(m["triple_id"], []).append(
                {
                    "session": m["session_id"], "message_ids": list(m["message_ids"]),
                    "event_time": m["event_time"], "ingested_at": m["ingested_at"], "origin": m["origin"],
                }  # fmt: skip
            )
        columns = (
            "subject", "predicate", "object", "subject_key", "predicate_key", "object_key",
            "valid_from", "valid_to", "superseded_by", "ingested_at", "ttl", "expires_at",
        )  # fmt: skip
        return [
            {
                "kind": "triple", "user": user_id, "id": row["id"],
                **{column: row[column] for column in columns},
                "mentions": mentions.get(row["id"], []),
            }  # fmt: skip
            for row in self.store.query("read triples", f"SELECT * FROM triples {_OWNER} ORDER BY seq", owner)
        ]

    # -- import -------------------------------------------------------------------------

    def import_rows(
        self,
        tenant_id: str,
        rows: Sequence[dict[str, Any]],
        triple_texts: Sequence[str],
        ranks: Optional[MessageRanks] = None,
    ) -> Counter[str]:
        """Write export rows into the tenant in one transaction (joining the caller's
        when one is open); how many of each kind were new. What the store already has is
        skipped, as on SQLite (:meth:`llama_memory.storage.admin.StoreAdmin.import_rows`)."""

        new: Counter[str] = Counter()
        ranks = MessageRanks() if ranks is None else ranks
        document_paths: set[tuple[str, str, str]] = set()
        with self.store.transaction("import") as conn:
            for row, triple_text in zip(rows, triple_texts):
                kind, user = row["kind"], row["user"]
                if kind == "message":
                    new[kind] += import_message(conn, "%s", tenant_id, row, ranks)
                elif kind == "record":
                    new[kind] += _import_record(conn, tenant_id, user, row)
                elif kind in DOCUMENT_KINDS:  # a profile or an instructions row
                    if _import_document_row(conn, DOCUMENT_KINDS[kind], tenant_id, user, row):
                        document_paths.add((DOCUMENT_KINDS[kind], user, row["path"]))
                        new[kind] += 1
                elif kind == "triple":
                    new[kind] += _import_triple(conn, tenant_id, user, row, triple_text)
            for table, user, path in sorted(document_paths):
                _one_current_value(conn, table, tenant_id, user, path)
        return new

    def chat_messages(self, tenant_id: str, user_id: str, session_id: str) -> list[str]:
        """The stored JSON of one session's messages, oldest first."""
        rows = self.store.query(
            "read chat history",
            f"SELECT message_json FROM chat_messages {_OWNER} AND session_id = %s ORDER BY seq",
            (tenant_id, user_id, session_id),
        )
        return [row["message_json"] for row in rows]

    # -- meta and jobs (what a copy carries besides the export rows) ------------------

    def user_meta(self, tenant_id: str, user_id: str) -> dict[str, str]:
        """The user's meta entries (per-session state such as extraction cursors)."""
        rows = self.store.query(
            "read user meta", "SELECT key, value FROM meta WHERE strpos(key, %s) > 0 ORDER BY key",
            (user_meta_infix(tenant_id, user_id),),
        )  # fmt: skip
        return {row["key"]: row["value"] for row in rows}

    def store_meta(self) -> dict[str, str]:
        """The store-wide meta entries, without users' entries and the store's id."""
        rows = self.store.query("read meta", "SELECT key, value FROM meta ORDER BY key")
        return {r["key"]: r["value"] for r in rows if r["key"] != "store_id" and ':["' not in r["key"]}

    def user_jobs(self, tenant_id: str, user_id: str) -> list[dict[str, Any]]:
        """The user's jobs still to run (queued or running), oldest first."""
        rows = self.store.query(
            "read jobs",
            "SELECT kind, payload, run_at, attempts, max_attempts, dedup_key, last_error, created_at "
            f"FROM jobs {_OWNER} AND state IN ('queued', 'running') ORDER BY seq",
            (tenant_id, user_id),
        )
        return [dict(row) for row in rows]

    def add_meta(self, entries: dict[str, str]) -> None:
        """Write meta entries, keeping any value the store already has for a key."""
        with self.store.transaction("write meta") as conn:
            for key, value in entries.items():
                conn.execute(
                    "INSERT INTO meta (key, value) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING", (key, value)
                )

    def refresh_statistics(self) -> None:
        """ANALYZE the store's tables, after a bulk import: until autovacuum's first
        ANALYZE (up to a minute), the planner walks a user's rows where an index serves
        (docs/howto/postgres.md, "The fifth round")."""
        self.store.query("analyze the tables", "ANALYZE")

    def add_jobs(self, tenant_id: str, user_id: str, jobs: Sequence[dict[str, Any]]) -> None:
        """Queue jobs (as :meth:`user_jobs` gives them) for the user, each queued again;
        one whose dedup key is already waiting is skipped (that pass covers it)."""
        with self.store.transaction("queue jobs") as conn:
            for job in jobs:
                conn.execute(
                    "INSERT INTO jobs (id, kind, payload, tenant_id, user_id, run_at, attempts, "
                    "max_attempts, dedup_key, last_error, created_at) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING",
                    (
                        uuid.uuid4().hex, job["kind"], Jsonb(job["payload"]), tenant_id, user_id,
                        job["run_at"], job["attempts"], job["max_attempts"], job["dedup_key"],
                        job["last_error"], job["created_at"],
                    ),
                )  # fmt: skip


def _import_record(conn: Connection, tenant_id: str, user: str, row: dict[str, Any]) -> int:
    """Write one record row (1), or merge its message ids into the one held (0)."""
    digest = content_hash(row["text"], row["role"])
    record_id = _record_id(row["source"], tenant_id, user, digest)
    existing = conn.execute(
        f"SELECT message_ids FROM records {_OWNER} AND id = %s FOR UPDATE", (tenant_id, user, record_id)
    ).fetchone()
    if existing is not None:
        known = list(existing["message_ids"])
        merged = known + [m for m in row["message_ids"] if m not in known]
        if merged != known:
            conn.execute(
                f"UPDATE records SET message_ids = %s {_OWNER} AND id = %s",
                (Jsonb(merged), tenant_id, user, record_id),
            )
        return 0
    conn.execute(
        "INSERT INTO records (id, source, tenant_id, user_id, session_id, role, text, event_date, "
        "content_hash, message_ids, event_time, ingested_at, metadata, ttl, expires_at) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (
            record_id, row["source"], tenant_id, user, row["session"], row["role"], row["text"],
            _event_date(row["event_time"]), digest, Jsonb(list(row["message_ids"])),
            row["event_time"], row["ingested_at"], Jsonb(row["metadata"] or {}), row["ttl"],
            row["expires_at"],
        ),
    )  # fmt: skip
    return 1


def _import_document_row(conn: Connection, table: str, tenant_id: str, user: str, row: dict[str, Any]) -> bool:
    """Write one row of a document of profile rows (``table``: the profile's, the
    instructions') unless its history already has it; whether it was written."""
    value_json = None if row["removed"] else json.dumps(row["value"], ensure_ascii=False)
    held = conn.execute(
        f"SELECT 1 FROM {table} {_OWNER} AND path = %s AND op = %s AND created_at = %s "
        "AND value_json IS NOT DISTINCT FROM %s",
        (tenant_id, user, row["path"], row["op"], row["created_at"], value_json),
    ).fetchone()
    if held is not None:
        return False
    conn.execute(
        f"INSERT INTO {table} (tenant_id, user_id, path, value_json, op, session_id, "
        "message_ids, created_at, superseded_at, ttl, expires_at) "
        "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
        (
            tenant_id, user, row["path"], value_json, row["op"], row["session"],
            Jsonb(list(row["message_ids"])), row["created_at"], row["superseded_at"], row["ttl"],
            row["expires_at"],
        ),
    )  # fmt: skip
    return True


def _import_triple(conn: Connection, tenant_id: str, user: str, row: dict[str, Any], text: str) -> int:
    """Write one triple row with its mentions (1); a triple held under its id is skipped,
    one whose fact the user holds now under another id adds its mentions to it (0)."""
    held = conn.execute("SELECT tenant_id, user_id FROM triples WHERE id = %s", (row["id"],)).fetchone()
    if held is not None:
        if (held["tenant_id"], held["user_id"]) != (tenant_id, user):
            raise ValueError(
                f"triple {row['id']} already belongs to user {held['user_id']!r} of tenant "
                f"{held['tenant_id']!r} in this store: import this file into another store, "
                "or forget that user first"
            )
        return 0
    keys = (row["subject_key"], row["predicate_key"], row["object_key"])
    same = None
    if row["valid_to"] is None:
        same = conn.execute(
            f"SELECT id FROM triples {_OWNER} AND subject_key = %s AND predicate_key = %s "
            "AND object_key = %s AND valid_to IS NULL",
            (tenant_id, user, *keys),
        ).fetchone()
    triple_id = same["id"] if same is not None else row["id"]
    if same is None:
        conn.execute(
            "INSERT INTO triples (id, tenant_id, user_id, subject, predicate, object, subject_key, "
            "predicate_key, object_key, valid_from, valid_to, superseded_by, ingested_at, ttl, "
            "expires_at, search_text) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
            (
                row["id"], tenant_id, user, row["subject"], row["predicate"], row["object"], *keys,
                row["valid_from"], row["valid_to"], row["superseded_by"], row["ingested_at"],
                row["ttl"], row["expires_at"], text,
            ),
        )  # fmt: skip
    for mention in row["mentions"]:
        ids = Jsonb(list(mention["message_ids"]))
        known = conn.execute(
            f"SELECT 1 FROM triple_mentions {_OWNER} AND triple_id = %s "
            "AND session_id IS NOT DISTINCT FROM %s AND message_ids = %s AND event_time = %s AND origin = %s",
            (tenant_id, user, triple_id, mention["session"], ids, mention["event_time"], mention["origin"]),
        ).fetchone()
        if known is None:
            conn.execute(
                "INSERT INTO triple_mentions (tenant_id, user_id, triple_id, session_id, message_ids, "
                "event_time, ingested_at, origin) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                (tenant_id, user, triple_id, mention["session"], ids, mention["event_time"],
                 mention["ingested_at"], mention["origin"]),
            )  # fmt: skip
    return int(same is None)


def _one_current_value(conn: Connection, table: str, tenant_id: str, user: str, path: str) -> None:
    """Leave one current row for a profile field (an instruction: ``table``): the latest
    written (as on SQLite)."""
    rows = conn.execute(
        f"SELECT id, created_at FROM {table} {_OWNER} AND path = %s AND superseded_at IS NULL "
        "ORDER BY created_at, id",
        (tenant_id, user, path),
    ).fetchall()
    if len(rows) > 1:
        latest = rows[-1]["created_at"]
        conn.execute(
            f"UPDATE {table} SET superseded_at = %s {_OWNER} AND id = ANY(%s)",
            (latest, tenant_id, user, [r["id"] for r in rows[:-1]]),
        )
