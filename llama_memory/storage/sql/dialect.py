"""What differs between the SQL backends (:class:`Dialect`), the store as the shared
algorithms see it (:class:`SQLStore`), and one connection for the reads of a ``get()``
(:func:`one_connection`).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from functools import lru_cache
from typing import Any, Optional, Protocol

from ...core.types import Scope
from ..ports.base import Transactional

#: SQL condition keeping rows that have not expired; its one parameter is "now".
ALIVE_SQL = "(expires_at IS NULL OR expires_at > ?)"
#: SQL condition keeping rows expired at "now" (its one parameter): NOT :data:`ALIVE_SQL`.
EXPIRED_SQL = "expires_at IS NOT NULL AND expires_at <= ?"


def owner(scope: Scope, what: str) -> tuple[str, str]:
    """``(tenant_id, user_id)`` of the scope; ScopeError naming ``what`` without a user."""
    return scope.tenant_id, scope.require_user(what)


class SQLStore(Transactional, Protocol):
    """What the shared algorithms use of a store: transactions, reads and its ``location``."""

    def query(self, action: str, sql: str, params: Sequence[Any] = ()) -> Sequence[Any]:
        """Run one read statement; its rows (read by column name)."""
        ...


def one_connection(store: object) -> AbstractContextManager[Any]:
    """A context in which ``store``'s reads share one pooled connection (PostgreSQL: a
    ``get()`` makes 15-20 reads); a no-op for other stores."""
    hold = getattr(store, "one_connection", None)
    return hold() if callable(hold) else nullcontext()


class Dialect(ABC):
    """One SQL database's spelling of what the shared algorithms need: statements are
    written with ``?`` and pass through :meth:`sql`. A member with a standard SQL spelling
    has it as default; one without is abstract."""

    #: A short name, for messages.
    name: str
    #: The literals a boolean column is compared with (SQLite keeps 0 and 1).
    true: str
    false: str
    #: What ends a ``SELECT`` whose rows the transaction will update, so that another writer
    #: of them waits (``FOR UPDATE``; nothing where a write holds the whole database).
    row_lock: str
    #: The same, passing over rows another transaction holds (workers never wait).
    skip_locked: str

    def sql(self, statement: str) -> str:
        """``statement`` as this driver takes it (by default as written, with ``?``)."""
        return statement

    def execute(self, conn: Any, statement: str, params: Sequence[Any] = ()) -> Any:
        """Run ``statement`` on ``conn`` (a connection of the store's transaction); the cursor."""
        return conn.execute(self.sql(statement), params)

    def execute_many(self, conn: Any, statement: str, rows: Sequence[Sequence[Any]]) -> None:
        """Run ``statement`` once for each parameter row of ``rows`` on ``conn``."""
        conn.executemany(self.sql(statement), rows)

    def in_list(self, column: str, values: Sequence[Any]) -> tuple[str, list[Any]]:
        """``(condition, parameters)`` for ``column`` being one of ``values`` (see batches)."""
        return f"{column} IN ({','.join('?' * len(values))})", list(values)

    #: How many values one :meth:`in_list` takes (None: any number).
    max_list: Optional[int] = None

    def batches(self, values: Sequence[Any]) -> Iterator[list[Any]]:
        """``values`` in lists :meth:`in_list` takes whole (none for no values)."""
        step = self.max_list or max(len(values), 1)
        for start in range(0, len(values), step):
            yield list(values[start : start + step])

    def starts_with(self, column: str, prefix: str) -> tuple[str, tuple[Any, ...]]:
        """``(condition, parameters)`` for ``column`` beginning with ``prefix`` (not ``LIKE``:
        it would read ``%`` and ``_``)."""
        return f"substr({column}, 1, ?) = ?", (len(prefix), prefix)

    def same_as(self, column: str) -> str:
        """``column`` equals one parameter, NULL equal to NULL (``IS NOT DISTINCT FROM``)."""
        return f"{column} IS NOT DISTINCT FROM ?"

    @abstractmethod
    def contains(self, column: str) -> str:
        """``column`` holds one parameter's text somewhere, as SQL."""

    @abstractmethod
    def utc_day(self, column: str) -> str:
        """The day (UTC, ``YYYY-MM-DD``) of ``column``'s Unix time, as SQL."""

    def json_param(self, value: Any) -> Any:
        """``value`` as a JSON list column's parameter (its JSON text, by default)."""
        return json.dumps(value)

    def json_value(self, stored: Any) -> Any:
        """A JSON list column's value as read back (the JSON text parsed, by default)."""
        return json.loads(stored)

    def insert(
        self, conn: Any, table: str, values: Mapping[str, Any], returning: Optional[str] = None
    ) -> Optional[int]:
        """``INSERT`` one row into ``table``; with ``returning``, its integer key column's value."""
        statement = insert_sql(table, list(values))
        if returning is None:
            self.execute(conn, statement, list(values.values()))
            return None
        row = self.execute(conn, f"{statement} RETURNING {returning}", list(values.values())).fetchone()
        assert row is not None  # an INSERT ... VALUES returns its row
        return int(row[returning])

    def insert_new(self, conn: Any, table: str, values: Mapping[str, Any]) -> bool:
        """``INSERT`` one row unless one with a unique key of it is there; whether it was."""
        statement = f"{insert_sql(table, list(values))} ON CONFLICT DO NOTHING"
        return int(self.execute(conn, statement, list(values.values())).rowcount) == 1

    def delete(
        self, conn: Any, table: str, where: str, params: Sequence[Any], returning: str
    ) -> list[Any]:
        """``DELETE`` the rows of ``table`` matching ``where``; their ``returning`` columns."""
        return list(self.execute(conn, f"DELETE FROM {table} WHERE {where} RETURNING {returning}", params).fetchall())

    def update_ids(
        self, transaction: Callable[[str], AbstractContextManager[Any]], action: str, table: str, assign: str,
        ids: Sequence[Any], where: str = "", before: Sequence[Any] = (), after: Sequence[Any] = ()
    ) -> None:
        """``UPDATE table SET assign`` on the rows whose ``id`` is in ``ids`` (and
        ``where``), in batches, in one transaction, taking their row locks in ``id`` order;
        ``before``/``after``: the parameters of ``assign``/``where``."""
        if not ids:
            return
        also = f" AND {where}" if where else ""
        with transaction(action) as conn:
            for batch in self.batches(sorted(ids)):
                listed, values = self.in_list("id", batch)
                if self.row_lock:  # rows locked in id order: two writers never wait on each other in a cycle
                    listed = f"id IN (SELECT id FROM {table} WHERE {listed} ORDER BY id{self.row_lock})"
                self.execute(conn, f"UPDATE {table} SET {assign} WHERE {listed}{also}", [*before, *values, *after])

    def user_tables(self, conn: Any) -> list[str]:
        """The tables with per-user rows (``tenant_id`` and ``user_id`` columns), by name."""
        rows = self.execute(
            conn,
            "SELECT table_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND column_name IN ('tenant_id', 'user_id') GROUP BY table_name HAVING count(*) = 2 "
            "ORDER BY table_name",
        ).fetchall()
        return [row["table_name"] for row in rows]

    @abstractmethod
    def lock(self, conn: Any, key: str) -> None:
        """Make the writers of ``key`` take turns until the open transaction ends."""


def given(where: list[str], params: list[Any], *filters: tuple[str, Any]) -> None:
    """Add each ``(condition, value)`` of ``filters`` with a value to ``where``, ``params``."""
    for condition, value in filters:
        if value is not None:
            where.append(condition)
            params.append(value)


def insert_sql(table: str, columns: Sequence[str]) -> str:
    """``INSERT INTO table (columns) VALUES (?, ...)``."""
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})"


@lru_cache(maxsize=512)
def format_style(statement: str) -> str:
    """``statement`` with psycopg's ``%s`` placeholders (``%`` doubled, each ``?`` a ``%s``:
    the shared statements hold no other ``?``)."""
    return statement.replace("%", "%%").replace("?", "%s")
