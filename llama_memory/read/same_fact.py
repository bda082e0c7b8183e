"""Whether two records of different sources state the same fact, one says all the
other says, or they give different values for the same thing.

The memory block shows each fact once, but never at the cost of a word of it: a record
may stand in for another only when it states everything the other states (every content
word, number, name and date, stemmed). Two records about the same thing that differ
(another object of the same subject and predicate, another value of a profile field,
"do not" against "do") are both shown. They are a conflict, marked so the LLM can ask the
user, only when the thing holds one value at a time: a profile field, a triple whose
predicate is functional (its record's ``metadata["functional"]``, which the triple source
sets: ``lives in``, ``works at``...), or a statement and its negation. Two values of a
thing that can hold several ("Bob likes pizza", "Bob likes sushi") are two facts.
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

# Words that turn a statement into its opposite: "I do not eat fish" is no detail added
# to "I eat fish". "t" is what the word pattern leaves of "don't", "isn't", "can't".
_NEGATIONS = frozenset("not no never nothing none nobody neither nor cannot without t".split())
# How a triple names the user it is about ("user", "I"): a message of the user says
# the same without naming them.
_SELF = frozenset("user i me myself".split())


@dataclass(frozen=True)
class Statement:
    """What a record states, as compared: its stemmed content words (negations and a
    triple's self-reference aside), whether it is negated, the words of the thing it
    gives a value of (a profile field's path, a triple's subject and predicate; none
    for a message), and whether that thing holds one value at a time (a profile field,
    a triple of a functional predicate: :func:`holds_one_value`)."""

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
    # The same thing with values that can hold together (a triple's predicate that is
    # not functional, a message): two facts, both shown, neither marked.
    DISTINCT = "distinct"
    CONFLICT = "conflict"  # one value at a time and another value, or opposite polarity


def fact_text(record: MemoryRecord) -> str:
    """The text of what a record states: a profile field's path and value, a triple's
    subject, predicate and object (not its dates), a message's text."""
    meta = record.metadata
    if is_profile(record):
        return f"{str(meta['path']).replace('_', ' ').replace('.', ' ')} {meta['value']}"
    if is_triple(record):
        subject = str(meta["subject"])
        subject = "" if subject.casefold() in _SELF else subject
        return f"{subject} {meta['predicate']} {meta['object']}"
    return record.text


def statement(record: MemoryRecord) -> Statement:
    """What ``record`` states (:class:`Statement`)."""
    words = content_words(fact_text(record))
    negated = any(w in _NEGATIONS for w in words)
    key = _stems(content_words(_key_text(record)))
    return Statement(_stems(words), negated, key, holds_one_value(record))


def holds_one_value(record: MemoryRecord) -> bool:
    """Whether the thing ``record`` gives a value of holds one value at a time, so that
    another value is a conflict: a profile field (one value per path), a triple whose
    record says its predicate is functional (``metadata["functional"]``, set by the
    triple source from its functional predicates). A message says nothing of it."""
    if is_profile(record):
        return True
    return is_triple(record) and record.metadata.get("functional") is True


def _stems(words: list[str]) -> frozenset[str]:
    return frozenset(stem(w) for w in words if w not in _NEGATIONS and w not in _SELF)


def _key_text(record: MemoryRecord) -> str:
    meta = record.metadata
    if is_profile(record):
        return str(meta["path"]).replace("_", " ").replace(".", " ")
    if is_triple(record):
        return f"{meta['subject']} {meta['predicate']}"
    return ""


def relate(first: Statement, second: Statement) -> Relation:
    """How two statements relate: about different things, the same fact, one covering
    the other, a conflict, or two facts about the same thing.

    A conflict is one statement negating the other ("I do not eat fish" against "I eat
    fish on Fridays": the words of one are all in the other), or differing words where
    either gives the value of a thing that holds one value at a time
    (:attr:`Statement.one_value`: a profile field, a functional triple). Differing words
    otherwise are :attr:`Relation.DISTINCT`: "Bob likes sushi" against "Bob — likes —
    pizza" are two facts, as are "Bob does not like sushi" and "Bob likes pizza"."""
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
    shorter one's words are in the other (at least :data:`MIN_SHARED`), or the thing a
    field or a triple gives a value of (two words or more: "home city", "Lena started")
    is named whole by the other."""
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
    """When the record's value was stated (seconds since the epoch), to tell the newer
    of two conflicting records: a message's time, a triple's statement or validity
    time, a profile value's update; else when it was stored."""
    meta = record.metadata
    for value in (record.event_time, meta.get("event_time"), meta.get("valid_from"),
                  meta.get("updated_at"), record.ingested_at):
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
    return None
