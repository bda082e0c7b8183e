"""The supersede timeline as pure functions: what one statement of a triple does.

Every (subject, predicate) pair of a user is a timeline of intervals
``[valid_from, valid_to)``, one per value it has had. A statement of a value at
time ``t``:

- for a predicate that may hold several values at once (``likes``), repeats the
  current triple with that value (a *mention*, which moves its start earlier when
  the statement is older) or adds a new current triple;
- for a *functional* predicate (one value at a time: ``lives in``), repeats the
  value holding at ``t`` (a mention), or ends the interval holding at ``t`` and
  starts its own, which ends where the next known value begins: a statement dated
  in the past slots into the history instead of overriding what is known to be
  newer. When the next known value is this very value, that triple simply held
  since earlier: its start moves to ``t``.

Stating a fact again renews it (the later expiry wins:
:func:`llama_memory.core.types.later_expiry`, the same for every kind of record,
applied by :mod:`.writes`). These functions read
timeline entries and return decisions; the source applies them through the
storage port, inside one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from ...storage.ports.triples import TimelineEntry

__all__ = ["Decision", "Written", "decide"]


@dataclass(frozen=True)
class Decision:
    """What one statement does to its (subject, predicate) timeline.

    Attributes:
        target: the existing triple the statement is a mention of; ``None``: a new
            triple is written.
        start: the target's new ``valid_from`` (the statement is earlier evidence
            that it held), or ``None`` to keep it.
        valid_to: where the new triple's interval ends (``None``: it holds now).
        superseded_by: the triple that follows the new one (the next known value).
        ends: triples whose interval ends at the statement's time, replaced by the
            target or the new triple.
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
    """What stating the value ``object_key`` at time ``at`` does to ``timeline``.

    Args:
        timeline: the (subject, predicate) pair's triples in write order (all of them
            for a functional predicate; for another one, at least its current triple
            with this object, if any: nothing else is looked at).
        object_key: the stated value, normalised.
        at: when it was stated (epoch seconds).
        functional: whether the predicate holds one value at a time.
    """
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
