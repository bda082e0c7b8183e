"""Vector copies in the SQLite system of record: each indexed record's vector as the
source encoded it, read by primary key instead of asking the dense index."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Optional

from .connection import SQLiteConnection


class VectorTables(SQLiteConnection):
    """The vector copies part of the store (table ``record_vectors``)."""

    def stored_vectors(self, ids: Sequence[str]) -> dict[str, bytes]:
        """The vector copies kept by :meth:`mark_indexed` of these records, by id (ids
        without one are left out)."""
        if not ids:
            return {}
        rows = self.query(
            "read record vectors",
            f"SELECT id, vector FROM record_vectors WHERE id IN ({','.join('?' * len(ids))})",
            tuple(ids),
        )
        return {row["id"]: bytes(row["vector"]) for row in rows}

    def user_vectors(
        self, source: str, tenant_id: str, user_id: str, limit: int
    ) -> Optional[dict[str, bytes]]:
        """Every vector copy of one user's indexed records of ``source``, by id; None
        when the user has more than ``limit`` indexed records or some have no copy
        (indexed before copies were kept): then only the dense index holds them all."""
        # One statement, so one snapshot: a count taken apart could disagree with the
        # rows when another process commits in between.
        rows = self.query(
            "read user vectors",
            "SELECT r.id AS id, v.vector AS vector FROM records r "
            "LEFT JOIN record_vectors v ON v.id = r.id "
            "WHERE r.source = ? AND r.tenant_id = ? AND r.user_id = ? AND r.indexed = 1 LIMIT ?",
            (source, tenant_id, user_id, limit + 1),
        )
        if len(rows) > limit or any(row["vector"] is None for row in rows):
            return None
        return {row["id"]: bytes(row["vector"]) for row in rows}

