"""Long-term records in PostgreSQL: what it does its own way over the shared
:class:`~llama_memory.storage.sql.records.RecordStore`: session order (``seq``), vector
copies in a column, and the full-text index (a generated ``tsvector``) and word counts."""

from __future__ import annotations

import time
from collections.abc import Collection, Iterator, Sequence
from typing import Any, Optional

import psycopg

from ...core.text import word_tokens
from ...core.types import STANDALONE_KEY, MemoryRecord, Scope, is_alive
from ..ports.records import NewRecord, PendingRecord
from ..sql.records import RECORD_COLUMNS, RecordStore, to_record
from .connection import PostgresConnection
from .schema import USER_WORDS_FUNCTION

#: A user of more records than this has their words counted on this many of their rows
#: (an idf needs rough counts only); a smaller user's exactly, by ``records_user_words``.
SAMPLE_ROWS = 5_000
#: How many records one user holds (all sources); parameters: tenant, user.
_USER_SIZE = "(SELECT count(*) FROM records WHERE tenant_id = %s AND user_id = %s)"
def _owner_words(tenant: str, user: str, words: str) -> str:
    """SQL for the owner-keyed words of the tsvector ``words``: one expression for rows and
    texts, so keys match."""
    return f"{USER_WORDS_FUNCTION}(hashtextextended({tenant} || chr(31) || {user}, 0), {words})"


#: A row's words keyed by its owner: the index expression of ``records_user_words``.
USER_WORDS = _owner_words("tenant_id", "user_id", "tsv")


def _user_words(tenant: str, user: str, text: str) -> str:
    return _owner_words(tenant, user, f"to_tsvector('english', {text})")


# The index finds the rows that may hold the words; the owner's key is a hash, so the
# tenant and user are checked again, on the row, where the planner cannot take them to
# an index of its own (it otherwise ANDs the index's few rows with all the user's).
_OWNED_BY = "ROW(tenant_id, user_id) IS NOT DISTINCT FROM ROW(%s::text, %s::text)"
#: The default of :attr:`RecordTables.rank_candidates`.
RANK_CANDIDATES = 100
# The query search_text scores a row with: the row's own words of the query. ts_rank_cd
# costs a row about 2 us for each word of the query, held by the row or not (20-30 us a
# row for a question of 10-15 words); the score is the same, as a word the row lacks adds
# nothing to cover density. Built from the row's tsvector cut to the query's lexemes
# (``lx``), stripped, in tsquery syntax (the two types quote a lexeme alike). A query
# with a phrase ("x_y": 'x' <-> 'y') is not an OR of words: it is scored whole.
_ROW_QUERY = (
    "CASE WHEN strpos(q::text, '<') > 0 THEN q ELSE "
    "replace(strip(ts_delete(tsv, tsvector_to_array(ts_delete(tsv, lx))))::text, ''' ''', ''' | ''')::tsquery END"
)
# The columns the session neighbours' read brings for the get()'s later read of the
# records; the JSON columns as text, parsed by each read (a record's metadata is its own).
_NEIGHBOUR_COLUMNS = "seq, " + RECORD_COLUMNS.replace("message_ids", "message_ids::text AS message_ids").replace(
    "metadata", "metadata::text AS metadata"
)
#: What the pool's check of a connection reads (:meth:`RecordTables._check`): the
#: server's snapshot and whether no record waits for the dense index (``records_pending``).
_CHECK = (
    "SELECT pg_current_snapshot()::text AS s, NOT EXISTS (SELECT 1 FROM records WHERE NOT indexed) AS none_pending"
)
#: The read-ahead key saying that no source has a pending record.
NONE_PENDING = ("no pending records", None)
# Month names in English whatever the process locale (the lexical index is English).
_MONTHS = (
    "January February March April May June July August September October November December".split()
)


