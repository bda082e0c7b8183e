"""The triple timeline over SQL, once for every SQL backend (tables ``triples`` and
``triple_mentions``; the rules: :mod:`llama_memory.storage.ports.triples`). A backend
subclass keeps its word index, its deletes and its mention links its own way.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar, Optional

from ...core.types import Scope
from ..ports.triples import (
    IndexFlags,
    NewTriple,
    StoredTriple,
    TimelineEntry,
    TripleEdge,
    TripleMention,
    TripleRef,
)
from .dialect import ALIVE_SQL, Dialect, given, owner

__all__ = ["TRIPLE_COLUMNS", "MentionLink", "TripleTimeline"]

_TIMELINE_COLUMNS = "id, object_key, valid_from, valid_to, ttl, expires_at"
#: The columns of a triple's row besides its id and owner.
TRIPLE_COLUMNS = (
    "subject", "predicate", "object", "subject_key", "predicate_key", "object_key",
    "valid_from", "valid_to", "superseded_by", "ingested_at", "ttl", "expires_at",
)  # fmt: skip


@dataclass(frozen=True)
class MentionLink:
    """How a backend's ``triple_mentions`` rows point at their triple: ``columns`` (as an
    INSERT lists them) copy ``sources`` of the triple's row; ``key``: the (mention, triple)
    columns they match by; ``order``: write order; ``scoped``: they carry the owner."""

    columns: str
    sources: str
    key: tuple[str, str]
    order: str
    scoped: bool


class TripleTimeline(ABC):
    """Knowledge triples, their provenance and lexical index, for every user of a SQL
    store. A backend sets :attr:`dialect` and :attr:`mentions` and writes the lexical
    index's three methods."""

    dialect: ClassVar[Dialect]
    mentions: ClassVar[MentionLink]
    #: The storage the timeline lives in (its ``transaction``, ``query`` and meta table).
    store: Any

    @contextmanager
    def transaction(self, action: str) -> Iterator[Any]:
        """One atomic write (joining an open one); ``action`` names it in errors."""
        with self.store.transaction(action):
            yield None

    # -- what a backend spells its own way -----------------------------------------------

    @abstractmethod
    def _insert_row(self, conn: Any, row: Mapping[str, Any], search_text: str) -> None:
        """Insert a triple's row and index its words (``search_text``)."""

    @abstractmethod
    def _delete_where(self, conn: Any, condition: str, params: Sequence[Any]) -> list[Any]:
        """Delete the triples matching ``condition`` with their mentions and lexical
        entries; their rows (``id``, ``tenant_id``, ``user_id``)."""

    @abstractmethod
    def search_words(
        self, scope: Scope, query: str, k: int, include_history: bool
    ) -> list[tuple[str, float]]:
        """The user's triples best matching any word of ``query`` (never query syntax),
        at most ``k``, as (id, score), higher better."""

    # -- the update rules ----------------------------------------------------------------

    def timeline(self, scope: Scope, subject_key: str, predicate_key: str) -> list[TimelineEntry]:
        """Every triple of the (subject, predicate) pair, expired ones too, by ``valid_from``
        then write order."""
        rows = self._query(
            "read a triple timeline",
            f"SELECT {_TIMELINE_COLUMNS} FROM triples WHERE tenant_id = ? AND user_id = ? "
            "AND subject_key = ? AND predicate_key = ? ORDER BY valid_from, seq",
            (*_owner(scope), subject_key, predicate_key),
        )
        return [_entry(r) for r in rows]

    def current(
        self, scope: Scope, subject_key: str, predicate_key: str, object_key: str
    ) -> Optional[TimelineEntry]:
        """The triple with these three keys that holds now (at most one does), if any."""
        rows = self._query(
            "read a current triple",
            f"SELECT {_TIMELINE_COLUMNS} FROM triples WHERE tenant_id = ? AND user_id = ? "
            "AND subject_key = ? AND predicate_key = ? AND object_key = ? AND valid_to IS NULL",
            (*_owner(scope), subject_key, predicate_key, object_key),
        )
        return _entry(rows[0]) if rows else None

    def entity_spelling(self, scope: Scope, entity_key: str) -> Optional[str]:
        """The text the user's earliest triple naming this entity (subject or object) has."""
        user = _owner(scope)
        rows = self._query(
            "read an entity's spelling",
            "SELECT text FROM (SELECT subject AS text, seq FROM triples WHERE tenant_id = ? "
            "AND user_id = ? AND subject_key = ? UNION ALL SELECT object, seq FROM triples "
            "WHERE tenant_id = ? AND user_id = ? AND object_key = ?) AS named "
            "ORDER BY seq LIMIT 1",
            (*user, entity_key, *user, entity_key),
        )
        return str(rows[0]["text"]) if rows else None

    def predicate_spelling(self, scope: Scope, predicate_key: str) -> Optional[str]:
        """The text the user's earliest-written triple with this predicate gives it."""
        rows = self._query(
            "read a predicate's spelling",
            "SELECT predicate FROM triples WHERE tenant_id = ? AND user_id = ? "
            "AND predicate_key = ? ORDER BY seq LIMIT 1",
            (*_owner(scope), predicate_key),
        )
        return str(rows[0]["predicate"]) if rows else None

    def insert(self, triple: NewTriple) -> None:
        """Write a new triple with its first mention and its lexical entry."""
        t = triple
        row = {
            "id": t.id, "tenant_id": t.tenant_id, "user_id": t.user_id, "subject": t.subject,
            "predicate": t.predicate, "object": t.object, "subject_key": t.subject_key,
            "predicate_key": t.predicate_key, "object_key": t.object_key,
            "valid_from": t.valid_from, "valid_to": t.valid_to, "superseded_by": t.superseded_by,
            "ingested_at": t.mention.ingested_at, "ttl": t.ttl, "expires_at": t.expires_at,
        }  # fmt: skip
        with self.store.transaction("add a knowledge triple") as conn:
            self._insert_row(conn, row, t.search_text)
            self._insert_mention(conn, t.id, t.mention)

    def add_mention(
        self, triple_id: str, mention: TripleMention, ttl: Optional[float], expires_at: Optional[float]
    ) -> None:
        """Record another statement of a triple, and set its lifetime (as renewed)."""
        with self.store.transaction("add a triple mention") as conn:
            self._insert_mention(conn, triple_id, mention)
            self.dialect.execute(
                conn, "UPDATE triples SET ttl = ?, expires_at = ? WHERE id = ?", (ttl, expires_at, triple_id)
            )

    def move_start(self, triple_id: str, valid_from: float) -> None:
        """Set a triple's ``valid_from`` (earlier evidence that it held)."""
        with self.store.transaction("move a triple's start") as conn:
            self.dialect.execute(conn, "UPDATE triples SET valid_from = ? WHERE id = ?", (valid_from, triple_id))

    def end(self, triple_ids: Sequence[str], valid_to: float, superseded_by: Optional[str]) -> None:
        """End triples' intervals at ``valid_to``, replaced by ``superseded_by`` (or none)."""
        self.dialect.update_ids(
            self.store.transaction, "supersede triples", "triples", "valid_to = ?, superseded_by = ?", triple_ids,
            before=(valid_to, superseded_by),
        )

    # -- reads ---------------------------------------------------------------------------

    def select(
        self, scope: Scope, alive_at: float, *, ids: Optional[Sequence[str]] = None, include_history: bool = True,
        subject_key: Optional[str] = None, predicate_key: Optional[str] = None
    ) -> list[StoredTriple]:
        """The user's triples alive at ``alive_at`` as asked, by ``valid_from`` then write order."""
        user = _owner(scope)
        where, params = ["tenant_id = ?", "user_id = ?"], [*user]
        if ids is not None:
            if not ids:
                return []
            condition, values = self.dialect.in_list("id", list(dict.fromkeys(ids)))
            where.append(condition)
            params.extend(values)
        if not include_history:
            where.append("valid_to IS NULL")
        given(where, params, ("subject_key = ?", subject_key), ("predicate_key = ?", predicate_key))
        # Expired triples are never read back, purged or not.
        rows = self._query(
            "read knowledge triples",
            f"SELECT * FROM triples WHERE {' AND '.join(where)} AND {ALIVE_SQL} "
            "ORDER BY valid_from, seq",
            [*params, alive_at],
        )
        mentions = self._mentions_of(user, rows)
        return [_stored(r, mentions.get(r[self.mentions.key[1]], ())) for r in rows]

    def counts(self, scope: Scope, alive_at: float) -> tuple[int, int]:
        """(all triples, current triples) of the user, not counting expired ones."""
        row = self._query(
            "count triples",
            "SELECT count(*) AS n, count(CASE WHEN valid_to IS NULL THEN 1 END) AS current "
            f"FROM triples WHERE tenant_id = ? AND user_id = ? AND {ALIVE_SQL}",
            (*_owner(scope), alive_at),
        )[0]
        return int(row["n"]), int(row["current"])

    def current_ids(self, scope: Scope, ids: Sequence[str]) -> set[str]:
        """Which of ``ids`` are the user's current triples."""
        user = _owner(scope)
        found: set[str] = set()
        for batch in self.dialect.batches(ids):
            condition, values = self.dialect.in_list("id", batch)
            rows = self._query(
                "filter current triples",
                f"SELECT id FROM triples WHERE tenant_id = ? AND user_id = ? AND {condition} "
                "AND valid_to IS NULL",
                (*user, *values),
            )
            found.update(r["id"] for r in rows)
        return found

    def touching(self, scope: Scope, entity_keys: Sequence[str], include_history: bool) -> list[TripleEdge]:
        """The user's triples whose subject or object is one of ``entity_keys``, unordered."""
        user = _owner(scope)
        if not entity_keys:
            return []
        subjects, keys = self.dialect.in_list("subject_key", entity_keys)
        objects, _ = self.dialect.in_list("object_key", entity_keys)
        current = "" if include_history else " AND valid_to IS NULL"
        rows = self._query(
            "read entity neighbourhood",
            "SELECT id, subject_key, object_key, valid_from FROM triples "
            f"WHERE tenant_id = ? AND user_id = ?{current} AND ({subjects} OR {objects})",
            (*user, *keys, *keys),
        )
        return [TripleEdge(r["id"], r["subject_key"], r["object_key"], r["valid_from"]) for r in rows]

    def entity_names(self, scope: Scope) -> list[str]:
        """Subjects and objects of the user's current triples, newest first (repeats kept)."""
        user = _owner(scope)
        rows = self._query(
            "read known entities",
            "SELECT subject AS name, valid_from FROM triples WHERE tenant_id = ? AND user_id = ? "
            "AND valid_to IS NULL UNION ALL SELECT object, valid_from FROM triples "
            "WHERE tenant_id = ? AND user_id = ? AND valid_to IS NULL ORDER BY valid_from DESC",
            (*user, *user),
        )
        return [r["name"] for r in rows]

    def refresh_expiry(self, triple_ids: Sequence[str], at: float) -> None:
        """Triples read at ``at`` live their ``ttl`` from then (those with a ttl)."""
        self.dialect.update_ids(
            self.store.transaction, "refresh triple expiry", "triples", "expires_at = ? + ttl",
            triple_ids, "ttl IS NOT NULL", (at,),
        )  # fmt: skip

    # -- the dense index's bookkeeping -----------------------------------------------------

    def pending(self, limit: int) -> list[TripleRef]:
        """Up to ``limit`` triples (of any user) not in the dense index yet, in write order."""
        rows = self._query(
            "read pending triples",
            "SELECT id, tenant_id, user_id, subject, predicate, object FROM triples "
            f"WHERE indexed = {self.dialect.false} ORDER BY seq LIMIT ?",
            (limit,),
        )
        return [
            TripleRef(r["tenant_id"], r["user_id"], r["id"], r["subject"], r["predicate"], r["object"])
            for r in rows
        ]

    def mark_indexed(self, triple_ids: Sequence[str], indexed: bool = True) -> None:
        """Flag triples as in the dense index (or as waiting for it)."""
        self.dialect.update_ids(self.store.transaction, "set triple index flags", "triples", "indexed = ?", triple_ids, before=(indexed,))

    def mark_all_unindexed(self) -> None:
        """Flag every triple as waiting for the dense index (a rebuild)."""
        with self.store.transaction("reset triple index flags") as conn:
            d = self.dialect
            d.execute(conn, f"UPDATE triples SET indexed = {d.false} WHERE indexed = {d.true}")

    def index_flags(self, scope: Optional[Scope] = None) -> IndexFlags:
        """Every triple id (of every user, or one) and whether the dense index holds it."""
        user = _owner(scope) if scope is not None else ()
        where = " WHERE tenant_id = ? AND user_id = ?" if user else ""
        flags: IndexFlags = {}
        for r in self._query(
            "read triple index flags", "SELECT id, tenant_id, user_id, indexed FROM triples" + where, user
        ):
            flags.setdefault((r["tenant_id"], r["user_id"]), {})[r["id"]] = bool(r["indexed"])
        return flags

    # -- forgetting ------------------------------------------------------------------------

    def delete_user(self, scope: Scope) -> None:
        """Delete the user's triples, their provenance and lexical entries."""
        with self.store.transaction("delete knowledge triples") as conn:
            self._delete_where(conn, "tenant_id = ? AND user_id = ?", _owner(scope))

    def delete_expired(self, at: float) -> list[TripleRef]:
        """Delete the triples expired at ``at`` (current or not) with their provenance and
        lexical entries; which ones (triples they superseded keep the id)."""
        with self.store.transaction("purge expired triples") as conn:
            rows = self._delete_where(conn, f"NOT {ALIVE_SQL}", (at,))
        return [TripleRef(r["tenant_id"], r["user_id"], r["id"]) for r in rows]

    # -- an export's rows, imported (the admin rows' import and copies) --------------------

    def import_row(self, conn: Any, tenant_id: str, user: str, row: dict[str, Any], text: str) -> int:
        """Write one triple export row with its mentions; 1 when written, 0 when one is held
        under its id or holds the same fact now (it takes the mentions)."""
        dialect = self.dialect
        held = dialect.execute(conn, "SELECT tenant_id, user_id FROM triples WHERE id = ?", (row["id"],)).fetchone()
        if held is not None:
            if (held["tenant_id"], held["user_id"]) != (tenant_id, user):
                raise ValueError(
                    f"triple {row['id']} already belongs to user {held['user_id']!r} of tenant "
                    f"{held['tenant_id']!r} in this store: import this file into another store, "
                    "or forget that user first"
                )
            return 0
        link = self.mentions
        mention_key, triple_key = link.key
        keys = (row["subject_key"], row["predicate_key"], row["object_key"])
        same = None
        if row["valid_to"] is None:
            same = dialect.execute(
                conn,
                f"SELECT id, {triple_key} FROM triples WHERE tenant_id = ? AND user_id = ? AND subject_key = ? "
                "AND predicate_key = ? AND object_key = ? AND valid_to IS NULL",
                (tenant_id, user, *keys),
            ).fetchone()
        if same is None:
            new = {"id": row["id"], "tenant_id": tenant_id, "user_id": user}
            new.update((column, row[column]) for column in TRIPLE_COLUMNS)
            self._insert_row(conn, new, text)
            same = dialect.execute(conn, f"SELECT id, {triple_key} FROM triples WHERE id = ?", (row["id"],)).fetchone()
        scoped = "tenant_id = ? AND user_id = ? AND " if link.scoped else ""
        for mention in row["mentions"]:
            known = dialect.execute(
                conn,
                f"SELECT 1 FROM triple_mentions WHERE {scoped}{mention_key} = ? AND {dialect.same_as('session_id')} "
                "AND message_ids = ? AND event_time = ? AND origin = ?",
                (*((tenant_id, user) if link.scoped else ()), same[triple_key], mention["session"],
                 dialect.json_param(list(mention["message_ids"])), mention["event_time"], mention["origin"]),
            ).fetchone()  # fmt: skip
            if known is None:
                self._insert_mention(conn, same["id"], TripleMention(
                    mention["session"], tuple(mention["message_ids"]), mention["event_time"],
                    mention["ingested_at"], mention["origin"],
                ))  # fmt: skip
        return int(same["id"] == row["id"])

    # -- helpers ---------------------------------------------------------------------------

    def _query(self, action: str, statement: str, params: Sequence[Any]) -> Sequence[Any]:
        return self.store.query(action, self.dialect.sql(statement), params)

    def _insert_mention(self, conn: Any, triple_id: str, m: TripleMention) -> None:
        link = self.mentions
        self.dialect.execute(
            conn,
            f"INSERT INTO triple_mentions ({link.columns}, session_id, message_ids, event_time, "
            f"ingested_at, origin) SELECT {link.sources}, ?, ?, ?, ?, ? FROM triples WHERE id = ?",
            (m.session_id, self.dialect.json_param(list(m.message_ids)), m.event_time, m.ingested_at,
             m.origin, triple_id),
        )  # fmt: skip

    def _mentions_of(self, user: tuple[str, str], rows: Sequence[Any]) -> dict[Any, list[TripleMention]]:
        """The mentions of the triples ``rows``, oldest first, by the triple's link key."""
        link = self.mentions
        mention_key, triple_key = link.key
        scoped = "tenant_id = ? AND user_id = ? AND " if link.scoped else ""
        mentions: dict[Any, list[TripleMention]] = {}
        for batch in self.dialect.batches([r[triple_key] for r in rows]):
            condition, values = self.dialect.in_list(mention_key, batch)
            for m in self._query(
                "read triple provenance",
                f"SELECT * FROM triple_mentions WHERE {scoped}{condition} ORDER BY ingested_at, {link.order}",
                (*(user if link.scoped else ()), *values),
            ):
                mentions.setdefault(m[mention_key], []).append(self._mention(m))
        return mentions

    def _mention(self, row: Any) -> TripleMention:
        return TripleMention(
            row["session_id"], tuple(self.dialect.json_value(row["message_ids"])),
            row["event_time"], row["ingested_at"], row["origin"],
        )  # fmt: skip


def _owner(scope: Scope) -> tuple[str, str]:
    return owner(scope, "the knowledge-triple store")


def _entry(row: Any) -> TimelineEntry:
    return TimelineEntry(
        row["id"], row["object_key"], row["valid_from"], row["valid_to"], row["ttl"], row["expires_at"]
    )


def _stored(row: Any, mentions: Sequence[TripleMention]) -> StoredTriple:
    return StoredTriple(
        id=row["id"], tenant_id=row["tenant_id"], user_id=row["user_id"],
        **{column: row[column] for column in TRIPLE_COLUMNS}, mentions=tuple(mentions),
    )  # fmt: skip
