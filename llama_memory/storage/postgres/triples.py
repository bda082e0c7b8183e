"""The triple timeline on PostgreSQL: tables ``triples`` (with a generated ``tsvector``
of each triple's text for lexical search) and ``triple_mentions`` (see
:mod:`llama_memory.storage.ports.triples`; migration 2 of
:data:`~llama_memory.storage.postgres.MIGRATIONS`).

Every statement runs through the :class:`PostgresStore` it is given: writes in
``store.transaction`` (they join a transaction already open in the thread, and a
batch of triples commits or rolls back as one), reads with ``store.query`` (on the
held connection when one is open, so they see its writes).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Optional

from psycopg.types.json import Jsonb

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
from .profile import ALIVE_SQL
from .store import PostgresStore

__all__ = ["PostgresTripleTimeline"]

_TIMELINE_COLUMNS = "id, object_key, valid_from, valid_to, ttl, expires_at"
_WORD = re.compile(r"\w+", re.UNICODE)


class PostgresTripleTimeline:
    """:class:`~llama_memory.storage.ports.triples.TripleTimeline` on a
    :class:`PostgresStore` (whose schema is migrated on open).

    Args:
        store: the PostgreSQL system of record; it provides the transactions.
    """

    def __init__(self, store: PostgresStore) -> None:
        if not isinstance(store, PostgresStore):
            raise TypeError(
                f"PostgresTripleTimeline keeps triples in a PostgresStore, not "
                f"{type(store).__name__} {store!r}: pass PostgresStore('postgresql://...')"
            )
        self.store = store

    @contextmanager
    def transaction(self, action: str) -> Iterator[Any]:
        """One atomic write, joining a transaction already open in this thread."""
        with self.store.transaction(action):
            yield None

    # -- the update rules ----------------------------------------------------------------

    def timeline(self, scope: Scope, subject_key: str, predicate_key: str) -> list[TimelineEntry]:
        """Every triple of the (subject, predicate) pair, by valid_from then write order."""
        rows = self.store.query(
            "read a triple timeline",
            f"SELECT {_TIMELINE_COLUMNS} FROM triples WHERE tenant_id = %s AND user_id = %s "
            "AND subject_key = %s AND predicate_key = %s ORDER BY valid_from, seq",
            (*_owner(scope), subject_key, predicate_key),
        )
        return [_entry(r) for r in rows]

    def current(
        self, scope: Scope, subject_key: str, predicate_key: str, object_key: str
    ) -> Optional[TimelineEntry]:
        """The triple with these keys that holds now, if any."""
        rows = self.store.query(
            "read a current triple",
            f"SELECT {_TIMELINE_COLUMNS} FROM triples WHERE tenant_id = %s AND user_id = %s "
            "AND subject_key = %s AND predicate_key = %s AND object_key = %s AND valid_to IS NULL",
            (*_owner(scope), subject_key, predicate_key, object_key),
        )
        return _entry(rows[0]) if rows else None

    def entity_spelling(self, scope: Scope, entity_key: str) -> Optional[str]:
        """The entity's text in the user's earliest-written triple naming it."""
        owner = _owner(scope)
        rows = self.store.query(
            "read an entity's spelling",
            "SELECT text FROM (SELECT subject AS text, seq FROM triples WHERE tenant_id = %s "
            "AND user_id = %s AND subject_key = %s UNION ALL SELECT object, seq FROM triples "
            "WHERE tenant_id = %s AND user_id = %s AND object_key = %s) AS named "
            "ORDER BY seq LIMIT 1",
            (*owner, entity_key, *owner, entity_key),
        )
        return str(rows[0]["text"]) if rows else None

    def predicate_spelling(self, scope: Scope, predicate_key: str) -> Optional[str]:
        """The predicate's text in the user's earliest-written triple with it."""
        rows = self.store.query(
            "read a predicate's spelling",
            "SELECT predicate FROM triples WHERE tenant_id = %s AND user_id = %s "
            "AND predicate_key = %s ORDER BY seq LIMIT 1",
            (*_owner(scope), predicate_key),
        )
        return str(rows[0]["predicate"]) if rows else None

    def insert(self, triple: NewTriple) -> None:
        """Write a new triple (its lexical entry is a generated column) and its first mention."""
        t = triple
        with self.store.transaction("add a knowledge triple") as conn:
            conn.execute(
                "INSERT INTO triples (id, tenant_id, user_id, subject, predicate, object, "
                "subject_key, predicate_key, object_key, valid_from, valid_to, superseded_by, "
                "ingested_at, ttl, expires_at, search_text) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    t.id, t.tenant_id, t.user_id, t.subject, t.predicate, t.object,
                    t.subject_key, t.predicate_key, t.object_key, t.valid_from, t.valid_to,
                    t.superseded_by, t.mention.ingested_at, t.ttl, t.expires_at, t.search_text,
                ),
            )  # fmt: skip
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
                "UPDATE triples SET ttl = %s, expires_at = %s WHERE id = %s",
                (ttl, expires_at, triple_id),
            )

    def move_start(self, triple_id: str, valid_from: float) -> None:
        """Set a triple's valid_from."""
        with self.store.transaction("move a triple's start") as conn:
            conn.execute("UPDATE triples SET valid_from = %s WHERE id = %s", (valid_from, triple_id))

    def end(self, triple_ids: Sequence[str], valid_to: float, superseded_by: Optional[str]) -> None:
        """End triples' intervals at ``valid_to``, replaced by ``superseded_by`` (``None``: retracted, nothing replaces them)."""
        if triple_ids:
            with self.store.transaction("supersede triples") as conn:
                conn.execute(
                    "UPDATE triples SET valid_to = %s, superseded_by = %s WHERE id = ANY(%s)",
                    (valid_to, superseded_by, list(triple_ids)),
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
        owner = _owner(scope)
        where = ["tenant_id = %s", "user_id = %s"]
        params: list[Any] = [*owner]
        if ids is not None:
            if not ids:
                return []
            where.append("id = ANY(%s)")
            params.append(list(dict.fromkeys(ids)))
        if not include_history:
            where.append("valid_to IS NULL")
        if subject_key is not None:
            where.append("subject_key = %s")
            params.append(subject_key)
        if predicate_key is not None:
            where.append("predicate_key = %s")
            params.append(predicate_key)
        # Expired triples are never read back, purged or not.
        rows = self.store.query(
            "read knowledge triples",
            f"SELECT * FROM triples WHERE {' AND '.join(where)} AND {ALIVE_SQL} "
            "ORDER BY valid_from, seq",
            [*params, alive_at],
        )
        mentions: dict[str, list[TripleMention]] = {}
        if rows:
            for m in self.store.query(
                "read triple provenance",
                "SELECT * FROM triple_mentions WHERE tenant_id = %s AND user_id = %s "
                "AND triple_id = ANY(%s) ORDER BY ingested_at, seq",
                (*owner, [r["id"] for r in rows]),
            ):
                mentions.setdefault(m["triple_id"], []).append(_mention(m))
        return [_stored(r, mentions.get(r["id"], ())) for r in rows]

    def counts(self, scope: Scope, alive_at: float) -> tuple[int, int]:
        """(all triples, current triples) of the user, not counting expired ones."""
        row = self.store.query(
            "count triples",
            "SELECT count(*) AS n, count(*) FILTER (WHERE valid_to IS NULL) AS current "
            f"FROM triples WHERE tenant_id = %s AND user_id = %s AND {ALIVE_SQL}",
            (*_owner(scope), alive_at),
        )[0]
        return int(row["n"]), int(row["current"])

    def current_ids(self, scope: Scope, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` are the user's current triples."""
        if not ids:
            return set()
        rows = self.store.query(
            "filter current triples",
            "SELECT id FROM triples WHERE tenant_id = %s AND user_id = %s AND id = ANY(%s) "
            "AND valid_to IS NULL",
            (*_owner(scope), list(ids)),
        )
        return {r["id"] for r in rows}

    def search_words(
        self, scope: Scope, query: str, k: int, include_history: bool
    ) -> list[tuple[str, float]]:
        """The user's triples best matching ``query``'s words, as (id, ``ts_rank_cd``
        score), best first.

        The words are OR-ed through ``websearch_to_tsquery``, which reads no operator
        but "or" and quotes: no user text is query syntax.
        """
        owner = _owner(scope)
        words = list(dict.fromkeys(w for w in _WORD.findall(query.casefold()) if w != "or"))
        if not words or k <= 0:
            return []
        current = "" if include_history else " AND valid_to IS NULL"
        rows = self.store.query(
            "search knowledge triples by words",
            "SELECT id, ts_rank_cd(tsv, q) AS score FROM triples, "
            "websearch_to_tsquery('english', %s) AS q "
            f"WHERE tenant_id = %s AND user_id = %s{current} AND tsv @@ q "
            "ORDER BY score DESC, seq LIMIT %s",
            (" or ".join(words), *owner, k),
        )
        return [(r["id"], float(r["score"])) for r in rows]

    def touching(
        self, scope: Scope, entity_keys: Sequence[str], include_history: bool
    ) -> list[TripleEdge]:
        """The user's triples whose subject or object is one of ``entity_keys``."""
        if not entity_keys:
            return []
        keys = list(entity_keys)
        current = "" if include_history else " AND valid_to IS NULL"
        rows = self.store.query(
            "read entity neighbourhood",
            "SELECT id, subject_key, object_key, valid_from FROM triples "
            f"WHERE tenant_id = %s AND user_id = %s{current} "
            "AND (subject_key = ANY(%s) OR object_key = ANY(%s))",
            (*_owner(scope), keys, keys),
        )
        return [TripleEdge(r["id"], r["subject_key"], r["object_key"], r["valid_from"]) for r in rows]

    def entity_names(self, scope: Scope) -> list[str]:
        """Subjects and objects of the user's current triples, newest first."""
        owner = _owner(scope)
        rows = self.store.query(
            "read known entities",
            "SELECT subject AS name, valid_from FROM triples WHERE tenant_id = %s AND user_id = %s "
            "AND valid_to IS NULL UNION ALL SELECT object, valid_from FROM triples "
            "WHERE tenant_id = %s AND user_id = %s AND valid_to IS NULL ORDER BY valid_from DESC",
            (*owner, *owner),
        )
        return [r["name"] for r in rows]

    def refresh_expiry(self, triple_ids: Sequence[str], at: float) -> None:
        """Triples read at ``at`` live their ttl from then."""
        if triple_ids:
            with self.store.transaction("refresh triple expiry") as conn:
                conn.execute(
                    "UPDATE triples SET expires_at = %s + ttl WHERE id = ANY(%s) AND ttl IS NOT NULL",
                    (at, list(triple_ids)),
                )

    # -- the dense index's bookkeeping -----------------------------------------------------

    def pending(self, limit: int) -> list[TripleRef]:
        """Triples not yet in the dense index, in write order."""
        rows = self.store.query(
            "read pending triples",
            "SELECT id, tenant_id, user_id, subject, predicate, object FROM triples "
            "WHERE NOT indexed ORDER BY seq LIMIT %s",
            (limit,),
        )
        return [
            TripleRef(r["tenant_id"], r["user_id"], r["id"], r["subject"], r["predicate"], r["object"])
            for r in rows
        ]

    def mark_indexed(self, triple_ids: Sequence[str], indexed: bool = True) -> None:
        """Flag triples as in the dense index, or as waiting for it."""
        if triple_ids:
            with self.store.transaction("set triple index flags") as conn:
                conn.execute(
                    "UPDATE triples SET indexed = %s WHERE id = ANY(%s)", (indexed, list(triple_ids))
                )

    def mark_all_unindexed(self) -> None:
        """Flag every triple as waiting for the dense index."""
        with self.store.transaction("reset triple index flags") as conn:
            conn.execute("UPDATE triples SET indexed = false WHERE indexed")

    def index_flags(self, scope: Optional[Scope] = None) -> IndexFlags:
        """Every triple id and whether it is indexed, per (tenant, user)."""
        owner = _owner(scope) if scope is not None else None
        where = " WHERE tenant_id = %s AND user_id = %s" if owner is not None else ""
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
        """Delete the user's triples with their provenance (the foreign key cascades)."""
        with self.store.transaction("delete knowledge triples") as conn:
            conn.execute("DELETE FROM triples WHERE tenant_id = %s AND user_id = %s", _owner(scope))

    def delete_expired(self, at: float) -> list[TripleRef]:
        """Delete the triples expired at ``at``; return which."""
        with self.store.transaction("purge expired triples") as conn:
            rows = conn.execute(
                f"DELETE FROM triples WHERE NOT {ALIVE_SQL} RETURNING id, tenant_id, user_id", (at,)
            ).fetchall()
        return [TripleRef(r["tenant_id"], r["user_id"], r["id"]) for r in rows]


def _owner(scope: Scope) -> tuple[str, str]:
    return scope.tenant_id, scope.require_user("the knowledge-triple store")


def _insert_mention(conn: Any, triple_id: str, m: TripleMention) -> None:
    conn.execute(
        "INSERT INTO triple_mentions (tenant_id, user_id, triple_id, session_id, message_ids, "
        "event_time, ingested_at, origin) SELECT tenant_id, user_id, id, %s, %s, %s, %s, %s "
        "FROM triples WHERE id = %s",
        (m.session_id, Jsonb(list(m.message_ids)), m.event_time, m.ingested_at, m.origin, triple_id),
    )


def _entry(row: dict[str, Any]) -> TimelineEntry:
    return TimelineEntry(
        row["id"], row["object_key"], row["valid_from"], row["valid_to"], row["ttl"], row["expires_at"]
    )


def _mention(row: dict[str, Any]) -> TripleMention:
    return TripleMention(
        row["session_id"],
        tuple(row["message_ids"]),
        row["event_time"],
        row["ingested_at"],
        row["origin"],
    )


def _stored(row: dict[str, Any], mentions: Sequence[TripleMention]) -> StoredTriple:
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
