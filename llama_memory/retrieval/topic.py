"""The topic query: a question that asks for a set, searched by meaning once more by its
topic alone (its content words without the names it mentions). The answers to "What
activities does Melanie partake in?" share no word with it but the name: of the
multi-hop evidence turns LoCoMo's blocks missed, 108 of 176 were among no candidate list
(docs/benchmarks.md, "Multi-hop, fourth round"; the rule is in docs/concepts.md).
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
    """The query's content words without the names it mentions: "What activities does
    Ana partake in?" -> "activities partake"."""
    names = names_in(query)
    return " ".join(w for w in content_words(query) if w not in names)


def topic_hop(
    query: str, ranked: Ranking, nearest: Callable[[str, int], Ranking], weight: float
) -> list[tuple[str, float]]:
    """``ranked`` (scores in 0..1) with the messages ``nearest`` to the query's topic (a
    search by meaning for a text and a count) joined at ``weight`` times their cosine
    rescaled among them (or their own score when higher), best first; the caller decides
    that ``query`` asks for a set."""
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
