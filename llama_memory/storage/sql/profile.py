"""Profile rows over SQL, once for every SQL backend: one table per document
(:data:`~llama_memory.storage.ports.profile.DOCUMENTS`), one row per value a field had.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, ClassVar, Optional

from ...core.types import Scope
from ..ports.profile import ProfileChange, ProfileWrite, document_table
from .dialect import ALIVE_SQL, Dialect, SQLStore, owner

__all__ = ["CURRENT_COLUMNS", "ProfileRows", "export_document", "import_document_row", "one_current_value"]

#: The columns a :class:`ProfileChange` is read from.
CURRENT_COLUMNS = "id, path, value_json, op, session_id, message_ids, created_at, superseded_at"
#: The current rows of one user (parameters: tenant, user); expiry is the caller's.
CURRENT_ROWS = "tenant_id = ? AND user_id = ? AND superseded_at IS NULL AND value_json IS NOT NULL"


class ProfileRows:
    """The rows of one document in a SQL store, for every user. Methods act within
    ``scope``'s tenant and user; writes are atomic and join an open transaction; failures
    raise StorageError. A backend sets :attr:`dialect` and calls :meth:`_open`.
    """

    dialect: ClassVar[Dialect]
    store: SQLStore
    document: str

    def _open(self, store: SQLStore, document: str) -> None:
        self.store = store
        self.document = document
        self._table = document_table(document)
        self._select = f"SELECT {CURRENT_COLUMNS} FROM {self._table} "
        self._current = self._select + f"WHERE {CURRENT_ROWS} AND {ALIVE_SQL} ORDER BY id"

    def current(self, scope: Scope, at: float) -> list[ProfileChange]:
        """The user's current field values (no removals, alive at ``at``), oldest first."""
        rows = self._query(f"read {self.document}", self._current, (*_owner(scope), at))
        return [self._to_change(row) for row in rows]

    def history(self, scope: Scope, at: float, path: Optional[str] = None) -> list[ProfileChange]:
        """Every row (of every kind) alive at ``at`` of the field at ``path`` and beneath
        (``None``: all), oldest first."""
        where, params = self._subtree(path)
        rows = self._query(
            f"read {self.document} history",
            self._select + f"WHERE tenant_id = ? AND user_id = ? AND {ALIVE_SQL}" + where + " ORDER BY id",
            (*_owner(scope), at, *params),
        )
        return [self._to_change(row) for row in rows]

    def update(
        self, scope: Scope, at: float, decide: Callable[[list[ProfileChange]], ProfileWrite]
    ) -> list[ProfileChange]:
        """Call ``decide`` with the current rows and write what it returns, in one
        transaction serialising the user's updates (nothing if it raises); the new rows."""
        user, d = _owner(scope), self.dialect
        with self.store.transaction(f"update {self.document}") as conn:
            # Updates of one user's document take turns (other threads, other workers):
            # each reads the rows the previous one committed. The key is unchanged
            # (["profile", tenant, user]) so that older releases take the same lock.
            d.lock(conn, json.dumps([self.document, *user]))
            old = [self._to_change(r) for r in d.execute(conn, self._current, (*user, at)).fetchall()]
            write = decide(old)
            for batch in d.batches(write.supersede):
                condition, ids = d.in_list("id", batch)
                d.execute(
                    conn,
                    f"UPDATE {self._table} SET superseded_at = ? WHERE tenant_id = ? AND user_id = ? AND {condition}",
                    (write.written_at, *user, *ids),
                )
            changes = []
            for new in write.insert:
                row = {
                    "tenant_id": user[0], "user_id": user[1], "path": new.path,
                    "value_json": None if new.removed else json.dumps(new.value, ensure_ascii=False),
                    "op": new.op, "session_id": write.session_id,
                    "message_ids": d.json_param(list(write.message_ids)),
                    "created_at": write.written_at, "ttl": write.ttl, "expires_at": write.expires_at,
                }  # fmt: skip
                row_id = d.insert(conn, self._table, row, returning="id")
                changes.append(ProfileChange(
                    path=new.path, op=new.op, value=None if new.removed else new.value,
                    removed=new.removed, session_id=write.session_id,
                    message_ids=list(write.message_ids), created_at=write.written_at,
                    superseded_at=None, id=int(row_id or 0),
                ))  # fmt: skip
        return changes

    def erase(self, scope: Scope, path: Optional[str] = None) -> int:
        """Delete every row of the field at ``path`` and beneath (``None``: all); how many."""
        where, params = self._subtree(path)
        action = f"forget {self.document}" if path is None else f"erase {self.document} field"
        with self.store.transaction(action) as conn:
            cursor = self.dialect.execute(
                conn,
                f"DELETE FROM {self._table} WHERE tenant_id = ? AND user_id = ?" + where,
                (*_owner(scope), *params),
            )
            return int(cursor.rowcount)

    def refresh_expiry(self, ids: Sequence[int], at: float) -> None:
        """Rows ``ids`` that have a ttl live it again from ``at`` (see the port)."""
        self.dialect.update_ids(
            self.store.transaction, f"refresh {self.document} expiry", self._table,
            "expires_at = ? + ttl", ids, "ttl IS NOT NULL", (at,),
        )  # fmt: skip

    def purge_expired(self, at: float) -> int:
        """Delete the rows of every user expired at ``at``; return how many."""
        with self.store.transaction(f"purge expired {self.document} fields") as conn:
            cursor = self.dialect.execute(conn, f"DELETE FROM {self._table} WHERE NOT {ALIVE_SQL}", (at,))
            return int(cursor.rowcount)

    def _query(self, action: str, statement: str, params: Sequence[Any]) -> Sequence[Any]:
        return self.store.query(action, self.dialect.sql(statement), params)

    def _subtree(self, path: Optional[str]) -> tuple[str, tuple[Any, ...]]:
        if path is None:
            return "", ()
        below, params = self.dialect.starts_with("path", path + ".")
        return f" AND (path = ? OR {below})", (path, *params)

    def _to_change(self, row: Any) -> ProfileChange:
        removed = row["value_json"] is None
        return ProfileChange(
            path=row["path"], op=row["op"], removed=removed,
            value=None if removed else json.loads(row["value_json"]), session_id=row["session_id"],
            message_ids=list(self.dialect.json_value(row["message_ids"])),
            created_at=row["created_at"], superseded_at=row["superseded_at"], id=int(row["id"]),
        )  # fmt: skip


