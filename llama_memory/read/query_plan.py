"""What to retrieve for a user's message (:func:`choose_query`), and the stored small talk
left out of what was retrieved (:func:`without_small_talk`); the rules are described in
docs/concepts.md ("The query", "Stored small talk is never shown").

A question of two parts is split (:func:`question_parts`) because, searched whole, it is
one vector between its two topics: the stronger topic filled every place and the second
part's fact was shown for 0.20 of them. Stored small talk matches a query of its kind
word for word and by meaning (a cosine near 1 with "got it"), and its excerpt brings
unrelated neighbours along.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta, timezone
from typing import Literal, Optional

from ..core.text import normalize_text
from ..core.types import MemoryRecord
from ..retrieval.excerpts import hit_of, without
from ..retrieval.relevance import content_words, is_personal, words
from .compose import IRRELEVANT, LeftOut

#: The most parts a question is searched in (each part costs a search).
MAX_PARTS = 3
# Where a question is split: "and" (or "&", "plus", ";") that starts a second question,
# by a question word ("... and which boat do I own?") or an auxiliary before its subject
# ("... and do I still have it?"). An "and" between two names ("Caroline and Melanie",
# "my mum's and dad's names") joins the things one question asks about: not split.
_JOIN = re.compile(
    r"\s*,?\s+(?:and|&|plus)\s+(?=(?:what|which|where|who|whom|whose|when|why|how)\b"
    r"|(?:do|does|did|is|are|am|was|were|can|could|will|would)\s+(?:i|we|my|our|you|he|she|they|it)\b)"
    r"|\s*;\s*",
    re.IGNORECASE,
)


def question_parts(text: str) -> tuple[str, ...]:
    """The parts of a question that asks for two or more things, each with a content
    word of its own; ``()`` for one part ("What did Caroline and Melanie paint?")."""
    if "?" not in text:
        return ()
    pieces = [p.strip() for p in _JOIN.split(text.strip()) if p.strip()]
    parts = tuple(p for p in pieces if content_words(p))
    return parts[:MAX_PARTS] if len(parts) >= 2 else ()


#: Words of greetings, thanks and acknowledgements: a message made of these only is small talk.
SMALL_TALK = frozenset(
    "hi hello hey heya hiya howdy yo hola greetings morning evening afternoon night gm gn "
    "thanks thank thx ty tysm cheers appreciate appreciated much lot lots "
    "ok okay k kk alright allright right fine sure yes yeah yep yup no nope nah "
    "great cool nice good awesome perfect excellent wonderful amazing fantastic lovely "
    "brilliant sweet neat wow indeed agreed true exactly absolutely definitely "
    "bye goodbye cya later see soon take care talk ttyl "
    "lol haha hahaha hehe lmao hmm hm mm oh ah ahh uh um huh "
    "welcome please np problem worries got it that sounds makes sense understood "
    "so very really too the a you u all for again is was this me will do well done "
    "how are whats what up sup s it doing going been have hope your day "
    # "hi there", "that's helpful": small talk with a greeting or thanks, never alone.
    "there helpful useful".split()
)
# Some words only make small talk in company ("how are you?"): a message needs one of these.
_GREETING_CORE = frozenset(
    "hi hello hey heya hiya howdy yo hola greetings morning evening afternoon night gm gn "
    "thanks thank thx ty tysm cheers ok okay k kk alright fine sure yes yeah yep yup no nope "
    "nah great cool nice good awesome perfect excellent wonderful amazing fantastic lovely "
    "brilliant sweet neat wow agreed exactly absolutely bye goodbye cya later ttyl lol haha "
    "hahaha hehe lmao hmm hm mm oh ah ahh uh um huh welcome np sup".split()
)


# Words that place a message in the time it is said: "How are you today?" is as much small
# talk as "how are you?". (Not "yesterday", "last week": they point back, :data:`_WHEN`.)
_TIME_DEIXIS = re.compile(
    r"\b(?:today|tonight|tonite|now|right now|nowadays|lately|recently|currently|these days|so far|"
    r"this (?:morning|afternoon|evening|week|weekend|month|year))\b"
)


def without_time_deixis(found: Sequence[str]) -> list[str]:
    """``found`` (a message's words) without the words of when it is said."""
    return _TIME_DEIXIS.sub(" ", " ".join(found)).split()


def is_small_talk(text: str) -> bool:
    """Whether a message is only a greeting, thanks or acknowledgement ("how are you
    today?"): at most 8 words, all of :data:`SMALL_TALK` once the words of when are set
    aside, one a greeting or acknowledgement; a message without words (an emoji) counts."""
    found = words(text)
    if not found:
        return bool(text.strip())
    found = without_time_deixis(found)
    if not found:  # "today?", "now?": a time alone asks about something said before
        return False
    joined = " ".join(found)
    return (
        len(found) <= 8
        and all(w in SMALL_TALK for w in found)
        and (any(w in _GREETING_CORE for w in found) or bool(_HOW_ARE_YOU.search(joined))
             or bool(_ACKNOWLEDGED.search(joined)))
    )


# Greetings without a greeting word ("how's it going" reads "how it going": no contraction tails).
_HOW_ARE_YOU = re.compile(r"\bhow (?:are|r) (?:you|u)\b|\bhow (?:s )?it going\b|\bwhats? (?:s )?up\b|\bhow have you been\b")
# Acknowledgements and goodbyes without such a word ("got it", "take care").
_ACKNOWLEDGED = re.compile(
    r"\bgot it\b|\bmakes sense\b|\bunderstood\b|\bwill do\b|\bwell done\b|\btake care\b|"
    r"\b(?:see|talk to) (?:you|u)\b|\btalk soon\b"
)


# Phrases that point back in time, with the span of days they point to (None: the
# latest earlier conversation, whenever it was).
_WHEN = (
    (re.compile(r"\byesterday\b"), (1, 1)),
    (re.compile(r"\b(?:last|past|previous) week\b"), (7, 1)),
    (re.compile(r"\b(?:last|previous) (?:time|session|conversation|chat)\b"), None),
    (re.compile(r"\b(?:earlier|before|previously|the other day)\b"), None),
)
# A message is about what was said when it names the talking itself.
_ABOUT_TALK = re.compile(
    r"\b(?:we|i|you)\s+(?:talk(?:ed)?|discuss(?:ed)?|sa(?:y|id)|told|tell|mention(?:ed)?|"
    r"chat(?:ted)?|spoke|speak|ask(?:ed)?)\b"
)
_TALK_WORDS = frozenset(
    "talk talked discuss discussed say said told tell mention mentioned chat chatted spoke "
    "speak ask asked yesterday last time week earlier before previously other day session "
    "conversation previous past".split()
)
# Words that stand for something said before ("the other one", "that", "why?").
_ANAPHORA = frozenset(
    "one ones other another it that this those these them they he she him her there then "
    "why same more again else which first second third last former latter".split()
)


@dataclass(frozen=True)
class QueryPlan:
    """What :func:`choose_query` decided to retrieve for.

    Attributes:
        kind: ``"none"`` (small talk), ``"as_is"`` (the message), ``"context"`` (with the
            previous user message), or ``"time"`` (what was said at an earlier time, and
            ``text`` if not empty).
        text: the text to search by (may be empty for ``"time"``).
        days: for ``"time"``: how many days back the span starts and ends ((1, 1) for
            yesterday); None for the latest earlier session.
        parts: a question's parts, each searched besides ``text``; ``()`` otherwise.
    """

    kind: Literal["none", "as_is", "context", "time"]
    text: str
    days: Optional[tuple[int, int]] = None
    parts: tuple[str, ...] = ()

    def span(self, now: float) -> Optional[tuple[float, float]]:
        """The (start, end) in epoch seconds of this plan's UTC days, or None."""
        if self.days is None:
            return None
        today = datetime.fromtimestamp(now, tz=timezone.utc).replace(
            hour=0, minute=0, second=0, microsecond=0
        )
        start = today - timedelta(days=self.days[0])
        end = today - timedelta(days=self.days[1] - 1)
        return start.timestamp(), end.timestamp()


def choose_query(text: Optional[str], earlier_user_texts: Sequence[str] = ()) -> QueryPlan:
    """Decide what to retrieve for the user's message ``text``.

    Args:
        text: the message (or the ``input`` given to ``get``).
        earlier_user_texts: the conversation's earlier user messages, oldest first
            (the latest is the one before ``text``).
    """
    text = (text or "").strip()
    if not text:  # no user message yet: every source is asked, as the protocol says
        return QueryPlan("as_is", "")
    if is_small_talk(text):
        return QueryPlan("none", "")
    lowered = text.casefold()
    content = content_words(text)
    for pattern, days in _WHEN:
        if pattern.search(lowered) and (_ABOUT_TALK.search(lowered) or len(content) <= 3):
            rest = [w for w in content if w not in _TALK_WORDS]
            return QueryPlan("time", " ".join(rest), days)
    found = words(text)
    topical = [w for w in content if w not in _ANAPHORA]
    previous = next((t for t in reversed(earlier_user_texts) if t.strip() not in ("", text)), "")
    if previous and len(found) <= 6 and len(topical) <= 1 and any(w in _ANAPHORA for w in found):
        return QueryPlan("context", f"{previous}\n{text}")
    if not content_words(" ".join(without_time_deixis(found))) and not is_personal(text):
        # Function words and words of when only, not about the user ("how about you?"):
        # no record can match it by what it is about. A time alone follows up the
        # previous message ("what about today?"): searched with it. A question about the
        # user in function words ("what do I do?") is searched: its meaning may match.
        if previous and len(without_time_deixis(found)) < len(found):
            return QueryPlan("context", f"{previous}\n{text}")
        return QueryPlan("none", "")
    return QueryPlan("as_is", text, parts=question_parts(text))


#: Why :func:`without_small_talk` left a record out (a :class:`LeftOut` rule).
SMALL_TALK_RULE = "the message that matched is small talk or the reply to it: it states nothing"
#: Why :func:`without_small_talk` left out a record that matched by repeating the query.
ECHO_RULE = "the message that matched says the same words as the query: it states nothing the query does not"


def empty_parts(record: MemoryRecord) -> set[int]:
    """The ``id()`` of each part of ``record`` (itself when it has none) in an empty
    exchange: a user message that is small talk, and the assistant's reply right after."""
    parts = record.parts or [record]
    empty: set[int] = set()
    after_small_talk = False
    for part in parts:
        if part.role == "user":
            after_small_talk = is_small_talk(part.text)
            if after_small_talk:
                empty.add(id(part))
        elif part.role == "assistant" and after_small_talk:
            empty.add(id(part))
            after_small_talk = False
        else:
            after_small_talk = False
    return empty


def without_small_talk(
    records: Sequence[MemoryRecord], query: str = ""
) -> tuple[list[MemoryRecord], list[LeftOut]]:
    """``records`` without the parts of empty exchanges (:func:`empty_parts`), and those
    whose hit is one of them as left out (:data:`SMALL_TALK_RULE`); so is a record whose
    hit repeats ``query``'s words (:data:`ECHO_RULE`: "one sec" said before, small talk
    no word list knows, matches itself best)."""
    echo = normalize_text(query) if query.strip() else None
    kept: list[MemoryRecord] = []
    dropped: list[LeftOut] = []
    for record in records:
        hit = hit_of(record)
        if echo is not None and normalize_text(hit.text) == echo:
            dropped.append(LeftOut(record, IRRELEVANT, detail=ECHO_RULE, rule=ECHO_RULE))
            continue
        empty = empty_parts(record)
        if not empty:
            kept.append(record)
            continue
        left = None if id(hit) in empty else without(record, lambda part: id(part) in empty)
        if left is None:
            dropped.append(LeftOut(record, IRRELEVANT, detail=SMALL_TALK_RULE, rule=SMALL_TALK_RULE))
        else:
            kept.append(_as_retrieved(left, record))
    return kept, dropped


def _as_retrieved(left: MemoryRecord, record: MemoryRecord) -> MemoryRecord:
    """``left`` (``record`` without some parts) with ``record``'s relevance and metadata,
    the excerpt's own keys as ``left`` has them."""
    own = {k: v for k, v in record.metadata.items() if k not in _EXCERPT_KEYS}
    return replace(left, relevance=record.relevance, importance=record.importance,
                   last_used=record.last_used, metadata={**own, **left.metadata})


#: The metadata keys an excerpt's text is made from (:func:`~llama_memory.retrieval.excerpts.join_parts`).
_EXCERPT_KEYS = ("hit", "omitted_before")
