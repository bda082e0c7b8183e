"""The topic query: a question that asks for a set, searched by meaning once more by its
topic alone.

"What activities does Melanie partake in?": the answer is camping in one session,
swimming in another, pottery in a third, turns that share no word with the question but
"Melanie" (and her name is on half the turns of a transcript). Of the multi-hop evidence
turns the block missed on LoCoMo, 108 of 176 were among no candidate list (neither the
dense nor the lexical side's, nor the second hop's), and 87 of them share no word with
the question but the person's name (docs/benchmarks.md, "Multi-hop, fourth round").

So, for a question that asks for a set (:func:`llama_memory.retrieval.excerpts.asks_for_a_set`),
:func:`topic_hop` embeds its *topic* (its content words without the names it mentions:
"activities partake"), takes as many of the store's messages nearest to it as the first
ranking holds, and lets them join the ranking at ``weight`` times their cosine rescaled
among them (the best 1, the worst 0), or keep their own score when it is higher. It
costs one embedding of a few words and one dense search per set question. The weight was
chosen leave-one-conversation-out on LoCoMo, with the set spread (docs/benchmarks.md,
"Multi-hop, fourth round").
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from .relevance import content_words, names_in

#: What a topic hit is worth against the first ranking, by default: every fold of five
#: chose 1 among 0, 0.5, 0.8 and 1 (``python -m bench.multihop --weights 0.5
#: --set-spreads 1,1.2,1.3,1.4,1.5,1.7 --topic-weights 0,0.5,0.8,1``).
TOPIC_WEIGHT = 1.0

Ranking = Sequence[tuple[str, float]]


def topic_of(query: str) -> str:
    """The query's content words without the names it mentions (and without its
    question words, which are no content words): "What activities does Ana partake in?"
    -> "activities partake"."""
    names = names_in(query)
    return " ".join(w for w in content_words(query) if w not in names)


def topic_hop(
    query: str,
    ranked: Ranking,
    nearest: Callable[[str, int], Ranking],
    weight: float,
) -> list[tuple[str, float]]:
    """``ranked`` with the messages nearest to the query's topic (see the module), best
    first.

    Args:
        query: the question (one that asks for a set: the caller decides).
        ranked: its first ranking, (id, score in 0..1) best first.
        nearest: a search by meaning, (id, cosine) best first, for a text and a count.
        weight: what a topic hit is worth against the first ranking (0 turns it off).
    """
    if weight <= 0 or not ranked:
        return list(ranked)
    topic = topic_of(query)
    if not topic:
        return list(ranked)
    hits = list(nearest(topic, len(ranked)))
    if not hits:
        return list(ranked)
    best, worst = hits[0][1], hits[-1][1]
    scores = dict(ranked)
    for record_id, cosine in hits:
        score = weight * ((cosine - worst) / (best - worst) if best > worst else 1.0)
        if score > scores.get(record_id, 0.0):
            scores[record_id] = score
    return sorted(scores.items(), key=lambda pair: pair[1], reverse=True)
