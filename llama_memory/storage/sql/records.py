"""What the record stores of every SQL backend share: a record's id, and a row as a
:class:`~llama_memory.types.MemoryRecord`."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from ...types import MemoryRecord

__all__ = ["record_id", "to_record"]


def record_id(source: str, tenant: str, user: str, digest: str) -> str:
    """The id of the user's record of ``source`` with content hash ``digest``.

    Deterministic, and the same on every backend: a record re-written after a crash
    gets the same id in both stores, and a store copied across keeps its ids.
    """
    key = f"{source}\x1f{tenant}\x1f{user}\x1f{digest}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]


def _json(stored: Any) -> Any:
    # JSON text (SQLite), or already parsed by the driver (PostgreSQL's jsonb).
    return json.loads(stored) if isinstance(stored, str) else stored


def to_record(row: Any) -> MemoryRecord:
    """A ``records`` row (read by column name) as a :class:`MemoryRecord`."""
    return MemoryRecord(
        id=row["id"],
        text=row["text"],
        source=row["source"],
        user_id=row["user_id"],
        session_id=row["session_id"],
        role=row["role"],
        message_ids=list(_json(row["message_ids"])),
        event_time=row["event_time"],
        ingested_at=row["ingested_at"],
        metadata=_json(row["metadata"]),
        expires_at=row["expires_at"],
        importance=row["importance"],
        last_used=row["last_used"],
    )
