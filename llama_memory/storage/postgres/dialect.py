"""PostgreSQL's spelling of the shared SQL algorithms (:mod:`llama_memory.storage.sql`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.types.json import Jsonb

from ..sql.dialect import Dialect, format_style


class PostgresDialect(Dialect):
    """``%s`` placeholders, ``= ANY(array)`` lists, ``jsonb``, ``RETURNING``, advisory locks."""

    name = "PostgreSQL"
    true, false = "true", "false"
    row_lock = " FOR UPDATE"
    skip_locked = " FOR UPDATE SKIP LOCKED"
    max_list = None  # one array parameter, however long

    def sql(self, statement: str) -> str:
        return format_style(statement)

    def execute_many(self, conn: Any, statement: str, rows: Sequence[Sequence[Any]]) -> None:
        """Through a cursor: a psycopg connection has no ``executemany``."""
        with conn.cursor() as cur:
            cur.executemany(self.sql(statement), rows)

    def in_list(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """``column = ANY(?)``: one statement text for every length (prepared once)."""
        return f"{column} = ANY(?)", [list(values)]

    def starts_with(self, column: str, prefix: str) -> tuple[str, tuple[Any, ...]]:
        return f"starts_with({column}, ?)", (prefix,)

    def contains(self, column: str) -> str:
        return f"strpos({column}, ?) > 0"

    def utc_day(self, column: str) -> str:
        return f"to_char(to_timestamp({column}) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"

    def json_param(self, value: Any) -> Jsonb:
        return Jsonb(value)

    def json_value(self, stored: Any) -> Any:
        """psycopg has parsed the ``jsonb`` already."""
        return stored

    def lock(self, conn: Any, key: str) -> None:
        """A transaction-scoped advisory lock on a hash of ``key``."""
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 1))", (key,))


#: The dialect of every PostgreSQL store.
POSTGRES = PostgresDialect()
