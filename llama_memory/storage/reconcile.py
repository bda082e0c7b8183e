"""Bringing a dense index back in line with the system of record (after a Chroma server
was down, restored from an old backup, or wiped), per user, all (``memory.reconcile()``)
or one (server mode's open):

- a record flagged indexed whose vector is missing is flagged again (embedded next);
- a record flagged waiting whose vector is there is flagged indexed;
- a vector without a record is deleted, as is a collection whose user has no records.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Callable, Optional

from .ports.records import IndexFlags
from .ports.vectors import VectorIndex


@dataclass
class ReconcileReport:
    """What reconciling one dense index (or several, added up) did.

    Attributes:
        users: users whose records were compared.
        missing: records whose vector was missing from the index (flagged for indexing).
        adopted: records flagged as waiting whose vector was in the index already.
        orphans: vectors without a record, deleted from the index.
        dropped_collections: collections of users with no records left, dropped.
        indexed: vectors written to the index by the catch-up that followed.
    """

    users: int = 0
    missing: int = 0
    adopted: int = 0
    orphans: int = 0
    dropped_collections: int = 0
    indexed: int = 0

    def __add__(self, other: "ReconcileReport") -> "ReconcileReport":
        return ReconcileReport(
            **{f.name: getattr(self, f.name) + getattr(other, f.name) for f in fields(self)}
        )


def reconcile_index(
    index: VectorIndex, read_flags: Callable[[], IndexFlags], set_flags: Callable[[Sequence[str], bool], None],
    owner: Optional[tuple[str, str]] = None
) -> ReconcileReport:
    """Compare ``index`` with the records' flags (``read_flags``), fix them with
    ``set_flags(ids, indexed)`` and delete orphans; with ``owner``, that user only.
    Chroma is read before SQLite on purpose: writers commit to SQLite first, so a
    concurrent writer's fresh vectors are never taken for orphans.
    """
    if owner is None:
        collections = set(index.collection_names())
        owners = [o for o in read_flags() if index.collection_name(*o) in collections]
    else:
        owners = [owner]  # reading one user's ids creates no collection
    in_index = {o: index.ids(*o) for o in owners}
    records = read_flags()  # again, after Chroma: see above
    if owner is not None:
        records = {o: ids for o, ids in records.items() if o == owner and ids}
        collections = {index.collection_name(*owner)} if in_index[owner] else set()
    report = ReconcileReport(users=len(records))
    expected = {index.collection_name(tenant, user) for tenant, user in records}
    for name in sorted(collections - expected):
        index.drop_collection(name)
        report.dropped_collections += 1
    for (tenant, user), known in records.items():
        vectors = in_index.get((tenant, user), set())
        missing = [i for i, indexed in known.items() if indexed and i not in vectors]
        adopted = [i for i, indexed in known.items() if not indexed and i in vectors]
        orphans = sorted(vectors - known.keys())
        set_flags(missing, False)
        set_flags(adopted, True)
        index.delete(tenant, user, orphans)
        report.missing += len(missing)
        report.adopted += len(adopted)
        report.orphans += len(orphans)
    return report
