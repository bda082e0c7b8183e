"""SQLite's spelling of the shared SQL algorithms (:mod:`llama_memory.storage.sql`)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, Optional

from ..sql.dialect import Dialect, insert_sql


class SQLiteDialect(Dialect):
    """``?`` placeholders, ``IN (?, ...)`` lists, JSON kept as text, 0/1 booleans."""

    name = "SQLite"
    true, false = "1", "0"
    # A write transaction (BEGIN IMMEDIATE) holds the file's one write lock from its start.
    row_lock = skip_locked = ""
    #: Values per ``IN`` list: well under SQLite's bound-parameter limit (999 before 3.32).
    max_list = 500

    def sql(self, statement: str) -> str:
        """The statement as written: ``?`` is sqlite3's own placeholder."""
        return statement

    def in_list(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """``column IN (?, ...)``, one placeholder a value."""
        return f"{column} IN ({','.join('?' * len(values))})", list(values)

    def starts_with(self, column: str, prefix: str) -> tuple[str, tuple[Any, ...]]:
        """``substr(column, 1, len) = prefix`` (not ``LIKE``: a prefix may hold ``%`` or ``_``)."""
        return f"substr({column}, 1, ?) = ?", (len(prefix), prefix)

    def same_as(self, column: str) -> str:
        """``column IS ?``."""
        return f"{column} IS ?"

    def contains(self, column: str) -> str:
        """``instr(column, ?) > 0``."""
        return f"instr({column}, ?) > 0"

    def utc_day(self, column: str) -> str:
        """``date(column, 'unixepoch')``."""
        return f"date({column}, 'unixepoch')"

    def json_param(self, value: Any) -> str:
        """The JSON text."""
        return json.dumps(value)

    def json_value(self, stored: Any) -> Any:
        """The JSON text parsed."""
        return json.loads(stored)

    def insert(
        self, conn: Any, table: str, values: Mapping[str, Any], returning: Optional[str] = None
    ) -> Optional[int]:
        """The row's ``rowid`` for ``returning`` (the table's ``INTEGER PRIMARY KEY``)."""
        cursor = conn.execute(insert_sql(table, list(values)), list(values.values()))
        return int(cursor.lastrowid or 0) if returning is not None else None

    def delete(
        self, conn: Any, table: str, where: str, params: Sequence[Any], returning: str
    ) -> list[Any]:
        """The rows read, then deleted: the write transaction holds the file between the
        two statements (and ``DELETE ... RETURNING`` needs SQLite 3.35)."""
        rows = conn.execute(f"SELECT {returning} FROM {table} WHERE {where}", params).fetchall()
        if rows:
            conn.execute(f"DELETE FROM {table} WHERE {where}", params)
        return list(rows)

    def user_tables(self, conn: Any) -> list[str]:
        """From ``sqlite_master`` and each table's ``PRAGMA table_info``."""
        names = [
            row[0]
            for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
            if not row[0].startswith("sqlite_")
        ]
        return [
            name
            for name in names
            if {"tenant_id", "user_id"} <= {col[1] for col in conn.execute(f'PRAGMA table_info("{name}")')}
        ]

    def lock(self, conn: Any, key: str) -> None:
        """Nothing to do: a write transaction (``BEGIN IMMEDIATE``) holds the file's one
        write lock from its start, so writers already take turns."""


#: The dialect of every SQLite store.
SQLITE = SQLiteDialect()
