"""How triple retrieval ranks: words, meaning and the named entities fused, plus the
optional second hop; pure functions over ids, scores and edges.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Optional

from ...core.types import MemoryRecord
from ...retrieval import fuse_rankings, fuse_scores
from ...storage.ports.triples import TripleEdge
from .model import KnowledgeTriple

_HOP_DECAY = 0.5  # a 2-hop triple's share of the score of the 1-hop triple leading to it
_MAX_FRONTIER = 50  # neighbour entities expanded for 2 hops, strongest first

#: Reads the triples touching some entity keys (as subject or object).
Touching = Callable[[Sequence[str]], Sequence[TripleEdge]]


def neighbourhood(entities: set[str], touching: Touching) -> list[TripleEdge]:
    """Triples touching ``entities``: those touching two of them first, then the newest."""
    if not entities:
        return []
    keys = sorted(entities)[: _MAX_FRONTIER * 10]  # bounded: a query names few entities
    # Distinct named entities touched: "John — name — John" touches one, not two.
    return sorted(touching(keys), key=lambda e: (-len({e.subject_key, e.object_key} & entities), -e.valid_from))


#: The fusions :func:`rank_triples` offers; ``"scores"`` is the default, chosen by
#: measurement (``python -m bench.triples``, docs/benchmarks.md).
FUSIONS = ("scores", "rrf")


def rank_triples(
    named: set[str], near: Sequence[TripleEdge], lexical: Sequence[tuple[str, float]],
    dense: Mapping[str, float], touching: Touching, k: int, hops: int, fusion: str = "scores",
) -> tuple[dict[str, float], dict[str, list[str]]]:
    """Scores of triple ids and which signals matched each one: ``lexical`` (id, score)
    best first, ``dense`` cosines, and ``near``, the neighbourhood of the ``named``
    entities, fused by ``fusion`` (``"scores"``: as the vector source fuses, plus the
    share of named entities touched at the same weight; or ``"rrf"``); the top ``k`` of
    each ranking count as its matches. ``hops=2`` adds the neighbours' triples (read by
    ``touching``) at half the best score leading to them.
    """
    if fusion not in FUSIONS:
        raise ValueError(f"fusion must be one of {FUSIONS}, got {fusion!r}")
    by_cosine = sorted(dense, key=lambda i: dense[i], reverse=True)
    lists = {"dense": by_cosine[:k], "lexical": [i for i, _ in lexical][:k], "entity": [r.id for r in near][:k]}
    if fusion == "rrf":
        scores = dict(fuse_rankings([([(i, 0.0) for i in ids], 1.0) for ids in lists.values()]))
    else:
        # Two of three parts from words and meaning, one from the entities named.
        scores = {i: 2 * s / 3 for i, s in fuse_scores(lexical, dense)}
        most = max((len({r.subject_key, r.object_key} & named) for r in near), default=0)
        for r in near:
            share = len({r.subject_key, r.object_key} & named) / most
            scores[r.id] = scores.get(r.id, 0.0) + share / 3
    matched = {i: [label for label, ids in lists.items() if i in ids] for i in scores}
    if hops == 2 and near:
        # Spread from each 1-hop triple to the entity at its far end.
        frontier: dict[str, float] = {}
        for r in near:
            for entity in (r.subject_key, r.object_key):
                if entity not in named:
                    frontier[entity] = max(frontier.get(entity, 0.0), scores.get(r.id, 0.0))
        strongest = sorted(frontier, key=lambda e: frontier[e], reverse=True)[:_MAX_FRONTIER]
        direct = {r.id for r in near}
        for r in neighbourhood(set(strongest), touching):
            if r.id not in direct:
                via = max(frontier.get(r.subject_key, 0.0), frontier.get(r.object_key, 0.0))
                scores[r.id] = scores.get(r.id, 0.0) + _HOP_DECAY * via
                matched.setdefault(r.id, []).append("2-hop")
    return scores, matched


def triple_record(
    triple: KnowledgeTriple, score: float, matched: list[str], source: str, before: Optional[str] = None,
    functional: bool = False,
) -> MemoryRecord:  # fmt: skip
    """A retrieved triple as a record of ``source``, rendered with its validity (and
    ``before``); the block marks another value of a ``functional`` predicate as a conflict."""
    # event_time stays None: the text already says "(since ...)", and the block would print
    # the date twice. The statement time is in the metadata.
    return MemoryRecord(
        text=triple.render(before), score=score, source=source, user_id=triple.user_id,
        session_id=triple.session_id, message_ids=list(triple.message_ids), event_time=None,
        ingested_at=triple.ingested_at, id=triple.id, expires_at=triple.expires_at,
        metadata={
            "subject": triple.subject, "predicate": triple.predicate, "object": triple.object,
            "valid_from": triple.valid_from, "valid_to": triple.valid_to,
            "superseded_by": triple.superseded_by, "event_time": triple.event_time,
            "session_ids": list(triple.session_ids), "mentions": triple.mentions,
            "current": triple.current, "matched_by": matched, "before": before,
            "functional": functional,
        },
    )
