"""What the MCP tools return, one JSON shape per kind of answer: a memory as
``memory.search`` gives it, with the ids of every record its text shows, cut at
:data:`MAX_TEXT_CHARS` (an agent's context is small).
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Optional

# pydantic (which reads the tools' result types) needs this TypedDict on Python < 3.12.
from typing_extensions import TypedDict

if TYPE_CHECKING:
    from ..core.types import MemoryRecord
    from ..sources.triples import KnowledgeTriple

__all__ = [
    "CUT_MARKER", "MAX_TEXT_CHARS", "AddedResult", "DeletedRecord", "DeletedResult", "ForgottenResult",
    "ProfileResult", "RecordResult", "TripleResult", "cut_text", "record_result", "triple_result",
]

#: The most characters of a record's text a search or a listing returns (marker
#: included): about 500 tokens, a few ordinary chat messages. ``read_memory`` reads
#: one record whole.
MAX_TEXT_CHARS = 2_000

#: What ends a cut text (``{n}``: how many characters were left out).
CUT_MARKER = " [… {n:,} more characters: read_memory with an id of record_ids reads the whole record]"


class RecordResult(TypedDict):
    """One long-term memory as a tool returns it; ``record_ids`` are the ids of every
    record ``text`` shows, in order (what ``delete_memory`` takes)."""

    text: str
    record_ids: list[str]
    role: Optional[str]
    source: str
    session_id: Optional[str]
    date: Optional[str]
    stored_at: Optional[str]
    relevance: Optional[float]
    truncated: bool


class TripleResult(TypedDict):
    """One knowledge triple as a tool returns it."""

    id: Optional[str]
    subject: str
    predicate: str
    object: str
    current: bool
    valid_from: Optional[str]
    valid_to: Optional[str]
    mentions: int


class ProfileResult(TypedDict):
    """A user's current profile."""

    user_id: str
    profile: dict[str, Any]


class AddedResult(TypedDict):
    """What ``add_memory`` stored."""

    user_id: str
    session_id: str
    message_id: str
    record_ids: list[str]


class DeletedRecord(TypedDict):
    """One record or triple ``delete_memory`` removed, and the source it belonged to."""

    id: str
    source: str


class DeletedResult(TypedDict):
    """What ``delete_memory`` removed."""

    user_id: str
    deleted: list[DeletedRecord]


class ForgottenResult(TypedDict):
    """Whom ``forget_user`` forgot."""

    forgotten: str


def iso(epoch: Optional[float]) -> Optional[str]:
    """Seconds since the epoch as an ISO 8601 UTC time to the second, or None."""
    if epoch is None:
        return None
    return datetime.fromtimestamp(epoch, tz=timezone.utc).isoformat(timespec="seconds")


def cut_text(text: str, limit: int = MAX_TEXT_CHARS) -> tuple[str, bool]:
    """``text`` whole when it has at most ``limit`` characters, else its start with
    :data:`CUT_MARKER`, ``limit`` characters in all; and whether it was cut."""
    if len(text) <= limit:
        return text, False
    # The marker's length depends on the count it shows: start from its longest, then
    # keep one more character at a time (the total grows by one at most) up to ``limit``.
    keep = max(0, limit - len(CUT_MARKER.format(n=len(text))))
    while keep + 1 + len(CUT_MARKER.format(n=len(text) - keep - 1)) <= limit:
        keep += 1
    return text[:keep] + CUT_MARKER.format(n=len(text) - keep), True


def record_result(record: MemoryRecord, whole: bool = False) -> RecordResult:
    """A record as the tools show it (cut at :data:`MAX_TEXT_CHARS` unless ``whole``),
    with the ids of every record it shows and a single message's speaker."""
    ids = [part.id for part in record.parts if part.id] if record.parts else [record.id] if record.id else []
    text, truncated = (record.text, False) if whole else cut_text(record.text)
    return RecordResult(
        text=text, record_ids=ids, role=None if record.parts else record.role, source=record.source,
        session_id=record.session_id, date=iso(record.event_time), stored_at=iso(record.ingested_at),
        relevance=None if record.relevance is None else round(record.relevance, 3), truncated=truncated,
    )  # fmt: skip


def triple_result(triple: KnowledgeTriple) -> TripleResult:
    """A knowledge triple as ``read_triples`` shows it."""
    return TripleResult(
        id=triple.id, subject=triple.subject, predicate=triple.predicate, object=triple.object,
        current=triple.current, valid_from=iso(triple.valid_from), valid_to=iso(triple.valid_to),
        mentions=triple.mentions,
    )  # fmt: skip
