"""The plain rows the admin rows return (store-wide reads and writes for managing a
memory, what :class:`~llama_memory.admin.memory_admin.MemoryAdmin` and the ``llama-memory``
command line use: :class:`~llama_memory.storage.sql.admin.AdminRows`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from .profile import document_table

#: The export kinds of the documents kept as profile rows (the profile, the user's
#: instructions), and their tables, on every backend.
DOCUMENT_KINDS: dict[str, str] = {
    "profile": document_table("profile"),
    "instruction": document_table("instructions"),
}


@dataclass(frozen=True)
class UserSummary:
    """One user of a tenant and how much is remembered of them.

    Attributes:
        user_id: the user.
        sessions: conversations with stored chat history.
        messages: chat messages stored (all sessions).
        records: long-term records (every source that keeps records: past messages...).
        triples: knowledge triples that currently hold.
        profile_fields: fields of the current profile.
        last_active: the latest time something of theirs was written (epoch seconds).
    """

    user_id: str
    sessions: int = 0
    messages: int = 0
    records: int = 0
    triples: int = 0
    profile_fields: int = 0
    last_active: Optional[float] = None


@dataclass(frozen=True)
class SessionSummary:
    """One conversation of a user.

    Attributes:
        session_id: the session.
        messages: chat messages stored in it.
        records: long-term records written from it.
        first_at, last_at: when its first and latest messages were stored (epoch
            seconds; None for a session known only from records).
    """

    session_id: str
    messages: int = 0
    records: int = 0
    first_at: Optional[float] = None
    last_at: Optional[float] = None


@dataclass
class StoreCounts:
    """What a store holds for one tenant, and what its dense index has not caught up with.

    Attributes:
        users, sessions, messages: chat history.
        records: long-term records by source name.
        triples, triples_current: knowledge triples (with history) and those that hold.
        profile_rows, profile_fields: profile rows (with history) and current fields.
        pending: records (by source name, ``"triples"`` for triples) written but not
            in the dense index yet: embedded on the next read, flush or reindex.
        expired: records, triples and profile rows past their time to live, not yet
            purged.
    """

    users: int = 0
    sessions: int = 0
    messages: int = 0
    records: dict[str, int] = field(default_factory=dict)
    triples: int = 0
    triples_current: int = 0
    profile_rows: int = 0
    profile_fields: int = 0
    pending: dict[str, int] = field(default_factory=dict)
    expired: int = 0
