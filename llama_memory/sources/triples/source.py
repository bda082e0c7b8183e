"""The knowledge-triple source: writes through the update rules (:mod:`.timeline`),
reads, retrieval (:mod:`.search`), the dense index's upkeep and forgetting, on the triple
timeline port. Facts arrive from :meth:`TripleSource.add_triples`, the agent tools and
memory formation, never from plain messages.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Union, cast

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ChatMessage

from ...core.types import NEVER, TTL, Expiry, MemoryRecord, Scope, StoredMessage
from ...embeddings.offline import embedding_dimension
from ...embeddings.store_model import DimensionGuard, vector_cache
from ...retrieval.hybrid import HybridSearch
from ...retrieval.relevance import calibrate, calibration_for
from ...retrieval.sync import IndexSync, add_cosines
from ...storage.ports import VectorIndex
from ...storage.ports.triples import TripleEdge
from ...storage.sql.triples import TripleTimeline
from ..base import IndexedSource, require_port
from ..change_notes import CHANGED_WITHIN, is_recent, window_seconds
from ..views import TripleTable
from .extraction import ParsedTriples, apply_triples, parse_triples, triples_prompt
from .index import TripleRows, TripleWords
from .model import DEFAULT_FUNCTIONAL_PREDICATES, KnowledgeTriple, to_triple
from .normalize import normalize_entity, normalize_predicate, query_entities
from .search import FUSIONS, neighbourhood, rank_triples, triple_record
from .timeline import Written
from .tools import knowledge_tools
from .writes import write_triples

if TYPE_CHECKING:  # pragma: no cover - for annotations only
    import networkx

#: A scope, or a user id for the default tenant.
Who = Union[Scope, str]


def _scope(who: Who) -> Scope:
    return who if isinstance(who, Scope) else Scope(user_id=who)


#: A triple's share of the query's content words (weighted by rarity) from which it
#: answers the query whatever the calibration says (see ``TripleSource._calibrate``).
FULL_MATCH = 0.999


class TripleSource(IndexedSource):
    """Facts as (subject, predicate, object) triples, superseded instead of lost.

    Args:
        store: the triple timeline, the system of record (a
            :class:`~llama_memory.storage.sql.triples.TripleTimeline`;
            :func:`llama_memory.memory.wiring.default_triple_source` builds the source).
        index: the dense index derived from it (a
            :class:`~llama_memory.storage.ports.VectorIndex` with its own prefix, e.g.
            :data:`TRIPLE_COLLECTION`).
        embed_model: any LlamaIndex embedding; a model of another dimension than the
            store's is refused.
        functional_predicates: predicates that hold one value at a time (a new object
            supersedes the current one); default :data:`DEFAULT_FUNCTIONAL_PREDICATES`,
            more with :meth:`declare_functional`.
        hops: the entity neighbourhood retrieval adds: 1 (triples touching an entity the
            query names) or 2 (also those touching their neighbours).
        batch_size: triples embedded per call, and embedded ones waiting before a
            dense-index write.
        name: the source's name in the memory block.
        priority: its place in the memory block (the profile is 10, past messages 0).
        expiry: default time to live of new triples, refresh on read, and the clock
            (default: kept until forgotten); ``add_triples(ttl=...)`` overrides it.
        fusion: how words, meaning and named entities are fused: ``"scores"``
            (normalised scores, the default) or ``"rrf"`` (reciprocal rank).
        changed_within: seconds (or a timedelta): a current fact that replaced another
            value this recently is rendered with it, ``(since 2026-03-02; before:
            Porto)``; default 90 days, 0 never.
    """

    _waiting = "triples"

    def __init__(
        self, store: TripleTimeline, index: VectorIndex, embed_model: BaseEmbedding, *,
        functional_predicates: Iterable[str] = DEFAULT_FUNCTIONAL_PREDICATES, hops: int = 1,
        batch_size: int = 64, name: str = "triples", priority: int = 5, expiry: Expiry = NEVER,
        fusion: str = "scores", changed_within: Union[float, timedelta, None] = CHANGED_WITHIN,
    ) -> None:
        if fusion not in FUSIONS:
            raise ValueError(f"fusion takes one of {FUSIONS}, not {fusion!r}")
        if hops not in (1, 2):
            raise ValueError(f"hops must be 1 or 2, got {hops!r}")
        self.timeline: TripleTimeline = require_port(
            store, TripleTimeline, "TripleSource",
            "SQLiteTripleTimeline(SQLiteStore(path)) (llama_memory.storage.sqlite), or build the "
            "source with llama_memory.memory.wiring.default_triple_source(store, path, embed_model)",
        )  # fmt: skip
        self.store = self.timeline.store
        self.index = index
        self.embed_model = embed_model
        self.hops = hops
        self.fusion = fusion
        self.name = name
        self.priority = priority
        self.expiry = expiry
        self.changed_within = window_seconds(changed_within)
        self._functional: set[str] = set()
        self.declare_functional(*functional_predicates)
        self._dimensions = DimensionGuard(self.store, embed_model, key_prefix="triples:")
        self._dimensions.check_at_open(embedding_dimension(embed_model))
        # Shared with the other sources of this model: one embedding of a query per get().
        self._vectors = vector_cache(embed_model)
        # The one index sync, as for past messages; no vector copies are kept (triples are
        # few per user, and a search asks the dense index for what it lacks).
        self._sync = IndexSync(
            TripleRows(self.timeline), index, name, self._dimensions.documents,
            batch_size=batch_size, resident_limit=0,
        )  # fmt: skip
        self._lock = self._sync.lock

    # -- functional predicates --------------------------------------------------------

    def declare_functional(self, *predicates: str) -> None:
        """Declare predicates that hold one value at a time for a subject, for triples
        written from now on (stored ones keep their validity until stated again)."""
        for predicate in predicates:
            key = normalize_predicate(predicate) if isinstance(predicate, str) else ""
            if not key:
                raise ValueError(f"not a predicate: {predicate!r}")
            self._functional.add(key)

    def is_functional(self, predicate: str) -> bool:
        """Whether ``predicate`` holds one value at a time (after normalisation)."""
        return normalize_predicate(predicate) in self._functional

    # -- writing ----------------------------------------------------------------------

    def add(self, messages: Sequence[StoredMessage], scope: Scope) -> None:
        """Nothing: triples come from :meth:`add_triples`, the tools or :meth:`extract`."""

    def add_triples(
        self, triples: Iterable[Any], scope: Who, *, event_time: Any = None, message_ids: Sequence[str] = (),
        ttl: Optional[TTL] = None,
    ) -> list[KnowledgeTriple]:  # fmt: skip
        """Store facts for the scope's user, all in one transaction.

        Args:
            triples: ``KnowledgeTriple``s, mappings with ``subject``, ``predicate``
                and ``object``, or ``(subject, predicate, object)`` tuples.
            scope: whose facts they are (a :class:`Scope`, or a user id).
            event_time: when they were stated (datetime, date, epoch seconds or ISO
                string; default now). A triple's own ``valid_from``/``event_time``
                wins.
            message_ids: ids of the chat messages they came from.
            ttl: how long they are kept (seconds or a timedelta); default the
                source's ``expiry.ttl``. Stating a known fact again renews it (the
                later expiry wins; a fact kept forever stays so).

        Returns:
            The stored triples, in the order given (an identical triple already
            known comes back with its grown provenance).

        Raises:
            TripleError: a triple was malformed; nothing was written.
            ScopeError: the scope has no user.
        """
        written = self._write(triples, _scope(scope), event_time, message_ids, origin="api", ttl=ttl)
        return self._by_ids([w.id for w in written], _scope(scope))

    def _write(
        self, triples: Iterable[Any], scope: Scope, event_time: Any, message_ids: Sequence[str], origin: str,
        ttl: Optional[TTL] = None,
    ) -> list[Written]:  # fmt: skip
        scope.require_user(f"the {self.name!r} memory source")
        self._dimensions.check_model()  # another model is refused before its triples are written
        with self._lock:
            return write_triples(
                self.timeline, self._functional, self.expiry.for_write(ttl),
                triples, scope, event_time, message_ids, origin,
            )  # fmt: skip

    # -- reading the store -----------------------------------------------------------------

    def triples(
        self, scope: Who, *, include_history: bool = False, subject: Optional[str] = None,
        predicate: Optional[str] = None,
    ) -> list[KnowledgeTriple]:  # fmt: skip
        """The user's triples (current ones only, unless ``include_history``), oldest
        first, optionally for one subject and/or predicate (matched normalised)."""
        scope = _scope(scope)
        scope.require_user(f"the {self.name!r} memory source")
        rows = self.timeline.select(
            scope, self.expiry.now(), include_history=include_history,
            subject_key=normalize_entity(subject) if subject is not None else None,
            predicate_key=normalize_predicate(predicate) if predicate is not None else None,
        )  # fmt: skip
        return [to_triple(r) for r in rows]

    def view(self, scope: Who, *, include_history: bool = True, draw: bool = True) -> TripleTable:
        """The user's triples as a table (:class:`~llama_memory.sources.views.TripleTable`),
        the current ones' graph drawn in Jupyter (``draw``); superseded ones unless
        ``include_history=False``."""
        scope = _scope(scope)
        return TripleTable(self.triples(scope, include_history=include_history), name=scope.user_id or "", draw=draw)

    def history(self, subject: str, predicate: str, scope: Who) -> list[KnowledgeTriple]:
        """Every value ``subject``'s ``predicate`` has had, oldest first (the supersede
        chain), the current one last."""
        return self.triples(scope, include_history=True, subject=subject, predicate=predicate)

    def count(self, scope: Who, *, include_history: bool = False) -> int:
        """How many triples the user has (current ones only, unless ``include_history``)."""
        scope = _scope(scope)
        scope.require_user()
        total, current = self.timeline.counts(scope, self.expiry.now())
        return total if include_history else current

    def _by_ids(self, ids: Sequence[str], scope: Scope) -> list[KnowledgeTriple]:
        """Triples by id, in the order given (repeats kept), within the scope."""
        if not ids:
            return []
        scope.require_user()
        rows = self.timeline.select(scope, self.expiry.now(), ids=ids)
        found = {r.id: to_triple(r) for r in rows}
        return [found[i] for i in ids if i in found]

    # -- retrieval ---------------------------------------------------------------------

    def retrieve(self, query: str, scope: Scope, k: int) -> list[MemoryRecord]:
        """Up to ``k`` current triples for ``query`` (:meth:`search`), each with its
        calibrated ``relevance``; none for an empty query."""
        records = self.search(query, scope, k)
        self._calibrate(query, records, scope)
        return records

    def _calibrate(self, query: str, records: Sequence[MemoryRecord], scope: Scope) -> None:
        """Give each triple its ``relevance``: the calibration fitted on past messages,
        applied to its words and its cosine with the query (none without a calibration)."""
        calibration = calibration_for(self.embed_model)
        if calibration is None or not records:
            return
        vector = self._dimensions.query(query)
        found = self.index.vectors(scope.tenant_id, scope.require_user(), [r.id for r in records if r.id])
        cosines: dict[str, float] = {}
        add_cosines(cosines, found, vector)

        def words_of(record: MemoryRecord) -> tuple[Optional[str], str]:
            meta = record.metadata
            return record.id, f"{meta['subject']} {meta['predicate']} {meta['object']}"

        def word_counts(words: Sequence[str]) -> tuple[int, dict[str, int]]:
            return self.store.word_counts(words, scope)

        calibrate(query, records, cosines, word_counts, calibration, words_of)
        # The calibration was fitted on messages, where words weigh little next to the
        # query's best cosine, and a short fact has a low cosine with most questions
        # ("where do I live?" / "user lives in Porto": 0.28). A fact that holds every
        # content word of the query answers it: it is relevant whatever its cosine.
        for record in records:
            if record.metadata["evidence"].get("lexical", 0.0) >= FULL_MATCH:
                record.relevance = 1.0
                record.metadata["evidence"]["own_relevance"] = 1.0

    def search(
        self, query: str, scope: Who, k: int = 10, *, include_history: bool = False, hops: Optional[int] = None
    ) -> list[MemoryRecord]:
        """The triples that best answer ``query``, as records rendered ``subject —
        predicate — object (since date)``, best first; current ones unless
        ``include_history``.

        Candidates come from the hybrid search (words and meaning) and the 1-hop
        neighbourhood of the entities the query names. With ``fusion="scores"`` a triple
        scores two thirds of its fused word and meaning scores plus one third of the share
        of named entities it touches; ``"rrf"`` fuses the three rankings by reciprocal
        rank. With ``hops=2``, a triple reached through a neighbour scores half the best
        score of the triples leading to it.
        """
        scope = _scope(scope)
        scope.require_user(f"the {self.name!r} memory source")
        hops = self.hops if hops is None else hops
        if hops not in (1, 2):
            raise ValueError(f"hops must be 1 or 2, got {hops!r}")
        if not query.strip() or k <= 0:
            return []
        total, current = self.timeline.counts(scope, self.expiry.now())
        if (total if include_history else current) == 0:
            return []  # nothing to find: skip embedding the query
        # Superseded triples keep their vectors (history is searchable), so the dense side
        # asks for k + the superseded count: enough to still find k current ones.
        pool = k if include_history else k + total - current
        # Triples are written rarely (a tool call, a formation pass): what waits goes to the
        # index now, in one write per user, rather than waiting in the overlay for a batch.
        self._sync.flush()
        hybrid = HybridSearch(self._sync, TripleWords(self.timeline, include_history), self._dimensions.query)
        lexical, dense = hybrid.candidates(query, scope, pool)
        if not include_history and dense:
            alive = self.timeline.current_ids(scope, list(dense))
            dense = {i: c for i, c in dense.items() if i in alive}

        def touching(keys: Sequence[str]) -> list[TripleEdge]:
            return self.timeline.touching(scope, keys, include_history)

        named = query_entities(query)
        near = neighbourhood(named, touching)
        self._add_cosines(dense, [r.id for r in near], scope, query)
        scores, matched = rank_triples(named, near, lexical, dense, touching, k, hops, self.fusion)
        ordered = sorted(scores, key=lambda i: scores[i], reverse=True)
        triples = {t.id: t for t in self._by_ids(ordered[:k], scope)}
        if len(triples) < len(ordered[:k]):  # some expired: look further down
            triples = {t.id: t for t in self._by_ids(ordered, scope)}
        ranked = [i for i in ordered if i in triples][:k]
        if self.expiry.refresh_on_read and ranked:
            self.timeline.refresh_expiry(ranked, self.expiry.now())
        before = self._replaced([triples[i] for i in ranked], scope)
        return [
            triple_record(triples[i], scores[i], matched[i], self.name, before.get(i),
                          functional=self.is_functional(triples[i].predicate))
            for i in ranked
        ]

    def _replaced(self, triples: Sequence[KnowledgeTriple], scope: Scope) -> dict[str, str]:
        """The value each current triple replaced within ``changed_within``: ``{id: old
        object}`` (only recent triples read their history)."""
        now = self.expiry.now()
        found: dict[str, str] = {}
        for triple in triples:
            if triple.id is None or not triple.current or not is_recent(triple.valid_from, now, self.changed_within):
                continue
            pair = self.timeline.select(
                scope, now, include_history=True, subject_key=normalize_entity(triple.subject),
                predicate_key=normalize_predicate(triple.predicate),
            )  # fmt: skip
            replaced = [t for t in pair if t.superseded_by == triple.id]
            if replaced:
                found[triple.id] = max(replaced, key=lambda t: t.valid_to or 0.0).object
        return found

    def _add_cosines(self, dense: dict[str, float], ids: Sequence[str], scope: Scope, query: str) -> None:
        """Give the entity candidates their cosine too, so fusion compares like with like."""
        missing = [i for i in ids if i not in dense]
        if not missing:
            return
        owner = (scope.tenant_id, scope.require_user())
        vectors: dict[str, Any] = {i: v for i, v in self._sync.waiting(owner).items() if i in missing}
        vectors.update(self.index.vectors(*owner, [i for i in missing if i not in vectors]))
        add_cosines(dense, vectors, self._dimensions.query(query))

    # -- the dense index -----------------------------------------------------------------

    def purge_expired(self) -> int:
        """Delete expired triples, their provenance and vectors; return how many."""
        with self._lock:
            return self._forget_rows(self.timeline.delete_expired(self.expiry.now()))

    # -- forgetting ----------------------------------------------------------------------

    def reset(self, scope: Scope) -> None:
        """Delete the user's triples, their provenance and their vectors."""
        user = scope.require_user(f"resetting the {self.name!r} memory source")
        with self._lock:
            self.timeline.delete_user(scope)
            self._vectors.clear()  # recent texts, the user's among them
            self._sync.forget((scope.tenant_id, user))  # the index last: see IndexSync.forget

    # -- tools, formation, graph -------------------------------------------------------------

    def tools(self, scope: Scope) -> list[Any]:
        """``save_knowledge`` and ``search_knowledge`` tools acting for the scope's user."""
        return knowledge_tools(self, scope)

    def extract(self, messages: Sequence[ChatMessage], llm: Any, scope: Scope) -> list[KnowledgeTriple]:
        """Turn ``messages`` into new and retracted triples with one LLM call and store
        them (the LLM sees user and assistant text; no call without any).

        Raises:
            ExtractionError: the answer was malformed or held an invalid triple; nothing
                was written.
        """
        # Imported here: formation imports sources.base, which runs this package's
        # __init__ (and so this module) first.
        from ...write.formation import ask_pass, pass_window

        window = pass_window(scope, messages)
        parsed = ask_pass(llm, [self], window)
        if self.pass_field not in parsed:
            return []
        return self._by_ids(apply_triples(self, parsed[self.pass_field], window), scope)

    # -- a part of the formation pass (llama_memory.write.formation.PassPart) --------------------

    @property
    def pass_field(self) -> str:
        """The key of the pass's answer this source owns: its name (``"triples"``)."""
        return self.name

    def pass_prompt(self, window: Any) -> str:
        """The pass's request: new and retracted triples, shown the known names and facts."""
        scope: Scope = window.scope
        scope.require_user(f"the {self.name!r} memory source")
        return triples_prompt(self, scope, self.expiry.now())

    def parse_pass(self, value: Any, window: Any) -> ParsedTriples:
        """Validate the answer (``{"new": [...], "retracted": [...]}``); writes nothing.

        Raises:
            TripleError: the answer or one of its triples was malformed.
        """
        return parse_triples(value)

    def apply_pass(self, parsed: ParsedTriples, window: Any) -> None:
        """Store the new triples and end the retracted ones, in the pass's transaction."""
        apply_triples(self, parsed, window)

    def to_networkx(self, scope: Who, *, include_history: bool = False) -> "networkx.MultiDiGraph":
        """The user's current knowledge graph (see :func:`llama_memory.sources.triples.graph.to_networkx`)."""
        from .graph import to_networkx

        scope = _scope(scope)
        return to_networkx(self.triples(scope, include_history=include_history), name=scope.require_user())

    def plot(self, path: Union[str, Path], scope: Who, **kwargs: Any) -> Path:
        """Draw the user's current knowledge graph to an image file; return its path."""
        from .graph import plot

        return cast(Path, plot(self.to_networkx(scope), path, **kwargs))
