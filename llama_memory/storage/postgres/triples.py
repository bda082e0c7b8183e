"""The triple timeline on PostgreSQL: tables ``triples`` (with a generated ``tsvector``
of each triple's text for lexical search) and ``triple_mentions`` (see
:mod:`llama_memory.storage.ports.triples`; migration 2 of
:data:`~llama_memory.storage.postgres.MIGRATIONS`).

The timeline's rules are :class:`~llama_memory.storage.sql.triples.TripleTimeline`'s
(shared with SQLite); here is what PostgreSQL does its own way: the words are a
generated ``tsvector`` column searched with ``ts_rank_cd``, mentions carry the user's
key and point at the triple's id, and deleting a triple cascades to its mentions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...core.text import word_tokens
from ...core.types import Scope
from ..sql.dialect import owner
from ..sql.triples import MentionLink, TripleTimeline
from .dialect import POSTGRES
from .store import PostgresStore

__all__ = ["PostgresTripleTimeline"]


class PostgresTripleTimeline(TripleTimeline):
    """:class:`~llama_memory.storage.sql.triples.TripleTimeline` on a
    :class:`PostgresStore` (whose schema is migrated on open).

    Args:
        store: the PostgreSQL system of record; it provides the transactions.
    """

    dialect = POSTGRES
    # Mentions lead with the user's key (tables sharded by user) and point at the id.
    mentions = MentionLink(
        columns="tenant_id, user_id, triple_id",
        sources="tenant_id, user_id, id",
        key=("triple_id", "id"),
        order="seq",
        scoped=True,
    )

    def __init__(self, store: PostgresStore) -> None:
        if not isinstance(store, PostgresStore):
            raise TypeError(
                f"PostgresTripleTimeline keeps triples in a PostgresStore, not "
                f"{type(store).__name__} {store!r}: pass PostgresStore('postgresql://...')"
            )
        self.store = store

    def _insert_row(self, conn: Any, row: Mapping[str, Any], search_text: str) -> None:
        # The lexical entry is the generated tsvector column of search_text.
        self.dialect.insert(conn, "triples", {**row, "search_text": search_text})

    def _delete_where(self, conn: Any, condition: str, params: Sequence[Any]) -> list[Any]:
        # The mentions' foreign key cascades.
        statement = f"DELETE FROM triples WHERE {condition} RETURNING id, tenant_id, user_id"
        return self.dialect.execute(conn, statement, params).fetchall()

    def search_words(
        self, scope: Scope, query: str, k: int, include_history: bool
    ) -> list[tuple[str, float]]:
        """The user's triples best matching ``query``'s words, as (id, ``ts_rank_cd``
        score), best first.

        The words are OR-ed through ``websearch_to_tsquery``, which reads no operator
        but "or" and quotes: no user text is query syntax.
        """
        user = owner(scope, "the knowledge-triple store")
        words = list(dict.fromkeys(w for w in word_tokens(query) if w != "or"))
        if not words or k <= 0:
            return []
        current = "" if include_history else " AND valid_to IS NULL"
        rows = self.store.query(
            "search knowledge triples by words",
            "SELECT id, ts_rank_cd(tsv, q) AS score FROM triples, "
            "websearch_to_tsquery('english', %s) AS q "
            f"WHERE tenant_id = %s AND user_id = %s{current} AND tsv @@ q "
            "ORDER BY score DESC, seq LIMIT %s",
            (" or ".join(words), *user, k),
        )
        return [(r["id"], float(r["score"])) for r in rows]
