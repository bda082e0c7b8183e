"""Questions that ask for a set, and how many records they get.

"What activities does Melanie partake in?", "What pets does Nate have?", "How many
children does Melanie have?", "What has Melanie painted?": the answer is gathered from
many sessions, one turn in each (pottery in one, camping in another, swimming in a
third), and those turns share few words with the question or with each other. Of the
multi-hop evidence turns the block missed on LoCoMo, 64 of 184 were among the ranking's
candidates, 31 of them ranked 10th to 29th: more excerpts reach some (docs/benchmarks.md,
"Multi-hop, third round").

So a question that asks for a set (:func:`asks_for_a_set`) gets :data:`SET_SPREAD`
times the records of another (:func:`records_for`), each one an excerpt of the same
length; the memory's token budget still caps the block. More but shorter excerpts (the
same number of messages) lost recall, for every question and for set questions alone:
the neighbouring turns are often the evidence.

The test is on the question's words only (no model): a plural noun right after
"what"/"which" ("what activities", "which cities", "what kind of books", "what outdoor
activities has..."), "how many", "both", "in what ways", "what has/have X (verb)ed".
On LoCoMo's dev questions it holds for 82 of 142 multi-hop questions and 28 of 418
single-hop ones.
"""

from __future__ import annotations

import re

#: A question that asks for a set gets this many times the records of another, chosen
#: leave-one-conversation-out on LoCoMo (three folds of five chose 1.3, two 1.5) among
#: 1, 1.2, 1.3, 1.4, 1.5 and 1.7
#: (``python -m bench.multihop --weights 0.5 --set-spreads 1,1.2,1.3,1.4,1.5,1.7``;
#: docs/benchmarks.md, "Multi-hop, third round").
SET_SPREAD = 1.3

# Verbs that follow "what"/"which" and end like a plural ("what does", "what has").
_AUXILIARIES = frozenset(
    "does do did has have had is are was were will would can could should may might".split()
)
_KIND_OF = frozenset("kind kinds type types sort sorts".split())
# Phrases that ask for a set whatever follows.
_SET_PHRASES = re.compile(
    r"\bhow many\b|\bboth\b|\bin what ways\b|^what (?:has|have) \w+ (?:\w+ )?\w+ed\b"
)
_WORD = re.compile(r"[\w']+", re.UNICODE)


def _plural(word: str) -> bool:
    """Whether a word looks like a plural noun (not an auxiliary, not "-ss"/"-us"/"-is")."""
    return word not in _AUXILIARIES and (
        word.endswith("ies") or (word.endswith("s") and not word.endswith(("ss", "us", "is", "'s")))
    )


def asks_for_a_set(question: str) -> bool:
    """Whether ``question`` asks for several things gathered from the history ("What
    activities does Melanie partake in?", "How many children does Melanie have?"),
    rather than for one ("What is Caroline's identity?"). See the module."""
    if not isinstance(question, str):
        raise TypeError(f"asks_for_a_set() takes the question as a str, not {type(question).__name__}")
    found = _WORD.findall(question.casefold())
    if _SET_PHRASES.search(" ".join(found)):
        return True
    if not found or found[0] not in ("what", "which"):
        return False
    rest = found[1:]
    if len(rest) >= 2 and rest[0] in _KIND_OF and rest[1] == "of":
        rest = rest[2:]
    if not rest or rest[0] in _AUXILIARIES:
        return False
    # "what activities ...", or "what outdoor activities has ...": the plural noun may
    # follow one word (an adjective) when an auxiliary comes next ("which activity
    # helps Nate" is no set: "helps" is a verb).
    return _plural(rest[0]) or (len(rest) >= 3 and _plural(rest[1]) and rest[2] in _AUXILIARIES)


def records_for(question: str, k: int, spread: float = SET_SPREAD) -> int:
    """How many records to retrieve for ``question`` when the memory shows ``k`` per
    source: ``round(k * spread)`` for a question that asks for a set, ``k`` otherwise."""
    if not spread >= 1:
        raise ValueError(
            f"the set spread (a memory's set_spread) is 1 (no more records for a question that "
            f"asks for a set) or more, got {spread}"
        )
    if k <= 0 or spread == 1 or not asks_for_a_set(question):
        return k
    return max(k, round(k * spread))
