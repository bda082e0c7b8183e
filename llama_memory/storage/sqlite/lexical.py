"""Lexical search over records in SQLite's FTS5 index (kept by triggers, see the schema)."""

from __future__ import annotations

import json
from collections.abc import Collection, Hashable, Iterator, Sequence
from typing import Optional

from ...core.text import word_tokens
from ...core.types import Scope
from .connection import SQLiteConnection

# Words too common to help a lexical query; dropping them keeps FTS5 from scoring every row.
_STOPWORDS = frozenset(
    "a an and are as at be been but by did do does for from had has have he her hers him his how "
    "i if in into is it its me my of on or our she so than that the their them then there these "
    "they this to was we were what when where which who whom why will with would you your".split()
)


#: rare word), and scoring its matches is most of what lexical search costs (a word in 40%
#: of 30,000 records: 30 of 45 ms).
MAX_TERM_SHARE = 0.25
#: Below this many indexed records every word is kept: counting costs more than it saves.
PRUNE_FROM_RECORDS = 2000
#: In a large store, lexical search scores at most about this many matches (rows x
#: words), the rarest words first: BM25 costs a few microseconds per match, and a
#: word of 100,000 records would otherwise cost more than the rest of a get().
LEXICAL_POSTINGS_BUDGET = 1000
#: The condition that leaves out the records whose ids a JSON list holds; ``{}`` is the
#: rowid column it applies to.
_NOT_LEFT_OUT = " AND {} NOT IN (SELECT rowid FROM records WHERE id IN (SELECT value FROM json_each(?)))"
#: search_text first takes this many times ``limit`` of the index's best matches and
#: keeps the user's; only if too few are theirs does it join every match to its record.
_OWNER_OVERFETCH = 2


def fts_words(text: str) -> list[str]:
    """The distinct non-stopwords of a text, lower-cased, in order."""
    return list(dict.fromkeys(w for w in word_tokens(text) if w not in _STOPWORDS))


def fts_query(text: str) -> str:
    """An FTS5 MATCH expression for free text: its distinct non-stopwords, OR-ed and quoted
    (so that no user text is read as FTS5 syntax). '' when nothing is left."""
    return _match_any(fts_words(text))


def _match_any(words: Sequence[str]) -> str:
    return " OR ".join(f'"{w}"' for w in words)


