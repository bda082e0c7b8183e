"""Storage ports: what the sources need from storage, as interfaces a backend implements.

Each port takes and returns plain domain rows (frozen dataclasses), never a
connection, SQL or a backend's row positions.
"""

from .triples import (  # noqa: F401
    NewTriple,
    StoredTriple,
    TimelineEntry,
    TripleEdge,
    TripleMention,
    TripleRef,
    TripleTimeline,
)
