"""What to retrieve for: the choice of query for a user's message.

:func:`choose_query` looks at the user's message:

- small talk ("hi", "thanks", "ok", "great!", "got it") retrieves nothing: no record can
  answer it; nor does a message of function words only that is not about the user
  ("how about you?") and refers to nothing earlier;
- a message that refers back to the conversation ("and the other one?", "why?") is
  too short to search by: it is searched together with the previous user message;
- a message that refers back in time ("what did we talk about last time?", "what did I
  say yesterday?") asks for what was said then: the records of the latest earlier
  session, or of that day, plus a search by its remaining words if it has any.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Literal, Optional

from ..retrieval.relevance import content_words, is_personal, words
from .question_parts import question_parts

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
    # "hi there", "that's helpful": the vocative "there" of a greeting, and praise of a
    # reply beside "great" and "nice" (with a greeting or thanks, never alone).
    "there helpful useful".split()
)
# Some words only make small talk in company ("how are you?"): alone, or with others,
# a message needs at least one of these to count.
_GREETING_CORE = frozenset(
    "hi hello hey heya hiya howdy yo hola greetings morning evening afternoon night gm gn "
    "thanks thank thx ty tysm cheers ok okay k kk alright fine sure yes yeah yep yup no nope "
    "nah great cool nice good awesome perfect excellent wonderful amazing fantastic lovely "
    "brilliant sweet neat wow agreed exactly absolutely bye goodbye cya later ttyl lol haha "
    "hahaha hehe lmao hmm hm mm oh ah ahh uh um huh welcome np sup".split()
)


# Words that place a message in the time it is said ("today", "tonight", "these days",
# "this week"): they say when, not what about. "How are you today?" is as much small talk
# as "how are you?", and "today" names nothing a record could hold; set aside before a
# message is judged by what it is about. (Not "yesterday", "last week": they point back
# to what was said then, :data:`_WHEN`.)
_TIME_DEIXIS = re.compile(
    r"\b(?:today|tonight|tonite|now|right now|nowadays|lately|recently|currently|these days|so far|"
    r"this (?:morning|afternoon|evening|week|weekend|month|year))\b"
)


def without_time_deixis(found: Sequence[str]) -> list[str]:
    """``found`` (a message's words, :func:`~llama_memory.retrieval.relevance.words`)
    without the words that place it in the time it is said (:data:`_TIME_DEIXIS`)."""
    return _TIME_DEIXIS.sub(" ", " ".join(found)).split()


def is_small_talk(text: str) -> bool:
    """Whether a message is only a greeting, thanks or acknowledgement ("hi", "thanks!",
    "ok", "great!", "how are you?"), with or without a word of when it is said ("how are
    you today?", "how's it going these days?"): at most 8 words, all of
    :data:`SMALL_TALK` once those are set aside, one a greeting or acknowledgement. A
    message without words (emoji, punctuation) counts too."""
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


# Greetings without a greeting word.
# (The words have no contraction tails: "how's it going" reads "how it going".)
_HOW_ARE_YOU = re.compile(r"\bhow (?:are|r) (?:you|u)\b|\bhow (?:s )?it going\b|\bwhats? (?:s )?up\b|\bhow have you been\b")
# Acknowledgements and goodbyes without such a word: the phrases whose words
# :data:`SMALL_TALK` holds for them ("got it", "makes sense", "will do", "take care").
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
        kind: ``"none"`` (small talk: retrieve nothing), ``"as_is"`` (the message),
            ``"context"`` (the message with the previous user message), or ``"time"``
            (what was said at an earlier time, and ``text`` if not empty).
        text: the text to search by (may be empty for ``"time"``).
        days: for ``"time"``: (how many days back the span starts, how many days back
            it ends), e.g. (1, 1) for yesterday; None for the latest earlier session.
        parts: for a question that asks for two things or more ("Which tea do I like and
            which boat do I own?"), each part, searched for by itself besides ``text``
            (:func:`~llama_memory.read.question_parts.question_parts`); ``()`` otherwise.
    """

    kind: Literal["none", "as_is", "context", "time"]
    text: str
    days: Optional[tuple[int, int]] = None
    parts: tuple[str, ...] = ()

    def span(self, now: float) -> Optional[tuple[float, float]]:
        """The (start, end) in epoch seconds of the days this plan points to, in UTC
        whole days, or None."""
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
    if len(found) <= 6 and len(topical) <= 1 and any(w in _ANAPHORA for w in found):
        previous = next((t for t in reversed(earlier_user_texts) if t.strip() and t.strip() != text), "")
        if previous:
            return QueryPlan("context", f"{previous}\n{text}")
    if not content_words(" ".join(without_time_deixis(found))) and not is_personal(text):
        # Nothing but function words and words of when it is said, and not about the
        # user ("how about you?", "are you there?", "what about today?"): no record can
        # match it by what it is about, only by the words every message has or by
        # "today". A time alone follows up the previous message ("what's on tomorrow?"
        # then "what about today?"): searched with it. A question about the user in
        # function words ("what do I do?", "what am I doing today?") is searched: its
        # meaning may match.
        previous = next((t for t in reversed(earlier_user_texts) if t.strip() and t.strip() != text), "")
        if previous and len(without_time_deixis(found)) < len(found):
            return QueryPlan("context", f"{previous}\n{text}")
        return QueryPlan("none", "")
    return QueryPlan("as_is", text, parts=question_parts(text))
