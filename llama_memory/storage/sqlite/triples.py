"""The triple timeline on SQLite: tables ``triples``, ``triple_mentions`` and the FTS5
table ``triples_fts``, in the store's file (see :mod:`llama_memory.storage.ports.triples`).

Every statement runs through the :class:`SQLiteStore` it is given: writes in
``store.transaction`` (so they join a transaction already open, and a batch of
triples commits or rolls back as one), reads with ``store.query`` (on the same
connection, so they see the open transaction's writes).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Optional

from ...types import Scope
from ..ports.triples import (
    IndexFlags,
    NewTriple,
    StoredTriple,
    TimelineEntry,
    TripleEdge,
    TripleMention,
    TripleRef,
)
from .expiry import ALIVE_SQL
from .lexical import fts_query
from .store import SQLiteStore

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
    # 2: expiry (see llama_memory.expiry); NULL: kept until forgotten.
    """
    ALTER TABLE triples ADD COLUMN ttl REAL;
    ALTER TABLE triples ADD COLUMN expires_at REAL;
    CREATE INDEX triples_expiring ON triples (expires_at) WHERE expires_at IS NOT NULL;
    """,
)

_TIMELINE_COLUMNS = "id, object_key, valid_from, valid_to, ttl, expires_at"
_CHUNK = 500  # ids per statement: stay under SQLite's bound-parameter limit


class SQLiteTripleTimeline:
    """:class:`~llama_memory.storage.ports.triples.TripleTimeline` on a
    :class:`SQLiteStore`; creates (or upgrades) its tables on construction."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store
        store.ensure_schema("triples", MIGRATIONS)

    @contextmanager
    def transaction(self, action: str) -> Iterator[Any]:
        """One atomic write, joining a transaction already open in this thread."""
        with self.store.transaction(action):
            yield None

    # -- the update rules ----------------------------------------------------------------

    def timeline(
        self, scope: Scope, subject_key: str, predicate_key: str
    ) -> list[TimelineEntry]:
        """Every triple of the (subject, predicate) pair, by valid_from then write order."""
        tenant_id, user_id = _owner(scope)
        rows = self.store.query(
            "read a triple timeline",
            f"SELECT {_TIMELINE_COLUMNS} FROM triples WHERE tenant_id = ? AND user_id = ? "
            "AND subject_key = ? AND predicate_key = ? ORDER BY valid_from, seq",
            (tenant_id, user_id, subject_key, predicate_key),
        )
        return [_entry(r) for r in rows]

    def current(
        self, scope: Scope, subject_key: str, predicate_key: str, object_key: str
    ) -> Optional[TimelineEntry]:
        """The triple with these keys that holds now, if any."""
        tenant_id, user_id = _owner(scope)
        rows = self.store.query(
            "read a current triple",
            f"SELECT {_TIMELINE_COLUMNS} FROM triples WHERE tenant_id = ? AND user_id = ? "
            "AND subject_key = ? AND predicate_key = ? AND object_key = ? AND valid_to IS NULL",
            (tenant_id, user_id, subject_key, predicate_key, object_key),
        )
        return _entry(rows[0]) if rows else None

    def entity_spelling(self, scope: Scope, entity_key: str) -> Optional[str]:
        """The entity's text in the user's earliest-written triple naming it."""
        tenant_id, user_id = _owner(scope)
        rows = self.store.query(
            "read an entity's spelling",
            "SELECT text FROM (SELECT subject AS text, seq FROM triples WHERE tenant_id = ? "
            "AND user_id = ? AND subject_key = ? UNION ALL SELECT object, seq FROM triples "
            "WHERE tenant_id = ? AND user_id = ? AND object_key = ?) ORDER BY seq LIMIT 1",
            (tenant_id, user_id, entity_key) * 2,
        )
        return rows[0][0] if rows else None

    def predicate_spelling(self, scope: Scope, predicate_key: str) -> Optional[str]:
        """The predicate's text in the user's earliest-written triple with it."""
        tenant_id, user_id = _owner(scope)
        rows = self.store.query(
            "read a predicate's spelling",
            "SELECT predicate FROM triples WHERE tenant_id = ? AND user_id = ? "
            "AND predicate_key = ? ORDER BY seq LIMIT 1",
            (tenant_id, user_id, predicate_key),
        )
        return rows[0][0] if rows else None

    def insert(self, triple: NewTriple) -> None:
        """Write a new triple, its lexical entry and its first mention."""
        t = triple
        with self.store.transaction("add a knowledge triple") as conn:
            seq = conn.execute(
                "INSERT INTO triples (id, tenant_id, user_id, subject, predicate, object, "
                "subject_key, predicate_key, object_key, valid_from, valid_to, superseded_by, "
                "ingested_at, ttl, expires_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    t.id, t.tenant_id, t.user_id, t.subject, t.predicate, t.object,
                    t.subject_key, t.predicate_key, t.object_key, t.valid_from, t.valid_to,
                    t.superseded_by, t.mention.ingested_at, t.ttl, t.expires_at,
                ),
            ).lastrowid  # fmt: skip
            conn.execute("INSERT INTO triples_fts (rowid, text) VALUES (?, ?)", (seq, t.search_text))
            _insert_mention(conn, t.id, t.mention)

    def add_mention(
        self,
        triple_id: str,
        mention: TripleMention,
        ttl: Optional[float],
        expires_at: Optional[float],
    ) -> None:
        """Record another statement of a triple and set its (renewed) lifetime."""
        with self.store.transaction("add a triple mention") as conn:
            _insert_mention(conn, triple_id, mention)
            conn.execute(
                "UPDATE triples SET ttl = ?, expires_at = ? WHERE id = ?",
                (ttl, expires_at, triple_id),
            )

    def move_start(self, triple_id: str, valid_from: float) -> None:
        """Set a triple's valid_from."""
        with self.store.transaction("move a triple's start") as conn:
            conn.execute("UPDATE triples SET valid_from = ? WHERE id = ?", (valid_from, triple_id))

    def end(self, triple_ids: Sequence[str], valid_to: float, superseded_by: Optional[str]) -> None:
        """End triples' intervals at ``valid_to``, replaced by ``superseded_by`` (``None``: retracted, nothing replaces them)."""
        with self.store.transaction("supersede triples") as conn:
            conn.executemany(
                "UPDATE triples SET valid_to = ?, superseded_by = ? WHERE id = ?",
                [(valid_to, superseded_by, i) for i in triple_ids],
            )

    # -- reads ---------------------------------------------------------------------------

    def select(
        self,
        scope: Scope,
        alive_at: float,
        *,
        ids: Optional[Sequence[str]] = None,
        include_history: bool = True,
        subject_key: Optional[str] = None,
        predicate_key: Optional[str] = None,
    ) -> list[StoredTriple]:
        """The user's unexpired triples matching the filters, by valid_from, write order."""
        tenant_id, user_id = _owner(scope)
        where, params = ["tenant_id = ?", "user_id = ?"], [tenant_id, user_id]
        if ids is not None:
            if not ids:
                return []
            unique = list(dict.fromkeys(ids))
            where.append(f"id IN ({','.join('?' * len(unique))})")
            params.extend(unique)
        if not include_history:
            where.append("valid_to IS NULL")
        if subject_key is not None:
            where.append("subject_key = ?")
            params.append(subject_key)
        if predicate_key is not None:
            where.append("predicate_key = ?")
            params.append(predicate_key)
        # Expired triples are never read back, purged or not.
        rows = self.store.query(
            "read knowledge triples",
            f"SELECT * FROM triples WHERE {' AND '.join(where)} AND {ALIVE_SQL} "
            "ORDER BY valid_from, seq",
            [*params, alive_at],
        )
        mentions: dict[int, list[TripleMention]] = {}
        seqs = [r["seq"] for r in rows]
        for start in range(0, len(seqs), _CHUNK):
            chunk = seqs[start : start + _CHUNK]
            for m in self.store.query(
                "read triple provenance",
                f"SELECT * FROM triple_mentions WHERE triple_seq IN ({','.join('?' * len(chunk))}) "
                "ORDER BY ingested_at, rowid",
                chunk,
            ):
                mentions.setdefault(m["triple_seq"], []).append(_mention(m))
        return [_stored(r, mentions.get(r["seq"], ())) for r in rows]

    def counts(self, scope: Scope, alive_at: float) -> tuple[int, int]:
        """(all triples, current triples) of the user, not counting expired ones."""
        tenant_id, user_id = _owner(scope)
        row = self.store.query(
            "count triples",
            "SELECT COUNT(*), COALESCE(SUM(valid_to IS NULL), 0) FROM triples "
            f"WHERE tenant_id = ? AND user_id = ? AND {ALIVE_SQL}",
            (tenant_id, user_id, alive_at),
        )[0]
        return int(row[0]), int(row[1])

    def current_ids(self, scope: Scope, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` are the user's current triples."""
        tenant_id, user_id = _owner(scope)
        found: set[str] = set()
        for start in range(0, len(ids), _CHUNK):
            chunk = list(ids[start : start + _CHUNK])
            found.update(
                r["id"]
                for r in self.store.query(
                    "filter current triples",
                    f"SELECT id FROM triples WHERE id IN ({','.join('?' * len(chunk))}) "
                    "AND tenant_id = ? AND user_id = ? AND valid_to IS NULL",
                    (*chunk, tenant_id, user_id),
                )
            )
        return found

    def search_words(
        self, scope: Scope, query: str, k: int, include_history: bool
    ) -> list[tuple[str, float]]:
        """The user's triples best matching ``query``'s words, as (id, FTS5 BM25 score
        turned positive), best first."""
        tenant_id, user_id = _owner(scope)
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

    def touching(
        self, scope: Scope, entity_keys: Sequence[str], include_history: bool
    ) -> list[TripleEdge]:
        """The user's triples whose subject or object is one of ``entity_keys``."""
        tenant_id, user_id = _owner(scope)
        if not entity_keys:
            return []
        marks = ",".join("?" * len(entity_keys))
        current = "" if include_history else " AND valid_to IS NULL"
        rows = self.store.query(
            "read entity neighbourhood",
            "SELECT id, subject_key, object_key, valid_from FROM triples "
            f"WHERE tenant_id = ? AND user_id = ?{current} "
            f"AND (subject_key IN ({marks}) OR object_key IN ({marks}))",
            (tenant_id, user_id, *entity_keys, *entity_keys),
        )
        return [TripleEdge(r["id"], r["subject_key"], r["object_key"], r["valid_from"]) for r in rows]

    def entity_names(self, scope: Scope) -> list[str]:
        """Subjects and objects of the user's current triples, newest first."""
        tenant_id, user_id = _owner(scope)
        rows = self.store.query(
            "read known entities",
            "SELECT subject AS name, valid_from FROM triples WHERE tenant_id = ? AND user_id = ? "
            "AND valid_to IS NULL UNION ALL SELECT object, valid_from FROM triples "
            "WHERE tenant_id = ? AND user_id = ? AND valid_to IS NULL ORDER BY valid_from DESC",
            (tenant_id, user_id, tenant_id, user_id),
        )
        return [r["name"] for r in rows]

    def refresh_expiry(self, triple_ids: Sequence[str], at: float) -> None:
        """Triples read at ``at`` live their ttl from then."""
        with self.store.transaction("refresh triple expiry") as conn:
            conn.executemany(
                "UPDATE triples SET expires_at = ? + ttl WHERE id = ? AND ttl IS NOT NULL",
                [(at, i) for i in triple_ids],
            )

    # -- the dense index's bookkeeping -----------------------------------------------------

    def pending(self, limit: int) -> list[TripleRef]:
        """Triples not yet in the dense index, in write order."""
        rows = self.store.query(
            "read pending triples",
            "SELECT id, tenant_id, user_id, subject, predicate, object FROM triples "
            "WHERE indexed = 0 ORDER BY seq LIMIT ?",
            (limit,),
        )
        return [
            TripleRef(r["tenant_id"], r["user_id"], r["id"], r["subject"], r["predicate"], r["object"])
            for r in rows
        ]

    def mark_indexed(self, triple_ids: Sequence[str], indexed: bool = True) -> None:
        """Flag triples as in the dense index, or as waiting for it."""
        with self.store.transaction("set triple index flags") as conn:
            conn.executemany(
                "UPDATE triples SET indexed = ? WHERE id = ?", [(int(indexed), i) for i in triple_ids]
            )

    def mark_all_unindexed(self) -> None:
        """Flag every triple as waiting for the dense index."""
        with self.store.transaction("reset triple index flags") as conn:
            conn.execute("UPDATE triples SET indexed = 0")

    def index_flags(self, scope: Optional[Scope] = None) -> IndexFlags:
        """Every triple id and whether it is indexed, per (tenant, user)."""
        owner = _owner(scope) if scope is not None else None
        where = " WHERE tenant_id = ? AND user_id = ?" if owner is not None else ""
        flags: IndexFlags = {}
        for r in self.store.query(
            "read triple index flags",
            "SELECT id, tenant_id, user_id, indexed FROM triples" + where,
            owner or (),
        ):
            flags.setdefault((r["tenant_id"], r["user_id"]), {})[r["id"]] = bool(r["indexed"])
        return flags

    # -- forgetting ------------------------------------------------------------------------

    def delete_user(self, scope: Scope) -> None:
        """Delete the user's triples, provenance and lexical entries."""
        tenant_id, user_id = _owner(scope)
        with self.store.transaction("delete knowledge triples") as conn:
            seqs = [
                (r["seq"],)
                for r in conn.execute(
                    "SELECT seq FROM triples WHERE tenant_id = ? AND user_id = ?",
                    (tenant_id, user_id),
                )
            ]
            _delete_rows(conn, seqs)

    def delete_expired(self, at: float) -> list[TripleRef]:
        """Delete the triples expired at ``at``; return which."""
        with self.store.transaction("purge expired triples") as conn:
            rows = conn.execute(
                f"SELECT seq, id, tenant_id, user_id FROM triples WHERE NOT {ALIVE_SQL}", (at,)
            ).fetchall()
            _delete_rows(conn, [(r["seq"],) for r in rows])
        return [TripleRef(r["tenant_id"], r["user_id"], r["id"]) for r in rows]


def _owner(scope: Scope) -> tuple[str, str]:
    return scope.tenant_id, scope.require_user("the knowledge-triple store")


def _insert_mention(conn: Any, triple_id: str, m: TripleMention) -> None:
    conn.execute(
        "INSERT INTO triple_mentions (triple_seq, session_id, message_ids, event_time, "
        "ingested_at, origin) SELECT seq, ?, ?, ?, ?, ? FROM triples WHERE id = ?",
        (m.session_id, json.dumps(list(m.message_ids)), m.event_time, m.ingested_at, m.origin,
         triple_id),
    )  # fmt: skip


def _delete_rows(conn: Any, seqs: Sequence[tuple[int]]) -> None:
    """Delete triples by seq with their lexical entries and provenance."""
    conn.executemany("DELETE FROM triples_fts WHERE rowid = ?", seqs)
    conn.executemany("DELETE FROM triple_mentions WHERE triple_seq = ?", seqs)
    conn.executemany("DELETE FROM triples WHERE seq = ?", seqs)


def _entry(row: Any) -> TimelineEntry:
    return TimelineEntry(
        row["id"], row["object_key"], row["valid_from"], row["valid_to"], row["ttl"], row["expires_at"]
    )


def _mention(row: Any) -> TripleMention:
    return TripleMention(
        row["session_id"],
        tuple(json.loads(row["message_ids"])),
        row["event_time"],
        row["ingested_at"],
        row["origin"],
    )


def _stored(row: Any, mentions: Sequence[TripleMention]) -> StoredTriple:
    return StoredTriple(
        id=row["id"],
        tenant_id=row["tenant_id"],
        user_id=row["user_id"],
        subject=row["subject"],
        predicate=row["predicate"],
        object=row["object"],
        subject_key=row["subject_key"],
        predicate_key=row["predicate_key"],
        object_key=row["object_key"],
        valid_from=row["valid_from"],
        valid_to=row["valid_to"],
        superseded_by=row["superseded_by"],
        ingested_at=row["ingested_at"],
        ttl=row["ttl"],
        expires_at=row["expires_at"],
        mentions=tuple(mentions),
    )
