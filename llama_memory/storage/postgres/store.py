"""The PostgreSQL store: every part (chat, records with their full-text index and
vector copies, jobs) on one pool, and what spans them (forgetting a user, purging)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from ...types import Scope
from ..ports.base import Storage, user_meta_infix
from ..ports.records import PendingRecord
from .chat import ChatTables, PostgresChatLog
from .connection import Connection
from .jobs import JobTables
from .records import RecordTables


class PostgresStore(ChatTables, RecordTables, JobTables):
    """A PostgreSQL system of record (psycopg 3, a bounded ``psycopg_pool`` pool).

    Args:
        url: ``postgresql://user:password@host:port/dbname``.
        **pool: ``min_size``, ``max_size``, ``max_idle``, ``max_lifetime``,
            ``prepare_threshold`` (``None`` behind pgbouncer), ``timeout`` (see
            :class:`~llama_memory.storage.postgres.connection.PostgresConnection`).

    Opening it migrates the schema (under an advisory lock: many workers opening
    one new database migrate it once). It implements every port of the
    :class:`~llama_memory.storage.ports.Storage` facade; a transaction is held by the
    thread that opened it, and every port's write in that thread joins it.
    """

    def chat_log(self, scope: Scope) -> PostgresChatLog:
        """The shared log of the scope's conversation."""
        return PostgresChatLog(self, scope)

    def purge_expired(self, at: float) -> list[PendingRecord]:
        """Delete every record of every source expired at ``at``; return them."""
        with self.transaction("purge expired records") as conn:
            rows = conn.execute(
                "DELETE FROM records WHERE expires_at IS NOT NULL AND expires_at <= %s "
                "RETURNING id, text, tenant_id, user_id",
                (at,),
            ).fetchall()
        return [PendingRecord(r["id"], r["text"], r["tenant_id"], r["user_id"]) for r in rows]

    def delete_user(self, scope: Scope, source: Optional[str] = None) -> list[str]:
        """Delete one user's records of ``source``; return their ids.

        Without ``source``: the user from every table of the schema with per-user rows
        (a ``tenant_id`` and a ``user_id`` column: records with their full-text index
        and vector copies, the dense index's vectors, chat history, jobs...), in one
        transaction. Returns the deleted record ids.
        """
        user = scope.require_user("forgetting a user")
        owner = (scope.tenant_id, user)
        with self.transaction("delete user") as conn:
            self._word_counts.clear()  # the counts shrink with the deleted rows
            if source is not None:
                rows = conn.execute(
                    "DELETE FROM records WHERE tenant_id = %s AND user_id = %s AND source = %s "
                    "RETURNING id",
                    (*owner, source),
                ).fetchall()
                return [row["id"] for row in rows]
            rows = conn.execute(
                "DELETE FROM records WHERE tenant_id = %s AND user_id = %s RETURNING id", owner
            ).fetchall()
            for table in self._user_tables(conn):
                conn.execute(f'DELETE FROM "{table}" WHERE tenant_id = %s AND user_id = %s', owner)
            conn.execute("DELETE FROM meta WHERE strpos(key, %s) > 0", (user_meta_infix(*owner),))
        return [row["id"] for row in rows]

    @staticmethod
    def _user_tables(conn: Connection) -> list[str]:
        """The tables of the current schema with per-user rows, whichever part made them."""
        rows = conn.execute(
            "SELECT table_name FROM information_schema.columns WHERE table_schema = current_schema() "
            "AND column_name IN ('tenant_id', 'user_id') GROUP BY table_name HAVING count(*) = 2 "
            "ORDER BY table_name"
        ).fetchall()
        return [row["table_name"] for row in rows]


if TYPE_CHECKING:  # mypy checks here that the store implements every port

    def _implements_the_ports(store: PostgresStore) -> Storage:
        return store
