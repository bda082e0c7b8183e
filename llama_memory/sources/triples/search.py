"""How triple retrieval ranks: three rankings fused, plus the optional second hop.

Pure functions over ids and edges: the source fetches the rankings (dense index,
lexical index) and passes a way to read the entity neighbourhood.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ...retrieval import fuse_rankings
from ...storage.ports.triples import TripleEdge
from ...types import MemoryRecord
from .model import KnowledgeTriple
from .normalize import query_entities

__all__ = ["neighbourhood", "rank_triples", "triple_record"]

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
    return sorted(
        touching(keys),
        key=lambda e: (-len({e.subject_key, e.object_key} & entities), -e.valid_from),
    )


def rank_triples(
    query: str,
    dense: Sequence[str],
    lexical: Sequence[str],
    touching: Touching,
    k: int,
    hops: int,
) -> tuple[dict[str, float], dict[str, list[str]]]:
    """Scores of triple ids for ``query`` and which signals matched each one.

    The dense and lexical rankings and the 1-hop neighbourhood of the entities the
    query names are fused by reciprocal rank; with ``hops=2`` a triple reached
    through a neighbour entity adds half the best score of the triples leading to it.
    """
    named = query_entities(query)
    near = neighbourhood(named, touching)
    lists = {"dense": list(dense), "lexical": list(lexical), "entity": [r.id for r in near][:k]}
    scores = dict(fuse_rankings([([(i, 0.0) for i in ids], 1.0) for ids in lists.values()]))
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
    triple: KnowledgeTriple, score: float, matched: list[str], source: str
) -> MemoryRecord:
    """A retrieved triple as a memory record of ``source``, rendered with its validity."""
    # event_time stays None on purpose: the rendered text already carries
    # "(since ...)", and the memory block would print the date twice. The
    # statement time is in the metadata.
    return MemoryRecord(
        text=triple.render(),
        score=score,
        source=source,
        user_id=triple.user_id,
        session_id=triple.session_id,
        message_ids=list(triple.message_ids),
        event_time=None,
        ingested_at=triple.ingested_at,
        id=triple.id,
        expires_at=triple.expires_at,
        metadata={
            "subject": triple.subject,
            "predicate": triple.predicate,
            "object": triple.object,
            "valid_from": triple.valid_from,
            "valid_to": triple.valid_to,
            "superseded_by": triple.superseded_by,
            "event_time": triple.event_time,
            "session_ids": list(triple.session_ids),
            "mentions": triple.mentions,
            "current": triple.current,
            "matched_by": matched,
        },
    )
