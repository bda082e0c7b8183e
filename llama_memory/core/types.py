"""Plain data types shared by the memory, its sources and storage: :class:`Scope`, a
message as a source receives it, a retrieved record, the clock, and the expiry of
records: a record with a ``ttl`` carries ``expires_at``, reads filter expired rows out
in SQL (``ALIVE_SQL``), ``refresh_on_read`` renews a record read, and stating it again
keeps the later expiry, "forever" winning all (:func:`later_expiry`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Optional, Union

from .errors import ScopeError

#: The key that marks a standalone statement (a memory added on its own, e.g. through
#: the MCP server's ``add_memory``): true in a message's ``additional_kwargs`` and in its
#: record's ``metadata``. Such a record is always found as itself, with its own id: it
#: never joins its session's other messages in an excerpt, nor they it.
STANDALONE_KEY = "standalone"


@dataclass(frozen=True)
class Scope:
    """Whose memory an operation touches.

    ``user_id`` is required by every long-term source: records are stored and
    retrieved strictly within one user. ``session_id`` names one conversation.
    ``tenant_id`` separates applications sharing one store.
    """

    user_id: Optional[str] = None
    session_id: Optional[str] = None
    tenant_id: str = "default"

    def require_user(self, what: str = "long-term memory", example: str = "user_id='alice'") -> str:
        """Return the user id, or raise :class:`ScopeError` naming ``what`` needed it and
        showing ``example``, a call that passes one (the caller's own)."""
        if not self.user_id or not self.user_id.strip():
            blank = f" (got {self.user_id!r}, which is blank)" if self.user_id else ""
            raise ScopeError(
                f"{what} needs a user_id{blank}: records are stored and retrieved per user. "
                f"Pass one, e.g. {example}."
            )
        return self.user_id


@dataclass(frozen=True)
class StoredMessage:
    """A chat message as a source receives it: the original ``message`` and its ``text``
    (``stored_text``: a placeholder such as ``"[image]"`` for media only); ``standalone``
    when it is a statement kept on its own, never joined with its session's other
    messages (``additional_kwargs["standalone"]``)."""

    message_id: str
    role: str
    text: str
    event_time: float
    message: Any = None
    standalone: bool = False


@dataclass
class MemoryRecord:
    """One retrieved memory with its provenance.

    Attributes:
        text: what is remembered, as it will be shown to the LLM.
        score: rank score for the query that retrieved it (higher is better; rescaled
            per query and only comparable within one source and one query).
        relevance: absolute, calibrated relevance to the query in 0..1 (an estimated
            probability that the record answers it, :mod:`llama_memory.retrieval.relevance`),
            comparable across queries, stores and sources; None for a record not ranked
            by relevance (a profile field, a custom source's record).
        source: the name of the source that holds it (``"vector"``, ...).
        user_id, session_id: the scope it was written in.
        message_ids: ids of the chat messages it came from.
        event_time: when it happened (seconds since the epoch, UTC), if known.
        ingested_at: when it was stored (seconds since the epoch, UTC).
        role: the speaker's role, for records that are chat messages.
        id: the record's id in its source's storage.
        metadata: anything else the source wants to keep.
        expires_at: when it expires (seconds since the epoch, UTC); None: never.
        importance: how much it matters, 0..1, as a formation pass judged it; None:
            not judged (ranking then uses simple signals, :mod:`llama_memory.retrieval.ranking`).
        last_used: when it was last shown in a memory block (seconds since the epoch,
            UTC); None: never (or not recorded yet: uses are written in batches).
        parts: for a record that groups several (an excerpt of a conversation, see
            :mod:`llama_memory.retrieval.excerpts`), the records it is made of, in order: its
            ``text`` and ``message_ids`` are theirs joined. Empty for a plain record.
    """

    text: str
    score: float = 0.0
    source: str = ""
    user_id: Optional[str] = None
    session_id: Optional[str] = None
    message_ids: list[str] = field(default_factory=list)
    event_time: Optional[float] = None
    ingested_at: Optional[float] = None
    role: Optional[str] = None
    id: Optional[str] = None
    metadata: dict[str, Any] = field(default_factory=dict)
    expires_at: Optional[float] = None
    parts: list["MemoryRecord"] = field(default_factory=list)
    relevance: Optional[float] = None
    importance: Optional[float] = None
    last_used: Optional[float] = None

    @property
    def is_turn(self) -> bool:
        """Whether the record is a turn of a conversation (a message, or an excerpt of
        them), rather than something learnt from one (a fact, a profile field)."""
        return bool(self.role or self.parts)

    @property
    def transcript(self) -> str:
        """The record as a reader should see it: ``"role: text"`` for a chat message,
        the text alone otherwise (an excerpt's text already names the role on each of
        its lines; a fact or profile value has no speaker)."""
        return f"{self.role}: {self.text}" if self.role else self.text

    @property
    def event_datetime(self) -> Optional[datetime]:
        """``event_time`` as an aware UTC datetime, or None."""
        if self.event_time is None:
            return None
        return datetime.fromtimestamp(self.event_time, tz=timezone.utc)


#: ``metadata["kind"]`` of a session summary (episodic memory, :mod:`llama_memory.sources.episodic`).
SUMMARY_KIND = "summary"


def now() -> float:
    """Seconds since the epoch; one place to read the clock."""
    return time.time()


class Stopwatch:
    """Milliseconds since it was made (``elapsed_ms``)."""

    def __init__(self) -> None:
        self._start = time.perf_counter()

    @property
    def elapsed_ms(self) -> float:
        """Milliseconds since the stopwatch was made."""
        return (time.perf_counter() - self._start) * 1000.0


#: A time to live as seconds or a ``timedelta``.
TTL = Union[float, int, timedelta]


def ttl_seconds(ttl: Optional[TTL]) -> Optional[float]:
    """``ttl`` in seconds (``None`` stays ``None``); ValueError unless positive."""
    if ttl is None:
        return None
    if isinstance(ttl, bool) or not isinstance(ttl, (int, float, timedelta)):
        raise TypeError(f"ttl takes seconds or a timedelta, not {type(ttl).__name__} {ttl!r}")
    seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else float(ttl)
    if not seconds > 0:  # also refuses NaN
        raise ValueError(f"ttl must be positive, got {ttl!r}")
    return seconds


@dataclass(frozen=True)
class Expiry:
    """How long a source keeps what it is given, and the clock it reads.

    Args:
        ttl: default time to live of new records in seconds (``None``: forever).
            A per-call ``ttl=`` (``add_triples``, profile updates) overrides it.
        refresh_on_read: a record returned by a read lives ``ttl`` seconds from
            then (only records that have a ttl; a record kept forever stays so).
        clock: epoch seconds now; injectable so tests need not sleep.
    """

    ttl: Optional[float] = None
    refresh_on_read: bool = False
    clock: Callable[[], float] = field(default=time.time, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "ttl", ttl_seconds(self.ttl))

    def now(self) -> float:
        """The clock's current time."""
        return float(self.clock())

    def for_write(self, ttl: Optional[TTL] = None) -> tuple[Optional[float], Optional[float]]:
        """``(ttl, expires_at)`` for a record written now: the given ``ttl``, else the
        default; ``(None, None)`` for a record kept forever."""
        seconds = ttl_seconds(ttl) if ttl is not None else self.ttl
        if seconds is None:
            return None, None
        return seconds, self.now() + seconds


#: No expiry: records are kept until forgotten.
NEVER = Expiry()


def is_alive(expires_at: Optional[float], at: float) -> bool:
    """Whether a record expiring at ``expires_at`` (None: never) is alive at ``at``."""
    return expires_at is None or expires_at > at


def later_expiry(
    kept: tuple[Optional[float], Optional[float]], stated: tuple[Optional[float], Optional[float]]
) -> tuple[Optional[float], Optional[float]]:
    """``(ttl, expires_at)`` of a record stated again: of the one ``kept`` and the one
    just ``stated``, the later expiry; never (``(None, None)``) if either is never."""
    if kept[1] is None or stated[1] is None:
        return None, None
    return stated if stated[1] > kept[1] else kept
