"""The topic query: a question that asks for a set, searched by meaning once more by its
topic alone, among the turns of the person it names.

"What activities does Melanie partake in?": the answer is camping in one session,
swimming in another, pottery in a third, turns that share no word with the question but
"Melanie" (and her name is on half the turns of a transcript). Of the multi-hop evidence
turns the block missed on LoCoMo, 108 of 176 were among no candidate list (neither the
dense nor the lexical side's, nor the second hop's), and 102 of those 108 were said by
the person the question names (docs/benchmarks.md, "Multi-hop, fourth round").

So, for a question that asks for a set (:func:`llama_memory.set_questions.asks_for_a_set`),
:func:`topic_hop` embeds its *topic* (its content words without the person it names:
"activities partake"), takes as many of the store's messages nearest to it as the first
ranking holds, keeps those said by that person when the question names exactly one
speaker, and lets them join the ranking at ``weight`` times their cosine rescaled among
them (the best 1, the worst 0), or keep their own score when it is higher. A speaker is
the name before a colon that opens a message ("Melanie: we went camping"), the way a
transcript of several people is stored; with no such names, every message is a
candidate. It costs one embedding of a few words and one dense search per set question.
The weight was chosen leave-one-conversation-out on LoCoMo, with the set spread
(multi-hop block recall 0.615 -> 0.643 pooled over the held-out folds; docs/benchmarks.md,
"Multi-hop, fourth round").
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Optional

from ..relevance import content_words, words

#: What a topic hit is worth against the first ranking, by default: every fold of five
#: chose 1 among 0, 0.5, 0.8 and 1 (``python -m bench.multihop --weights 0.5
#: --set-spreads 1,1.2,1.3,1.4,1.5,1.7 --topic-weights 0,0.5,0.8,1``).
TOPIC_WEIGHT = 1.0

#: "Melanie: ..." -> "Melanie": a capitalised name before a colon opening a message.
_SPEAKER = re.compile(r"\s*([^\W\d_][\w'-]{0,40}):", re.UNICODE)

Ranking = Sequence[tuple[str, float]]


def speaker_of(text: str) -> Optional[str]:
    """The name before the colon that opens ``text`` ("Melanie: we went camping" ->
    "Melanie"), or None."""
    found = _SPEAKER.match(text)
    return found.group(1) if found and found.group(1)[0].isupper() else None


def named_speakers(query: str, texts: Iterable[str]) -> set[str]:
    """The speakers of ``texts`` (:func:`speaker_of`) that ``query`` names, compared
    without case."""
    asked = set(words(query))
    speakers = {speaker_of(t) for t in texts}
    return {s for s in speakers if s is not None and s.casefold() in asked}


def topic_of(query: str, names: Iterable[str] = ()) -> str:
    """The query's content words without ``names`` (and without its question words,
    which are no content words): "What activities does Melanie partake in?" ->
    "activities partake"."""
    left_out = {n.casefold() for n in names}
    return " ".join(w for w in content_words(query) if w not in left_out)


def topic_hop(
    query: str,
    ranked: Ranking,
    texts: Callable[[Sequence[str]], Mapping[str, str]],
    nearest: Callable[[str, int], Ranking],
    weight: float,
) -> list[tuple[str, float]]:
    """``ranked`` with the messages nearest to the query's topic (see the module), best
    first.

    Args:
        query: the question (one that asks for a set: the caller decides).
        ranked: its first ranking, (id, score in 0..1) best first.
        texts: gives the text of records by id (for the speakers).
        nearest: a search by meaning, (id, cosine) best first, for a text and a count.
        weight: what a topic hit is worth against the first ranking (0 turns it off).
    """
    if weight <= 0 or not ranked:
        return list(ranked)
    names = named_speakers(query, texts([i for i, _ in ranked]).values())
    topic = topic_of(query, names)
    if not topic:
        return list(ranked)
    hits = list(nearest(topic, len(ranked)))
    if len(names) == 1:
        # The person's own turns: a question about what Melanie did is answered by what
        # she said, and the other speaker's turns near the topic crowd hers out.
        (name,) = names
        said = texts([i for i, _ in hits])
        hits = [(i, c) for i, c in hits if speaker_of(said.get(i, "")) == name]
    if not hits:
        return list(ranked)
    best, worst = hits[0][1], hits[-1][1]
    scores = dict(ranked)
    for record_id, cosine in hits:
        score = weight * ((cosine - worst) / (best - worst) if best > worst else 1.0)
        if score > scores.get(record_id, 0.0):
            scores[record_id] = score
    return sorted(scores.items(), key=lambda pair: pair[1], reverse=True)
