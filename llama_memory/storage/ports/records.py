"""The message records port: long-term records with provenance, written with dedup,
read by id and in session order, with expiry applied by storage."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple, Optional, Protocol, runtime_checkable

from ...core.types import MemoryRecord, Scope


@dataclass(frozen=True)
class NewRecord:
    """A record to be written by :meth:`RecordStore.add_records`."""

    source: str
    scope: Scope
    text: str
    message_ids: tuple[str, ...]
    event_time: Optional[float]
    role: Optional[str] = None
    metadata: Optional[dict] = None
    #: Time to live in seconds and expiry time (epoch seconds); None: kept forever.
    ttl: Optional[float] = None
    expires_at: Optional[float] = None
    #: How much it matters, 0..1 (a formation pass's judgement); None: not judged. A
    #: record stated again keeps the higher of the two.
    importance: Optional[float] = None


class PendingRecord(NamedTuple):
    """A record waiting for its vector (or just deleted): what the dense index needs
    to add (or remove) it."""

    id: str
    text: str
    tenant_id: str
    user_id: str


def more_important(new: Optional[float], old: Optional[float]) -> bool:
    """Whether a record stated again with importance ``new`` takes it over its stored
    ``old`` one: the higher wins, a judgement wins over none (every backend's dedup)."""
    return new is not None and (old is None or new > old)


#: Every record id of a collection and whether the dense index holds it, per (tenant, user).
IndexFlags = dict[tuple[str, str], dict[str, bool]]


@runtime_checkable
class RecordStore(Protocol):
    """Long-term records of every source, keyed by a deterministic id.

    Semantics every backend keeps (the conformance suite checks them): a record whose
    normalised text (and role) the same user already has in the same source is stored
    once (its message ids grow, the later expiry wins, "forever" wins all); reads
    never return another user's records, nor (given ``alive_at``) expired ones.
    """

    def add_records(self, records: Sequence[NewRecord]) -> list[str]:
        """Write records in one transaction (joining an open one); return their ids."""
        ...

    def get_records(
        self, ids: Sequence[str], scope: Scope, source: str, alive_at: Optional[float] = None
    ) -> dict[str, MemoryRecord]:
        """Records by id, of the scope's user and ``source`` only (and alive at
        ``alive_at`` when given)."""
        ...

    def get_texts(
        self, ids: Sequence[str], scope: Scope, source: str
    ) -> dict[str, tuple[Optional[str], str]]:
        """The (role, text) of the records of ``ids`` that :meth:`get_records` would
        return without ``alive_at``: a light read for what needs no whole record."""
        ...

    def record_ids(
        self, texts: Sequence[str], roles: Sequence[Optional[str]], scope: Scope, source: str
    ) -> list[str]:
        """The ids that the scope's user's records of ``source`` with these ``texts``
        have, or would have: one for each text and each of ``roles``. An id is a hash of
        the record's normalised text and role (the same on every backend): nothing is
        read, and an id may belong to no record."""
        ...

    def session_neighbours(
        self, ids: Sequence[str], scope: Scope, source: str, radius: int
    ) -> dict[str, list[tuple[int, str]]]:
        """For each id: the records of its session from ``radius`` before to ``radius``
        after it, itself included, as (position, id) in write order. A position is any
        integer that grows with write order within the store (a sequence column)."""
        ...

    def ensure_session_order(self) -> None:
        """Prepare what :meth:`session_neighbours` needs (SQLite: an index, created once
        per file); a backend that needs nothing does nothing."""
        ...

    def recent_records(
        self,
        scope: Scope,
        source: str,
        limit: int,
        span: Optional[tuple[float, float]] = None,
        alive_at: Optional[float] = None,
    ) -> list[MemoryRecord]:
        """The scope's user's latest records of ``source``, oldest first: at most
        ``limit`` of those whose event time is in ``span`` (start, end in epoch
        seconds), or, without a span, of the latest session other than the scope's own."""
        ...

    def session_records(self, scope: Scope, source: str, limit: int) -> list[MemoryRecord]:
        """The first ``limit`` records of ``source`` in the scope's session, in write
        order (what a session summary sums up)."""
        ...

    def count_records(self, source: str, scope: Optional[Scope] = None) -> int:
        """How many records ``source`` holds (for one user when ``scope`` is given)."""
        ...

    def refresh_expiry(self, ids: Sequence[str], at: float) -> None:
        """Make records that have a time to live expire ``ttl`` seconds after ``at``."""
        ...

    def delete_expired(self, source: str, at: float) -> list[PendingRecord]:
        """Delete the records of ``source`` expired at ``at``; return them (for the
        dense index)."""
        ...

    def delete_records(self, ids: Sequence[str], scope: Scope, source: str) -> list[PendingRecord]:
        """Delete these records of the scope's user in ``source`` (joining an open
        transaction); return what was deleted (for the dense index). Ids of another
        user or source, or unknown, are ignored."""
        ...

    def mark_used(self, ids: Sequence[str], at: float) -> None:
        """Record that these records were shown at ``at`` (``last_used`` only moves
        forward; unknown ids are ignored). Callers batch it: it is a write."""
        ...


@runtime_checkable
class IndexedRows(Protocol):
    """The index flags of a collection of rows a dense index is derived from: which rows
    wait for their vector. The message records implement it (``collection`` is the
    source's name); any other indexed collection (triples) can, and then shares the one
    index sync (:class:`~llama_memory.retrieval.sync.IndexSync`)."""

    def pending_records(self, source: str, limit: int) -> list[PendingRecord]:
        """Up to ``limit`` rows the dense index has not caught up with, oldest first."""
        ...

    def mark_indexed(
        self, ids: Sequence[str], indexed: bool = True, vectors: Optional[Sequence[bytes]] = None
    ) -> None:
        """Record that the dense index holds (or no longer holds) these rows, keeping
        ``vectors`` (encoded, one per id) as their copies."""
        ...

    def mark_all_unindexed(self, source: str) -> int:
        """Flag every row of ``source`` for re-indexing (copies dropped); return how many."""
        ...

    def index_flags(self, source: str, owner: Optional[tuple[str, str]] = None) -> IndexFlags:
        """Every row id of ``source`` (of one (tenant, user) ``owner``, or all) and
        whether the dense index holds it."""
        ...
