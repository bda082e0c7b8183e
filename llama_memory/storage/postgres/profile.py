"""Profile rows (the :class:`~llama_memory.storage.ports.ProfileRows` port) in PostgreSQL.

Table ``profile_fields`` (migration 2 of :data:`~llama_memory.storage.postgres.MIGRATIONS`),
and ``instruction_fields`` for the instructions document (migration 3; see
:data:`~llama_memory.storage.ports.profile.DOCUMENTS`): one row per value a field had, with provenance and expiry, the same rows as on SQLite.
Statements run through the store's ``transaction``/``query``, so a write made inside
an open transaction of the store joins it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any, Optional

from psycopg.types.json import Jsonb

from ...types import Scope
from ..ports.profile import DOCUMENTS, ProfileChange, ProfileWrite, document_table
from .connection import Connection
from .store import PostgresStore

#: SQL condition keeping rows that have not expired; its one parameter is "now".
ALIVE_SQL = "(expires_at IS NULL OR expires_at > %s)"

_SELECT = (
    "SELECT id, path, value_json, op, session_id, message_ids, created_at, superseded_at "
    "FROM {table} "
)
_CURRENT = (
    _SELECT + "WHERE tenant_id = %s AND user_id = %s AND superseded_at IS NULL "
    f"AND value_json IS NOT NULL AND {ALIVE_SQL} ORDER BY id"
)
# The current rows of every document of one user (expiry left to the reader: each reads
# at its own time); parameters: tenant and user, once per document.
_CURRENT_OF_EVERY_DOCUMENT = (
    "SELECT * FROM ("
    + " UNION ALL ".join(
        f"SELECT '{table}' AS doc, id, path, value_json, op, session_id, message_ids, created_at, "
        f"superseded_at, expires_at FROM {table} WHERE tenant_id = %s AND user_id = %s "
        "AND superseded_at IS NULL AND value_json IS NOT NULL"
        for table in DOCUMENTS.values()
    )
    + ") AS d ORDER BY id"
)
# The field at a path and the fields beneath it; parameters: path, path + ".".
_SUBTREE = "(path = %s OR starts_with(path, %s))"


class PostgresProfileRows:
    """The profile rows of one :class:`PostgresStore` (its schema is migrated on open).

    Args:
        store: the PostgreSQL system of record; it provides the transactions.
        document: which document of the user these rows hold (a key of
            :data:`~llama_memory.storage.ports.profile.DOCUMENTS`): ``"profile"``, or
            ``"instructions"`` (procedural memory), each in its own table.
    """

    def __init__(self, store: PostgresStore, document: str = "profile") -> None:
        if not isinstance(store, PostgresStore):
            raise TypeError(
                f"PostgresProfileRows keeps the profile in a PostgresStore, not "
                f"{type(store).__name__} {store!r}: pass PostgresStore('postgresql://...')"
            )
        self.store = store
        self.document = document
        self._table = document_table(document)
        self._select = _SELECT.format(table=self._table)
        self._current = _CURRENT.format(table=self._table)

    def current(self, scope: Scope, at: float) -> list[ProfileChange]:
        """The user's current field values, oldest row first (see the port).

        Within one ``get()`` (the store's :meth:`~PostgresConnection.one_connection`),
        the first document read reads every document's current rows in one statement,
        and a later read of another document of the same user takes its rows from
        there (a memory reads the instructions, then the profile: one round trip for
        both). Expiry is applied at each read's own time."""
        owner = _owner(scope)
        ahead = self.store.read_ahead()
        if ahead is None:
            rows = self.store.query(f"read {self.document}", self._current, (*owner, at))
            return [_to_change(row) for row in rows]
        key = ("current profile rows", self._table, owner)
        if key not in ahead:
            every = self.store.query(f"read {self.document}", _CURRENT_OF_EVERY_DOCUMENT, owner * len(DOCUMENTS))
            for table in DOCUMENTS.values():
                ahead[("current profile rows", table, owner)] = [r for r in every if r["doc"] == table]
        return [_to_change(row) for row in ahead.pop(key) if row["expires_at"] is None or row["expires_at"] > at]

    def history(self, scope: Scope, at: float, path: Optional[str] = None) -> list[ProfileChange]:
        """The rows of ``path`` and beneath it (all with None), oldest first (see the port)."""
        where, params = ("", ()) if path is None else (f" AND {_SUBTREE}", (path, path + "."))
        rows = self.store.query(
            f"read {self.document} history",
            self._select + f"WHERE tenant_id = %s AND user_id = %s AND {ALIVE_SQL}" + where + " ORDER BY id",
            (*_owner(scope), at, *params),
        )
        return [_to_change(row) for row in rows]

    def update(
        self, scope: Scope, at: float, decide: Callable[[list[ProfileChange]], ProfileWrite]
    ) -> list[ProfileChange]:
        """Read the current rows, ``decide``, write, in one transaction (see the port)."""
        owner = _owner(scope)
        with self.store.transaction(f"update {self.document}") as conn:
            # Updates of one user's profile take turns (other threads, other workers):
            # each reads the rows the previous one committed.
            _lock_document(conn, self.document, owner)
            old = [_to_change(r) for r in conn.execute(self._current, (*owner, at)).fetchall()]
            write = decide(old)
            if write.supersede:
                conn.execute(
                    f"UPDATE {self._table} SET superseded_at = %s WHERE tenant_id = %s "
                    "AND user_id = %s AND id = ANY(%s)",
                    (write.written_at, *owner, list(write.supersede)),
                )
            changes = []
            for new in write.insert:
                value_json = None if new.removed else json.dumps(new.value, ensure_ascii=False)
                row = conn.execute(
                    f"INSERT INTO {self._table} (tenant_id, user_id, path, value_json, op, "
                    "session_id, message_ids, created_at, ttl, expires_at) "
                    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING id",
                    (
                        *owner, new.path, value_json, new.op, write.session_id,
                        Jsonb(list(write.message_ids)), write.written_at, write.ttl, write.expires_at,
                    ),  # fmt: skip
                ).fetchone()
                assert row is not None
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
                        id=int(row["id"]),
                    )
                )
        return changes

    def erase(self, scope: Scope, path: Optional[str] = None) -> int:
        """Delete the rows of ``path`` and beneath it (all with None) (see the port)."""
        where, params = ("", ()) if path is None else (f" AND {_SUBTREE}", (path, path + "."))
        action = f"forget {self.document}" if path is None else f"erase {self.document} field"
        with self.store.transaction(action) as conn:
            cursor = conn.execute(
                f"DELETE FROM {self._table} WHERE tenant_id = %s AND user_id = %s" + where,
                (*_owner(scope), *params),
            )
            return int(cursor.rowcount)

    def refresh_expiry(self, ids: Sequence[int], at: float) -> None:
        """Rows ``ids`` that have a ttl live it again from ``at`` (see the port)."""
        if ids:
            with self.store.transaction(f"refresh {self.document} expiry") as conn:
                conn.execute(
                    f"UPDATE {self._table} SET expires_at = %s + ttl WHERE id = ANY(%s) "
                    "AND ttl IS NOT NULL",
                    (at, list(ids)),
                )

    def purge_expired(self, at: float) -> int:
        """Delete every user's rows expired at ``at`` (see the port)."""
        with self.store.transaction(f"purge expired {self.document} fields") as conn:
            cursor = conn.execute(f"DELETE FROM {self._table} WHERE NOT {ALIVE_SQL}", (at,))
            return int(cursor.rowcount)


def _owner(scope: Scope) -> tuple[str, str]:
    return scope.tenant_id, scope.require_user("the profile memory")


def _lock_document(conn: Connection, document: str, owner: tuple[str, str]) -> None:
    # The profile's key is unchanged (["profile", tenant, user]): processes of an older
    # release that update the same profile still take the same lock.
    conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended(%s, 1))", (json.dumps([document, *owner]),)
    )


def _to_change(row: dict[str, Any]) -> ProfileChange:
    removed = row["value_json"] is None
    return ProfileChange(
        path=row["path"],
        op=row["op"],
        value=None if removed else json.loads(row["value_json"]),
        removed=removed,
        session_id=row["session_id"],
        message_ids=list(row["message_ids"]),
        created_at=row["created_at"],
        superseded_at=row["superseded_at"],
        id=int(row["id"]),
    )
