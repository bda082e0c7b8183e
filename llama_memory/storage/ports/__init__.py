"""The storage ports: what a backend writes (``typing.Protocol`` classes), and the plain
rows the storage parts take and return. Code above storage sees these and domain rows:
no connection, no SQL, no rowid. See docs/architecture.md ("The ports").
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
