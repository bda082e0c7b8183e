"""Store-wide reads and writes for managing a memory on SQLite: the SQL behind
:mod:`llama_memory.admin.memory_admin`, written once for every SQL backend in
:class:`~llama_memory.storage.sql.admin.AdminRows`.

Here is what SQLite does its own way: the tables of the profile and triple sources
(and the job queue's) exist only once such a source was opened on the file, so every
read treats a missing table as empty; records keep their write order in ``rowid``.
"""

from __future__ import annotations

from ..sql.admin import AdminRows
from .connection import SQLITE
from .triples import SQLiteTripleTimeline

__all__ = ["StoreAdmin"]


class StoreAdmin(AdminRows):
    """Administrative reads and writes on one SQLite store, for one tenant at a time
    (the :class:`~llama_memory.storage.sql.admin.AdminRows` port on SQLite)."""

    dialect = SQLITE
    record_order = "rowid"
    tables_on_first_use = True
    timeline_class = SQLiteTripleTimeline

    def tables(self) -> set[str]:
        """The names of the tables in the file."""
        rows = self.store.query(
            "list tables", "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')"
        )
        return {row["name"] for row in rows}

    def _existing(self, *tables: str) -> set[str]:
        return set(tables) & self.tables()

    def refresh_statistics(self) -> None:
        """Nothing to do: the SQLite store's queries are planned without statistics (its
        plans are fixed in the SQL, e.g. the full-text join's CROSS JOIN)."""
