"""Later records on the same thing: an older message of the user that the block shows
beside a later one about the same thing is marked as possibly superseded by it (without
a mark the LLM reads two homes with two dates and may answer with the old one).

Messages have no field or functional predicate (:mod:`llama_memory.read.same_fact`), so
this judges the user's own statements, of a source with vectors, by meaning and by
names, with the question as the third point; the rule is described in docs/concepts.md
("A later message may supersede an older one"). One of a pair must be among the
:data:`CLOSEST_PLACES` statements closest to the question: on LoCoMo, marking every such
pair marked about half the records of a block (two visits, two concerts).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence, Set
from dataclasses import dataclass, replace
from typing import Any, Optional

import numpy as np

from ..core.text import format_time
from ..core.types import MemoryRecord
from ..retrieval.relevance import content_words, is_users_question, stem
from ..retrieval.sync import unit
from .query_plan import is_small_talk

#: The metadata key of the mark on an older message (a list of the later records).
SUPERSEDED_BY = "possibly_superseded_by"

#: A message is about what is asked from this cosine with the question on. Records the
#: block shows for a question sit at 0.2 to 0.7 (the default offline model); a message
#: below 0.25 was let in by words or by its neighbour, not by speaking of the question.
ASKED_MIN_COSINE = 0.25
#: Two messages this close in meaning are about the same thing whatever words they use
#: ("Dentist on Tuesday the 9th at 8:15" / "the dental clinic pushed my check-up to
#: Friday the 19th": 0.67). Two different facts of one person's life reach 0.55.
SAME_MIN_COSINE = 0.6
#: Two messages that name the same rare thing are about it from this cosine on: low, as
#: the rest of each message may be about anything ("nobody warned me about November in
#: Tampere when we packed up and moved here" / "we've moved again! ... unpacking boxes in
#: Oulu": 0.24).
NAMED_MIN_COSINE = 0.2
#: A word held by at most this many of the user's records names one thing: the two
#: messages and two more (a reply, a mention).
RARE_RECORDS = 4
#: Two messages this close in meaning that share a word none of the block's other
#: statements about what is asked holds are about the same thing, however many records
#: of the store hold the word: a month, a common noun ("We fly to Accra on December 19"
#: / "the airline moved our Ghana flight, we now leave on December 21": 0.43, and 52 of
#: 1,700 records hold "december"). Midway between :data:`NAMED_MIN_COSINE` and
#: :data:`SAME_MIN_COSINE`: two statements that share only a common word are seldom this
#: close unless they are about one thing.
LOCALLY_NAMED_MIN_COSINE = 0.4
#: One of a pair must be among this many statements closest to the question. The
#: closest alone missed updates whose closest statement was a distractor ("What car do
#: we have nowadays?": a statement about potholes, then the new car, then the old).
CLOSEST_PLACES = 2

#: (records in the store, records holding each word) for some words: the store's counts.
WordCounts = Callable[[Sequence[str]], tuple[int, Mapping[str, int]]]


@dataclass(frozen=True)
class Statement:
    """One message of the user in the block: the record showing it, the message, its
    vector and its cosine with the question."""

    record: int
    part: MemoryRecord
    vector: np.ndarray
    asked: float


def statements(records: Sequence[MemoryRecord]) -> list[tuple[int, MemoryRecord]]:
    """The user's own statements among the records' messages, with the index of the
    record showing each: no questions, no small talk, only messages with an id, a time
    and a conversation."""
    out = []
    for n, record in enumerate(records):
        for part in record.parts or [record]:
            if (part.role == "user" and part.id and part.event_time is not None and part.session_id is not None
                    and not is_users_question(part.role, part.text) and not is_small_talk(part.text)):
                out.append((n, part))
    return out


def mark_superseded(
    records: Sequence[MemoryRecord], query_vector: Optional[np.ndarray],
    vectors: Callable[[str, Sequence[str]], Mapping[str, Any]], word_counts: WordCounts
) -> list[MemoryRecord]:
    """``records`` with each older message about the same thing as a later one marked
    (see the module).

    Args:
        records: the block's records, in order.
        query_vector: the question's vector (None: nothing is marked).
        vectors: a source's stored vectors of some of its record ids, by source name
            and ids (a source without vectors gives none).
        word_counts: the store's word counts (:data:`WordCounts`).
    """
    if query_vector is None or len(records) < 2:
        return list(records)
    found = about_what_is_asked(records, query_vector, vectors)
    if len(found) < 2:
        return list(records)
    later_of = same_things(found, word_counts)
    if not later_of:
        return list(records)
    return [with_marks(record, n, later_of, records) for n, record in enumerate(records)]


def about_what_is_asked(
    records: Sequence[MemoryRecord], query_vector: np.ndarray,
    vectors: Callable[[str, Sequence[str]], Mapping[str, Any]]
) -> list[Statement]:
    """The user's statements among ``records`` that are close in meaning to the question
    (:data:`ASKED_MIN_COSINE`), with their unit vectors."""
    candidates = statements(records)
    by_source: dict[str, list[str]] = {}
    for n, part in candidates:
        by_source.setdefault(records[n].source or part.source, []).append(str(part.id))
    held: dict[tuple[str, str], np.ndarray] = {}
    for source, ids in by_source.items():
        for i, vector in vectors(source, ids).items():
            held[(source, i)] = unit(vector)
    query = unit(query_vector)
    out = []
    for n, part in candidates:
        vector = held.get((records[n].source or part.source, str(part.id)))
        if vector is None or vector.shape != query.shape:
            continue
        asked = float(vector @ query)
        if asked >= ASKED_MIN_COSINE:
            out.append(Statement(n, part, vector, asked))
    return out


def same_things(found: Sequence[Statement], word_counts: WordCounts) -> dict[int, Statement]:
    """For each older statement (by the ``id()`` of its message) the latest statement of
    another record and conversation about the same thing, one of the two among the
    :data:`CLOSEST_PLACES` closest to the question."""
    closest = set(sorted(range(len(found)), key=lambda n: -found[n].asked)[:CLOSEST_PLACES])
    pairs: list[tuple[int, int, float]] = []  # (older, later, cosine)
    for a, older in enumerate(found):
        for b, later in enumerate(found):
            if ((a in closest or b in closest) and older.record != later.record and older.part.session_id != later.part.session_id
                    and (older.part.event_time or 0.0) < (later.part.event_time or 0.0)):
                close = float(older.vector @ later.vector)
                if close >= NAMED_MIN_COSINE:
                    pairs.append((a, b, close))
    if not pairs:
        return {}
    shared = {(a, b): shared_words(found[a].part.text, found[b].part.text)
              for a, b, close in pairs if close < SAME_MIN_COSINE}
    rare = rare_words({w for words in shared.values() for w in words}, word_counts)
    # How many of the statements hold each stem, counted once for every pair.
    holders = Counter(st for s in found for st in {stem(w) for w in content_words(s.part.text)})
    later_of: dict[int, Statement] = {}
    for a, b, close in pairs:
        if (about_the_same(close, shared.get((a, b), ()), rare)
                or named_by_them_alone(close, shared.get((a, b), ()), holders)):
            held = later_of.get(a)
            if held is None or (found[b].part.event_time or 0.0) > (held.part.event_time or 0.0):
                later_of[a] = found[b]
    return {id(found[a].part): later for a, later in later_of.items()}


def about_the_same(close: float, shared: Sequence[str], rare: Set[str]) -> bool:
    """Whether two statements at cosine ``close`` that share the words ``shared`` are
    about the same thing: close in meaning, or naming a word of ``rare``."""
    return close >= SAME_MIN_COSINE or (close >= NAMED_MIN_COSINE and any(w in rare for w in shared))


def named_by_them_alone(close: float, shared: Sequence[str], holders: Mapping[str, int]) -> bool:
    """Whether two statements at cosine ``close`` (at least
    :data:`LOCALLY_NAMED_MIN_COSINE`) share a word no other statement holds (its stem
    counted twice in ``holders``)."""
    if close < LOCALLY_NAMED_MIN_COSINE or not shared:
        return False
    return any(holders[stem(w)] == 2 for w in shared)


def shared_words(first: str, second: str) -> list[str]:
    """The content words of ``first`` whose stem ``second`` holds too."""
    stems = {stem(w) for w in content_words(second)}
    return [w for w in content_words(first) if stem(w) in stems and len(w) >= 3]


def rare_words(words: set[str], word_counts: WordCounts) -> set[str]:
    """Those of ``words`` that at most :data:`RARE_RECORDS` of the user's records hold
    (a word the counts do not know is not taken for rare)."""
    if not words:
        return set()
    _, counts = word_counts(sorted(words))
    return {w for w in words if 0 < counts.get(w, 0) <= RARE_RECORDS}


def with_marks(
    record: MemoryRecord, n: int, later_of: Mapping[int, Statement], records: Sequence[MemoryRecord]
) -> MemoryRecord:
    """``record`` (the ``n``-th) with each of its messages that a later one supersedes
    marked (:data:`SUPERSEDED_BY`: the later record's source, label time, id and text)."""
    def marked(part: MemoryRecord) -> MemoryRecord:
        later = later_of.get(id(part))
        if later is None:
            return part
        shown_in = records[later.record]
        mark = {"source": shown_in.source, "time": format_time(shown_in.event_time), "id": later.part.id,
                "text": later.part.text}
        return replace(part, metadata={**part.metadata, SUPERSEDED_BY: [mark]})

    return each_message(record, marked)


def each_message(record: MemoryRecord, change: Callable[[MemoryRecord], MemoryRecord]) -> MemoryRecord:
    """``record`` with ``change`` applied to each of its messages (its parts, or itself);
    ``record`` itself when nothing changed."""
    if not record.parts:
        return change(record)
    parts = [change(p) for p in record.parts]
    if all(new is old for new, old in zip(parts, record.parts)):
        return record
    return replace(record, parts=parts)


def marks_of_shown(records: Sequence[MemoryRecord], shown: Set[str]) -> list[MemoryRecord]:
    """``records`` with only the marks whose later message is among ``shown`` (message
    ids): a mark naming a record the budget left out points the LLM at nothing."""
    def kept(part: MemoryRecord) -> MemoryRecord:
        marks = part.metadata.get(SUPERSEDED_BY)
        if not marks:
            return part
        left = [mark for mark in marks if mark.get("id") in shown]
        if len(left) == len(marks):
            return part
        metadata = {k: v for k, v in part.metadata.items() if k != SUPERSEDED_BY}
        return replace(part, metadata={**metadata, SUPERSEDED_BY: left} if left else metadata)

    return [each_message(record, kept) for record in records]
