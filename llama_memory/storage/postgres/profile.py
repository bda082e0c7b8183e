"""Profile rows (the :class:`~llama_memory.storage.sql.profile.ProfileRows` port) in PostgreSQL.

Table ``profile_fields`` (migration 2 of :data:`~llama_memory.storage.postgres.MIGRATIONS`),
and ``instruction_fields`` for the instructions document (migration 3; see
:data:`~llama_memory.storage.ports.profile.DOCUMENTS`): the same rows as on SQLite, read
and written by :class:`~llama_memory.storage.sql.profile.ProfileRows`. What is
PostgreSQL's own: a ``get()`` reads every document's current rows in one round trip.
"""

from __future__ import annotations

from ...core.types import Scope
from ..ports.profile import DOCUMENTS, ProfileChange
from ..sql.dialect import ALIVE_SQL, owner
from ..sql.profile import CURRENT_COLUMNS, CURRENT_ROWS, ProfileRows
from .dialect import POSTGRES
from .store import PostgresStore

__all__ = ["ALIVE_SQL", "PostgresProfileRows"]

# The current rows of every document of one user (expiry left to the reader: each reads
# at its own time); parameters: tenant and user, once per document.
_CURRENT_OF_EVERY_DOCUMENT = POSTGRES.sql(
    "SELECT * FROM ("
    + " UNION ALL ".join(
        f"SELECT '{table}' AS doc, {CURRENT_COLUMNS}, expires_at FROM {table} WHERE {CURRENT_ROWS}"
        for table in DOCUMENTS.values()
    )
    + ") AS d ORDER BY id"
)


class PostgresProfileRows(ProfileRows):
    """The profile rows of one :class:`PostgresStore` (its schema is migrated on open).

    Args:
        store: the PostgreSQL system of record; it provides the transactions.
        document: which document of the user these rows hold (a key of
            :data:`~llama_memory.storage.ports.profile.DOCUMENTS`): ``"profile"``, or
            ``"instructions"`` (procedural memory), each in its own table.
    """

    dialect = POSTGRES
    store: PostgresStore

    def __init__(self, store: PostgresStore, document: str = "profile") -> None:
        if not isinstance(store, PostgresStore):
            raise TypeError(
                f"PostgresProfileRows keeps the profile in a PostgresStore, not "
                f"{type(store).__name__} {store!r}: pass PostgresStore('postgresql://...')"
            )
        self._open(store, document)

    def current(self, scope: Scope, at: float) -> list[ProfileChange]:
        """The user's current field values, oldest row first (see the port).

        Within one ``get()`` (the store's :meth:`~PostgresConnection.one_connection`),
        the first document read reads every document's current rows in one statement,
        and a later read of another document of the same user takes its rows from
        there (a memory reads the instructions, then the profile: one round trip for
        both). Expiry is applied at each read's own time."""
        ahead = self.store.read_ahead()
        if ahead is None:
            return super().current(scope, at)
        user = owner(scope, "the profile memory")
        key = ("current profile rows", self._table, user)
        if key not in ahead:
            every = self.store.query(f"read {self.document}", _CURRENT_OF_EVERY_DOCUMENT, user * len(DOCUMENTS))
            for table in DOCUMENTS.values():
                ahead[("current profile rows", table, user)] = [r for r in every if r["doc"] == table]
        return [self._to_change(row) for row in ahead.pop(key) if row["expires_at"] is None or row["expires_at"] > at]
