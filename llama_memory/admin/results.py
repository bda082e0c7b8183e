"""What :class:`~llama_memory.admin.memory_admin.MemoryAdmin` returns beyond the storage rows (a
user's overview, a store's statistics) and the errors it raises."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..core.errors import LlamaMemoryError
from ..core.types import MemoryRecord
from ..storage.ports import SessionSummary, StoreCounts, UserSummary
from ..storage.ports.jobs import FormationDay

if TYPE_CHECKING:
    from ..sources.instructions import Instruction
    from ..sources.triples import KnowledgeTriple


class StoreNotFoundError(LlamaMemoryError, FileNotFoundError):
    """The path given is not a memory directory (no ``memory.sqlite3`` in it)."""


class UnknownUserError(LlamaMemoryError, KeyError):
    """The store has nothing of the user asked for (in this tenant)."""

    def __str__(self) -> str:  # KeyError would print the message quoted
        return str(self.args[0])


@dataclass
class UserOverview:
    """What is remembered of one user (:meth:`MemoryAdmin.show`).

    Attributes:
        summary: counts (sessions, messages, records, triples, profile fields).
        profile: the current profile as a nested dict.
        triples: the knowledge triples that hold now.
        instructions: the standing instructions the assistant follows for the user.
        recent: the latest long-term records, newest first.
        sessions: the user's conversations.
    """

    summary: UserSummary
    profile: dict[str, Any] = field(default_factory=dict)
    triples: list[KnowledgeTriple] = field(default_factory=list)
    instructions: list[Instruction] = field(default_factory=list)
    recent: list[MemoryRecord] = field(default_factory=list)
    sessions: list[SessionSummary] = field(default_factory=list)


@dataclass
class StoreStats:
    """What a store holds for a tenant (:meth:`MemoryAdmin.stats`).

    Attributes:
        counts: users, sessions, messages, records by source, triples, profile rows,
            records waiting for the dense index (``counts.pending``) and expired ones
            not purged yet.
        sizes: bytes on disk: ``sqlite`` (the file with its WAL), ``chroma`` (the
            embedded index), ``total``; on PostgreSQL ``postgres`` (the tables with their
            indexes) and ``total``.
        schema_version: the SQLite schema version.
        tenants: every tenant in the store.
        location: the store: its directory, or ``host:port/dbname`` (no password).
        jobs: background jobs (formation passes) by state: ``queued`` (waiting,
            or waiting for a retry), ``running``, ``done``, ``dead`` (failed for
            good; the store keeps the last error), for the whole store.
        formation: what the tenant's formation passes cost, per user and per day
            (UTC), oldest day first: passes run, failed ones, LLM tokens sent and
            received, wall time (:class:`~llama_memory.storage.ports.jobs.FormationDay`;
            a job's runs count on the day its last run ended).
    """

    counts: StoreCounts
    sizes: dict[str, int]
    schema_version: int
    tenants: list[str]
    jobs: dict[str, int] = field(default_factory=dict)
    location: str = ""
    formation: list[FormationDay] = field(default_factory=list)
