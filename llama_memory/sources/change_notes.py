"""Recent changes the memory block points out ("lives in Lisbon; before: Porto"), once
per fact, so the agent can check with the user; shared by the triple and profile sources."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Optional, Union

#: Default window: a value that replaced another within this many seconds (90 days)
#: is shown with the value before it.
CHANGED_WITHIN = 90 * 86400.0


def window_seconds(value: Union[float, int, timedelta, None], name: str = "changed_within") -> float:
    """A change window in seconds (``None`` or 0: never); ValueError for a negative or
    non-numeric one."""
    if value is None:
        return 0.0
    seconds = value.total_seconds() if isinstance(value, timedelta) else value
    if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or seconds < 0:
        raise ValueError(f"{name} must be seconds (or a timedelta) of zero or more, got {value!r}")
    return float(seconds)


def is_recent(since: Optional[float], now: float, window: float) -> bool:
    """Whether a value that holds since ``since`` replaced its predecessor within the window."""
    return window > 0 and since is not None and now - since <= window


def since_before(since: float, before: str) -> str:
    """``since 2026-03-02; before: Porto``: the note of a value that replaced another."""
    day = datetime.fromtimestamp(since, tz=timezone.utc).strftime("%Y-%m-%d")
    return f"since {day}; before: {before}"
