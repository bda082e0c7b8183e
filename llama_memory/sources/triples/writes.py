"""Writing triples: a batch validated whole, then the update rules (:mod:`.timeline`)
applied through the triple timeline port, in one transaction."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Sequence
from typing import AbstractSet, Any, Optional, Protocol

from ...core.messages import to_epoch
from ...core.types import TTL, MemoryRecord, Scope, later_expiry, now
from ...storage.ports.triples import NewTriple, TimelineEntry, TripleMention
from ...storage.sql.triples import TripleTimeline
from .model import KnowledgeTriple, Prepared, TripleError, prepare_all
from .normalize import search_text
from .timeline import Decision, Written, decide


class TripleAccess(Protocol):
    """What the triples' pass part and agent tools use of a triple source."""

    name: str
    timeline: TripleTimeline
    _lock: Any

    def search(self, query: str, scope: Scope, k: int = 10) -> list[MemoryRecord]: ...  # noqa: D102

    def _write(
        self, triples: Iterable[Any], scope: Scope, event_time: Any, message_ids: Sequence[str], origin: str,
        ttl: Optional[TTL] = None,
    ) -> list[Written]: ...  # fmt: skip

    def _by_ids(self, ids: Sequence[str], scope: Scope) -> list[KnowledgeTriple]: ...


def write_triples(
    timeline: TripleTimeline, functional_keys: AbstractSet[str], lifetime: tuple[Optional[float], Optional[float]],
    triples: Iterable[Any], scope: Scope, event_time: Any, message_ids: Sequence[str], origin: str,
) -> list[Written]:  # fmt: skip
    """Store ``triples`` (as :meth:`TripleSource.add_triples` takes them) for the scope's
    user, all or nothing; return what each did. ``functional_keys``: the normalised
    predicates of one value at a time; ``lifetime``: ``(ttl, expires_at)`` (None: forever);
    ``event_time``: when stated (default now; a triple's own date wins); ``origin``:
    ``"api"``, ``"tool"`` or ``"extraction"``. TripleError (nothing written) for a
    malformed triple or ``event_time``."""
    prepared = prepare_all(triples)  # all validated before anything is written
    try:
        default_time = now() if event_time is None else to_epoch(event_time)
    except ValueError as exc:
        raise TripleError(f"event_time: {exc}") from exc
    ids = tuple(str(m) for m in message_ids)
    results: list[Written] = []
    with timeline.transaction("add knowledge triples"):
        ingested = now()
        for item in prepared:
            stated = item.stated_at if item.stated_at is not None else default_time
            mention = TripleMention(scope.session_id, ids, stated, ingested, origin)
            results.append(_write_one(timeline, functional_keys, scope, item, mention, lifetime))
    return results


def _write_one(
    timeline: TripleTimeline, functional_keys: AbstractSet[str], scope: Scope, item: Prepared, mention: TripleMention,
    lifetime: tuple[Optional[float], Optional[float]],
) -> Written:  # fmt: skip
    """Apply :func:`.timeline.decide`'s update rules to one triple in the caller's transaction."""
    t = mention.event_time
    functional = item.predicate_key in functional_keys
    entries: list[TimelineEntry]
    if functional:
        entries = timeline.timeline(scope, item.subject_key, item.predicate_key)
    else:  # only the current triple with this value matters: one indexed lookup
        same = timeline.current(scope, item.subject_key, item.predicate_key, item.object_key)
        entries = [same] if same is not None else []
    decision = decide(entries, item.object_key, t, functional)
    if decision.target is not None:
        target = next(e for e in entries if e.id == decision.target)
        if decision.start is not None:
            timeline.move_start(target.id, decision.start)
        renewed = later_expiry((target.ttl, target.expires_at), lifetime)
        timeline.add_mention(target.id, mention, *renewed)
        successor = target.id
    else:
        successor = _insert(timeline, scope, item, mention, lifetime, decision)
    if decision.ends:
        timeline.end(decision.ends, t, successor)
    return Written(successor, decision.creates, decision.ends)


def _insert(
    timeline: TripleTimeline, scope: Scope, item: Prepared, mention: TripleMention,
    lifetime: tuple[Optional[float], Optional[float]], decision: Decision,
) -> str:  # fmt: skip
    # The spellings the user's graph already uses: an entity is shown the way it was
    # first written ("Alice", even when a later statement says "alice"), so one node
    # never reads two ways.
    subject = timeline.entity_spelling(scope, item.subject_key) or item.subject
    predicate = timeline.predicate_spelling(scope, item.predicate_key) or item.predicate
    obj = timeline.entity_spelling(scope, item.object_key) or item.object
    # A random id, not a content hash: the same fact may hold again later (a
    # move back to Paris) and is then a new interval with an id of its own.
    triple_id = uuid.uuid4().hex
    timeline.insert(
        NewTriple(
            id=triple_id, tenant_id=scope.tenant_id, user_id=scope.require_user(),
            subject=subject, predicate=predicate, object=obj,
            subject_key=item.subject_key, predicate_key=item.predicate_key,
            object_key=item.object_key, valid_from=mention.event_time, valid_to=decision.valid_to,
            superseded_by=decision.superseded_by, ttl=lifetime[0], expires_at=lifetime[1],
            search_text=search_text(subject, predicate, obj), mention=mention,
        )
    )  # fmt: skip
    return triple_id


def retract_triples(timeline: TripleTimeline, scope: Scope, retracted: Sequence[Prepared], at: float) -> list[str]:
    """End the current triples a statement says no longer hold (no successor, history
    kept; one not current is left alone); return the ids ended."""
    ended: list[str] = []
    with timeline.transaction("retract knowledge triples"):
        for item in retracted:
            current = timeline.current(scope, item.subject_key, item.predicate_key, item.object_key)
            if current is not None:
                timeline.end([current.id], max(at, current.valid_from), None)
                ended.append(current.id)
    return ended
