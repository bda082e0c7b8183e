"""The schema of the SQLite store and its migrations: the version is ``PRAGMA
user_version``, :data:`MIGRATIONS` the steps applied on open; the optional parts (jobs,
documents, triples) have their own steps, applied when first opened on the file.
"""

from __future__ import annotations

import sqlite3

# The event date in words, e.g. "8 May 2023", computed in SQL inside the FTS trigger
# (questions say "in May 2023", not "2023-05-08").
_EVENT_DATE_SQL = (
    "CASE WHEN new.event_time IS NULL THEN '' ELSE "
    "ltrim(strftime('%d', new.event_time, 'unixepoch'), '0') || ' ' || "
    "CASE strftime('%m', new.event_time, 'unixepoch') WHEN '01' THEN 'January' WHEN '02' THEN 'February' WHEN '03' THEN 'March' WHEN '04' THEN 'April' WHEN '05' THEN 'May' WHEN '06' THEN 'June' WHEN '07' THEN 'July' WHEN '08' THEN 'August' WHEN '09' THEN 'September' WHEN '10' THEN 'October' WHEN '11' THEN 'November' WHEN '12' THEN 'December' END || ' ' || "
    "strftime('%Y', new.event_time, 'unixepoch') END"
)

#: Ordered schema migrations; entry i brings the schema from version i to i + 1.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE meta (
        key TEXT PRIMARY KEY,
        value TEXT NOT NULL
    );
    CREATE TABLE chat_messages (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        session_id TEXT NOT NULL,
        message_json TEXT NOT NULL,
        created_at REAL NOT NULL
    );
    CREATE INDEX chat_messages_by_session
        ON chat_messages (tenant_id, user_id, session_id, seq);
    CREATE TABLE records (
        id TEXT PRIMARY KEY,
        source TEXT NOT NULL,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        session_id TEXT,
        role TEXT,
        text TEXT NOT NULL,
        content_hash TEXT NOT NULL,
        message_ids TEXT NOT NULL,
        event_time REAL,
        ingested_at REAL NOT NULL,
        metadata TEXT NOT NULL DEFAULT '{}',
        indexed INTEGER NOT NULL DEFAULT 0
    );
    CREATE UNIQUE INDEX records_by_content
        ON records (source, tenant_id, user_id, content_hash);
    CREATE INDEX records_pending ON records (source, indexed);
    """,
    # 2: lexical search. Each record's text, and its event date in words ("8 May 2023"),
    # in an FTS5 index kept in step with the records table by triggers.
    f"""
    CREATE VIRTUAL TABLE records_fts USING fts5(text, event_date, tokenize = 'porter unicode61');
    CREATE TRIGGER records_fts_insert AFTER INSERT ON records BEGIN
        INSERT INTO records_fts (rowid, text, event_date) VALUES (new.rowid, new.text, {_EVENT_DATE_SQL});
    END;
    CREATE TRIGGER records_fts_delete AFTER DELETE ON records BEGIN
        DELETE FROM records_fts WHERE rowid = old.rowid;
    END;
    INSERT INTO records_fts (rowid, text, event_date)
        SELECT rowid, text, {_EVENT_DATE_SQL.replace("new.", "")} FROM records;
    """,
    # 3: expiry. A record's time to live (seconds, for refresh on read) and when it
    # expires (epoch seconds); NULL for both: kept until forgotten.
    """
    ALTER TABLE records ADD COLUMN ttl REAL;
    ALTER TABLE records ADD COLUMN expires_at REAL;
    CREATE INDEX records_expiring ON records (expires_at) WHERE expires_at IS NOT NULL;
    """,
    # 4: a copy of each indexed record's vector (as the source encodes it), so that a
    # search reads the vectors of its lexical candidates by primary key here instead of
    # asking the dense index for them (one more round trip per search). Deleting a record
    # deletes its copy.
    """
    CREATE TABLE record_vectors (id TEXT PRIMARY KEY, vector BLOB NOT NULL) WITHOUT ROWID;
    CREATE TRIGGER record_vectors_delete AFTER DELETE ON records BEGIN
        DELETE FROM record_vectors WHERE id = old.id;
    END;
    """,
    # 5 (importance and recency): how much a record matters (0..1, set by a
    # formation pass; NULL: judged from simple signals at ranking time) and when it was
    # last shown in a memory block (epoch seconds; NULL: never).
    """
    ALTER TABLE records ADD COLUMN importance REAL;
    ALTER TABLE records ADD COLUMN last_used REAL;
    """,
    # 6: a user's records across sources, for the size of what a user's word counts
    # are counted in (the idf is the user's own: LexicalTables.word_counts).
    """
    CREATE INDEX records_by_user ON records (tenant_id, user_id);
    """,
)

#: The job queue's table, made on first use under the schema component ``jobs`` (the
#: queue itself is written once: :class:`~llama_memory.storage.sql.jobs.JobQueue`).
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

#: Migrations of the index behind :meth:`SQLiteStore.session_neighbours` (records of one
#: session in the order written), kept apart from :data:`MIGRATIONS` as an optional part.
SESSION_ORDER_MIGRATIONS: tuple[str, ...] = (
    "CREATE INDEX IF NOT EXISTS records_by_session "
    "ON records (source, tenant_id, user_id, session_id)",
)


#: The columns of a document's field rows: one row per value a field had (a removal has
#: no value).
_FIELD_COLUMNS = """
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        path TEXT NOT NULL,
        value_json TEXT,
        op TEXT NOT NULL,
        session_id TEXT,
        message_ids TEXT NOT NULL DEFAULT '[]',
        created_at REAL NOT NULL,
        superseded_at REAL"""

#: The profile's own schema in the memory's SQLite file (see ``SQLiteStore.ensure_schema``).
PROFILE_MIGRATIONS: tuple[str, ...] = (
    f"""
    CREATE TABLE profile_fields ({_FIELD_COLUMNS}
    );
    CREATE INDEX profile_fields_current ON profile_fields (tenant_id, user_id, superseded_at);
    CREATE INDEX profile_fields_by_path ON profile_fields (tenant_id, user_id, path);
    """,
    # 2: expiry (see llama_memory.core.types.Expiry); NULL: kept until forgotten.
    """
    ALTER TABLE profile_fields ADD COLUMN ttl REAL;
    ALTER TABLE profile_fields ADD COLUMN expires_at REAL;
    """,
)

#: The instructions document's table (same rows as the profile's; see
#: :data:`~llama_memory.storage.ports.profile.DOCUMENTS`), created whole.
INSTRUCTION_MIGRATIONS: tuple[str, ...] = (
    f"""
    CREATE TABLE instruction_fields ({_FIELD_COLUMNS},
        ttl REAL,
        expires_at REAL
    );
    CREATE INDEX instruction_fields_current ON instruction_fields (tenant_id, user_id, superseded_at);
    """,
)
#: Each document's migrations, applied under its own schema component name.
DOCUMENT_MIGRATIONS = {"profile": PROFILE_MIGRATIONS, "instructions": INSTRUCTION_MIGRATIONS}


#: The triples' own schema, applied by ``store.ensure_schema("triples", TRIPLE_MIGRATIONS)``: tables ``triples``,
#: ``triple_mentions`` and the FTS5 table ``triples_fts`` (keyed by the triple's ``seq``).
TRIPLE_MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE triples (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        id TEXT NOT NULL UNIQUE,
        tenant_id TEXT NOT NULL,
        user_id TEXT NOT NULL,
        subject TEXT NOT NULL,
        predicate TEXT NOT NULL,
        object TEXT NOT NULL,
        subject_key TEXT NOT NULL,
        predicate_key TEXT NOT NULL,
        object_key TEXT NOT NULL,
        valid_from REAL NOT NULL,
        valid_to REAL,
        superseded_by TEXT,
        ingested_at REAL NOT NULL,
        indexed INTEGER NOT NULL DEFAULT 0
    );
    CREATE UNIQUE INDEX triples_one_current
        ON triples (tenant_id, user_id, subject_key, predicate_key, object_key)
        WHERE valid_to IS NULL;
    CREATE INDEX triples_by_subject
        ON triples (tenant_id, user_id, subject_key, predicate_key, valid_from);
    CREATE INDEX triples_by_object ON triples (tenant_id, user_id, object_key);
    CREATE INDEX triples_pending ON triples (indexed);
    CREATE TABLE triple_mentions (
        triple_seq INTEGER NOT NULL REFERENCES triples (seq) ON DELETE CASCADE,
        session_id TEXT,
        message_ids TEXT NOT NULL DEFAULT '[]',
        event_time REAL NOT NULL,
        ingested_at REAL NOT NULL,
        origin TEXT NOT NULL
    );
    CREATE INDEX triple_mentions_by_triple ON triple_mentions (triple_seq);
    CREATE VIRTUAL TABLE triples_fts USING fts5 (
        text, tokenize = 'porter unicode61 remove_diacritics 2'
    );
    """,
    # 2: expiry (see llama_memory.core.types.Expiry); NULL: kept until forgotten.
    """
    ALTER TABLE triples ADD COLUMN ttl REAL;
    ALTER TABLE triples ADD COLUMN expires_at REAL;
    CREATE INDEX triples_expiring ON triples (expires_at) WHERE expires_at IS NOT NULL;
    """,
)


def sql_statements(script: str) -> list[str]:
    """Split an SQL script into complete statements (a trigger body's ``;`` included)."""
    statements, current = [], ""
    for piece in script.split(";"):
        current += piece + ";"
        if sqlite3.complete_statement(current):
            if current.strip(" \n\t;"):
                statements.append(current.strip())
            current = ""
    if current.strip(" \n\t;"):
        raise ValueError(f"incomplete SQL statement: {current.strip()!r}")
    return statements


#: In a large store, a query word found in more than this share of the indexed records is
