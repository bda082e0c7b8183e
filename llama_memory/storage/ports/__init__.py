"""Storage ports: what everything above storage may ask of a backend (plain rows in and
out, no connections, no SQL). Each backend implements them (``llama_memory.storage``)."""

from .profile import ProfileChange, ProfileRows, ProfileValue, ProfileWrite  # noqa: F401
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
