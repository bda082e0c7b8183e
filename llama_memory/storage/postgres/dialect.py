"""PostgreSQL's spelling of the shared SQL algorithms (:mod:`llama_memory.storage.sql`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional

from psycopg.types.json import Jsonb

from ..sql.dialect import Dialect, format_style, insert_sql


class PostgresDialect(Dialect):
    """``%s`` placeholders, ``= ANY(array)`` lists, ``jsonb``, ``RETURNING``, advisory locks."""

    name = "PostgreSQL"
    true, false = "true", "false"
    row_lock = " FOR UPDATE"
    skip_locked = " FOR UPDATE SKIP LOCKED"
    max_list = None  # one array parameter, however long

    def sql(self, statement: str) -> str:
        """The statement with psycopg's ``%s`` placeholders."""
        return format_style(statement)

    def execute_many(self, conn: Any, statement: str, rows: Sequence[Sequence[Any]]) -> None:
        """Through a cursor: a psycopg connection has no ``executemany``."""
        with conn.cursor() as cur:
            cur.executemany(self.sql(statement), rows)

    def in_list(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """``column = ANY(?)`` with the values as one array: one statement text for every
        length (prepared once)."""
        return f"{column} = ANY(?)", [list(values)]

    def starts_with(self, column: str, prefix: str) -> tuple[str, tuple[Any, ...]]:
        """``starts_with(column, prefix)``."""
        return f"starts_with({column}, ?)", (prefix,)

    def same_as(self, column: str) -> str:
        """``column IS NOT DISTINCT FROM ?``."""
        return f"{column} IS NOT DISTINCT FROM ?"

    def contains(self, column: str) -> str:
        """``strpos(column, ?) > 0``."""
        return f"strpos({column}, ?) > 0"

    def utc_day(self, column: str) -> str:
        """``to_char(to_timestamp(column) AT TIME ZONE 'UTC', 'YYYY-MM-DD')``."""
        return f"to_char(to_timestamp({column}) AT TIME ZONE 'UTC', 'YYYY-MM-DD')"

    def json_param(self, value: Any) -> Jsonb:
        """The value for a ``jsonb`` column."""
        return Jsonb(value)

    def json_value(self, stored: Any) -> Any:
        """psycopg has parsed the ``jsonb`` already."""
        return stored

    def insert(
        self, conn: Any, table: str, values: Mapping[str, Any], returning: Optional[str] = None
    ) -> Optional[int]:
        """``INSERT ... RETURNING`` the key column asked for."""
        statement = insert_sql(table, list(values))
        if returning is None:
            conn.execute(self.sql(statement), list(values.values()))
            return None
        row = conn.execute(self.sql(f"{statement} RETURNING {returning}"), list(values.values())).fetchone()
        assert row is not None  # an INSERT ... VALUES returns its row
        return int(row[returning])

    def delete(self, conn: Any, table: str, where: str, params: Sequence[Any], returning: str) -> list[Any]:
        """``DELETE ... RETURNING``: one statement."""
        return list(self.execute(conn, f"DELETE FROM {table} WHERE {where} RETURNING {returning}", params).fetchall())

    def user_tables(self, conn: Any) -> list[str]:
        """From ``information_schema``, of the current schema, by name."""
        rows = conn.execute(
            "SELECT table_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND column_name IN ('tenant_id', 'user_id') GROUP BY table_name HAVING count(*) = 2 "
            "ORDER BY table_name"
        ).fetchall()
        return [row["table_name"] for row in rows]

    def lock(self, conn: Any, key: str) -> None:
        """A transaction-scoped advisory lock on a hash of ``key``: writers of one key
        on every worker and machine take turns; it is released at commit or rollback."""
        conn.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, 1))", (key,))


#: The dialect of every PostgreSQL store.
POSTGRES = PostgresDialect()
