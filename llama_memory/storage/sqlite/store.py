"""The SQLite store: every part (chat, records, lexical index, vector copies, jobs) on
one connection; what SQLite's records and jobs do their own way is here."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Optional

from ...core.types import Scope
from ..sql.store import Storage
from .chat import ChatTables, SQLiteChatLog
from .lexical import LexicalTables
from .schema import JOB_MIGRATIONS, SESSION_ORDER_MIGRATIONS

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
            the files are owner-only (the default: a ``0700`` directory, ``0600``
            files). Default: SQLCipher when ``LLAMA_MEMORY_ENCRYPTION_KEY`` is set.

    One connection is shared by all threads behind a lock; WAL mode and a busy
    timeout let several processes use one file. Every error of the driver is
    re-raised as :class:`~llama_memory.core.errors.StorageError` naming the file.

    It is the :class:`~llama_memory.storage.sql.store.Storage` facade: the parts
    written once over SQL, with what SQLite does its own way: the connection
    (``connection.py``), the chat logs (``chat.py``), FTS5 (``lexical.py``), and here the
    records' session neighbours and vector copies and the job queue's table.
    """

    user_dependents = _USER_DEPENDENTS
    _jobs_ready = False

    def _jobs_table(self) -> None:
        """Make the job queue's table on first use (a claim runs under the file's write
        lock, ``BEGIN IMMEDIATE``: two workers never hold one job)."""
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
        """For each record id of the scope's user in ``source``: the ids of the records
        of its session from ``radius`` before it to ``radius`` after it, itself
        included, as (position, id) in the order they were written. Ids not found (or
        another user's) are left out.

        Call :meth:`ensure_session_order` once first, or each lookup scans the user's
        records.
        """
        if not ids or radius < 0:
            return {}
        user = scope.require_user(f"the {source!r} memory source")
        marks = ",".join("?" * len(ids))
        hits = [
            row
            for row in self.query(
                "read record positions",
                f"SELECT id, rowid AS pos, session_id, source, tenant_id, user_id FROM records "
                f"WHERE id IN ({marks})",
                tuple(ids),
            )
            if (row["source"], row["tenant_id"], row["user_id"]) == (source, scope.tenant_id, user)
        ]
        if not hits:
            return {}
        # One statement for all hits: per hit, the rows up to it and the rows after it
        # in its session, each read backwards or forwards along records_by_session.
        same = "source = ? AND tenant_id = ? AND user_id = ? AND session_id IS ?"
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
        found: dict[str, list[tuple[int, str]]] = {hit["id"]: [] for hit in hits}
        for row in rows:
            found[hits[row["hit"]]["id"]].append((row["pos"], row["id"]))
        return {hit: sorted(around) for hit, around in found.items()}

    def ensure_session_order(self) -> None:
        """Create the index that finds a record's session neighbours (once per file)."""
        self.ensure_schema("session-order", SESSION_ORDER_MIGRATIONS)

    def mark_indexed(
        self, ids: Sequence[str], indexed: bool = True, vectors: Optional[Sequence[bytes]] = None
    ) -> None:
        """Record that the dense index holds (or no longer holds) these records.

        ``vectors`` (one encoded vector per id) keeps a copy of each record's vector
        (:meth:`stored_vectors`); un-indexing a record drops its copy.
        """
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
        """Flag every record of ``source`` for re-indexing (their vector copies are
        dropped: the model may have changed); return how many."""
        with self.transaction("reset index flags") as conn:
            conn.execute(
                "DELETE FROM record_vectors WHERE id IN (SELECT id FROM records WHERE source = ?)",
                (source,),
            )
            cur = conn.execute("UPDATE records SET indexed = 0 WHERE source = ?", (source,))
            return cur.rowcount

    def chat_log(self, scope: Scope) -> SQLiteChatLog:
        """The shared log of the scope's conversation."""
        return SQLiteChatLog(self, scope)

    def change_token(self) -> Hashable:
        """Changes when another connection commits to the file (``PRAGMA data_version``)."""
        return self.data_version()

