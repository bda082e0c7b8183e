"""The triple timeline on SQLite: tables ``triples``, ``triple_mentions`` and the FTS5
table ``triples_fts``, in the store's file (see :mod:`llama_memory.storage.ports.triples`).

The timeline's rules are :class:`~llama_memory.storage.sql.triples.TripleTimeline`'s
(shared with PostgreSQL); here is what SQLite does its own way: the words are indexed in
an FTS5 table keyed by the triple's ``seq``, mentions point at that ``seq``, and deleting
a triple deletes its FTS5 entry (which no foreign key reaches) and its mentions with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...core.types import Scope
from ..sql.dialect import owner
from ..sql.triples import MentionLink, TripleTimeline
from .connection import SQLITE
from .store import SQLiteStore, fts_query

__all__ = ["MIGRATIONS", "SQLiteTripleTimeline"]

#: The triples' own schema, applied by ``store.ensure_schema("triples", MIGRATIONS)``.
MIGRATIONS: tuple[str, ...] = (
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


class SQLiteTripleTimeline(TripleTimeline):
    """:class:`~llama_memory.storage.sql.triples.TripleTimeline` on a
    :class:`SQLiteStore`; creates (or upgrades) its tables on construction."""

    dialect = SQLITE
    mentions = MentionLink(columns="triple_seq", sources="seq", key=("triple_seq", "seq"), order="rowid", scoped=False)

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        store.ensure_schema("triples", MIGRATIONS)

    def _insert_row(self, conn: Any, row: Mapping[str, Any], search_text: str) -> None:
        seq = self.dialect.insert(conn, "triples", row, returning="seq")
        conn.execute("INSERT INTO triples_fts (rowid, text) VALUES (?, ?)", (seq, search_text))

    def _delete_where(self, conn: Any, condition: str, params: Sequence[Any]) -> list[Any]:
        rows = conn.execute(f"SELECT seq, id, tenant_id, user_id FROM triples WHERE {condition}", params).fetchall()
        seqs = [(r["seq"],) for r in rows]
        conn.executemany("DELETE FROM triples_fts WHERE rowid = ?", seqs)
        conn.executemany("DELETE FROM triple_mentions WHERE triple_seq = ?", seqs)
        conn.executemany("DELETE FROM triples WHERE seq = ?", seqs)
        return rows

    def search_words(
        self, scope: Scope, query: str, k: int, include_history: bool
    ) -> list[tuple[str, float]]:
        """The user's triples best matching ``query``'s words, as (id, FTS5 BM25 score
        turned positive), best first."""
        tenant_id, user_id = owner(scope, "the knowledge-triple store")
        match = fts_query(query)  # quoted words: user text is never read as FTS5 syntax
        if not match:
            return []
        current = "" if include_history else " AND t.valid_to IS NULL"
        rows = self.store.query(
            "search knowledge triples by words",
            "SELECT t.id AS id, -bm25(triples_fts) AS score FROM triples_fts "
            "JOIN triples AS t ON t.seq = triples_fts.rowid "
            f"WHERE triples_fts MATCH ? AND t.tenant_id = ? AND t.user_id = ?{current} "
            "ORDER BY score DESC LIMIT ?",
            (match, tenant_id, user_id, k),
        )
        return [(r["id"], float(r["score"])) for r in rows]
