"""Store-wide reads and writes for managing a memory: the SQL behind :mod:`llama_memory.admin`.

Everything here works on one :class:`~llama_memory.storage.sqlite.SQLiteStore` and
returns plain rows (dataclasses and dicts), never SQL: listing the users and sessions
of a tenant, a user's records with filters, deleting one record or triple, counting
what the store holds and what the dense index still has to catch up with, and reading
and writing the rows of an export (chat messages, records, profile rows, triples with
their mentions).

The tables of the profile and triple sources exist only once such a source was opened
on the file; every function here treats a missing table as empty.
"""

from __future__ import annotations

import json
import uuid
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any, Optional

from ..types import MemoryRecord
from .chat_import import MessageRanks, import_message
from .ports.admin import DOCUMENT_KINDS, SessionSummary, StoreCounts, UserSummary
from .ports.base import user_meta_infix
from .sqlite import SQLiteStore, content_hash
from .sqlite.records import _record_id, _to_record

#: Tables a source adds to the file when it is first opened on it.
TRIPLE_TABLES = ("triples", "triple_mentions", "triples_fts")
PROFILE_TABLE = DOCUMENT_KINDS["profile"]


class StoreAdmin:
    """Administrative reads and writes on one SQLite store, for one tenant at a time
    (the :class:`~llama_memory.storage.ports.admin.AdminRows` port on SQLite)."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store

    # -- what is there ----------------------------------------------------------------

    def tables(self) -> set[str]:
        """The names of the tables in the file."""
        rows = self.store.query(
            "list tables", "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
        )
        return {row["name"] for row in rows}

    def has_triples(self) -> bool:
        """Whether the file holds any knowledge triple (of any tenant)."""
        return "triples" in self.tables() and bool(
            self.store.query("find triples", "SELECT 1 FROM triples LIMIT 1")
        )

    def has_profile(self) -> bool:
        """Whether the file holds any profile row (of any tenant)."""
        return PROFILE_TABLE in self.tables() and bool(
            self.store.query("find profile rows", f"SELECT 1 FROM {PROFILE_TABLE} LIMIT 1")
        )

    def tenants(self) -> list[str]:
        """Every tenant with chat history or records, sorted."""
        selects = ["SELECT tenant_id FROM chat_messages", "SELECT tenant_id FROM records"]
        tables = self.tables()
        if "triples" in tables:
            selects.append("SELECT tenant_id FROM triples")
        if PROFILE_TABLE in tables:
            selects.append(f"SELECT tenant_id FROM {PROFILE_TABLE}")
        rows = self.store.query("list tenants", " UNION ".join(selects) + " ORDER BY 1")
        return [row[0] for row in rows]

    def users(self, tenant_id: str) -> list[UserSummary]:
        """Every user of the tenant (anyone with chat history, records, triples or a
        profile), sorted by id. The anonymous buffer (no user) is left out."""
        found: dict[str, dict[str, Any]] = {}

        def take(action: str, sql: str, column: str) -> None:
            for row in self.store.query(action, sql, (tenant_id,)):
                if row["user_id"] == "":
                    continue
                entry = found.setdefault(row["user_id"], {})
                entry[column] = row["n"]
                if row["last"] is not None:
                    entry["last_active"] = max(entry.get("last_active") or 0.0, row["last"])
                if column == "messages":
                    entry["sessions"] = row["sessions"]

        take(
            "list users",
            "SELECT user_id, COUNT(*) AS n, COUNT(DISTINCT session_id) AS sessions, "
            "MAX(created_at) AS last FROM chat_messages WHERE tenant_id = ? GROUP BY user_id",
            "messages",
        )
        take(
            "list users",
            "SELECT user_id, COUNT(*) AS n, MAX(ingested_at) AS last FROM records "
            "WHERE tenant_id = ? GROUP BY user_id",
            "records",
        )
        tables = self.tables()
        if "triples" in tables:
            take(
                "list users",
                "SELECT user_id, SUM(valid_to IS NULL) AS n, MAX(ingested_at) AS last "
                "FROM triples WHERE tenant_id = ? GROUP BY user_id",
                "triples",
            )
        if PROFILE_TABLE in tables:
            take(
                "list users",
                "SELECT user_id, SUM(superseded_at IS NULL AND value_json IS NOT NULL) AS n, "
                f"MAX(created_at) AS last FROM {PROFILE_TABLE} WHERE tenant_id = ? GROUP BY user_id",
                "profile_fields",
            )
        return [UserSummary(user_id=user, **found[user]) for user in sorted(found)]

    def sessions(self, tenant_id: str, user_id: str) -> list[SessionSummary]:
        """The user's sessions, in the order they began: those with chat history (by
        their first message), then those known only from long-term records."""
        chats = self.store.query(
            "list sessions",
            "SELECT session_id, COUNT(*) AS n, MIN(created_at) AS first, MAX(created_at) AS last "
            "FROM chat_messages WHERE tenant_id = ? AND user_id = ? "
            "GROUP BY session_id ORDER BY MIN(seq)",
            (tenant_id, user_id),
        )
        records = self.store.query(
            "list sessions",
            "SELECT session_id, COUNT(*) AS n FROM records WHERE tenant_id = ? AND user_id = ? "
            "AND session_id IS NOT NULL GROUP BY session_id ORDER BY MIN(rowid)",
            (tenant_id, user_id),
        )
        per_session = {row["session_id"]: row["n"] for row in records}
        out = [
            SessionSummary(
                row["session_id"], row["n"], per_session.pop(row["session_id"], 0),
                row["first"], row["last"],
            )  # fmt: skip
            for row in chats
        ]
        out += [SessionSummary(session, 0, n) for session, n in per_session.items()]
        return out

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
        """The user's long-term records, in the order written (or newest first), with
        filters: one session, one source, a time range ``[since, until)`` on when each
        happened (its event time, else when it was stored). Expired records included."""
        where = ["tenant_id = ?", "user_id = ?"]
        params: list[Any] = [tenant_id, user_id]
        if session_id is not None:
            where.append("session_id = ?")
            params.append(session_id)
        if source is not None:
            where.append("source = ?")
            params.append(source)
        if since is not None:
            where.append("COALESCE(event_time, ingested_at) >= ?")
            params.append(since)
        if until is not None:
            where.append("COALESCE(event_time, ingested_at) < ?")
            params.append(until)
        sql = f"SELECT * FROM records WHERE {' AND '.join(where)} ORDER BY rowid"
        if newest_first:
            sql += " DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [_to_record(row) for row in self.store.query("list records", sql, params)]

    def delete_record(self, tenant_id: str, user_id: str, record_id: str) -> Optional[str]:
        """Delete one of the user's records (its text, lexical entry and vector copy go
        with it); return its source's name, or None when the user has no such record."""
        with self.store.transaction("delete record") as conn:
            row = conn.execute(
                "SELECT source FROM records WHERE id = ? AND tenant_id = ? AND user_id = ?",
                (record_id, tenant_id, user_id),
            ).fetchone()
            if row is None:
                return None
            # The triggers delete its lexical (FTS5) entry and its vector copy.
            conn.execute("DELETE FROM records WHERE id = ?", (record_id,))
        return str(row["source"])

    def delete_triple(self, tenant_id: str, user_id: str, triple_id: str) -> bool:
        """Delete one of the user's knowledge triples with its lexical entry and
        provenance; False when the user has no such triple."""
        if "triples" not in self.tables():
            return False
        with self.store.transaction("delete triple") as conn:
            row = conn.execute(
                "SELECT seq FROM triples WHERE id = ? AND tenant_id = ? AND user_id = ?",
                (triple_id, tenant_id, user_id),
            ).fetchone()
            if row is None:
                return False
            conn.execute("DELETE FROM triples_fts WHERE rowid = ?", (row["seq"],))
            conn.execute("DELETE FROM triple_mentions WHERE triple_seq = ?", (row["seq"],))
            conn.execute("DELETE FROM triples WHERE seq = ?", (row["seq"],))
        return True

    def counts(self, tenant_id: str, at: float) -> StoreCounts:
        """What the tenant has in the store (``at``: now, for what has expired)."""
        one = (tenant_id,)
        chat = self.store.query(
            "count chat history",
            "SELECT COUNT(DISTINCT user_id) AS users, "
            "COUNT(DISTINCT user_id || char(31) || session_id) AS sessions, COUNT(*) AS n "
            "FROM chat_messages WHERE tenant_id = ? AND user_id != ''",
            one,
        )[0]
        counts = StoreCounts(
            users=len(self.users(tenant_id)), sessions=chat["sessions"], messages=chat["n"]
        )
        for row in self.store.query(
            "count records",
            "SELECT source, COUNT(*) AS n, SUM(indexed = 0) AS pending, "
            "SUM(expires_at IS NOT NULL AND expires_at <= ?) AS expired "
            "FROM records WHERE tenant_id = ? GROUP BY source ORDER BY source",
            (at, tenant_id),
        ):
            counts.records[row["source"]] = row["n"]
            counts.pending[row["source"]] = row["pending"] or 0
            counts.expired += row["expired"] or 0
        tables = self.tables()
        if "triples" in tables:
            row = self.store.query(
                "count triples",
                "SELECT COUNT(*) AS n, SUM(valid_to IS NULL) AS current, "
                "SUM(indexed = 0) AS pending, "
                "SUM(expires_at IS NOT NULL AND expires_at <= ?) AS expired "
                "FROM triples WHERE tenant_id = ?",
                (at, tenant_id),
            )[0]
            counts.triples, counts.triples_current = row["n"], row["current"] or 0
            counts.pending["triples"] = row["pending"] or 0
            counts.expired += row["expired"] or 0
        if PROFILE_TABLE in tables:
            row = self.store.query(
                "count profile rows",
                "SELECT COUNT(*) AS n, "
                "SUM(superseded_at IS NULL AND value_json IS NOT NULL) AS current, "
                "SUM(expires_at IS NOT NULL AND expires_at <= ?) AS expired "
                f"FROM {PROFILE_TABLE} WHERE tenant_id = ?",
                (at, tenant_id),
            )[0]
            counts.profile_rows, counts.profile_fields = row["n"], row["current"] or 0
            counts.expired += row["expired"] or 0
        return counts

    def index_backlog(self, source: str) -> tuple[int, int]:
        """Across every tenant: how many records of ``source`` and triples there are, and
        how many of them wait for the dense index (what a reindex has to embed)."""
        row = self.store.query(
            "count index work",
            "SELECT COUNT(*) AS n, SUM(indexed = 0) AS pending FROM records WHERE source = ?",
            (source,),
        )[0]
        total, pending = row["n"], row["pending"] or 0
        if "triples" in self.tables():
            row = self.store.query(
                "count index work", "SELECT COUNT(*) AS n, SUM(indexed = 0) AS pending FROM triples"
            )[0]
            total, pending = total + row["n"], pending + (row["pending"] or 0)
        return total, pending

    # -- export -------------------------------------------------------------------------

    def count_export_rows(self, tenant_id: str, users: Sequence[str]) -> int:
        """How many rows :meth:`export_rows` yields for these users (for a progress bar)."""
        total = 0
        tables = self.tables()
        for user in users:
            owner = (tenant_id, user)
            where = "WHERE tenant_id = ? AND user_id = ?"
            total += self.store.query("count", f"SELECT COUNT(*) FROM chat_messages {where}", owner)[0][0]
            total += self.store.query("count", f"SELECT COUNT(*) FROM records {where}", owner)[0][0]
            for table in DOCUMENT_KINDS.values():
                if table in tables:
                    total += self.store.query(
                        "count", f"SELECT COUNT(*) FROM {table} {where}", owner
                    )[0][0]
            if "triples" in tables:
                total += self.store.query("count", f"SELECT COUNT(*) FROM triples {where}", owner)[0][0]
        return total

    def export_rows(self, tenant_id: str, user_id: str) -> Iterator[dict[str, Any]]:
        """Everything the store holds of one user, as plain dicts in a fixed order: chat
        messages (in the order written), records, profile rows (history included), then
        triples (history included, each with its mentions). Derived data (vectors, index
        flags, lexical entries) is left out: an import rebuilds it."""
        owner = (tenant_id, user_id)
        where = "WHERE tenant_id = ? AND user_id = ?"
        for row in self.store.query(
            "export chat history",
            f"SELECT session_id, message_json, created_at FROM chat_messages {where} ORDER BY seq",
            owner,
        ):
            yield {
                "kind": "message",
                "user": user_id,
                "session": row["session_id"],
                "created_at": row["created_at"],
                "message": json.loads(row["message_json"]),
            }
        for row in self.store.query(
            "export records", f"SELECT * FROM records {where} ORDER BY rowid", owner
        ):
            yield {
                "kind": "record",
                "user": user_id,
                "source": row["source"],
                "session": row["session_id"],
                "role": row["role"],
                "text": row["text"],
                "message_ids": json.loads(row["message_ids"]),
                "event_time": row["event_time"],
                "ingested_at": row["ingested_at"],
                "metadata": json.loads(row["metadata"]),
                "ttl": row["ttl"],
                "expires_at": row["expires_at"],
            }
        tables = self.tables()
        for kind, table in DOCUMENT_KINDS.items():
            if table not in tables:
                continue
            for row in self.store.query(
                f"export {kind}", f"SELECT * FROM {table} {where} ORDER BY id", owner
            ):
                removed = row["value_json"] is None
                yield {
                    "kind": kind,
                    "user": user_id,
                    "path": row["path"],
                    "value": None if removed else json.loads(row["value_json"]),
                    "removed": removed,
                    "op": row["op"],
                    "session": row["session_id"],
                    "message_ids": json.loads(row["message_ids"]),
                    "created_at": row["created_at"],
                    "superseded_at": row["superseded_at"],
                    "ttl": row["ttl"],
                    "expires_at": row["expires_at"],
                }
        if "triples" in tables:
            yield from self.triple_rows(tenant_id, user_id)

    def triple_rows(self, tenant_id: str, user_id: str) -> list[dict[str, Any]]:
        """The user's knowledge triples as export rows (each with its mentions), in the
        order written. (Reading triples as the API shows them goes through the triple
        timeline port, :class:`~llama_memory.storage.sqlite.triples.SQLiteTripleTimeline`.)"""
        if "triples" not in self.tables():
            return []
        out = []
        for row in self.store.query(
            "read triples",
            "SELECT * FROM triples WHERE tenant_id = ? AND user_id = ? ORDER BY seq",
            (tenant_id, user_id),
        ):
            mentions = self.store.query(
                "read triple mentions",
                "SELECT * FROM triple_mentions WHERE triple_seq = ? ORDER BY rowid",
                (row["seq"],),
            )
            out.append(
                {
                    "kind": "triple",
                    "user": user_id,
                    "id": row["id"],
                    **{
                        column: row[column]
                        for column in (
                            "subject", "predicate", "object", "subject_key", "predicate_key",
                            "object_key", "valid_from", "valid_to", "superseded_by",
                            "ingested_at", "ttl", "expires_at",
                        )  # fmt: skip
                    },
                    "mentions": [
                        {
                            "session": m["session_id"],
                            "message_ids": json.loads(m["message_ids"]),
                            "event_time": m["event_time"],
                            "ingested_at": m["ingested_at"],
                            "origin": m["origin"],
                        }
                        for m in mentions
                    ],
                }
            )
        return out

    # -- import -------------------------------------------------------------------------

    def import_rows(
        self,
        tenant_id: str,
        rows: Sequence[dict[str, Any]],
        triple_texts: Sequence[str],
        ranks: Optional[MessageRanks] = None,
    ) -> Counter[str]:
        """Write export rows (of :meth:`export_rows`) into the tenant, in one transaction;
        return how many of each kind were new. What the store already has is skipped,
        so importing the same rows twice changes nothing:

        - a chat message already in its session is not added again: the k-th message
          of a session with the same content and time is held when the session has k
          such messages (:mod:`llama_memory.storage.chat_import`; ``ranks`` carries the
          count over the batches of one import, default this call's rows only);
        - a record already held (same source, user and text) only gains the message
          ids it lacked;
        - a profile (or instructions) row already in the history (same path, operation,
          value, time) is skipped; afterwards each field (instruction) has one current
          value, the latest;
        - a triple already held (same id) is skipped; one that holds now and whose
          fact the user already holds under another id adds its mentions to it.

        ``triple_texts`` gives, per row (in order; ignored for other kinds), the text
        the triple's lexical index holds. The profile and triple tables must exist
        (the caller opens those sources first) when such rows are given; so must the
        instructions table for ``instruction`` rows.
        """

        new: Counter[str] = Counter()
        ranks = MessageRanks() if ranks is None else ranks
        document_paths: set[tuple[str, str, str]] = set()  # (table, user, path)
        with self.store.transaction("import") as conn:
            for row, triple_text in zip(rows, triple_texts):
                kind = row["kind"]
                user = row["user"]
                if kind == "message":
                    new[kind] += import_message(conn, "?", tenant_id, row, ranks)
                elif kind == "record":
                    digest = content_hash(row["text"], row["role"])
                    record_id = _record_id(row["source"], tenant_id, user, digest)
                    existing = conn.execute(
                        "SELECT message_ids FROM records WHERE id = ?", (record_id,)
                    ).fetchone()
                    if existing is not None:
                        known = json.loads(existing["message_ids"])
                        merged = known + [m for m in row["message_ids"] if m not in known]
                        if merged != known:
                            conn.execute(
                                "UPDATE records SET message_ids = ? WHERE id = ?",
                                (json.dumps(merged), record_id),
                            )
                        continue
                    conn.execute(
                        "INSERT INTO records (id, source, tenant_id, user_id, session_id, role, "
                        "text, content_hash, message_ids, event_time, ingested_at, metadata, ttl, "
                        "expires_at, indexed) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)",
                        (
                            record_id, row["source"], tenant_id, user, row["session"], row["role"],
                            row["text"], digest, json.dumps(list(row["message_ids"])),
                            row["event_time"], row["ingested_at"],
                            json.dumps(row["metadata"] or {}), row["ttl"], row["expires_at"],
                        ),
                    )  # fmt: skip
                    new[kind] += 1
                elif kind in DOCUMENT_KINDS:  # a profile or an instructions row
                    table = DOCUMENT_KINDS[kind]
                    value_json = (
                        None if row["removed"] else json.dumps(row["value"], ensure_ascii=False)
                    )
                    held = conn.execute(
                        f"SELECT 1 FROM {table} WHERE tenant_id = ? AND user_id = ? "
                        "AND path = ? AND op = ? AND created_at = ? AND value_json IS ?",
                        (tenant_id, user, row["path"], row["op"], row["created_at"], value_json),
                    ).fetchone()
                    if held is not None:
                        continue
                    conn.execute(
                        f"INSERT INTO {table} (tenant_id, user_id, path, value_json, op, "
                        "session_id, message_ids, created_at, superseded_at, ttl, expires_at) "
                        "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (
                            tenant_id, user, row["path"], value_json, row["op"], row["session"],
                            json.dumps(list(row["message_ids"])), row["created_at"],
                            row["superseded_at"], row["ttl"], row["expires_at"],
                        ),
                    )  # fmt: skip
                    document_paths.add((table, user, row["path"]))
                    new[kind] += 1
                elif kind == "triple":
                    if self._import_triple(conn, tenant_id, user, row, triple_text):
                        new[kind] += 1
            for table, user, path in document_paths:
                self._one_current_value(conn, table, tenant_id, user, path)
        return new

    @staticmethod
    def _import_triple(conn: Any, tenant_id: str, user: str, row: dict[str, Any], text: str) -> bool:
        held = conn.execute(
            "SELECT tenant_id, user_id FROM triples WHERE id = ?", (row["id"],)
        ).fetchone()
        if held is not None:
            if (held["tenant_id"], held["user_id"]) != (tenant_id, user):
                raise ValueError(
                    f"triple {row['id']} already belongs to user {held['user_id']!r} of tenant "
                    f"{held['tenant_id']!r} in this store: import this file into another store, "
                    "or forget that user first"
                )
            return False
        keys = (row["subject_key"], row["predicate_key"], row["object_key"])
        same = None
        if row["valid_to"] is None:
            same = conn.execute(
                "SELECT seq FROM triples WHERE tenant_id = ? AND user_id = ? AND subject_key = ? "
                "AND predicate_key = ? AND object_key = ? AND valid_to IS NULL",
                (tenant_id, user, *keys),
            ).fetchone()
        if same is not None:
            seq = same["seq"]
        else:
            cursor = conn.execute(
                "INSERT INTO triples (id, tenant_id, user_id, subject, predicate, object, "
                "subject_key, predicate_key, object_key, valid_from, valid_to, superseded_by, "
                "ingested_at, ttl, expires_at, indexed) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 0)",
                (
                    row["id"], tenant_id, user, row["subject"], row["predicate"], row["object"],
                    *keys, row["valid_from"], row["valid_to"], row["superseded_by"],
                    row["ingested_at"], row["ttl"], row["expires_at"],
                ),
            )  # fmt: skip
            seq = cursor.lastrowid
            conn.execute("INSERT INTO triples_fts (rowid, text) VALUES (?, ?)", (seq, text))
        for mention in row["mentions"]:
            ids = json.dumps(list(mention["message_ids"]))
            known = conn.execute(
                "SELECT 1 FROM triple_mentions WHERE triple_seq = ? AND session_id IS ? "
                "AND message_ids = ? AND event_time = ? AND origin = ?",
                (seq, mention["session"], ids, mention["event_time"], mention["origin"]),
            ).fetchone()
            if known is None:
                conn.execute(
                    "INSERT INTO triple_mentions (triple_seq, session_id, message_ids, "
                    "event_time, ingested_at, origin) VALUES (?, ?, ?, ?, ?, ?)",
                    (seq, mention["session"], ids, mention["event_time"],
                     mention["ingested_at"], mention["origin"]),
                )  # fmt: skip
        return same is None

    @staticmethod
    def _one_current_value(conn: Any, table: str, tenant_id: str, user: str, path: str) -> None:
        """Leave one current row for a profile field (or an instruction: ``table``): the
        latest written; the others are superseded when it was written (histories merged
        from two stores)."""
        rows = conn.execute(
            f"SELECT id, created_at FROM {table} WHERE tenant_id = ? AND user_id = ? "
            "AND path = ? AND superseded_at IS NULL ORDER BY created_at, id",
            (tenant_id, user, path),
        ).fetchall()
        if len(rows) > 1:
            latest = rows[-1]["created_at"]
            conn.executemany(
                f"UPDATE {table} SET superseded_at = ? WHERE id = ?",
                [(latest, r["id"]) for r in rows[:-1]],
            )

    def chat_messages(self, tenant_id: str, user_id: str, session_id: str) -> list[str]:
        """The stored JSON of one session's messages, oldest first (for imports that
        skip what a session already holds)."""
        rows = self.store.query(
            "read chat history",
            "SELECT message_json FROM chat_messages WHERE tenant_id = ? AND user_id = ? "
            "AND session_id = ? ORDER BY seq",
            (tenant_id, user_id, session_id),
        )
        return [row["message_json"] for row in rows]

    # -- what a copy to another store carries besides the export rows -----------------

    def user_meta(self, tenant_id: str, user_id: str) -> dict[str, str]:
        """The user's meta entries (per-session state such as extraction cursors)."""
        infix = user_meta_infix(tenant_id, user_id)
        rows = self.store.query(
            "read user meta", "SELECT key, value FROM meta WHERE instr(key, ?) > 0 ORDER BY key", (infix,)
        )
        return {row["key"]: row["value"] for row in rows}

    def store_meta(self) -> dict[str, str]:
        """The store-wide meta entries (the embedding fingerprints...), without any
        user's entries and without the store's own id."""
        rows = self.store.query("read meta", "SELECT key, value FROM meta ORDER BY key")
        return {
            row["key"]: row["value"] for row in rows
            if row["key"] != "store_id" and not _is_user_key(row["key"])
        }  # fmt: skip

    def user_jobs(self, tenant_id: str, user_id: str) -> list[dict[str, Any]]:
        """The user's jobs still to run (queued, or running under a lease), oldest first."""
        if "jobs" not in self.tables():
            return []  # the queue's table is made when a memory first queues a job
        rows = self.store.query(
            "read jobs",
            "SELECT kind, payload, run_at, attempts, max_attempts, dedup_key, last_error, created_at "
            "FROM jobs WHERE tenant_id = ? AND user_id = ? AND state IN ('queued', 'running') "
            "ORDER BY seq",
            (tenant_id, user_id),
        )
        return [{**dict(row), "payload": json.loads(row["payload"])} for row in rows]

    def add_meta(self, entries: dict[str, str]) -> None:
        """Write meta entries, keeping any value the store already has for a key."""
        with self.store.transaction("write meta") as conn:
            conn.executemany(
                "INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)", list(entries.items())
            )

    def refresh_statistics(self) -> None:
        """Nothing to do: the SQLite store's queries are planned without statistics (its
        plans are fixed in the SQL, e.g. the full-text join's CROSS JOIN)."""

    def add_jobs(self, tenant_id: str, user_id: str, jobs: Sequence[dict[str, Any]]) -> None:
        """Queue jobs (as :meth:`user_jobs` gives them) for the user, each queued again."""
        with self.store.transaction("queue jobs") as conn:
            for job in jobs:
                conn.execute(
                    "INSERT OR IGNORE INTO jobs (id, kind, payload, tenant_id, user_id, run_at, "
                    "attempts, max_attempts, dedup_key, last_error, created_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        uuid.uuid4().hex, job["kind"], json.dumps(job["payload"]), tenant_id, user_id,
                        job["run_at"], job["attempts"], job["max_attempts"], job["dedup_key"],
                        job["last_error"], job["created_at"],
                    ),
                )  # fmt: skip


def _is_user_key(key: str) -> bool:
    """Whether a meta key is a :func:`user_meta_key` (``kind:["tenant", "user", ...``)."""
    return ':["' in key
