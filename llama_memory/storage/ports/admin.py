"""The admin port: store-wide reads and writes for managing a memory (what
:class:`~llama_memory.admin.memory_admin.MemoryAdmin` and the ``llama-memory`` command line use),
and the plain rows they return. SQLite implements it in
:mod:`llama_memory.storage.sqlite.admin`, PostgreSQL in :mod:`llama_memory.storage.postgres.admin`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

from ...core.types import MemoryRecord
from ..chat_import import MessageRanks
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


class AdminRows(Protocol):
    """Administrative reads and writes on one store, one tenant at a time (each
    method is documented on the SQLite implementation, :class:`~llama_memory.storage.sqlite.admin.StoreAdmin`)."""

    def has_triples(self) -> bool: ...
    def tenants(self) -> list[str]: ...
    def users(self, tenant_id: str) -> list[UserSummary]: ...
    def sessions(self, tenant_id: str, user_id: str) -> list[SessionSummary]: ...
    def records(
        self,
        tenant_id: str,
        user_id: str,
        *,
        session_id: Optional[str] = None,
        source: Optional[str] = None,
        since: Optional[float] = None,
        until: Optional[float] = None,
        limit: Optional[int] = None,
        newest_first: bool = False,
        ids: Optional[Sequence[str]] = None,
    ) -> list[MemoryRecord]: ...
    def delete_record(self, tenant_id: str, user_id: str, record_id: str) -> Optional[str]: ...
    def delete_triple(self, tenant_id: str, user_id: str, triple_id: str) -> bool: ...
    def counts(self, tenant_id: str, at: float) -> StoreCounts: ...
    def index_backlog(self, source: str) -> tuple[int, int]: ...
    def count_export_rows(self, tenant_id: str, users: Sequence[str]) -> int: ...
    def export_rows(self, tenant_id: str, user_id: str) -> Iterator[dict[str, Any]]: ...
    def import_rows(
        self,
        tenant_id: str,
        rows: Sequence[dict[str, Any]],
        triple_texts: Sequence[str],
        ranks: Optional[MessageRanks] = None,
    ) -> Counter[str]: ...
    def chat_messages(self, tenant_id: str, user_id: str, session_id: str) -> list[str]: ...
    def user_meta(self, tenant_id: str, user_id: str) -> dict[str, str]: ...
    def store_meta(self) -> dict[str, str]: ...
    def user_jobs(self, tenant_id: str, user_id: str) -> list[dict[str, Any]]: ...
    def add_meta(self, entries: dict[str, str]) -> None: ...
    def add_jobs(self, tenant_id: str, user_id: str, jobs: Sequence[dict[str, Any]]) -> None: ...
    def refresh_statistics(self) -> None: ...
