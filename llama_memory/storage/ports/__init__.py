from .triples import (  # noqa: F401
    NewTriple,
    StoredTriple,
    TimelineEntry,
    TripleEdge,
    TripleMention,
    TripleRef,
    TripleRow,
    TripleTimeline,
)
