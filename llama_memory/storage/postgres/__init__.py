"""The PostgreSQL backend: the system of record in one PostgreSQL database with
pgvector, shared by every worker on every machine (issue 15).

Install it with ``pip install 'llama-memory[postgres]'``. :class:`PostgresStore`
implements every port of :mod:`llama_memory.storage.ports` (the ``Storage`` facade);
:class:`PgVectorIndex` is the dense index in the same database. Tables are keyed by
``(tenant_id, user_id, ...)``; the schema is migrated on open (:data:`MIGRATIONS`).
Not yet here: the profile and triple ports, ``from_defaults(store="postgresql://...")``.
"""

from .chat import ChatCursor, PostgresChatLog
from .connection import PostgresConnection, describe_url
from .schema import MIGRATIONS
from .store import PostgresStore
from .vectors import PgVectorIndex

__all__ = [
    "MIGRATIONS",
    "ChatCursor",
    "PgVectorIndex",
    "PostgresChatLog",
    "PostgresConnection",
    "PostgresStore",
    "describe_url",
]
