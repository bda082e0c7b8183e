"""Profile rows (the :class:`~llama_memory.storage.ports.ProfileRows` port) in SQLite.

One table per document (``profile_fields``, ``instruction_fields``: see
:data:`~llama_memory.storage.ports.profile.DOCUMENTS`) in the memory's SQLite file:
one row per value a field had, with provenance and expiry. Statements run through the store's
``transaction``/``query``, so a write made inside an open transaction of the
store joins it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, Optional

from ...types import Scope
from ..ports.profile import ProfileChange, ProfileWrite, document_table
from .expiry import ALIVE_SQL
from .store import SQLiteStore

#: The profile's own schema in the memory's SQLite file (see ``SQLiteStore.ensure_schema``).
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE profile_fields (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        path TEXT NOT NULL,
        value_json TEXT,
        op TEXT NOT NULL,
        session_id TEXT,
        message_ids TEXT NOT NULL DEFAULT '[]',
        created_at REAL NOT NULL,
        superseded_at REAL
    );
    CREATE INDEX profile_fields_current ON profile_fields (tenant_id, user_id, superseded_at);
    CREATE INDEX profile_fields_by_path ON profile_fields (tenant_id, user_id, path);
    """,
    # 2: expiry (see llama_memory.expiry); NULL: kept until forgotten.
    """
    ALTER TABLE profile_fields ADD COLUMN ttl REAL;
    ALTER TABLE profile_fields ADD COLUMN expires_at REAL;
    """,
)

