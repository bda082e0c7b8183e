"""The schema of the PostgreSQL store and its migrations (entry i of :data:`MIGRATIONS`
goes from version i to i + 1; applied versions are in ``llama_memory_migrations``).
Per-user tables lead their keys and indexes with ``(tenant_id, user_id)``: a user's
queries never scan another's rows, and tables can be sharded by user.
"""

from __future__ import annotations

from typing import Any

from ...core.errors import StorageError

#: The advisory lock key under which migrations run (many workers opening one new
#: database at once would otherwise collide creating the same tables).
MIGRATION_LOCK = 0x6C6C6D656D  # "llmem"

#: The function whose values ``records_user_words`` indexes: each word of a record's
#: ``tsv`` prefixed by its owner's key (:data:`~.records.USER_WORDS`).
USER_WORDS_FUNCTION = "llama_memory_user_words"

#: The version table, created before any migration runs.
VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS llama_memory_migrations (
    version integer PRIMARY KEY,
    applied_at timestamptz NOT NULL DEFAULT now()
)
"""

def _field_rows(table: str) -> tuple[str, ...]:
    """The statements making a document's field rows (one per value a field had; value_json
    is text: JSON escapes NUL, which neither text nor jsonb stores raw)."""
    return (
        f"""
        CREATE TABLE {table} (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            id bigserial NOT NULL,
            path text NOT NULL,
            value_json text,
            op text NOT NULL,
            session_id text,
            message_ids jsonb NOT NULL DEFAULT '[]',
            created_at double precision NOT NULL,
            superseded_at double precision,
            ttl double precision,
            expires_at double precision,
            PRIMARY KEY (tenant_id, user_id, id)
        )
        """,
        f"CREATE INDEX {table}_current ON {table} (tenant_id, user_id, id) WHERE superseded_at IS NULL",
        # refresh_expiry names rows by id alone; purge_expired scans the expiring ones.
        f"CREATE INDEX {table}_by_id ON {table} (id)",
        f"CREATE INDEX {table}_expiring ON {table} (expires_at) WHERE expires_at IS NOT NULL",
    )


#: Ordered schema migrations; each entry is a list of statements run in one transaction.
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    (
        "CREATE EXTENSION IF NOT EXISTS vector",
        """
        CREATE TABLE meta (
            key text PRIMARY KEY,
            value text NOT NULL
        )
        """,
        # message_json is text, not jsonb: lossless (jsonb refuses the NUL character).
        # Sequence numbers order one conversation: appends to a conversation take its
        # advisory lock first, so within a conversation seq order is commit order.
        """
        CREATE TABLE chat_messages (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            session_id text NOT NULL,
            seq bigserial NOT NULL,
            message_json text NOT NULL,
            created_at double precision NOT NULL,
            PRIMARY KEY (tenant_id, user_id, session_id, seq)
        )
        """,
        # The event date in words ("8 May 2023") is written by the code (to_char is not
        # immutable, so it cannot feed a generated column); the tsvector is generated.
        """
        CREATE TABLE records (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            source text NOT NULL,
            id text NOT NULL,
            seq bigserial NOT NULL,
            session_id text,
            role text,
            text text NOT NULL,
            event_date text NOT NULL DEFAULT '',
            content_hash text NOT NULL,
            message_ids jsonb NOT NULL,
            event_time double precision,
            ingested_at double precision NOT NULL,
            metadata jsonb NOT NULL DEFAULT '{}',
            ttl double precision,
            expires_at double precision,
            indexed boolean NOT NULL DEFAULT false,
            vector bytea,
            tsv tsvector GENERATED ALWAYS AS (
                setweight(to_tsvector('english'::regconfig, text), 'A') ||
                setweight(to_tsvector('english'::regconfig, event_date), 'B')
            ) STORED,
            PRIMARY KEY (tenant_id, user_id, id),
            UNIQUE (tenant_id, user_id, source, content_hash)
        )
        """,
        "CREATE INDEX records_by_source ON records (tenant_id, user_id, source, seq)",
        "CREATE INDEX records_by_session ON records (tenant_id, user_id, source, session_id, seq)",
        # Vector copies are read by id alone (VectorCopies.stored_vectors takes no scope).
        "CREATE INDEX records_by_id ON records (id)",
        "CREATE INDEX records_pending ON records (source, seq) WHERE NOT indexed",
        "CREATE INDEX records_expiring ON records (expires_at) WHERE expires_at IS NOT NULL",
        "CREATE INDEX records_tsv ON records USING gin (tsv)",
        # The dense index (the VectorIndex port): one partition per (tenant, user) and
        # collection. The column has no fixed dimension: an HNSW index per dimension is
        # added when a dimension is first written (PgVectorIndex.ensure_hnsw).
        """
        CREATE TABLE record_embeddings (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            collection text NOT NULL,
            id text NOT NULL,
            embedding vector NOT NULL,
            PRIMARY KEY (tenant_id, user_id, collection, id)
        )
        """,
        "CREATE INDEX record_embeddings_by_collection ON record_embeddings (collection)",
        """
        CREATE TABLE jobs (
            seq bigserial PRIMARY KEY,
            id text NOT NULL UNIQUE,
            kind text NOT NULL,
            payload jsonb NOT NULL,
            tenant_id text,
            user_id text,
            state text NOT NULL DEFAULT 'queued',
            run_at double precision NOT NULL,
            attempts integer NOT NULL DEFAULT 0,
            max_attempts integer NOT NULL,
            worker text,
            lease_until double precision,
            dedup_key text,
            last_error text,
            created_at double precision NOT NULL
        )
        """,
        "CREATE INDEX jobs_ready ON jobs (state, run_at, seq)",
        "CREATE INDEX jobs_by_user ON jobs (tenant_id, user_id)",
        "CREATE UNIQUE INDEX jobs_dedup ON jobs (dedup_key) "
        "WHERE dedup_key IS NOT NULL AND state IN ('queued', 'running')",
    ),
    # 2: profile rows and the triple timeline (the ProfileRows and TripleTimeline ports).
    (
        *_field_rows("profile_fields"),
        # seq is the write order (ties of valid_from, first spellings). The port names
        # triples by id alone in some writes: hence the index on id.
        """
        CREATE TABLE triples (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            id text NOT NULL,
            seq bigserial NOT NULL,
            subject text NOT NULL,
            predicate text NOT NULL,
            object text NOT NULL,
            subject_key text NOT NULL,
            predicate_key text NOT NULL,
            object_key text NOT NULL,
            valid_from double precision NOT NULL,
            valid_to double precision,
            superseded_by text,
            ingested_at double precision NOT NULL,
            ttl double precision,
            expires_at double precision,
            indexed boolean NOT NULL DEFAULT false,
            search_text text NOT NULL,
            tsv tsvector GENERATED ALWAYS AS (to_tsvector('english'::regconfig, search_text)) STORED,
            PRIMARY KEY (tenant_id, user_id, id)
        )
        """,
        "CREATE UNIQUE INDEX triples_one_current ON triples "
        "(tenant_id, user_id, subject_key, predicate_key, object_key) WHERE valid_to IS NULL",
        "CREATE INDEX triples_by_subject ON triples "
        "(tenant_id, user_id, subject_key, predicate_key, valid_from)",
        "CREATE INDEX triples_by_object ON triples (tenant_id, user_id, object_key)",
        "CREATE INDEX triples_by_id ON triples (id)",
        "CREATE INDEX triples_pending ON triples (seq) WHERE NOT indexed",
        "CREATE INDEX triples_expiring ON triples (expires_at) WHERE expires_at IS NOT NULL",
        "CREATE INDEX triples_tsv ON triples USING gin (tsv)",
        """
        CREATE TABLE triple_mentions (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            triple_id text NOT NULL,
            seq bigserial NOT NULL,
            session_id text,
            message_ids jsonb NOT NULL DEFAULT '[]',
            event_time double precision NOT NULL,
            ingested_at double precision NOT NULL,
            origin text NOT NULL,
            PRIMARY KEY (tenant_id, user_id, triple_id, seq),
            FOREIGN KEY (tenant_id, user_id, triple_id) REFERENCES triples (tenant_id, user_id, id)
                ON DELETE CASCADE
        )
        """,
    ),
    # 3: the instructions document (procedural memory): the same rows as the profile's.
    (
        *_field_rows("instruction_fields"),
    ),
    # 4: how many vectors each user has per collection, kept by PgVectorIndex in the
    # transaction of every write: a search knows in one row read whether the user is small
    # (exact search) or large (HNSW); a count(*) would cost as much as the exact search.
    (
        """
        CREATE TABLE vector_counts (
            tenant_id text NOT NULL,
            user_id text NOT NULL,
            collection text NOT NULL,
            n bigint NOT NULL,
            PRIMARY KEY (tenant_id, user_id, collection)
        )
        """,
        "INSERT INTO vector_counts (tenant_id, user_id, collection, n) "
        "SELECT tenant_id, user_id, collection, count(*) FROM record_embeddings "
        "GROUP BY tenant_id, user_id, collection",
        # The HNSW indexes are not created here: they need the embedding dimension,
        # which only the first vector written tells (PgVectorIndex.ensure_hnsw).
    ),
    # 5 (importance and recency): how much a record matters (0..1, set by a
    # formation pass; NULL: judged from simple signals at ranking time) and when it was
    # last shown in a memory block (epoch seconds; NULL: never).
    (
        "ALTER TABLE records ADD COLUMN importance double precision",
        "ALTER TABLE records ADD COLUMN last_used double precision",
    ),
    # 6: the full-text indexes take each row as it is written. With GIN's fastupdate, new
    # rows wait in a pending list (up to 4 MB) every search scans whole until a vacuum
    # merges it: after a few thousand messages, counting 15 words took 15 ms instead of 1.
    # A write pays a little more.
    (
        "ALTER INDEX records_tsv SET (fastupdate = off)",
        "ALTER INDEX triples_tsv SET (fastupdate = off)",
        "SELECT gin_clean_pending_list('records_tsv'::regclass)",
        "SELECT gin_clean_pending_list('triples_tsv'::regclass)",
    ),
    # 7: the words of each user's records, keyed by the user. records_tsv's posting list
    # of a common word holds every user's rows (124,000 of 1M); through these keys a
    # search or word count reads only the user's rows that hold a word of the query (1.7
    # ms instead of 3.0 for a search at 1M). records_tsv served only word counts: it goes.
    # The owner is a hash of (tenant, user): a collision only adds candidates, which every
    # query filters again. The function is one expression of built-ins, which the planner
    # inlines (a function running a query of its own cost ~30 us a row).
    (
        f"""
        CREATE FUNCTION {USER_WORDS_FUNCTION}(owner bigint, words tsvector) RETURNS text[]
        LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
        AS $$ SELECT CASE WHEN length(words) = 0 THEN ARRAY[]::text[] ELSE string_to_array(
            owner::text || ' ' || array_to_string(tsvector_to_array(words), chr(1) || owner::text || ' '),
            chr(1)) END $$
        """,
        f"CREATE INDEX records_user_words ON records USING gin ({USER_WORDS_FUNCTION}("
        "hashtextextended(tenant_id || chr(31) || user_id, 0), tsv)) WITH (fastupdate = off)",
        "DROP INDEX records_tsv",
    ),
    # 8: what the runs of a job cost (LLM tokens, wall time), how many ended and failed,
    # and when the last one ended (per-user daily figures and the token budget read them
    # through jobs_finished). Jobs run before this version count nothing.
    (
        "ALTER TABLE jobs ADD COLUMN passes integer NOT NULL DEFAULT 0",
        "ALTER TABLE jobs ADD COLUMN failures integer NOT NULL DEFAULT 0",
        "ALTER TABLE jobs ADD COLUMN tokens_sent bigint NOT NULL DEFAULT 0",
        "ALTER TABLE jobs ADD COLUMN tokens_received bigint NOT NULL DEFAULT 0",
        "ALTER TABLE jobs ADD COLUMN duration_ms double precision NOT NULL DEFAULT 0",
        "ALTER TABLE jobs ADD COLUMN finished_at double precision",
        "CREATE INDEX jobs_finished ON jobs (tenant_id, user_id, finished_at) WHERE finished_at IS NOT NULL",
    ),
)


def migrate(conn: Any, location: str) -> None:
    """Migrate the schema to the latest version in ``conn``'s transaction; StorageError
    for a schema newer than this release."""
    # Workers starting at once on a new database migrate one after the other.
    conn.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATION_LOCK,))
    conn.execute(VERSION_TABLE)
    row = conn.execute("SELECT coalesce(max(version), 0) AS v FROM llama_memory_migrations").fetchone()
    version = int(row["v"]) if row else 0
    if version > len(MIGRATIONS):
        raise StorageError(
            f"PostgreSQL store {location} has schema version {version}, newer than "
            f"this release of llama-memory understands ({len(MIGRATIONS)}): upgrade llama-memory"
        )
    for step in range(version, len(MIGRATIONS)):
        for statement in MIGRATIONS[step]:
            conn.execute(statement)
        conn.execute("INSERT INTO llama_memory_migrations (version) VALUES (%s)", (step + 1,))
