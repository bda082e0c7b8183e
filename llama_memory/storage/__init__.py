"""Storage: the SQLite system of record and the Chroma dense index derived from it."""

from .chroma import DenseIndex, ephemeral_client, persistent_client
from .sqlite import SQLiteChatLog, SQLiteStore, content_hash, normalize_text

__all__ = [
    "DenseIndex",
    "SQLiteChatLog",
    "SQLiteStore",
    "content_hash",
    "ephemeral_client",
    "normalize_text",
    "persistent_client",
]