class RecordTables(PostgresConnection, RecordStore):
    """The records part of the store: what PostgreSQL does its own way."""

    write_order = "seq"
    with_copies, copy_column = "records r", "r.vector"

    #: How many of a user's matching rows :meth:`search_text` scores with ``ts_rank_cd``
    #: (at least ``limit``): the best by ``ts_rank``, a fifth of the cost; the top 30 stayed
    #: the same as ranking every row (docs/benchmarks.md, "PostgreSQL get() speed, idle").
    rank_candidates: int = RANK_CANDIDATES

    def pending_records(self, source: str, limit: int) -> list[PendingRecord]:
        """Within one ``get()``, a read that found none is remembered: every retrieval of
        the ``get()`` asks, and only a write (a transaction, which forgets it) adds one."""
        key = ("no pending records", source)
        held = self.read_ahead() or {}
        if key in held or NONE_PENDING in held:
            return []
        rows = super().pending_records(source, limit)
        ahead = self.read_ahead()  # the hold's connection is taken by the first statement
        if ahead is not None and not rows:
            ahead[key] = True
        return rows

    def _check(self, conn: Any) -> None:
        """Also reads whether any record waits for the dense index: when none does, the
        ``get()`` the connection serves reads no pending rows (:meth:`pending_records`)."""
        try:
            row = conn.execute(_CHECK).fetchone()
        except psycopg.errors.UndefinedTable:  # a database the schema is not in yet
            super()._check(conn)
            return
        self._checked[conn] = str(row["s"])
        if row["none_pending"]:
            self._checked_ahead[conn] = {NONE_PENDING: True}
        else:  # a connection checked again keeps what the last check read only
            self._checked_ahead.pop(conn, None)

    def _derived_columns(self, rec: NewRecord) -> dict[str, Any]:
        # The full-text index reads the event date in words too (the column ``tsv``).
        return {"event_date": event_date_words(rec.event_time)}

    def session_neighbours(
        self, ids: Sequence[str], scope: Scope, source: str, radius: int
    ) -> dict[str, list[tuple[int, str]]]:
        """Positions are the ``seq`` column, by a ``LATERAL`` join."""
        if not ids or radius < 0:
            return {}
        user = scope.require_user(f"the {source!r} memory source")
        # A standalone hit's neighbours are itself, and a standalone row is no hit's.
        together = (
            f"(r.id = h.id OR (h.metadata->'{STANDALONE_KEY}' IS DISTINCT FROM 'true'"
            f" AND r.metadata->'{STANDALONE_KEY}' IS DISTINCT FROM 'true'))"
        )
        # Within one get() the rows come whole, for the records' read that follows.
        whole = self.holds_connection()
        columns = _NEIGHBOUR_COLUMNS if whole else "seq, id"
        # The limits are written in the statement (whole numbers from the code): as parameters,
        # the server planned the prepared statement afresh at every call (0.15-0.2 ms).
        before, after = int(radius) + 1, int(radius)
        rows = self.query(
            "read session neighbours",
            "SELECT h.id AS hit, n.seq AS pos, n.* FROM records h "
            "CROSS JOIN LATERAL ("
            f"  (SELECT {columns} FROM records r WHERE r.tenant_id = h.tenant_id AND r.user_id = h.user_id"
            "   AND r.source = h.source AND r.session_id IS NOT DISTINCT FROM h.session_id"
            f"   AND r.seq <= h.seq AND {together} ORDER BY r.seq DESC LIMIT {before})"
            "  UNION ALL"
            f"  (SELECT {columns} FROM records r WHERE r.tenant_id = h.tenant_id AND r.user_id = h.user_id"
            "   AND r.source = h.source AND r.session_id IS NOT DISTINCT FROM h.session_id"
            f"   AND r.seq > h.seq AND {together} ORDER BY r.seq LIMIT {after})"
            ") n "
            "WHERE h.tenant_id = %(t)s AND h.user_id = %(u)s AND h.source = %(s)s AND h.id = ANY(%(ids)s)",
            {"t": scope.tenant_id, "u": user, "s": source, "ids": list(ids)},
        )
        found: dict[str, list[tuple[int, str]]] = {}
        ahead = self.read_ahead() if whole else None
        for row in rows:
            found.setdefault(row["hit"], []).append((int(row["pos"]), row["id"]))
        if ahead is not None:
            kind = ("record row", scope.tenant_id, user, source)  # the owner of every row read
            ahead.update(((kind, row["id"]), row) for row in rows)
        return {hit: sorted(around) for hit, around in found.items()}

    def get_records(
        self, ids: Sequence[str], scope: Scope, source: str, alive_at: Optional[float] = None
    ) -> dict[str, MemoryRecord]:
        """Within one ``get()``, built from the rows the session neighbours' read brought."""
        user = scope.require_user(f"the {source!r} memory source")
        rows = _read_ahead(self.read_ahead(), ("record row", scope.tenant_id, user, source), ids)
        if rows is None:
            return super().get_records(ids, scope, source, alive_at)
        return {
            row["id"]: to_record(row) for row in rows if alive_at is None or is_alive(row["expires_at"], alive_at)
        }

    def get_texts(
        self, ids: Sequence[str], scope: Scope, source: str
    ) -> dict[str, tuple[Optional[str], str]]:
        """Within one ``get()``, from what a lexical search or neighbours' read brought."""
        ahead = self.read_ahead()
        user = scope.require_user(f"the {source!r} memory source")
        owner = (scope.tenant_id, user, source)
        rows = _read_ahead(ahead, ("record text", *owner), ids) or _read_ahead(ahead, ("record row", *owner), ids)
        if rows is None:
            return super().get_texts(ids, scope, source)
        return {row["id"]: (row["role"], row["text"]) for row in rows}

    # -- index flags and vector copies ----------------------------------------------------

    def mark_indexed(
        self, ids: Sequence[str], indexed: bool = True, vectors: Optional[Sequence[bytes]] = None
    ) -> None:
        """Flags and vector copies in the column ``vector``."""
        if vectors is not None and len(vectors) != len(ids):
            raise ValueError(f"{len(ids)} record ids but {len(vectors)} vectors")
        with self.transaction("mark records indexed") as conn, conn.cursor() as cur:
            if not indexed:
                cur.execute("UPDATE records SET indexed = false, vector = NULL WHERE id = ANY(%s)", (list(ids),))
            elif vectors is None:
                cur.execute("UPDATE records SET indexed = true WHERE id = ANY(%s)", (list(ids),))
            else:  # row by row in id order, as update_ids locks them: two flushes never deadlock
                cur.executemany(
                    "UPDATE records SET indexed = true, vector = %s WHERE id = %s",
                    [(bytes(v), i) for i, v in sorted(zip(ids, vectors), key=lambda pair: pair[0])],
                )

    def mark_all_unindexed(self, source: str) -> int:
        """Flags and vector copies in the column ``vector``."""
        with self.transaction("reset index flags") as conn:
            cur = conn.execute("UPDATE records SET indexed = false, vector = NULL WHERE source = %s", (source,))
            return cur.rowcount

    # -- lexical search ---------------------------------------------------------------------

    def word_counts(self, words: Sequence[str], scope: Scope) -> tuple[int, dict[str, int]]:
        """Stemmed as the index is; one statement reads the size, counts the words not
        cached and looks elsewhere for uncounted ones (a large user's: on a sample)."""
        user = scope.require_user("word counts")
        owner = (scope.tenant_id, user)
        unique = list(dict.fromkeys(words))
        # Within one get() the counts given are remembered until a transaction: a later
        # retrieval of it asks for words counted already (a question of two parts holds
        # its parts' words) and gets the same counts without a statement.
        key = ("word counts", owner)
        held = self.read_ahead() or {}
        given = held.get(key)
        if given is not None and all(w in given[1] for w in unique):
            return given[0], {w: given[1][w] for w in unique}
        # The words of the get()'s searches not counted yet are counted in the same
        # statement: the get() asks for them next, then without a statement of its own.
        searched = [w for w in held.get(("searched words", owner), ()) if given is None or w not in given[1]]
        total, counts = self._word_counts_of(owner, list(dict.fromkeys([*unique, *searched])))
        ahead = self.read_ahead()  # the hold's connection is taken by the first statement
        if ahead is not None:
            given = ahead.get(key)
            if given is None or given[0] != total:
                given = (total, {})
                ahead[key] = given
            remembered: dict[str, int] = given[1]
            remembered.update(counts)
        return total, {w: counts[w] for w in unique}

    def _word_counts_of(self, owner: tuple[str, str], unique: list[str]) -> tuple[int, dict[str, int]]:
        """:meth:`word_counts` of distinct words, read (and remembered across calls)."""
        # Which counts are fresh depends on the size the first statement reads: a word not
        # remembered is counted in it, one turned stale by a second (rare: a tenth's growth).
        pending = [w for w in unique if not self._word_counts.holds((*owner, w))]
        maybe_none = [w for w in unique if w in pending or self._word_counts.peek((*owner, w)) == 0]
        total, counted, elsewhere = self._count_words(owner, pending, maybe_none)
        counts: dict[str, int] = {}
        stale: list[str] = []
        for word in unique:
            if word in counted:
                counts[word] = counted[word]
                self._word_counts.put((*owner, word), counted[word], total)
                continue
            cached = self._word_counts.get((*owner, word), total)
            if cached is None:
                stale.append(word)
            else:
                counts[word] = cached
        if stale:  # a stale word may count none now: looked for in the same statement
            _, recounted, also = self._count_words(owner, stale, stale)
            elsewhere += also
            for word, n in recounted.items():
                counts[word] = n
                self._word_counts.put((*owner, word), n, total)
        known = set(elsewhere)
        for word in unique:
            if counts[word] == 0 and word in known:
                counts[word] = 1
        return total, {word: counts[word] for word in unique}

    def _count_words(
        self, owner: tuple[str, str], words: Sequence[str], maybe_none: Sequence[str] = ()
    ) -> tuple[int, dict[str, int], list[str]]:
        """(the user's records, each word's count, those of ``maybe_none`` in their triples
        or profile); beyond :data:`SAMPLE_ROWS` records, counted on a sample and scaled (a
        word the sample lacks is rare: counted exactly)."""
        total, counts, elsewhere = self._count_by_index(owner, words, SAMPLE_ROWS, maybe_none)
        if len(counts) == len(words):
            return total, counts, elsewhere
        # One FILTER clause per word: the SQL text holds placeholders only, never a word.
        # A stop word's query is empty and matches nothing ("the" counts 0).
        matches = "".join(
            f", count(*) FILTER (WHERE s.tsv @@ plainto_tsquery('english', %s)) AS n{i}"
            for i in range(len(words))
        )
        row = self.query(
            "count word matches",
            f"SELECT count(*) AS sampled{matches} FROM (SELECT tsv FROM records "
            "WHERE tenant_id = %s AND user_id = %s LIMIT %s) AS s",
            (*words, *owner, SAMPLE_ROWS),
        )[0]
        scale = total / max(1, int(row["sampled"]))
        found = [int(row[f"n{i}"]) for i in range(len(words))]
        counts = {w: max(1, round(n * scale)) for w, n in zip(words, found) if n}
        rare = [w for w in words if w not in counts]
        if rare:
            counts.update(self._count_by_index(owner, rare)[1])  # size read above
        return total, counts, elsewhere

    def _count_by_index(
        self, owner: tuple[str, str], words: Sequence[str], up_to: Optional[int] = None,
        maybe_none: Sequence[str] = ()
    ) -> tuple[int, dict[str, int], list[str]]:
        """As :meth:`_count_words`, exactly through ``records_user_words``; given ``up_to``,
        only for a user of at most that many records (the size read then, else 0)."""
        size = _USER_SIZE % ("%(t)s", "%(u)s") if up_to is not None else "0"
        listed = list(dict.fromkeys([*words, *maybe_none]))
        counted, looked_for = set(words), set(maybe_none)
        # A stop word has no lexeme (its empty keys every row contains). Each word's keys
        # are made once, beside it (see search_text), and the size and counts once (OFFSET
        # 0: not copied into each place that reads them). The LEFT JOIN gives the size even
        # for no word.
        rows = self.query(
            "count word matches",
            "SELECT s.total, c.word, c.n, c.known FROM (SELECT " + size + " AS total OFFSET 0) AS s "
            "LEFT JOIN LATERAL (SELECT w AS word, n, CASE WHEN z AND coalesce(n, 0) = 0 THEN (EXISTS ("
            "SELECT 1 FROM triples WHERE tenant_id = %(t)s AND user_id = %(u)s "
            "AND tsv @@ plainto_tsquery('english', w)) OR EXISTS ("
            "SELECT 1 FROM profile_fields WHERE tenant_id = %(t)s AND user_id = %(u)s AND superseded_at IS NULL "
            "AND strpos(lower(path || ' ' || coalesce(value_json, '')), folded) > 0)) END AS known "
            "FROM (SELECT w, z, folded, CASE WHEN NOT counts OR s.total > %(up_to)s THEN NULL "
            "WHEN numnode(plainto_tsquery('english', w)) = 0 THEN 0 ELSE "
            "(SELECT count(*) FROM records WHERE " + USER_WORDS + " @> keys AND "
            + _OWNED_BY % ("%(t)s", "%(u)s") + ") END AS n "
            "FROM unnest(%(w)s::text[], %(c)s::boolean[], %(z)s::boolean[], %(f)s::text[]) "
            "AS u(w, counts, z, folded), " + _user_words("%(t)s", "%(u)s", "w") + " AS keys OFFSET 0) AS m"
            ") AS c ON true",
            {"t": owner[0], "u": owner[1], "up_to": up_to, "w": listed,
             "c": [w in counted for w in listed], "z": [w in looked_for for w in listed],
             "f": [w.casefold() for w in listed]},  # fmt: skip
        )
        counts = {row["word"]: int(row["n"]) for row in rows if row["word"] in counted and row["n"] is not None}
        elsewhere = [row["word"] for row in rows if row["known"]]
        return int(rows[0]["total"]), counts, elsewhere

    def search_text(
        self, query: str, scope: Scope, source: str, limit: int, exclude: Collection[str] = ()
    ) -> list[tuple[str, float]]:
        """``ts_rank_cd`` of words OR-ed by ``websearch_to_tsquery`` (no user text is syntax)."""
        user = scope.require_user(f"the {source!r} memory source")
        text = _or_words(query)
        if not text or limit <= 0:
            return []
        return self._ranked_text(text, scope.tenant_id, user, source, max(self.rank_candidates, limit), limit, exclude)

    def rank_text(
        self, query: str, scope: Scope, source: str, exclude: Collection[str] = (), first: int = 30
    ) -> Iterator[tuple[str, float]]:
        """Every candidate the cheap rank picks (at least ``first``) comes back scored
        from one statement; reading past them all searches four times as many."""
        user = scope.require_user(f"the {source!r} memory source")
        text = _or_words(query)
        candidates = max(self.rank_candidates, first)
        given: set[str] = set()
        while text:
            rows = self._ranked_text(text, scope.tenant_id, user, source, candidates, candidates, exclude)
            for found in rows:
                if found[0] not in given:
                    given.add(found[0])
                    yield found
            if len(rows) < candidates:
                return
            candidates *= 4

    def _ranked_text(
        self, text: str, tenant: str, user: str, source: str, candidates: int, limit: int, exclude: Collection[str]
    ) -> list[tuple[str, float]]:
        """The ``limit`` best by ``ts_rank_cd`` of the ``candidates`` best by ``ts_rank``."""
        # ts_rank_cd costs ~15 us a row, ts_rank a fifth of it: a question shares a common
        # word with hundreds of the user's rows, so the cheap rank picks the candidates.
        # records_user_words gives the user's rows holding any word of the query (a
        # superset: a phrase needs all its words), then matched by ts_match_vq (tsv @@ q in
        # a form no index serves). The query's parts are made once, in FROM: a generic plan
        # evaluates an expression of its parameters for every row (180 ms at 2,000 rows).
        # Within one get() the rows bring their texts, which the get() reads next.
        texts = ", role, text" if self.holds_connection() else ""
        rows = self.query(
            "search text",
            f"SELECT id{texts}, ts_rank_cd(tsv, {_ROW_QUERY}) AS score FROM ("
            f"SELECT id{texts}, seq, tsv, q, lx FROM records, websearch_to_tsquery('english', %(q)s) AS q, "
            f"tsvector_to_array(to_tsvector('english', %(q)s)) AS lx, {_user_words('%(t)s', '%(u)s', '%(q)s')} AS keys "
            f"WHERE {USER_WORDS} && keys "
            "AND tenant_id = %(t)s AND user_id = %(u)s AND source = %(s)s AND ts_match_vq(tsv, q) "
            f"{'AND NOT (id = ANY(%(x)s::text[])) ' if exclude else ''}"
            "ORDER BY ts_rank(tsv, q) DESC, seq LIMIT %(n)s) AS c ORDER BY score DESC, seq LIMIT %(k)s",
            {"q": text, "t": tenant, "u": user, "s": source, "n": candidates, "k": limit,
             **({"x": list(exclude)} if exclude else {})},
        )
        ahead = self.read_ahead() if texts else None
        if ahead is not None:
            ahead[("searched words", (tenant, user))] = text.split(" or ")
            kind = ("record text", tenant, user, source)  # for the get()'s later get_texts
            ahead.update(((kind, row["id"]), row) for row in rows)
        return [(row["id"], float(row["score"])) for row in rows]


def _read_ahead(ahead: Optional[dict[Any, Any]], kind: Any, ids: Sequence[str]) -> Optional[list[Any]]:
    """What ``ahead`` holds of ``kind`` (a read and its rows' owner) for each of ``ids``
    (distinct), or None when it lacks one (or there is no ``get()``)."""
    if not ahead or not ids:
        return None
    found = []
    for rid in dict.fromkeys(ids):
        held = ahead.get((kind, rid))
        if held is None:
            return None
        found.append(held)
    return found


def _or_words(query: str) -> str:
    """The distinct words of ``query`` (but "or") joined by "or"; '' when none."""
    return " or ".join(dict.fromkeys(w for w in word_tokens(query) if w != "or"))


def event_date_words(event_time: Optional[float]) -> str:
    """The event date in words, e.g. "8 May 2023" (UTC), as the lexical index reads it."""
    if event_time is None:
        return ""
    day = time.gmtime(event_time)
    return f"{day.tm_mday} {_MONTHS[day.tm_mon - 1]} {day.tm_year}"
