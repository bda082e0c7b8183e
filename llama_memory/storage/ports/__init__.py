"""The storage ports: what a backend writes, and the plain rows the storage parts take
and return.

A backend writes the connection (:class:`Transactional`, with ``query``: the
:class:`~llama_memory.storage.sql.dialect.SQLStore` port), its lexical index
(:class:`LexicalIndex`), its chat logs (:class:`SharedChatLog`), the dense index
(:class:`VectorIndex`) and its bundle (:mod:`llama_memory.storage.backend`); the parts
a memory reads and writes (records, jobs, triples, profile rows, admin rows, meta) are
written once over SQL in :mod:`llama_memory.storage.sql`, the store that holds them being
:class:`~llama_memory.storage.sql.store.Storage`. Sources, retrieval and the memory see
these types and plain domain rows (``MemoryRecord``, ``Scope``, ``NewRecord``...): no
connection, no SQL, no rowid. See docs/architecture.md.
"""

from .base import SessionSummary, StoreCounts, Transactional, UserSummary
from .chat import ChatLog, ChatLogChanges, SharedChatLog
from .jobs import JOB_STATES, FormationDay, Job, JobRow, PassCost
from .profile import ProfileChange, ProfileValue, ProfileWrite
from .records import IndexFlags, LexicalIndex, NewRecord, PendingRecord, RankedLexicalIndex
from .triples import (
    NewTriple,
    StoredTriple,
    TimelineEntry,
    TripleEdge,
    TripleMention,
    TripleRef,
    TripleRow,
)
from .vectors import Vector, VectorIndex

__all__ = [
    "JOB_STATES",
    "ChatLog",
    "ChatLogChanges",
    "FormationDay",
    "IndexFlags",
    "Job",
    "JobRow",
    "LexicalIndex",
    "RankedLexicalIndex",
    "NewRecord",
    "NewTriple",
    "PassCost",
    "PendingRecord",
    "ProfileChange",
    "ProfileValue",
    "ProfileWrite",
    "SessionSummary",
    "SharedChatLog",
    "StoreCounts",
    "StoredTriple",
    "TimelineEntry",
    "Transactional",
    "TripleEdge",
    "TripleMention",
    "TripleRef",
    "TripleRow",
    "UserSummary",
    "Vector",
    "VectorIndex",
]
