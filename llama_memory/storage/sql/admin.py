"""Store-wide reads and writes for managing a memory, once for every SQL backend
(:class:`AdminRows`, behind :mod:`llama_memory.admin.memory_admin` and the command line):
users, sessions, a user's records, deleting a record or triple, counts, and the export
rows, read and written back (the same on every backend, so one's export imports into
another). A backend subclass says which tables it has (:meth:`AdminRows._existing`), its
records' write order and extra columns, and its triple timeline.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from abc import ABC
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any, ClassVar, Optional

from ...core.text import content_hash
from ...core.types import MemoryRecord
from ..codec import dump_message
from ..ports.base import SessionSummary, StoreCounts, UserSummary, user_meta_infix
from ..ports.profile import DOCUMENT_KINDS
from .dialect import EXPIRED_SQL, Dialect, SQLStore, given
from .profile import export_document, import_document_row, one_current_value
from .records import record_id, to_record
from .triples import TRIPLE_COLUMNS, TripleTimeline

__all__ = ["PROFILE_TABLE", "AdminRows"]

PROFILE_TABLE = DOCUMENT_KINDS["profile"]
#: The condition on a user's rows; its parameters are the tenant and the user.
_OWNER = "WHERE tenant_id = ? AND user_id = ?"


def _count(condition: str) -> str:
    return f"count(CASE WHEN {condition} THEN 1 END)"


_EXPIRED = _count(EXPIRED_SQL)


def _is_user_key(key: str) -> bool:
    return ':["' in key  # a user_meta_key: kind:["tenant", "user", ...


#: The columns of a chat message an import writes.
_CHAT_COLUMNS = ("tenant_id", "user_id", "session_id", "message_json", "created_at")


class MessageRanks:
    """For one import: how many messages equal to each one came before it, over every
    batch (keyed by a 16-byte digest: about 100 bytes a message).

    A stored message has no id and one ``put_messages`` call gives its messages one time,
    so a message of an export is identified by its session, time, content *and its rank
    among equal messages in the file*: the third "OK." of a session at time t is held when
    the session holds three such rows. Counted over the whole import (not per batch, nor
    by position in the session, which a later ``set()`` or ``reset()`` would shift), an
    import again adds nothing and a stopped one resumes. Each check walks the session's
    index: the cost grows with the square of a session's length.
    """

    def __init__(self) -> None:
        self._seen: Counter[bytes] = Counter()

    def next(self, key: tuple[str, str, str, str, float]) -> int:
        """The rank (1 for the first) of this message among equal ones so far."""
        digest = hashlib.blake2b(json.dumps(key).encode("utf-8", "surrogatepass"), digest_size=16).digest()
        self._seen[digest] += 1
        return self._seen[digest]


class AdminRows(ABC):
    """Administrative reads and writes on one SQL store, for one tenant at a time."""

    dialect: ClassVar[Dialect]
    #: The backend's triple timeline (its mention links; writing and deleting triples).
    timeline_class: ClassVar[type[TripleTimeline]]
    #: The ``records`` column that keeps write order.
    record_order: ClassVar[str]
    #: Whether the tables of the optional sources are made when a source is first
    #: opened: then a triples table says the triple source is in use.
    tables_on_first_use: ClassVar[bool]

    # -- what a backend does its own way -------------------------------------------------

    def _existing(self, *tables: str) -> set[str]:
        """Which of ``tables`` exist (all, where the schema is migrated on open)."""
        return set(tables)

    def refresh_statistics(self) -> None:
        """Update the planner's statistics after a bulk import (none on SQLite: plans are fixed)."""

    def _record_extras(self, row: dict[str, Any]) -> dict[str, Any]:
        """The backend's extra ``records`` columns for an imported record row."""
        return {}

    # -- plumbing -------------------------------------------------------------------------

    def __init__(self, store: SQLStore) -> None:
        self.store = store

    def _timeline(self) -> TripleTimeline:
        return self.timeline_class(self.store)  # type: ignore[call-arg]

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
        """Every user of the tenant (chat, records, triples or profile) by id, but the anonymous."""
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
        """The user's sessions as they began: those with chat history, then records only."""
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
        """The user's records in write order (or newest first), expired ones too, filtered
        by session, source, ``[since, until)`` on the event (else stored) time and ids."""
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
        """Delete one of the user's records; its source's name, or None when there is none."""
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
        """Delete one of the user's triples (and what hangs on it); False when there is none."""
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
        """How many of the tenant's rows of ``table`` (``n``), ``current``, ``expired``."""
        return self._one(
            action,
            f"SELECT count(*) AS n, {_count(current)} AS current{more}, {_EXPIRED} AS expired "
            f"FROM {table} WHERE tenant_id = ?",
            (at, tenant_id),
        )

    def index_backlog(self, source: str) -> tuple[int, int]:
        """Across tenants: records of ``source`` and triples, and how many wait for the index."""
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
        """Everything the store holds of one user as plain dicts: chat messages, records,
        documents, then triples with their mentions (history included, in write order).
        Derived data (vectors, index flags, lexical entries) is rebuilt on import."""
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
                yield from export_document(self._query, self.dialect, kind, table, owner)
        if "triples" in tables:
            yield from self.triple_rows(tenant_id, user_id)

    def triple_rows(self, tenant_id: str, user_id: str) -> list[dict[str, Any]]:
        """The user's triples as export rows (each with its mentions), in write order."""
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
                **{column: row[column] for column in TRIPLE_COLUMNS},
                "mentions": mentions.get(row["id"], []),
            }  # fmt: skip
            for row in self._query("read triples", f"SELECT * FROM triples {_OWNER} ORDER BY seq", owner)
        ]

    def chat_messages(self, tenant_id: str, user_id: str, session_id: str) -> list[str]:
        """The stored JSON of one session's messages, oldest first."""
        rows = self._query(
            "read chat history",
            f"SELECT message_json FROM chat_messages {_OWNER} AND session_id = ? ORDER BY seq",
            (tenant_id, user_id, session_id),
        )
        return [row["message_json"] for row in rows]

    # -- import -------------------------------------------------------------------------

    def import_rows(
        self, tenant_id: str, rows: Sequence[dict[str, Any]], triple_texts: Sequence[str],
        ranks: Optional[MessageRanks] = None
    ) -> Counter[str]:
        """Write export rows (of :meth:`export_rows`) into the tenant in one transaction
        (joining an open one); how many of each kind were new. Importing the same rows
        twice changes nothing:

        - a chat message is skipped when its session holds it (:class:`MessageRanks`;
          ``ranks`` carries the count over the batches of one import);
        - a record already held (source, user, text) only gains message ids;
        - a document row already in the history (path, operation, value, time) is
          skipped; each field then has one current value, the latest;
        - a triple held under its id is skipped; one whose fact the user holds now under
          another id adds its mentions to it.

        ``triple_texts``: per row, the text of a triple's lexical entry. The profile,
        instructions and triple tables must exist when such rows are given.
        """
        new: Counter[str] = Counter()
        ranks = MessageRanks() if ranks is None else ranks
        document_paths: set[tuple[str, str, str]] = set()  # (table, user, path)
        timeline: Optional[TripleTimeline] = None
        with self.store.transaction("import") as conn:
            for row, triple_text in zip(rows, triple_texts):
                kind, user = row["kind"], row["user"]
                if kind == "message":
                    new[kind] += self._import_message(conn, tenant_id, row, ranks)
                elif kind == "record":
                    new[kind] += self._import_record(conn, tenant_id, user, row)
                elif kind in DOCUMENT_KINDS:  # a profile or an instructions row
                    if import_document_row(conn, self.dialect, DOCUMENT_KINDS[kind], tenant_id, user, row):
                        document_paths.add((DOCUMENT_KINDS[kind], user, row["path"]))
                        new[kind] += 1
                elif kind == "triple":
                    timeline = timeline or self._timeline()
                    new[kind] += timeline.import_row(conn, tenant_id, user, row, triple_text)
            for table, user, path in sorted(document_paths):
                one_current_value(conn, self.dialect, table, tenant_id, user, path)
        return new

    def _import_message(
        self, conn: Any, tenant_id: str, row: dict[str, Any], ranks: MessageRanks
    ) -> int:
        """Write one message row (1) unless the session holds it (0; :class:`MessageRanks`)."""
        # As the chat log writes it (whatever the key order of the file): what makes two
        # messages equal.
        from llama_index.core.base.llms.types import ChatMessage  # only imports need it

        data = dump_message(ChatMessage.model_validate(row["message"]))
        key = (tenant_id, row["user"], row["session"], data, float(row["created_at"]))
        rank = ranks.next(key)
        held = self.dialect.execute(
            conn,
            "SELECT count(*) AS n FROM chat_messages WHERE tenant_id = ? AND user_id = ? "
            "AND session_id = ? AND message_json = ? AND created_at = ?",
            key,
        ).fetchone()
        if held["n"] >= rank:
            return 0
        self.dialect.insert(conn, "chat_messages", dict(zip(_CHAT_COLUMNS, key)))
        return 1

    def _import_record(self, conn: Any, tenant_id: str, user: str, row: dict[str, Any]) -> int:
        """Write one record row (1), or merge its message ids into the held one (0)."""
        dialect = self.dialect
        digest = content_hash(row["text"], row["role"])
        new_id = record_id(row["source"], tenant_id, user, digest)
        existing = dialect.execute(
            conn, f"SELECT message_ids FROM records {_OWNER} AND id = ?{dialect.row_lock}", (tenant_id, user, new_id)
        ).fetchone()
        if existing is not None:
            known = list(dialect.json_value(existing["message_ids"]))
            merged = known + [m for m in row["message_ids"] if m not in known]
            if merged != known:
                dialect.execute(
                    conn, f"UPDATE records SET message_ids = ? {_OWNER} AND id = ?",
                    (dialect.json_param(merged), tenant_id, user, new_id),
                )  # fmt: skip
            return 0
        dialect.insert(conn, "records", {
            "id": new_id, "source": row["source"], "tenant_id": tenant_id, "user_id": user,
            "session_id": row["session"], "role": row["role"], "text": row["text"], "content_hash": digest,
            "message_ids": dialect.json_param(list(row["message_ids"])), "event_time": row["event_time"],
            "ingested_at": row["ingested_at"], "metadata": dialect.json_param(row["metadata"] or {}),
            "ttl": row["ttl"], "expires_at": row["expires_at"], **self._record_extras(row),
        })  # fmt: skip
        return 1

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
        """The store-wide meta entries, without users' entries and the store's id."""
        rows = self._query("read meta", "SELECT key, value FROM meta ORDER BY key")
        return {r["key"]: r["value"] for r in rows if r["key"] != "store_id" and not _is_user_key(r["key"])}

    def user_jobs(self, tenant_id: str, user_id: str) -> list[dict[str, Any]]:
        """The user's jobs still to run (queued or running), oldest first."""
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
        """Queue jobs (as :meth:`user_jobs` gives them) for the user; one whose dedup key is
        already waiting is skipped."""
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
