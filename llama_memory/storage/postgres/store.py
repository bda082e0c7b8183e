"""The PostgreSQL store: every part on one pool (job claims take the next row with
``FOR UPDATE SKIP LOCKED``: workers on many machines never hold one job or wait)."""

from __future__ import annotations

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

    Opening it migrates the schema under an advisory lock (workers opening one new
    database migrate it once). A transaction is held by the thread that opened it.
    """

    chat_log_type = PostgresChatLog

