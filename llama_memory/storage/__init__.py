"""Storage: the SQLite system of record and the Chroma dense index derived from it."""

from .chroma import DenseIndex, ephemeral_client, http_client, persistent_client
from .reconcile import ReconcileReport, reconcile_index
from .sqlite import SQLiteChatLog, SQLiteStore, content_hash, normalize_text

__all__ = [
    "DenseIndex",
    "ReconcileReport",
    "SQLiteChatLog",
    "SQLiteStore",
    "content_hash",
    "ephemeral_client",
    "http_client",
    "normalize_text",
    "persistent_client",
    "reconcile_index",
]
