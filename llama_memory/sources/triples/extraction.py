"""Knowledge triples as a part of a formation pass: the request, the answer's
validation, and writing new and retracted triples."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from ...core.errors import ExtractionError
from ...core.messages import message_time
from ...core.types import Scope
from .model import Prepared, TripleError, prepare_all
from .normalize import normalize_entity
from .writes import TripleAccess, retract_triples

#: How many current triples the pass shows the LLM (the newest), so it can retract them.
SHOWN_TRIPLES = 50

#: The triples part's paragraph; ``{known_entities}`` and ``{current}`` are filled in.
PART_PROMPT = (
    'an object {{"new": [...], "retracted": [...]}}, each a list of '
    '{{"subject": "...", "predicate": "...", "object": "..."}}.\n'
    '- "new": lasting facts the conversation states or clearly implies about the user and '
    "the people, places and things in their life, as knowledge triples. Short names for "
    'subjects and objects ("John", "New York"), short present-tense predicates ("lives in", '
    '"likes", "has friend", "works at"). Call the user "User" unless they have told their '
    "name. Nothing about the assistant.\n"
    '- "retracted": current facts (listed below) that the conversation says no longer hold '
    '("I don\'t eat meat any more" retracts User likes steak), copied as listed. A new value '
    "of a one-valued relation (lives in, works at) replaces the old one by itself: give it "
    'under "new", do not retract the old one.\n'
    "Names already known (reuse them for the same entities): {known_entities}\n"
    "Current facts:\n{current}"
)


class ParsedTriples(NamedTuple):
    """The triples part's validated answer: what to write, and what to end."""

    new: list[Mapping[str, Any]]
    retracted: list[Prepared]


def triples_prompt(source: TripleAccess, scope: Scope, now: float) -> str:
    """The triples part's paragraph, with the user's known names and current facts."""
    known = known_entities(source.timeline.entity_names(scope))
    current = source.timeline.select(scope, now, include_history=False)[-SHOWN_TRIPLES:]
    listed = "\n".join(
        f"- {json.dumps({'subject': t.subject, 'predicate': t.predicate, 'object': t.object}, ensure_ascii=False)}"
        for t in current
    )
    return PART_PROMPT.format(
        known_entities=", ".join(known) if known else "(none yet)", current=listed or "(none yet)"
    )


def parse_triples(value: Any) -> ParsedTriples:
    """Validate the answer under the triples key (writes nothing); TripleError for
    anything but lists ``new`` and ``retracted`` of valid triples."""
    if not isinstance(value, Mapping):
        raise TripleError(f'expected an object {{"new": [...], "retracted": [...]}}, got {type(value).__name__}')
    unknown = sorted(set(value) - {"new", "retracted"})
    if unknown:
        raise TripleError(f'unknown keys {unknown}: the triples answer has "new" and "retracted"')
    lists: dict[str, list[Any]] = {}
    for key in ("new", "retracted"):
        items = value.get(key, [])
        if not isinstance(items, list):
            raise TripleError(f"{key!r} must be a list of triples, got {type(items).__name__}")
        lists[key] = items
    prepared: dict[str, list[Prepared]] = {}
    for key in ("new", "retracted"):
        try:
            prepared[key] = prepare_all(lists[key])
        except TripleError as exc:
            raise TripleError(f"{key}: {exc}") from exc
    return ParsedTriples(lists["new"], prepared["retracted"])


def apply_triples(source: TripleAccess, parsed: ParsedTriples, window: Any) -> list[str]:
    """Write a pass's new triples, then end its retracted ones (dated by the window's
    newest message); return the ids written."""
    scope: Scope = window.scope
    stated = max((message_time(m, default=window.now) for m in window.messages), default=window.now)
    ids = [i for i in window.message_ids if i]
    try:
        written = source._write(parsed.new, scope, stated, ids, origin="extraction")
    except TripleError as exc:
        raise ExtractionError(f"the LLM's knowledge triples were rejected, nothing was stored: {exc}") from exc
    with source._lock:
        retract_triples(source.timeline, scope, parsed.retracted, stated)
    return [w.id for w in written]


def known_entities(names: Sequence[str], limit: int = 30) -> list[str]:
    """Distinct entities among ``names`` (newest first), as first seen: shown to the
    extracting LLM so it reuses them ("John", not "my friend John")."""
    found: dict[str, str] = {}
    for name in names:
        found.setdefault(normalize_entity(name), name)
        if len(found) >= limit:
            break
    return list(found.values())
