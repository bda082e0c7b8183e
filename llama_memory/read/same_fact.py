"""Whether two records of different sources state the same fact, one says all the other
says, or they give different values for the same thing (a conflict only when the thing
holds one value at a time, or one negates the other). The rules are described in
docs/concepts.md ("Each fact once, and no fact less", "Conflicts are shown, not settled").
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Optional

from ..core.types import MemoryRecord
from ..retrieval.relevance import content_words, stem

#: Two statements are about the same thing when this share of the shorter one's content
#: words (stemmed) is in the longer one, and they share at least :data:`MIN_SHARED`.
SAME_THING_SHARE = 0.75
MIN_SHARED = 2

# Words that turn a statement into its opposite ("t" is what the word pattern leaves of "don't").
_NEGATIONS = frozenset("not no never nothing none nobody neither nor cannot without t".split())
# How a triple names the user it is about: a message of the user says it without naming them.
_SELF = frozenset("user i me myself".split())


@dataclass(frozen=True)
class Statement:
    """What a record states, as compared: its stemmed content words, whether it is
    negated, the words of the thing it gives a value of (a field's path, a triple's
    subject and predicate), and whether that thing holds one value at a time."""

    words: frozenset[str]
    negated: bool
    key: frozenset[str] = frozenset()
    one_value: bool = False


class Relation(Enum):
    """How two statements relate (:func:`relate`)."""

    UNRELATED = "unrelated"
    SAME = "same"  # each states all the other does
    FIRST_COVERS = "first covers"  # the first states all the second does, and more
    SECOND_COVERS = "second covers"
    DISTINCT = "distinct"  # values that can hold together: two facts, neither marked
    CONFLICT = "conflict"  # one value at a time and another value, or opposite polarity


def fact_texts(record: MemoryRecord) -> tuple[str, str]:
    """The text of what a record states (a field's path and value, a triple without its
    dates, a message's text) and of the thing it gives a value of ("" for a message)."""
    meta = record.metadata
    if is_profile(record):
        path = str(meta["path"]).replace("_", " ").replace(".", " ")
        return f"{path} {meta['value']}", path
    if is_triple(record):
        subject = str(meta["subject"])
        said = "" if subject.casefold() in _SELF else subject
        return f"{said} {meta['predicate']} {meta['object']}", f"{subject} {meta['predicate']}"
    return record.text, ""


def statement(record: MemoryRecord) -> Statement:
    """What ``record`` states (:class:`Statement`)."""
    fact, key = fact_texts(record)
    meta = record.metadata
    words = content_words(fact)
    negated = any(w in _NEGATIONS for w in words)
    # A profile field holds one value at a time, a triple when it says it is functional.
    one_value = is_profile(record) or (is_triple(record) and meta.get("functional") is True)
    return Statement(_stems(words), negated, _stems(content_words(key)), one_value)


def _stems(words: list[str]) -> frozenset[str]:
    return frozenset(stem(w) for w in words if w not in _NEGATIONS and w not in _SELF)


def relate(first: Statement, second: Statement) -> Relation:
    """How two statements relate (:class:`Relation`). A conflict is one negating the
    other with the words of one all in the other, or differing words where either holds
    one value at a time; "Bob likes sushi" and "Bob does not like pizza" are two facts."""
    if not same_thing(first, second):
        return Relation.UNRELATED
    one_within = first.words <= second.words or second.words <= first.words
    if first.negated != second.negated:
        one_value = first.one_value or second.one_value
        return Relation.CONFLICT if one_within or one_value else Relation.DISTINCT
    if first.words == second.words:
        return Relation.SAME
    if second.words <= first.words:
        return Relation.FIRST_COVERS
    if first.words <= second.words:
        return Relation.SECOND_COVERS
    return Relation.CONFLICT if first.one_value or second.one_value else Relation.DISTINCT


def same_thing(first: Statement, second: Statement) -> bool:
    """Whether two statements are about the same thing: :data:`SAME_THING_SHARE` of the
    shorter one's words (at least :data:`MIN_SHARED`) are in the other, or the other names
    the key of a field or triple whole ("home city", "Lena started")."""
    shared = len(first.words & second.words)
    shorter = min(len(first.words), len(second.words))
    if shared >= MIN_SHARED and shared >= SAME_THING_SHARE * shorter:
        return True
    return any(
        len(one.key) >= MIN_SHARED and one.key <= other.words
        for one, other in ((first, second), (second, first))
    )


def is_profile(record: MemoryRecord) -> bool:
    """Whether the record is a profile field (a path and a value): never left out."""
    return "path" in record.metadata and "value" in record.metadata


def is_triple(record: MemoryRecord) -> bool:
    """Whether the record is a knowledge triple."""
    meta = record.metadata
    return "subject" in meta and "predicate" in meta and "object" in meta


def stated_at(record: MemoryRecord) -> Optional[float]:
    """When the record's value was stated (epoch seconds), to tell the newer of two
    conflicting records; else when it was stored."""
    meta = record.metadata
    for value in (record.event_time, meta.get("event_time"), meta.get("valid_from"),
                  meta.get("updated_at"), record.ingested_at):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None
