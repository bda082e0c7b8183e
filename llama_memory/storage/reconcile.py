"""Bringing a dense index back in line with the system of record.

The dense index (Chroma) is derived from SQLite, and the two can drift apart
when they are not on one machine: a Chroma server that was down while records
were written or forgotten, restored from an old backup, or wiped. Reconciling
compares, per user, the ids SQLite holds with the ids Chroma holds:

- a record flagged as indexed whose vector is missing is flagged again, so the
  next flush (or read) embeds and writes it;
- a record flagged as waiting whose vector is there already is flagged indexed;
- a vector without a record (an orphan) is deleted;
- a collection of this index whose user has no records left is dropped.

It runs for every user of the store (``memory.reconcile()``) or for one user
(what opening a memory in server mode does: a cost of one Chroma read, whatever
the number of users).
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
    index: VectorIndex,
    read_flags: Callable[[], IndexFlags],
    set_flags: Callable[[Sequence[str], bool], None],
    owner: Optional[tuple[str, str]] = None,
) -> ReconcileReport:
    """Compare ``index`` with the record's ids (``read_flags``), fix the flags with
    ``set_flags(ids, indexed)`` and delete what the record no longer holds. With
    ``owner`` (tenant, user), only that user's ids are compared, ``read_flags``
    may return that user's alone, and no other collection is touched.

    Chroma is read before SQLite on purpose: a writer commits to SQLite before it
    writes to Chroma, so whatever Chroma shows is already in the SQLite read that
    follows, and a concurrent writer's fresh vectors are never taken for orphans.
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