def _owner(scope: Scope) -> tuple[str, str]:
    return owner(scope, "the profile memory")


# -- a document's rows in an export, and back (the admin rows: export, import, copy) -----


def export_document(
    query: Callable[..., Sequence[Any]], dialect: Dialect, kind: str, table: str, user: tuple[str, str]
) -> Iterator[dict[str, Any]]:
    """One user's rows of a document as export rows of ``kind``, in write order."""
    for row in query(f"export {kind}", f"SELECT * FROM {table} WHERE tenant_id = ? AND user_id = ? ORDER BY id", user):
        removed = row["value_json"] is None
        yield {
            "kind": kind, "user": user[1], "path": row["path"],
            "value": None if removed else json.loads(row["value_json"]), "removed": removed,
            "op": row["op"], "session": row["session_id"],
            "message_ids": list(dialect.json_value(row["message_ids"])), "created_at": row["created_at"],
            "superseded_at": row["superseded_at"], "ttl": row["ttl"], "expires_at": row["expires_at"],
        }  # fmt: skip


def import_document_row(conn: Any, dialect: Dialect, table: str, tenant_id: str, user: str, row: dict[str, Any]) -> bool:
    """Write one export row of a document unless its history has it; whether it was written."""
    value_json = None if row["removed"] else json.dumps(row["value"], ensure_ascii=False)
    held = dialect.execute(
        conn,
        f"SELECT 1 FROM {table} WHERE tenant_id = ? AND user_id = ? AND path = ? AND op = ? AND created_at = ? "
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


def one_current_value(conn: Any, dialect: Dialect, table: str, tenant_id: str, user: str, path: str) -> None:
    """Leave one current row for a field, the latest (histories merged from two stores)."""
    rows = dialect.execute(
        conn,
        f"SELECT id, created_at FROM {table} WHERE tenant_id = ? AND user_id = ? AND path = ? "
        "AND superseded_at IS NULL ORDER BY created_at, id",
        (tenant_id, user, path),
    ).fetchall()
    if len(rows) > 1:
        latest = rows[-1]["created_at"]
        for batch in dialect.batches([r["id"] for r in rows[:-1]]):
            condition, values = dialect.in_list("id", batch)
            dialect.execute(
                conn, f"UPDATE {table} SET superseded_at = ? WHERE tenant_id = ? AND user_id = ? AND {condition}",
                (latest, tenant_id, user, *values),
            )  # fmt: skip
