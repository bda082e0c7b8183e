"""The admin rows of a PostgreSQL store (:class:`~llama_memory.storage.sql.admin.AdminRows`,
written once for every SQL backend): what PostgreSQL does its own way. Every table exists
from the first migration on, a record row carries its event date in words for the
full-text index, the tables' size is measured, and a bulk import is followed by ``ANALYZE``.
"""

from __future__ import annotations

from typing import Any

from ..sql.admin import AdminRows
from .dialect import POSTGRES
from .records import _event_date
from .triples import PostgresTripleTimeline

__all__ = ["TABLES", "PostgresStoreAdmin"]

#: Tables whose size :meth:`PostgresStoreAdmin.size_bytes` adds up (with their indexes).
TABLES = (
    "chat_messages", "records", "record_embeddings", "profile_fields", "instruction_fields",
    "triples", "triple_mentions", "jobs", "meta",
)  # fmt: skip


class PostgresStoreAdmin(AdminRows):
    """Administrative reads and writes on one PostgreSQL store, for one tenant at a time."""

    dialect = POSTGRES
    record_order = "seq"
    tables_on_first_use = False
    timeline_class = PostgresTripleTimeline

    def _record_extras(self, row: dict[str, Any]) -> dict[str, Any]:
        return {"event_date": _event_date(row["event_time"])}

    def size_bytes(self) -> int:
        """Bytes the llama-memory tables take in the database, indexes included."""
        row = self._one(
            "measure tables",
            "SELECT coalesce(sum(pg_total_relation_size(to_regclass(t))), 0) AS n FROM unnest(?::text[]) AS t",
            (list(TABLES),),
        )
        return int(row["n"])

    def refresh_statistics(self) -> None:
        """ANALYZE the store's tables, after a bulk import: until autovacuum's first
        ANALYZE (up to a minute), the planner walks a user's rows where an index serves
        (docs/howto/postgres.md, "The fifth round")."""
        self.store.query("analyze the tables", "ANALYZE")
