"""Writing the rows of an export into a store, once for every SQL backend: the import
half of :class:`~llama_memory.storage.sql.admin.AdminRows`.

What the store already has is skipped, so importing the same rows twice changes
nothing. A backend says which columns its record rows add
(:meth:`SQLImportRows._record_extras`) and which triple timeline writes a triple with
its lexical entry and its mentions (:attr:`SQLImportRows.timeline_class`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Sequence
from typing import Any, ClassVar, Optional

from ...core.text import content_hash
from ..chat_import import MessageRanks, import_message
from ..ports.admin import DOCUMENT_KINDS
from ..ports.triples import TripleMention
from .dialect import Dialect, SQLStore
from .records import record_id
from .triples import TripleTimeline

__all__ = ["OWNER", "SQLImportRows"]

#: The condition on a user's rows; its parameters are the tenant and the user.
OWNER = "WHERE tenant_id = ? AND user_id = ?"
_OWNER = OWNER


class SQLImportRows:
    """Import of export rows into a SQL store (see :mod:`.admin_import`)."""

    dialect: ClassVar[Dialect]
    #: The backend's triple timeline (its mention links; writing and deleting triples).
    timeline_class: ClassVar[type[TripleTimeline]]

    def __init__(self, store: SQLStore) -> None:
        self.store = store

    def _record_extras(self, row: dict[str, Any]) -> dict[str, Any]:
        """Columns of the backend's ``records`` table beyond the shared ones, for an
        imported record row."""
        return {}

    def _timeline(self) -> TripleTimeline:
        return self.timeline_class(self.store)  # type: ignore[call-arg]

    def import_rows(
        self,
        tenant_id: str,
        rows: Sequence[dict[str, Any]],
        triple_texts: Sequence[str],
        ranks: Optional[MessageRanks] = None,
    ) -> Counter[str]:
        """Write export rows (of :meth:`~llama_memory.storage.sql.admin.AdminRows.export_rows`) into the tenant, in one transaction
        (joining the caller's when one is open); return how many of each kind were new.
        What the store already has is skipped, so importing the same rows twice changes
        nothing:

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
        timeline: Optional[TripleTimeline] = None
        with self.store.transaction("import") as conn:
            for row, triple_text in zip(rows, triple_texts):
                kind, user = row["kind"], row["user"]
                if kind == "message":
                    new[kind] += import_message(conn, self.dialect.sql("?"), tenant_id, row, ranks)
                elif kind == "record":
                    new[kind] += self._import_record(conn, tenant_id, user, row)
                elif kind in DOCUMENT_KINDS:  # a profile or an instructions row
                    if self._import_document_row(conn, DOCUMENT_KINDS[kind], tenant_id, user, row):
                        document_paths.add((DOCUMENT_KINDS[kind], user, row["path"]))
                        new[kind] += 1
                elif kind == "triple":
                    timeline = timeline or self._timeline()
                    new[kind] += self._import_triple(conn, timeline, tenant_id, user, row, triple_text)
            for table, user, path in sorted(document_paths):
                self._one_current_value(conn, table, tenant_id, user, path)
        return new

    def _import_record(self, conn: Any, tenant_id: str, user: str, row: dict[str, Any]) -> int:
        """Write one record row (1), or merge its message ids into the one held (0)."""
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

    def _import_document_row(self, conn: Any, table: str, tenant_id: str, user: str, row: dict[str, Any]) -> bool:
        """Write one row of a document of profile rows (``table``: the profile's, the
        instructions') unless its history already has it; whether it was written."""
        dialect = self.dialect
        value_json = None if row["removed"] else json.dumps(row["value"], ensure_ascii=False)
        held = dialect.execute(
            conn,
            f"SELECT 1 FROM {table} {_OWNER} AND path = ? AND op = ? AND created_at = ? "
            f"AND {dialect.same_as('value_json')}",
            (tenant_id, user, row["path"], row["op"], row["created_at"], value_json),
        ).fetchone()
        if held is not None:
            return False
        dialect.insert(conn, table, {
            "tenant_id": tenant_id, "user_id": user, "path": row["path"], "value_json": value_json,
            "op": row["op"], "session_id": row["session"],
            "message_ids": dialect.json_param(list(row["message_ids"])), "created_at": row["created_at"],
            "superseded_at": row["superseded_at"], "ttl": row["ttl"], "expires_at": row["expires_at"],
        })  # fmt: skip
        return True

    def _import_triple(
        self, conn: Any, timeline: TripleTimeline, tenant_id: str, user: str, row: dict[str, Any], text: str
    ) -> int:
        """Write one triple row with its mentions (1); a triple held under its id is
        skipped, one whose fact the user holds now under another id adds its mentions
        to it (0)."""
        dialect = self.dialect
        held = dialect.execute(conn, "SELECT tenant_id, user_id FROM triples WHERE id = ?", (row["id"],)).fetchone()
        if held is not None:
            if (held["tenant_id"], held["user_id"]) != (tenant_id, user):
                raise ValueError(
                    f"triple {row['id']} already belongs to user {held['user_id']!r} of tenant "
                    f"{held['tenant_id']!r} in this store: import this file into another store, "
                    "or forget that user first"
                )
            return 0
        link = timeline.mentions
        mention_key, triple_key = link.key
        keys = (row["subject_key"], row["predicate_key"], row["object_key"])
        same = None
        if row["valid_to"] is None:
            same = dialect.execute(
                conn,
                f"SELECT id, {triple_key} FROM triples {_OWNER} AND subject_key = ? AND predicate_key = ? "
                "AND object_key = ? AND valid_to IS NULL",
                (tenant_id, user, *keys),
            ).fetchone()
        if same is None:
            timeline._insert_row(conn, {
                "id": row["id"], "tenant_id": tenant_id, "user_id": user, "subject": row["subject"],
                "predicate": row["predicate"], "object": row["object"], "subject_key": keys[0],
                "predicate_key": keys[1], "object_key": keys[2], "valid_from": row["valid_from"],
                "valid_to": row["valid_to"], "superseded_by": row["superseded_by"],
                "ingested_at": row["ingested_at"], "ttl": row["ttl"], "expires_at": row["expires_at"],
            }, text)  # fmt: skip
            same = dialect.execute(conn, f"SELECT id, {triple_key} FROM triples WHERE id = ?", (row["id"],)).fetchone()
        scoped = "tenant_id = ? AND user_id = ? AND " if link.scoped else ""
        for mention in row["mentions"]:
            known = dialect.execute(
                conn,
                f"SELECT 1 FROM triple_mentions WHERE {scoped}{mention_key} = ? AND {dialect.same_as('session_id')} "
                "AND message_ids = ? AND event_time = ? AND origin = ?",
                (*((tenant_id, user) if link.scoped else ()), same[triple_key], mention["session"],
                 dialect.json_param(list(mention["message_ids"])), mention["event_time"], mention["origin"]),
            ).fetchone()  # fmt: skip
            if known is None:
                timeline._insert_mention(conn, same["id"], TripleMention(
                    mention["session"], tuple(mention["message_ids"]), mention["event_time"],
                    mention["ingested_at"], mention["origin"],
                ))  # fmt: skip
        return int(same["id"] == row["id"])

    def _one_current_value(self, conn: Any, table: str, tenant_id: str, user: str, path: str) -> None:
        """Leave one current row for a profile field (or an instruction: ``table``): the
        latest written; the others are superseded when it was written (histories merged
        from two stores)."""
        rows = self.dialect.execute(
            conn,
            f"SELECT id, created_at FROM {table} {_OWNER} AND path = ? AND superseded_at IS NULL "
            "ORDER BY created_at, id",
            (tenant_id, user, path),
        ).fetchall()
        if len(rows) > 1:
            latest = rows[-1]["created_at"]
            for batch in self.dialect.batches([r["id"] for r in rows[:-1]]):
                condition, values = self.dialect.in_list("id", batch)
                self.dialect.execute(
                    conn, f"UPDATE {table} SET superseded_at = ? {_OWNER} AND {condition}",
                    (latest, tenant_id, user, *values),
                )  # fmt: skip
