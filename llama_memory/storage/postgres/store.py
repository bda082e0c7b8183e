"""The PostgreSQL store: every part (chat, records with their full-text index and
vector copies, jobs) on one pool. The job queue is written once
(:class:`~llama_memory.storage.sql.jobs.JobQueue`, a part of
:class:`~llama_memory.storage.sql.store.Storage`): a claim takes the next runnable
row with ``FOR UPDATE SKIP LOCKED``, so workers on many machines never hold one job and
never wait for each other."""

from __future__ import annotations

from ...core.types import Scope
from ..sql.store import Storage
from .chat import ChatTables, PostgresChatLog
from .records import RecordTables


class PostgresStore(ChatTables, RecordTables, Storage):
    """A PostgreSQL system of record (psycopg 3, a bounded ``psycopg_pool`` pool).

    Args:
        url: ``postgresql://user:password@host:port/dbname``.
        **pool: ``min_size``, ``max_size``, ``max_idle``, ``max_lifetime``,
            ``prepare_threshold`` (``None`` behind pgbouncer), ``timeout`` (see
            :class:`~llama_memory.storage.postgres.connection.PostgresConnection`).

    Opening it migrates the schema (under an advisory lock: many workers opening
    one new database migrate it once). It implements every port of the
    :class:`~llama_memory.storage.sql.store.Storage` facade; a transaction is held by the
    thread that opened it, and every port's write in that thread joins it.
    """

    def chat_log(self, scope: Scope) -> PostgresChatLog:
        """The shared log of the scope's conversation."""
        return PostgresChatLog(self, scope)

