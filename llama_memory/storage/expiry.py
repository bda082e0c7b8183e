"""Expiry (time to live) of long-term records.

A record written with a time to live carries ``ttl`` (seconds) and
``expires_at`` (epoch seconds) in the system of record. Reads filter expired
rows out in SQL, so an expired record is never retrieved even before it is
purged; ``purge_expired()`` deletes them from SQLite and the dense index.
With ``refresh_on_read`` a record returned by a read lives ``ttl`` seconds
from that read (LangGraph's ``TTLConfig(refresh_on_read=True)``). Stating a
record again renews it: the later expiry wins, and "forever" wins all
(:func:`later_expiry`).

Expiry is storage's: the policy (:class:`Expiry`) and the rules here are the same
for every kind of record, and each backend applies them in its queries (the SQL
backends' condition: ``llama_memory.storage.sql.dialect.ALIVE_SQL``).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Callable, Optional, Union

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
