"""The PostgreSQL backend (``pip install 'llama-index-memory-composable[postgres]'``): the
system of record and its vectors (pgvector) in one database, shared by every worker;
``ComposableMemory.from_defaults(store="postgresql://...")`` opens a memory on it.
"""

from .bundle import PostgresProfileRows, PostgresTripleTimeline
from .chat import ChatCursor, PostgresChatLog
from .connection import PostgresConnection
from .schema import MIGRATIONS
from .store import PostgresStore
from .urls import describe_url
from .vectors import PgVectorIndex

__all__ = [
    "MIGRATIONS",
    "ChatCursor",
    "PgVectorIndex",
    "PostgresChatLog",
    "PostgresConnection",
    "PostgresProfileRows",
    "PostgresStore",
    "PostgresTripleTimeline",
    "describe_url",
]
