"""The second hop: what the best hits of a search name leads to other messages.

Evidence for a question is often spread over sessions ("Where did Caroline move from?":
one session says she moved from her home country, a later one that her home country is
Sweden). The first search finds the message that shares the question's words; the
other one shares none, only the first one's words ("home country"). So, after the first
ranking (:func:`second_hop`):

1. the best ``seeds`` hits are the seeds (never the user's own questions nor the message
   just put: the vector source sets those apart first, :mod:`llama_memory.retrieval.apart`);
2. each seed's *link words* are its content words that the query does not have and that
   are rare in the store (held by at least two records, the seed and another, and by at
   most :data:`MAX_LINK_SHARE` of them): names, places, things; common words link
   everything to everything;
3. one lexical search for the query's words and every seed's link words finds the messages
   that carry the link, the query's words adding to it where they occur;
4. those candidates join the ranking with ``weight`` times the seed's score times their
   score normalised by the best found message holding that seed's links (as if each
   seed had been searched alone; a hop is never worth more than its seed), or keep
   their own score when it is higher.

A lexical hop only: it needs no new embedding (a seed's text is searched as words), and
every seed's link words go into one text search (with the query's words): it costs one
indexed text search, one look-up of word counts and one read of the found records'
texts (which seed's links each holds) per retrieval. The weight is chosen by
leave-one-conversation-out on LoCoMo (``python -m bench.multihop``; the figures are
in docs/benchmarks.md, "Multi-hop").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import lru_cache

from .relevance import content_words, stem

#: How many of the first ranking's hits seed a second hop.
SEEDS = 3
#: How many link words a seed contributes (the rarest).
LINKS = 4
#: What a hop is worth against the first ranking, by default (chosen by leave-one-out).
HOP_WEIGHT = 0.5
#: A word held by more than this share of the store's records is no link.
MAX_LINK_SHARE = 0.02
#: The hop's search returns this many times the ``k`` of the retrieval: 2 was chosen
#: leave-one-conversation-out among 1, 2 and 3 (every fold chose it; 3 was the first
#: round's, 1 lost multi-hop recall); each found message's text is read, so fewer cost less.
HOP_FOUND = 2

#: How many texts' stems :func:`content_stems` keeps.
STEMS_KEPT = 4096

Ranking = Sequence[tuple[str, float]]


@lru_cache(maxsize=STEMS_KEPT)
def content_stems(text: str) -> frozenset[str]:
    """The stems of a text's content words. Cached: the hop asks which link words each
    found message holds, and the same messages are found again and again (a record's
    text never changes). A source that forgets records calls ``cache_clear()``, so no
    forgotten text stays held here."""
    return frozenset(stem(w) for w in content_words(text))


def link_words(
    seed_text: str,
    query: str,
    counts: Mapping[str, int],
    total: int,
    links: int = LINKS,
) -> list[str]:
    """A seed's link words, rarest first: content words of ``seed_text`` not in ``query``
    (compared by stem), held by 2 to ``MAX_LINK_SHARE * total`` records (``counts``: records
    holding each word; ``total``: records in the store)."""
    asked = {stem(w) for w in content_words(query)}
    most = max(2, int(MAX_LINK_SHARE * total))
    candidates = [
        w for w in content_words(seed_text)
        if stem(w) not in asked and not w.isdigit() and 2 <= counts.get(w, 0) <= most
    ]
    return sorted(candidates, key=lambda w: counts[w])[:links]


def second_hop(
    query: str,
    ranked: Ranking,
    seed_texts: Mapping[str, str],
    word_counts: Callable[[Sequence[str]], tuple[int, Mapping[str, int]]],
    search: Callable[[str], Ranking],
    texts: Callable[[Sequence[str]], Mapping[str, str]],
    weight: float,
    seeds: int = SEEDS,
) -> list[tuple[str, float]]:
    """``ranked`` with what its best hits link to (see the module), best first.

    Args:
        query: the query of the first search.
        ranked: its fused ranking, (id, score in 0..1) best first.
        seed_texts: the text of (at least) the first ``seeds`` ids of ``ranked``.
        word_counts: gives (records in the store, records holding each word).
        search: a lexical search, (id, score) best first, for a text; called once.
        texts: gives the text of records the search found (to tell which seed's links
            each one holds).
        weight: what a hop is worth against the first ranking (0 turns it off).
        seeds: how many of the best hits are followed.
    """
    if weight <= 0 or seeds <= 0 or not ranked:
        return list(ranked)
    tops = [(i, s) for i, s in ranked[:seeds] if i in seed_texts]
    # Only the words that could link are counted (a count is a look-up in the index).
    asked = {stem(w) for w in content_words(query)}
    words = {
        w for i, _ in tops for w in content_words(seed_texts[i])
        if stem(w) not in asked and not w.isdigit()
    }
    total, counts = word_counts(sorted(words))
    linking = [(s, link_words(seed_texts[i], query, counts, total)) for i, s in tops]
    linking = [(s, links) for s, links in linking if links]
    if not linking:
        return list(ranked)
    # One search for every seed's links at once: a search per seed cost three times as
    # much (docs/benchmarks.md, "Multi-hop"). What each candidate is worth is still
    # reckoned per seed, as if each had been searched alone: among the candidates that
    # hold that seed's links, normalised by the best of them (normalising by the best of
    # all let one seed's very rare link sink the others' and cost recall).
    links = dict.fromkeys(w for _, seed_links in linking for w in seed_links)
    seeded = {i for i, _ in tops}
    found = [(i, s) for i, s in search(" ".join([query, *links])) if i not in seeded and s > 0]
    if not found:
        return list(ranked)
    every_link = {stem(w) for w in links}
    # the stems of each found record's link words
    held = {i: content_stems(t) & every_link for i, t in texts([i for i, _ in found]).items()}
    scores = dict(ranked)
    for seed_score, seed_links in linking:
        wanted = {stem(w) for w in seed_links}
        # a candidate with none of any seed's links matched the query's words only:
        # every seed's own search would have found it too
        mine = [(i, s) for i, s in found if held.get(i, set()) & wanted or not held.get(i)]
        best = max((s for i, s in mine if held.get(i, set()) & wanted), default=0.0)
        if best <= 0:
            continue
        for record_id, score in mine:
            hop = weight * seed_score * min(1.0, score / best)
            if hop > scores.get(record_id, 0.0):
                scores[record_id] = hop
    return sorted(scores.items(), key=lambda pair: pair[1], reverse=True)
