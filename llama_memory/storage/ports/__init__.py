"""The storage ports: the interfaces everything above ``llama_memory.storage`` depends on.

A backend implements them (``llama_memory.storage.sqlite`` with FTS5, and
``llama_memory.storage.chroma`` for the dense index); sources, retrieval and the
memory only ever see these types and plain domain rows (``MemoryRecord``, ``Scope``,
``NewRecord``...): no connection, no SQL, no rowid. See docs/architecture.md.
"""

from .base import MetaStore, Storage, Transactional, UserDeletion, one_connection
from .chat import ChatLog, ChatLogChanges, ChatStore, SharedChatLog
from .jobs import JOB_STATES, FormationDay, Job, JobQueue, JobRow, PassCost
from .lexical import LexicalIndex
from .records import IndexedRows, IndexFlags, NewRecord, PendingRecord, RecordStore
from .vectors import Vector, VectorCopies, VectorIndex

__all__ = [
    "JOB_STATES",
    "ChatLog",
    "ChatLogChanges",
    "ChatStore",
    "IndexFlags",
    "IndexedRows",
    "Job",
    "FormationDay",
    "JobQueue",
    "JobRow",
    "PassCost",
    "LexicalIndex",
    "MetaStore",
    "NewRecord",
    "PendingRecord",
    "RecordStore",
    "SharedChatLog",
    "Storage",
    "Transactional",
    "UserDeletion",
    "one_connection",
    "Vector",
    "VectorCopies",
    "VectorIndex",
]
# Ports of the triple timeline and of profile rows, imported below, one line each.
from .profile import ProfileChange, ProfileRows, ProfileValue, ProfileWrite  # noqa: E402
from .triples import (  # noqa: E402
    NewTriple,
    StoredTriple,
    TimelineEntry,
    TripleEdge,
    TripleMention,
    TripleRef,
    TripleRow,
    TripleTimeline,
)

__all__ += [
    "NewTriple",
    "ProfileChange",
    "ProfileRows",
    "ProfileValue",
    "ProfileWrite",
    "StoredTriple",
    "TimelineEntry",
    "TripleEdge",
    "TripleMention",
    "TripleRef",
    "TripleRow",
    "TripleTimeline",
]
