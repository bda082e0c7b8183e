"""The PostgreSQL backend: the system of record in one PostgreSQL database with
pgvector, shared by every worker on every machine.

Install it with ``pip install 'llama-index-memory-composable[postgres]'``. :class:`PostgresStore`
implements every port of :mod:`llama_memory.storage.ports` (the ``Storage`` facade);
:class:`PgVectorIndex` is the dense index in the same database. Tables are keyed by
``(tenant_id, user_id, ...)``; the schema is migrated on open (:data:`MIGRATIONS`).
:class:`PostgresProfileRows` and :class:`PostgresTripleTimeline` keep the profile and
the knowledge triples in it. ``ComposableMemory.from_defaults(store="postgresql://...")``
opens a whole memory on it.
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
