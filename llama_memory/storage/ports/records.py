"""The rows of the long-term records (with provenance, written with dedup, read by id
and in session order, with expiry applied by storage): what
:class:`~llama_memory.storage.sql.records.RecordStore` takes and returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple, Optional

from ...core.types import Scope


@dataclass(frozen=True)
class NewRecord:
    """A record to be written by :meth:`~llama_memory.storage.sql.records.RecordStore.add_records`."""

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