#: The instructions document's table (same rows as the profile's; see
#: :data:`~llama_memory.storage.ports.profile.DOCUMENTS`), created whole.
INSTRUCTION_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE instruction_fields (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        path TEXT NOT NULL,
        value_json TEXT,
        op TEXT NOT NULL,
        session_id TEXT,
        message_ids TEXT NOT NULL DEFAULT '[]',
        created_at REAL NOT NULL,
        superseded_at REAL,
        ttl REAL,
        expires_at REAL
    );
    CREATE INDEX instruction_fields_current ON instruction_fields (tenant_id, user_id, superseded_at);
    """,
)
#: Each document's migrations, applied under its own schema component name.
_MIGRATIONS = {"profile": MIGRATIONS, "instructions": INSTRUCTION_MIGRATIONS}

_SELECT = (
    "SELECT id, path, value_json, op, session_id, message_ids, created_at, superseded_at "
    "FROM {table} "
)
_CURRENT = (
    _SELECT + "WHERE tenant_id = ? AND user_id = ? AND superseded_at IS NULL "
    f"AND value_json IS NOT NULL AND {ALIVE_SQL} ORDER BY id"
)
# The field at a path and the fields beneath it; parameters: path, len(path) + 1, path + ".".
_SUBTREE = "(path = ? OR substr(path, 1, ?) = ?)"


def _subtree_params(path: str) -> tuple[Any, ...]:
    return (path, len(path) + 1, path + ".")


class SQLiteProfileRows:
    """The profile rows of one :class:`SQLiteStore` (creates or migrates the table).

    Args:
        store: the memory's SQLite system of record; it provides the transactions.
        document: which document of the user these rows hold (a key of
            :data:`~llama_memory.storage.ports.profile.DOCUMENTS`): ``"profile"``, or
            ``"instructions"`` (procedural memory), each in its own table.
    """

    def __init__(self, store: SQLiteStore, document: str = "profile") -> None:
        if not isinstance(store, SQLiteStore):
            raise TypeError(
                "the profile is kept in a SQLiteStore (or any implementation of "
                f"llama_memory.storage.ports.ProfileRows), not {type(store).__name__} "
                f"{store!r}: pass the memory's store, e.g. SQLiteProfileRows(SQLiteStore('./memory'))"
            )
        self.store = store
        self.document = document
        table = document_table(document)
        store.ensure_schema(document, _MIGRATIONS[document])
        self._select = _SELECT.format(table=table)
        self._current = _CURRENT.format(table=table)
        self._table = table

    def current(self, scope: Scope, at: float) -> list[ProfileChange]:
        """The user's current field values, oldest row first (see the port)."""
        rows = self.store.query(f"read {self.document}", self._current, (scope.tenant_id, scope.user_id, at))
        return [_to_change(row) for row in rows]

    def history(self, scope: Scope, at: float, path: Optional[str] = None) -> list[ProfileChange]:
        """The rows of ``path`` and beneath it (all with None), oldest first (see the port)."""
        where, params = ("", ()) if path is None else (f" AND {_SUBTREE}", _subtree_params(path))
        rows = self.store.query(
            f"read {self.document} history",
            self._select + f"WHERE tenant_id = ? AND user_id = ? AND {ALIVE_SQL}" + where + " ORDER BY id",
            (scope.tenant_id, scope.user_id, at, *params),
        )
        return [_to_change(row) for row in rows]

    def update(
        self, scope: Scope, at: float, decide: Callable[[list[ProfileChange]], ProfileWrite]
    ) -> list[ProfileChange]:
        """Read the current rows, ``decide``, write, in one transaction (see the port)."""
        with self.store.transaction(f"update {self.document}") as conn:
            # Read inside the write transaction (BEGIN IMMEDIATE holds the write lock),
            # so concurrent updates apply one after the other.
            old = [_to_change(r) for r in conn.execute(self._current, (scope.tenant_id, scope.user_id, at))]
            write = decide(old)
            conn.executemany(
                f"UPDATE {self._table} SET superseded_at = ? WHERE id = ?",
                [(write.written_at, row_id) for row_id in write.supersede],
            )
            message_ids = json.dumps(list(write.message_ids))
            changes = []
            for new in write.insert:
                value_json = None if new.removed else json.dumps(new.value, ensure_ascii=False)
                cursor = conn.execute(
                    f"INSERT INTO {self._table} (tenant_id, user_id, path, value_json, op, "
                    "session_id, message_ids, created_at, ttl, expires_at) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        scope.tenant_id, scope.user_id, new.path, value_json, new.op,
                        write.session_id, message_ids, write.written_at, write.ttl,
                        write.expires_at,
                    ),  # fmt: skip
                )
                changes.append(
                    ProfileChange(
                        path=new.path,
                        op=new.op,
                        value=None if new.removed else new.value,
                        removed=new.removed,
                        session_id=write.session_id,
                        message_ids=list(write.message_ids),
                        created_at=write.written_at,
                        superseded_at=None,
                        id=int(cursor.lastrowid or 0),
                    )
                )
        return changes

    def erase(self, scope: Scope, path: Optional[str] = None) -> int:
        """Delete the rows of ``path`` and beneath it (all with None) (see the port)."""
        where, params = ("", ()) if path is None else (f" AND {_SUBTREE}", _subtree_params(path))
        action = f"forget {self.document}" if path is None else f"erase {self.document} field"
        with self.store.transaction(action) as conn:
            cursor = conn.execute(
                f"DELETE FROM {self._table} WHERE tenant_id = ? AND user_id = ?" + where,
                (scope.tenant_id, scope.user_id, *params),
            )
            return int(cursor.rowcount)

    def refresh_expiry(self, ids: Sequence[int], at: float) -> None:
        """Rows ``ids`` that have a ttl live it again from ``at`` (see the port)."""
        with self.store.transaction(f"refresh {self.document} expiry") as conn:
            conn.executemany(
                f"UPDATE {self._table} SET expires_at = ? + ttl WHERE id = ? AND ttl IS NOT NULL",
                [(at, row_id) for row_id in ids],
            )

    def purge_expired(self, at: float) -> int:
        """Delete every user's rows expired at ``at`` (see the port)."""
        with self.store.transaction(f"purge expired {self.document} fields") as conn:
            cursor = conn.execute(f"DELETE FROM {self._table} WHERE NOT {ALIVE_SQL}", (at,))
            return int(cursor.rowcount)


def _to_change(row: sqlite3.Row) -> ProfileChange:
    removed = row["value_json"] is None
    return ProfileChange(
        path=row["path"],
        op=row["op"],
        value=None if removed else json.loads(row["value_json"]),
        removed=removed,
        session_id=row["session_id"],
        message_ids=json.loads(row["message_ids"]),
        created_at=row["created_at"],
        superseded_at=row["superseded_at"],
        id=row["id"],
    )
