"""Storage, the bottom layer: the ports (:mod:`.ports`), the backends chosen by location
(:mod:`.registry`: SQLite with Chroma, PostgreSQL with pgvector), the algorithms written
once over SQL (:mod:`.sql`); re-exported here, the embedded backend's store and index."""

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