class LexicalTables(SQLiteConnection):
    """The lexical index part of the store (table ``records_fts``)."""

    def search_text(
        self, query: str, scope: Scope, source: str, limit: int, exclude: Collection[str] = ()
    ) -> list[tuple[str, float]]:
        """Records of the scope's user whose text (or event date) shares words with
        ``query``, best first, as (id, score) with BM25 scores turned positive; the
        records of ``exclude`` (ids) are left out in the query itself."""
        user = scope.require_user(f"the {source!r} memory source")
        words = fts_words(query)
        if not words or limit <= 0:
            return []
        owner = (source, scope.tenant_id, user)
        # The ids left out, as one JSON parameter (any number of them); matched to
        # their rows by the records' id index, once per query.
        skip, skipped = ("", ()) if not exclude else (_NOT_LEFT_OUT, (json.dumps(list(exclude)),))
        with self._lock:
            match = _match_any(self._selective_words(words))
            # First the best matches of the whole index, without the join to records: a
            # store usually holds one user's records, and then these are the answer.
            # Only when too few of them are the user's does the join run (exact either way:
            # the user's top ``limit`` are the first ``limit`` of theirs in the global order).
            fetch = limit * _OWNER_OVERFETCH
            top = self.query(
                "search text",
                "SELECT rowid, -bm25(records_fts, 1.0, 0.5) AS score FROM records_fts "
                f"WHERE records_fts MATCH ?{skip.format('rowid')} ORDER BY score DESC LIMIT ?",
                (match, *skipped, fetch),
            )
            # The owner of the first ``limit`` matches first: when they are all the user's
            # (one user's store) they are the answer, and the rest need no look-up.
            rowids = [row["rowid"] for row in top]
            ids = self._ids_of_owner(rowids[:limit], owner)
            if len(ids) < limit:
                ids.update(self._ids_of_owner(rowids[limit:], owner))
            found = [(ids[row["rowid"]], float(row["score"])) for row in top if row["rowid"] in ids]
            if len(found) >= limit or len(top) < fetch:
                return found[:limit]
            # ORDER BY the alias: repeating bm25(...) there would score every row twice.
            rows = self.query(
                "search text",
                "SELECT r.id AS id, -bm25(records_fts, 1.0, 0.5) AS score FROM records_fts "
                "JOIN records r ON r.rowid = records_fts.rowid "
                f"WHERE records_fts MATCH ?{skip.format('r.rowid')} AND r.source = ? AND r.tenant_id = ? "
                "AND r.user_id = ? ORDER BY score DESC LIMIT ?",
                (match, *skipped, *owner, limit),
            )
        return [(row["id"], float(row["score"])) for row in rows]

    def rank_text(
        self, query: str, scope: Scope, source: str, exclude: Collection[str] = (), first: int = 30
    ) -> Iterator[tuple[str, float]]:
        """Every record of the scope's user that :meth:`search_text` may find, in its
        order (best first, as (id, score)), from one statement: BM25 scores every match
        whatever the LIMIT, so a caller that leaves some hits aside (the user's own
        questions) reads on instead of searching again. Each match is joined to its
        record (about 0.3 us a match: less than looking up the owners of a few hundred
        rowids apart, 1-3 us each); BM25 scores only the user's rows."""
        user = scope.require_user(f"the {source!r} memory source")
        words = fts_words(query)
        if not words:
            return iter(())
        skip, skipped = ("", ()) if not exclude else (_NOT_LEFT_OUT.format("r.rowid"), (json.dumps(list(exclude)),))
        with self._lock, self._errors("search text"):
            match = _match_any(self._selective_words(words))
            cursor = self._conn.cursor()
            cursor.row_factory = None  # plain tuples: there may be a thousand rows
            # CROSS JOIN keeps the index's matches the outer loop (see _word_count).
            ranked = cursor.execute(
                "SELECT r.id, -bm25(records_fts, 1.0, 0.5) AS score FROM records_fts "
                "CROSS JOIN records r ON r.rowid = records_fts.rowid "
                f"WHERE records_fts MATCH ?{skip} AND r.source = ? AND r.tenant_id = ? AND r.user_id = ? "
                "ORDER BY score DESC",
                (match, *skipped, source, scope.tenant_id, user),
            ).fetchall()
        return iter(ranked)

    def _ids_of_owner(self, rowids: Sequence[int], owner: tuple[str, str, str]) -> dict[int, str]:
        """The record ids of those ``rowids`` whose (source, tenant, user) is ``owner``."""
        if not rowids:
            return {}
        rows = self.query(
            "search text",
            "SELECT rowid, id, source, tenant_id, user_id FROM records "
            f"WHERE rowid IN ({','.join('?' * len(rowids))})",
            tuple(rowids),
        )
        return {
            row["rowid"]: row["id"]
            for row in rows
            if (row["source"], row["tenant_id"], row["user_id"]) == owner
        }

    def _selective_words(self, words: list[str]) -> list[str]:
        """The words worth scoring. In a large store (from :data:`PRUNE_FROM_RECORDS`
        indexed records) a word found in more than :data:`MAX_TERM_SHARE` of them is
        dropped, and the rest are kept rarest first while their matches add up to at most
        :data:`LEXICAL_POSTINGS_BUDGET` (the rarest always kept): BM25 scores every
        matching row before it can sort, so this bounds a search's cost by a constant
        instead of by the store's size. Small stores keep every word."""
        if len(words) < 2:
            return words
        # max(rowid) is instant and close to the row count (deletions only make it larger,
        # which keeps more words: the safe side).
        total = self.query("size lexical index", "SELECT max(rowid) FROM records_fts")[0][0] or 0
        if total < PRUNE_FROM_RECORDS:
            return words
        counts = {word: self._word_count(word, total) for word in words}
        common = [w for w in words if counts[w] > MAX_TERM_SHARE * total]
        kept: list[str] = []
        postings = 0
        for word in sorted((w for w in words if w not in common), key=counts.__getitem__):
            if kept and postings + counts[word] > LEXICAL_POSTINGS_BUDGET:
                break
            kept.append(word)
            postings += counts[word]
        return kept or [min(words, key=counts.__getitem__)]

    def word_counts(self, words: Sequence[str], scope: Scope) -> tuple[int, dict[str, int]]:
        """How many records the scope's user holds (all sources), and how many of them
        match each word (as FTS5 matches it, stemmed): what an idf needs. Only the
        user's own records count: another user's words must not make a question look
        answerable (nor change how this user's records rank). Counts are remembered until
        the user's records grow by a tenth. A word none of the user's records holds but
        a knowledge triple or a current profile field of the user does (a user's name
        often appears only there) counts as held by one: the store knows it."""
        user = scope.require_user("word counts")
        owner = (scope.tenant_id, user)
        with self._lock:
            total = int(self.query(
                "size the user's records",
                "SELECT count(*) FROM records WHERE tenant_id = ? AND user_id = ?",
                owner,
            )[0][0])
            counts = {word: self._word_count(word, total, owner) for word in dict.fromkeys(words)}
            unseen = [w for w, n in counts.items() if n == 0]
            for word in self._known_elsewhere(unseen, scope):
                counts[word] = 1
            return total, counts

    def _known_elsewhere(self, words: Sequence[str], scope: Scope) -> list[str]:
        """Those of ``words`` found in the user's triples or current profile fields
        (tables that exist only once a triple or profile source has opened the file)."""
        if not words:
            return []
        tables = {
            row[0]
            for row in self.query(
                "find tables",
                "SELECT name FROM sqlite_master WHERE name IN ('triples_fts', 'profile_fields')",
            )
        }
        known = []
        for word in words:
            if "triples_fts" in tables and self.query(
                "find word in triples",
                "SELECT 1 FROM triples_fts JOIN triples AS t ON t.seq = triples_fts.rowid "
                "WHERE triples_fts MATCH ? AND t.tenant_id = ? AND t.user_id = ? LIMIT 1",
                (_match_any([word]), scope.tenant_id, scope.user_id),
            ):
                known.append(word)
            elif "profile_fields" in tables and self.query(
                "find word in profiles",
                "SELECT 1 FROM profile_fields WHERE tenant_id = ? AND user_id = ? "
                "AND superseded_at IS NULL AND instr(lower(path || ' ' || "
                "coalesce(value_json, '')), ?) > 0 LIMIT 1",
                (scope.tenant_id, scope.user_id, word.casefold()),
            ):
                known.append(word)
        return known

    def _word_count(self, word: str, total: int, owner: Optional[tuple[str, str]] = None) -> int:
        """How many indexed records match ``word``, or, given ``owner`` (tenant, user),
        how many of that user's; counted again only once ``total`` (the size counted
        in) has grown by a tenth since (a count walks the word's whole posting list)."""
        key: Hashable = word if owner is None else (*owner, word)
        cached = self._word_counts.get(key, total)
        if cached is not None:
            return cached
        args: tuple[str, ...]
        if owner is None:
            sql, args = "SELECT count(*) FROM records_fts WHERE records_fts MATCH ?", (_match_any([word]),)
        else:
            # CROSS JOIN keeps the word's posting list the outer loop: with a plain JOIN
            # the planner walks the user's rows (records_by_user) and probes the index for
            # each, 100 times slower (2.1 ms against 0.015 ms a word on a LoCoMo store).
            sql = (
                "SELECT count(*) FROM records_fts CROSS JOIN records AS r ON r.rowid = records_fts.rowid "
                "WHERE records_fts MATCH ? AND r.tenant_id = ? AND r.user_id = ?"
            )
            args = (_match_any([word]), *owner)
        count = int(self.query("count word matches", sql, args)[0][0])
        self._word_counts.put(key, count, total)
        return count

