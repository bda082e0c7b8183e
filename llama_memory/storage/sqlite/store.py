"""The SQLite store: every part on one connection, with what SQLite does its own way: the
chat history (JSON messages in commit order, shared by every reader of the file) and the
lexical search over records in FTS5 (kept by triggers, see the schema).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Collection, Hashable, Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple, Optional

from ...core.text import word_tokens
from ...core.types import STANDALONE_KEY, Scope
from ..codec import load_message
from ..ports.chat import ChatLogChanges
from ..sql.store import SQLChatLog, SQLChatTables, Storage, conversation_key, replaced
from .connection import SQLiteConnection
from .schema import JOB_MIGRATIONS, SESSION_ORDER_MIGRATIONS

if TYPE_CHECKING:
    from llama_index.core.base.llms.types import ChatMessage


# Words too common to help a lexical query; dropping them keeps FTS5 from scoring every row.
_STOPWORDS = frozenset(
    "a an and are as at be been but by did do does for from had has have he her hers him his how "
    "i if in into is it its me my of on or our she so than that the their them then there these "
    "they this to was we were what when where which who whom why will with would you your".split()
)

#: In a large store, a query word in more than this share of the indexed records is left
#: out of lexical search: BM25 gives it little weight (log(3) against about 7 for a rare
#: word), and scoring its matches is most of the cost (40% of 30,000 records: 30 of 45 ms).
MAX_TERM_SHARE = 0.25
#: Below this many indexed records every word is kept: counting costs more than it saves.
PRUNE_FROM_RECORDS = 2000
#: In a large store, lexical search scores at most about this many matches (rows x
#: words), the rarest words first: BM25 costs a few microseconds per match, and a
#: word of 100,000 records would otherwise cost more than the rest of a get().
LEXICAL_POSTINGS_BUDGET = 1000
#: The condition leaving out the records whose ids a JSON list holds (``{}``: the rowid).
_NOT_LEFT_OUT = " AND {} NOT IN (SELECT rowid FROM records WHERE id IN (SELECT value FROM json_each(?)))"
#: search_text first takes this many times ``limit`` of the index's best matches.
_OWNER_OVERFETCH = 2
#: Whether a record is a standalone statement (its JSON metadata's mark; 0 or 1).
_STANDALONE = f"(metadata <> '{{}}' AND json_extract(metadata, '$.{STANDALONE_KEY}') IS 1)"


def fts_words(text: str) -> list[str]:
    """The distinct non-stopwords of a text, lower-cased, in order."""
    return list(dict.fromkeys(w for w in word_tokens(text) if w not in _STOPWORDS))


def fts_query(text: str) -> str:
    """An FTS5 MATCH of the text's distinct non-stopwords, OR-ed and quoted so that no user
    text is read as FTS5 syntax ('' for none)."""
    return _match_any(fts_words(text))


def _match_any(words: Sequence[str]) -> str:
    return " OR ".join(f'"{w}"' for w in words)


class LexicalTables(SQLiteConnection):
    """The lexical index part of the store (table ``records_fts``)."""

    def search_text(
        self, query: str, scope: Scope, source: str, limit: int, exclude: Collection[str] = ()
    ) -> list[tuple[str, float]]:
        """BM25 scores turned positive; ``exclude`` is left out in the query itself."""
        user = scope.require_user(f"the {source!r} memory source")
        words = fts_words(query)
        if not words or limit <= 0:
            return []
        owner = (source, scope.tenant_id, user)
        # The ids left out as one JSON parameter, matched by the records' id index once.
        skip, skipped = ("", ()) if not exclude else (_NOT_LEFT_OUT, (json.dumps(list(exclude)),))
        with self._lock:
            match = _match_any(self._selective_words(words))
            # First the best matches of the whole index without the join: a store usually
            # holds one user's records. Only when too few are theirs does the join run (exact
            # either way: the user's top ``limit`` are the first of theirs in the global order).
            fetch = limit * _OWNER_OVERFETCH
            top = self.query(
                "search text",
                "SELECT rowid, -bm25(records_fts, 1.0, 0.5) AS score FROM records_fts "
                f"WHERE records_fts MATCH ?{skip.format('rowid')} ORDER BY score DESC LIMIT ?",
                (match, *skipped, fetch),
            )
            # The owners of the first ``limit`` first: all the user's, the rest need no look-up.
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
        """One statement (BM25 scores every match whatever the LIMIT), each match joined to
        its record; ``exclude`` is dropped here, the same rows in the same order (the sort
        keeps ties in the order of the matches) as leaving it out in the statement, which
        cost 0.15 ms a search more."""
        user = scope.require_user(f"the {source!r} memory source")
        words = fts_words(query)
        if not words:
            return iter(())
        with self._lock, self._errors("search text"):
            match = _match_any(self._selective_words(words))
            cursor = self._conn.cursor()
            cursor.row_factory = None  # plain tuples: there may be a thousand rows
            # CROSS JOIN keeps the index's matches the outer loop (see _word_count).
            ranked = cursor.execute(
                "SELECT r.id, -bm25(records_fts, 1.0, 0.5) AS score FROM records_fts "
                "CROSS JOIN records r ON r.rowid = records_fts.rowid "
                "WHERE records_fts MATCH ? AND r.source = ? AND r.tenant_id = ? AND r.user_id = ? "
                "ORDER BY score DESC",
                (match, source, scope.tenant_id, user),
            ).fetchall()
        if exclude:
            left_out = exclude if isinstance(exclude, (set, frozenset)) else set(exclude)
            return (row for row in ranked if row[0] not in left_out)
        return iter(ranked)

    def _ids_of_owner(self, rowids: Sequence[int], owner: tuple[str, str, str]) -> dict[int, str]:
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
        """The words worth scoring: from :data:`PRUNE_FROM_RECORDS` records, common ones
        dropped, the rest rarest first within :data:`LEXICAL_POSTINGS_BUDGET` (BM25 scores
        every match before sorting: this bounds a search's cost by a constant)."""
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
        """Counted as FTS5 matches (stemmed); remembered until the records grow by a tenth."""
        user = scope.require_user("word counts")
        owner = (scope.tenant_id, user)
        with self._lock:
            total = int(self.query(
                "size the user's records",
                "SELECT count(*) FROM records WHERE tenant_id = ? AND user_id = ?", owner
            )[0][0])
            counts = {word: self._word_count(word, total, owner) for word in dict.fromkeys(words)}
            unseen = [w for w, n in counts.items() if n == 0]
            for word in self._known_elsewhere(unseen, scope):
                counts[word] = 1
            return total, counts

    def _known_elsewhere(self, words: Sequence[str], scope: Scope) -> list[str]:
        """Those of ``words`` in the user's triples or current profile fields."""
        if not words:
            return []
        found = self.query(
            "find tables",
            "SELECT name FROM sqlite_master WHERE name IN ('triples_fts', 'profile_fields')",
        )
        tables = {row[0] for row in found}
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
        """How many indexed records (of ``owner``, given) match ``word``; counted again once
        ``total`` has grown by a tenth (a count walks the whole posting list)."""
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


class ChatRows(NamedTuple):
    """Messages of one conversation and the ``seq`` of its first and last rows (None, 0: empty)."""

    messages: list[ChatMessage]
    first: Optional[int]
    last: int


class ChatTables(SQLiteConnection, SQLChatTables):
    """The chat history part of the store (table ``chat_messages``)."""

    def load_chat(self, scope: Scope) -> list[ChatMessage]:
        """One conversation's messages, oldest first."""
        rows = self.query(
            "load chat history",
            "SELECT message_json FROM chat_messages "
            "WHERE tenant_id = ? AND user_id = ? AND session_id = ? ORDER BY seq",
            conversation_key(scope),
        )
        return [load_message(row["message_json"]) for row in rows]

    def append_chat(self, scope: Scope, messages: Sequence[ChatMessage]) -> None:
        """Append messages to one conversation, in one transaction."""
        with self.transaction("append chat history") as conn:
            self._insert_chat(conn, scope, messages)

    def replace_chat(self, scope: Scope, messages: Sequence[ChatMessage]) -> None:
        """Replace one conversation's messages, atomically."""
        with self.transaction("replace chat history") as conn:
            self._delete_chat(conn, scope)
            self._insert_chat(conn, scope, messages)

    def chat_since(self, scope: Scope, after: int) -> ChatRows:
        """Messages after ``seq`` ``after`` and the bounds, in one snapshot (by the session
        index: the cost follows the new rows)."""
        with self._lock, self._errors("read new chat history"):
            own = not self._conn.in_transaction
            if own:  # one snapshot: the rows and the bounds must agree
                self._conn.execute("BEGIN")
            try:
                return self._chat_since(self._conn, scope, after)
            finally:
                if own:
                    self._conn.execute("COMMIT")

    def append_chat_after(
        self, scope: Scope, after: int, messages: Sequence[ChatMessage]
    ) -> tuple[ChatRows, ChatRows, tuple[int, int]]:
        """Append; what :meth:`chat_since` saw before (read under the write lock), the
        bounds after, the stamp once committed."""
        with self.transaction("append chat history") as conn:
            stamp = self._stamp_after_commit()
            before = self._chat_since(conn, scope, after)
            self._insert_chat(conn, scope, messages)
            after_append = self._chat_bounds(conn, scope)
        return before, after_append, stamp

    def replace_chat_bounds(
        self, scope: Scope, messages: Sequence[ChatMessage]
    ) -> tuple[ChatRows, tuple[int, int]]:
        """:meth:`replace_chat`, returning the new bounds and the stamp once committed."""
        with self.transaction("replace chat history") as conn:
            stamp = self._stamp_after_commit()
            self._delete_chat(conn, scope)
            self._insert_chat(conn, scope, messages)
            bounds = self._chat_bounds(conn, scope)
        return bounds, stamp

    @staticmethod
    def _chat_bounds(conn: sqlite3.Connection, scope: Scope) -> ChatRows:
        # Two queries: SQLite answers a lone MIN or MAX from the index in one step, but
        # scans the session's rows for both in one query.
        key = conversation_key(scope)
        where = "FROM chat_messages WHERE tenant_id = ? AND user_id = ? AND session_id = ?"
        first = conn.execute(f"SELECT MIN(seq) {where}", key).fetchone()[0]
        last = conn.execute(f"SELECT MAX(seq) {where}", key).fetchone()[0]
        return ChatRows([], first, last or 0)

    @classmethod
    def _chat_since(cls, conn: sqlite3.Connection, scope: Scope, after: int) -> ChatRows:
        rows = conn.execute(
            "SELECT seq, message_json FROM chat_messages "
            "WHERE tenant_id = ? AND user_id = ? AND session_id = ? AND seq > ? ORDER BY seq",
            (*conversation_key(scope), after),
        ).fetchall()
        bounds = cls._chat_bounds(conn, scope)
        return ChatRows([load_message(row["message_json"]) for row in rows], bounds.first, bounds.last)

class ChatCursor(NamedTuple):
    """How far a reader of a :class:`SQLiteChatLog` read: the change stamp, the bounds."""

    stamp: tuple[int, int]
    first: Optional[int]
    last: int


class SQLiteChatLog(SQLChatLog):
    """One conversation's shared chat log on a SQLite file. Sequence numbers only grow
    (``AUTOINCREMENT``), so a conversation whose first one changed was replaced or cleared.
    """

    store: ChatTables

    def load(self) -> list[ChatMessage]:
        return self.store.load_chat(self.scope)

    def append(self, messages: Sequence[ChatMessage]) -> None:
        self.store.append_chat(self.scope, messages)

    def changes(self, cursor: Optional[ChatCursor]) -> Optional[ChatLogChanges]:
        """None also while another thread writes through this store."""
        # Read before the rows: a commit after it shows next time (a reader never waits).
        stamp = self.store.change_stamp(wait=cursor is None)
        if stamp is None or (cursor is not None and cursor.stamp == stamp):
            return None
        rows = self.store.chat_since(self.scope, cursor.last if cursor is not None else 0)
        return ChatLogChanges(
            rows.messages, replaced(cursor, rows.first), ChatCursor(stamp, rows.first, rows.last)
        )

    def append_after(
        self, cursor: Optional[ChatCursor], messages: Sequence[ChatMessage]
    ) -> ChatLogChanges:
        before, bounds, stamp = self.store.append_chat_after(
            self.scope, cursor.last if cursor is not None else 0, messages
        )
        return ChatLogChanges(
            before.messages, replaced(cursor, before.first), ChatCursor(stamp, bounds.first, bounds.last)
        )

    def replace_all(self, messages: Sequence[ChatMessage]) -> ChatCursor:
        bounds, stamp = self.store.replace_chat_bounds(self.scope, messages)
        return ChatCursor(stamp, bounds.first, bounds.last)


# Rows that belong to a user through a row of another table, with no trigger to delete
# them with it: deleted first when the user is (see RecordStore.delete_user).
_USER_DEPENDENTS: dict[str, tuple[str, ...]] = {
    "triples": (
        "DELETE FROM triples_fts WHERE rowid IN "
        "(SELECT seq FROM triples WHERE tenant_id = ? AND user_id = ?)",
        "DELETE FROM triple_mentions WHERE triple_seq IN "
        "(SELECT seq FROM triples WHERE tenant_id = ? AND user_id = ?)",
    ),
}


class SQLiteStore(ChatTables, LexicalTables, Storage):
    """A thread-safe SQLite system of record.

    Args:
        path: directory of the memory (the file :data:`DB_FILENAME` is created in
            it), or ``None`` for a private in-memory database.
        timeout: seconds a statement waits for another process's write lock.
        driver: how the file is opened: plain ``sqlite3`` or SQLCipher with a key
            (:func:`~llama_memory.storage.sqlite.driver.sqlite_driver`), and whether
            the files are owner-only (the default). Default: SQLCipher when
            ``LLAMA_MEMORY_ENCRYPTION_KEY`` is set.

    The :class:`~llama_memory.storage.sql.store.Storage` facade on SQLite; driver errors
    are re-raised as :class:`~llama_memory.core.errors.StorageError` naming the file.
    """

    user_dependents = _USER_DEPENDENTS
    chat_log_type = SQLiteChatLog
    _jobs_ready = False

    def _jobs_table(self) -> None:
        if not self._jobs_ready:
            self.ensure_schema("jobs", JOB_MIGRATIONS)
            self._jobs_ready = True

    # -- what SQLite's records do their own way: session neighbours along ``rowid``, and
    # vector copies in the table ``record_vectors`` (deleted with their record by a trigger)

    write_order = "rowid"
    with_copies, copy_column = "records r LEFT JOIN record_vectors v ON v.id = r.id", "v.vector"

    def session_neighbours(
        self, ids: Sequence[str], scope: Scope, source: str, radius: int
    ) -> dict[str, list[tuple[int, str]]]:
        """Positions are ``rowid``s; call :meth:`ensure_session_order` once first, or each
        lookup scans the user's records."""
        if not ids or radius < 0:
            return {}
        user = scope.require_user(f"the {source!r} memory source")
        marks = ",".join("?" * len(ids))
        hits = [
            row
            for row in self.query(
                "read record positions",
                f"SELECT id, rowid AS pos, session_id, source, tenant_id, user_id, {_STANDALONE} AS alone "
                f"FROM records WHERE id IN ({marks})",
                tuple(ids),
            )
            if (row["source"], row["tenant_id"], row["user_id"]) == (source, scope.tenant_id, user)
        ]
        found: dict[str, list[tuple[int, str]]] = {hit["id"]: [(hit["pos"], hit["id"])] for hit in hits if hit["alone"]}
        hits = [hit for hit in hits if not hit["alone"]]
        if not hits:
            return found
        # One statement for all hits: per hit, the rows up to it and the rows after it
        # in its session, each read backwards or forwards along records_by_session.
        same = f"source = ? AND tenant_id = ? AND user_id = ? AND session_id IS ? AND NOT {_STANDALONE}"
        parts, params = [], []
        for n, hit in enumerate(hits):
            key = (source, scope.tenant_id, user, hit["session_id"])
            parts.append(
                f"SELECT * FROM (SELECT {n} AS hit, rowid AS pos, id FROM records WHERE {same} "
                f"AND rowid <= ? ORDER BY rowid DESC LIMIT ?)"
            )
            parts.append(
                f"SELECT * FROM (SELECT {n} AS hit, rowid AS pos, id FROM records WHERE {same} "
                f"AND rowid > ? ORDER BY rowid LIMIT ?)"
            )
            params += [*key, hit["pos"], radius + 1, *key, hit["pos"], radius]
        rows = self.query("read session neighbours", " UNION ALL ".join(parts), params)
        around: dict[str, list[tuple[int, str]]] = {hit["id"]: [] for hit in hits}
        for row in rows:
            around[hits[row["hit"]]["id"]].append((row["pos"], row["id"]))
        return {**found, **{hit: sorted(rows) for hit, rows in around.items()}}

    def ensure_session_order(self) -> None:
        """Create the index that finds a record's session neighbours (once per file)."""
        self.ensure_schema("session-order", SESSION_ORDER_MIGRATIONS)

    def mark_indexed(
        self, ids: Sequence[str], indexed: bool = True, vectors: Optional[Sequence[bytes]] = None
    ) -> None:
        """Flags and vector copies in ``record_vectors``."""
        if vectors is not None and len(vectors) != len(ids):
            raise ValueError(f"{len(ids)} record ids but {len(vectors)} vectors")
        with self.transaction("mark records indexed") as conn:
            conn.executemany(
                "UPDATE records SET indexed = ? WHERE id = ?", [(int(indexed), i) for i in ids]
            )
            if not indexed:
                conn.executemany("DELETE FROM record_vectors WHERE id = ?", [(i,) for i in ids])
            elif vectors is not None:
                conn.executemany(
                    "INSERT OR REPLACE INTO record_vectors (id, vector) "
                    "SELECT id, ? FROM records WHERE id = ?",  # a record deleted meanwhile: none
                    [(v, i) for i, v in zip(ids, vectors)],
                )

    def mark_all_unindexed(self, source: str) -> int:
        """Flags and vector copies in ``record_vectors``."""
        with self.transaction("reset index flags") as conn:
            conn.execute(
                "DELETE FROM record_vectors WHERE id IN (SELECT id FROM records WHERE source = ?)",
                (source,),
            )
            cur = conn.execute("UPDATE records SET indexed = 0 WHERE source = ?", (source,))
            return cur.rowcount

    def change_token(self) -> Hashable:
        return self.data_version()
