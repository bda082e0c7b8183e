"""The ``meta`` table of every SQL store (one text value a key: the store's id, what
the dense index was built with, per-user marks), written once: :class:`MetaStore` is a
part of the store's connection class, whose ``transaction`` and ``query`` it uses."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from .dialect import Dialect

__all__ = ["MetaStore"]


class MetaStore:
    """Store-wide key/value settings (the embedding model's identity, schema versions,
    per-user marks): reads and writes of the ``meta`` table (``key`` its primary key)."""

    dialect: ClassVar[Dialect]

    if TYPE_CHECKING:  # what the store this part belongs to provides

        def transaction(self, action: str) -> AbstractContextManager[Any]: ...

        def query(self, action: str, sql: str, params: Sequence[Any] = ()) -> Sequence[Any]: ...

    def get_meta(self, key: str) -> Optional[str]:
        """The value stored under ``key`` in the meta table, or None."""
        rows = self.query("read meta", self.dialect.sql("SELECT value FROM meta WHERE key = ?"), (key,))
        return str(rows[0]["value"]) if rows else None

    def set_meta(self, key: str, value: str) -> None:
        """Store ``value`` under ``key`` in the meta table."""
        with self.transaction("write meta") as conn:
            self.dialect.execute(
                conn,
                "INSERT INTO meta (key, value) VALUES (?, ?) ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                (key, value),
            )

    def set_meta_once(self, key: str, value: str) -> str:
        """Store ``value`` under ``key`` unless a value is there already; return the value
        kept (atomic: of two processes recording at once, both see the first one's)."""
        with self.transaction("write meta") as conn:
            self.dialect.insert_new(conn, "meta", {"key": key, "value": value})
            return str(self.dialect.execute(conn, "SELECT value FROM meta WHERE key = ?", (key,)).fetchone()["value"])

    def delete_meta(self, keys: Sequence[str]) -> None:
        """Remove ``keys`` from the meta table (absent ones are ignored)."""
        with self.transaction("delete meta") as conn:
            for batch in self.dialect.batches(keys):
                listed, values = self.dialect.in_list("key", batch)
                self.dialect.execute(conn, f"DELETE FROM meta WHERE {listed}", values)

    @property
    def store_id(self) -> str:
        """A random id given to this store when first asked, kept in the meta table: it
        keeps the collections of different stores apart on a shared Chroma server."""
        return self.set_meta_once("store_id", uuid.uuid4().hex[:12])
