"""The parts of a question that asks for two things at once ("Which tea do I like and
which boat do I own?"): each part is searched for by itself.

Searched whole, such a question is one vector between its two topics and one bag of
words: the records of the stronger topic fill every place, and the other part's answer
is not found (measured: the second fact of a two-part question was shown for 0.20 of
them). Searched part by part, each part's best records are found, and the rankings are
merged round-robin with the whole question's (:func:`~llama_memory.read.pipeline.retrieve_for`).
"""

from __future__ import annotations

import re

from ..retrieval.relevance import content_words

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
    word of its own; ``()`` for a question of one part (or a text that is no question).

    "Which tea do I like and which boat do I own?" -> ("Which tea do I like",
    "which boat do I own?"); "What did Caroline and Melanie paint?" is one question about
    two people: not split."""
    if "?" not in text:
        return ()
    pieces = [p.strip() for p in _JOIN.split(text.strip()) if p.strip()]
    if len(pieces) < 2:
        return ()
    parts = tuple(p for p in pieces if content_words(p))
    if len(parts) < 2:
        return ()
    return parts[:MAX_PARTS]
