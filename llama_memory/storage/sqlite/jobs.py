"""The job queue in SQLite (table ``jobs``): the :class:`~llama_memory.storage.sql.jobs.JobQueue`
port, written once in :class:`~llama_memory.storage.sql.jobs.JobQueue`. A claim runs
under the file's write lock (``BEGIN IMMEDIATE``), so two workers (threads or processes)
never hold one job. Here is what SQLite does its own way: the table's schema, made on
first use."""

from __future__ import annotations

from ..sql.jobs import JobQueue
from .connection import SQLiteConnection

JOB_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE jobs (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        kind TEXT NOT NULL,
        payload TEXT NOT NULL,
        tenant_id TEXT,
        user_id TEXT,
        state TEXT NOT NULL DEFAULT 'queued',
        run_at REAL NOT NULL,
        attempts INTEGER NOT NULL DEFAULT 0,
        max_attempts INTEGER NOT NULL,
        worker TEXT,
        lease_until REAL,
        dedup_key TEXT,
        last_error TEXT,
        created_at REAL NOT NULL
    );
    CREATE INDEX jobs_ready ON jobs (state, run_at, seq);
    CREATE UNIQUE INDEX jobs_dedup ON jobs (dedup_key)
        WHERE dedup_key IS NOT NULL AND state IN ('queued', 'running');
    """,
    # 2: what the runs of a job cost (LLM tokens, wall time), how many ended and failed,
    # and when the last one ended: per-user daily figures and the token budget read them.
    # Jobs run before this version count nothing.
    """
    ALTER TABLE jobs ADD COLUMN passes INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN failures INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN tokens_sent INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN tokens_received INTEGER NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN duration_ms REAL NOT NULL DEFAULT 0;
    ALTER TABLE jobs ADD COLUMN finished_at REAL;
    CREATE INDEX jobs_finished ON jobs (tenant_id, user_id, finished_at) WHERE finished_at IS NOT NULL;
    """,
)


class JobTables(SQLiteConnection, JobQueue):
    """The job queue part of the store (its table created on first use)."""

    _jobs_ready = False

    def _jobs_table(self) -> None:
        if not self._jobs_ready:
            self.ensure_schema("jobs", JOB_MIGRATIONS)
            self._jobs_ready = True
