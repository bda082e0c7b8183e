"""The job queue in PostgreSQL (table ``jobs``, made by the store's migrations), written
once in :class:`~llama_memory.storage.sql.jobs.SQLJobQueue`: a claim takes the next
runnable row with ``FOR UPDATE SKIP LOCKED``, so workers on many machines never hold
one job and never wait for each other."""

from __future__ import annotations

from ..sql.jobs import SQLJobQueue
from .connection import PostgresConnection


class JobTables(PostgresConnection, SQLJobQueue):
    """The job queue part of the store."""

