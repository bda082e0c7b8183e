"""The profile rows port: a user's profile as a timeline of field values.

A profile is stored as its leaves, one row per dotted path (``diet``,
``travel.seat``). A change never overwrites a row: the replaced row gets a
``superseded_at`` time and a new row holds the new value; a removal is a row
without a value. The port reads and writes those rows as plain
:class:`ProfileChange` values; the rules that decide *which* rows an update
writes (operations, merge patch, schema) live above it, in
``llama_memory.sources.profile``, and reach storage through :meth:`ProfileRows.update`.

The same rows keep a second document of the user, their standing **instructions**
(procedural memory, ``llama_memory.sources.instructions``): one path per instruction, in a
table of its own. :data:`DOCUMENTS` names the documents a backend keeps.

Expiry: a row may carry a time to live; every read takes the time ``at`` that
decides what has expired, so an expired value reads as absent before it is purged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Protocol, runtime_checkable

from ...core.types import Scope

#: The documents kept as profile rows, each in its own table: the user's profile, and
#: the instructions the assistant follows for them (procedural memory).
DOCUMENTS: dict[str, str] = {"profile": "profile_fields", "instructions": "instruction_fields"}


def document_table(document: str) -> str:
    """The table of a document of :data:`DOCUMENTS`; ValueError naming the known ones."""
    if not isinstance(document, str) or document not in DOCUMENTS:
        raise ValueError(
            f"document takes one of {sorted(DOCUMENTS)} (each is a table of the store), "
            f"not {document!r}"
        )
    return DOCUMENTS[document]


@dataclass(frozen=True)
class ProfileChange:
    """One row of a profile's history: a value a field had, or its removal.

    Attributes:
        path: the field's dotted path.
        op: the operation that wrote it (``set``, ``append``, ``remove``).
        value: the field's value after the operation (None for a removal).
        removed: True when the row records the removal of the field.
        session_id, message_ids: where the change came from.
        created_at: when it was written (seconds since the epoch, UTC).
        superseded_at: when a newer value replaced it; None while current.
        id: the row's id.
    """

    path: str
    op: str
    value: Any
    removed: bool
    session_id: Optional[str]
    message_ids: list[str]
    created_at: float
    superseded_at: Optional[float]
    id: int = 0

    @property
    def current(self) -> bool:
        """Whether this is the field's value now."""
        return self.superseded_at is None and not self.removed


@dataclass(frozen=True)
class ProfileValue:
    """A row an update writes: a field's new value, or the removal of the field.

    Attributes:
        path: the field's dotted path.
        op: the operation that wrote it (``set``, ``append``, ``remove``).
        value: the new value as JSON data (None for a removal).
        removed: True when the row records the removal of the field.
    """

    path: str
    op: str
    value: Any = None
    removed: bool = False


@dataclass(frozen=True)
class ProfileWrite:
    """What one update writes, decided from the current rows (see :meth:`ProfileRows.update`).

    Attributes:
        supersede: ids of current rows the update replaces or removes.
        insert: the rows to add, in order.
        written_at: the time recorded as ``created_at`` / ``superseded_at``.
        session_id, message_ids: provenance of every inserted row.
        ttl, expires_at: expiry of every inserted row (None: kept until forgotten).
    """

    supersede: tuple[int, ...] = ()
    insert: tuple[ProfileValue, ...] = ()
    written_at: float = 0.0
    session_id: Optional[str] = None
    message_ids: tuple[str, ...] = ()
    ttl: Optional[float] = None
    expires_at: Optional[float] = None


@runtime_checkable
class ProfileRows(Protocol):
    """Profile rows of every user of one store.

    Every method acts within ``scope.tenant_id`` and ``scope.user_id`` (the caller
    checks that a user is given). Writes are atomic; a write made while the
    storage's transaction is open joins it. Storage failures raise
    :class:`~llama_memory.core.errors.StorageError`, never read as an empty profile.
    """

    def current(self, scope: Scope, at: float) -> list[ProfileChange]:
        """The user's current field values (not superseded, not removals, alive at
        ``at``), oldest row first."""
        ...

    def history(self, scope: Scope, at: float, path: Optional[str] = None) -> list[ProfileChange]:
        """Every row alive at ``at`` of the field at ``path`` and the fields beneath it
        (``None``: the whole profile), superseded ones and removals included, oldest first."""
        ...

    def update(
        self, scope: Scope, at: float, decide: Callable[[list[ProfileChange]], ProfileWrite]
    ) -> list[ProfileChange]:
        """Read the current rows (as :meth:`current`), call ``decide`` with them and write
        what it returns, all in one transaction that serialises concurrent updates of
        the user's profile (other threads, other processes). If ``decide`` raises,
        nothing is written and the exception propagates. Returns the inserted rows."""
        ...

    def erase(self, scope: Scope, path: Optional[str] = None) -> int:
        """Delete every row, history included, of the field at ``path`` and the fields
        beneath it (``None``: the user's whole profile); return how many."""
        ...

    def refresh_expiry(self, ids: Sequence[int], at: float) -> None:
        """Rows ``ids`` that have a time to live live it again from ``at``."""
        ...

    def purge_expired(self, at: float) -> int:
        """Delete the rows of every user expired at ``at``; return how many."""
        ...
