"""The supersede timeline as pure functions: what one statement of a triple does to its
(subject, predicate) timeline of intervals ``[valid_from, valid_to)``. A many-valued
predicate gets a mention of the current triple or a new one; a functional one repeats
the value holding at ``t`` or slots a new interval into the history, ending where the
next known value begins (docs/triples.md). The source applies the decisions in one
transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from ...storage.ports.triples import TimelineEntry


@dataclass(frozen=True)
class Decision:
    """What one statement does to its (subject, predicate) timeline.

    Attributes:
        target: the existing triple the statement is a mention of (``None``: a new one).
        start: the target's new ``valid_from`` (earlier evidence), or ``None``.
        valid_to: where the new triple's interval ends (``None``: it holds now).
        superseded_by: the triple that follows the new one (the next known value).
        ends: triples whose interval ends at the statement's time.
    """

    target: Optional[str] = None
    start: Optional[float] = None
    valid_to: Optional[float] = None
    superseded_by: Optional[str] = None
    ends: tuple[str, ...] = ()

    @property
    def creates(self) -> bool:
        """Whether the statement writes a new triple."""
        return self.target is None


def decide(timeline: Sequence[TimelineEntry], object_key: str, at: float, functional: bool) -> Decision:
    """What stating the value ``object_key`` at time ``at`` does to ``timeline``: the
    pair's triples in write order (all of them for a ``functional`` predicate, else at
    least its current triple with this object)."""
    if not functional:
        same = next((e for e in timeline if e.current and e.object_key == object_key), None)
        if same is None:
            return Decision()
        return Decision(target=same.id, start=at if at < same.valid_from else None)
    ordered = sorted(timeline, key=lambda e: e.valid_from)  # stable: ties keep write order
    holding = [e for e in ordered if e.holds_at(at)]
    same = next((e for e in holding if e.object_key == object_key), None)
    if same is not None:
        return Decision(target=same.id)
    ends = tuple(e.id for e in holding)
    following = next((e for e in ordered if e.valid_from > at), None)
    if following is None:
        return Decision(ends=ends)
    if following.object_key == object_key:
        # The value that comes next is this one: it has simply held since earlier.
        return Decision(target=following.id, start=at, ends=ends)
    return Decision(valid_to=following.valid_from, superseded_by=following.id, ends=ends)


@dataclass(frozen=True)
class Written:
    """What writing one triple did: its id, whether it was new, what it replaced."""

    id: str
    created: bool
    superseded: tuple[str, ...]
