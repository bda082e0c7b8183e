"""The rows of a user's documents (the profile, the instructions) as a timeline of field
values: one row per dotted path (``travel.seat``); a change supersedes the row and adds a
new one, a removal is a row without a value, and reads take the time ``at`` that decides
what has expired. Which rows an update writes is decided above storage
(``llama_memory.sources.profile``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

#: The documents kept as rows, each in its own table.
DOCUMENTS: dict[str, str] = {"profile": "profile_fields", "instructions": "instruction_fields"}


def document_table(document: str) -> str:
    """The table of a document of :data:`DOCUMENTS`; ValueError naming the known ones."""
    if not isinstance(document, str) or document not in DOCUMENTS:
        raise ValueError(
            f"document takes one of {sorted(DOCUMENTS)} (each is a table of the store), "
            f"not {document!r}"
        )
    return DOCUMENTS[document]


#: The export kinds of the documents, and their tables.
DOCUMENT_KINDS: dict[str, str] = {"profile": DOCUMENTS["profile"], "instruction": DOCUMENTS["instructions"]}


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
    """What one update writes, decided from the current rows (see :meth:`~llama_memory.storage.sql.profile.ProfileRows.update`).

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
