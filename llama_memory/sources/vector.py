"""Vector memory of past messages: recall across the conversations of one user."""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from typing import Literal, Optional, Union

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding

from ..core.errors import StorageError
from ..core.types import NEVER, STANDALONE_KEY, Expiry, MemoryRecord, Scope, StoredMessage
from ..embeddings.offline import embedding_dimension
from ..embeddings.store_model import DimensionGuard, vector_cache
from ..retrieval.apart import KnownLines, RecordReads, SetApart, WindowIds, search_beside
from ..retrieval.excerpts import (
    JOIN_GAP,
    WideNeighbourhoods,
    asks_for_a_set,
    hit_of,
    join_parts,
    pack_excerpts,
)
from ..retrieval.hybrid import HOP_FOUND, HOP_WEIGHT, SEEDS, HybridSearch, second_hop
from ..retrieval.ranking import Salience
from ..retrieval.relevance import Calibration, asks_only, calibrate, calibration_for, content_stems
from ..retrieval.sync import IndexSync
from ..retrieval.topic import TOPIC_WEIGHT, topic_hop
from ..storage.ports import NewRecord, VectorIndex
from ..storage.sql.store import Storage
from .base import IndexedSource

logger = logging.getLogger(__name__)

#: Users with at most this many indexed records are searched in memory, exactly
#: (:class:`~llama_memory.retrieval.sync.ResidentVectors`); larger ones in Chroma. 20,000 vectors of
#: 384 dimensions take 31 MB and about 2 ms to search.
RESIDENT_LIMIT = 20_000


class VectorSource(IndexedSource):
    """Each user or assistant message becomes a record, found again by meaning and by words.

    Retrieval fuses the user's records ranked by meaning (cosine, in the dense index and
    an in-memory overlay) and by words (BM25 over the text and event date) by a weighted
    sum of normalised scores, then groups the best messages with their neighbours into
    excerpts (:mod:`llama_memory.retrieval.excerpts`). ``put`` only writes the record;
    embedding is deferred and batched (:class:`~llama_memory.retrieval.sync.IndexSync`):
    records without a vector are embedded before a retrieval and written to the index
    once ``batch_size`` wait, on :meth:`flush` and on ``close()``.

    Args:
        store: the system of record (any :class:`~llama_memory.storage.sql.store.Storage`).
        index: the dense index derived from it (one Chroma collection per user).
        embed_model: any LlamaIndex embedding; its dimension, name and fingerprint are
            recorded in the store, and another model is refused
            (:class:`~llama_memory.embeddings.store_model.DimensionGuard`).
        roles: which message roles are remembered (not tool results and system prompts,
            by default).
        batch_size: records embedded per call to the model, vectors waiting before a
            dense-index write, and records a bulk import writes before embedding them.
        name: the source's name in the store and in the memory block.
        dense_weight: weight of the normalised dense score in fusion
            (:func:`~llama_memory.retrieval.fuse_scores`; 0 turns it off).
        lexical_weight: weight of the normalised lexical score (0 turns it off).
        candidate_factor: each retriever ranks ``k * candidate_factor`` candidates.
        excerpt_messages: a search for ``k`` records returns up to ``k`` excerpts holding
            up to ``excerpt_messages * k`` messages, each a run of consecutive messages
            of one session; 1 returns single messages.
        expiry: time to live of new records, refresh on read, and the clock (default:
            kept until forgotten).
        resident_limit: a user with at most this many indexed records is searched
            exactly in memory (from the vector copies in the store); 0 always asks the
            dense index.
        calibration: turns a record's evidence into its absolute ``relevance``
            (:mod:`llama_memory.retrieval.relevance`); by default the one fitted for the
            default offline model, none for other models (``relevance=None``, not
            filtered).
        hop_weight: what the second hop (:func:`llama_memory.retrieval.hybrid.second_hop`:
            messages of other sessions sharing the best hits' rare words) is worth
            against the first ranking, 0 to 1; 0 turns it off.
        salience: the weights of recency and importance in the ranking
            (:mod:`llama_memory.retrieval.ranking`); ``NO_SALIENCE`` ranks by the match.
        topic_weight: for a question asking for a set
            (:func:`~llama_memory.retrieval.excerpts.asks_for_a_set`), what the messages
            nearest to its topic alone are worth against the first ranking
            (:mod:`llama_memory.retrieval.topic`), 0 to 1; 0 turns it off.
    """

    def __init__(
        self, store: Storage, index: VectorIndex, embed_model: BaseEmbedding, *,
        roles: Sequence[str] = ("user", "assistant"), batch_size: int = 256, name: str = "vector",
        dense_weight: float = 1.0, lexical_weight: float = 1.0, candidate_factor: int = 3,
        excerpt_messages: float = 2.5, expiry: Expiry = NEVER, resident_limit: int = RESIDENT_LIMIT,
        calibration: Union[Calibration, None, Literal["auto"]] = "auto",
        hop_weight: float = HOP_WEIGHT, salience: Optional[Salience] = None,
        topic_weight: float = TOPIC_WEIGHT,
    ) -> None:
        if batch_size <= 0:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if not excerpt_messages >= 1:
            raise ValueError(f"excerpt_messages must be 1 (single messages) or more, got {excerpt_messages}")
        if not 0 <= hop_weight <= 1:
            raise ValueError(f"hop_weight is between 0 (no second hop) and 1, got {hop_weight}")
        if not 0 <= topic_weight <= 1:
            raise ValueError(f"topic_weight is between 0 (no topic query) and 1, got {topic_weight}")
        self.store = store
        self.index = index
        self.hop_weight = hop_weight
        self.topic_weight = topic_weight
        self.embed_model = embed_model
        self.roles = frozenset(roles)
        self.name = name
        self.dense_weight = dense_weight
        self.lexical_weight = lexical_weight
        self.candidate_factor = candidate_factor
        self.excerpt_messages = excerpt_messages
        self.expiry = expiry
        self.salience = salience if salience is not None else Salience()
        self.calibration = calibration_for(embed_model) if calibration == "auto" else calibration
        store.ensure_session_order()
        self._unflushed = 0  # records added since the last flush
        # Shared with the other sources of this model: a query is embedded once per get(),
        # and (symmetric models) not at all when it is the user message just embedded.
        self._vectors = vector_cache(embed_model)
        # Across retrievals: the (role, text) of candidates by id, the ids of the window's
        # records by text (retrieval/apart.py).
        self._lines = KnownLines()
        self._window_ids = WindowIds(store, name, self.roles)
        # The share of the last retrieval's candidates set apart: its searches ask for
        # that many more to begin with (what they find does not depend on it).
        self._aside_share = 0.0
        self._dimensions = DimensionGuard(store, embed_model)
        self._dimensions.check_at_open(embedding_dimension(embed_model))
        self._sync = IndexSync(
            store, index, name, self._dimensions.documents, batch_size=batch_size,
            resident_limit=resident_limit,
        )
        self._lock = self._sync.lock
        self._search = HybridSearch(self._sync, store, self._dimensions.query)

    @property
    def resident_limit(self) -> int:
        """Users with at most this many indexed records are searched in memory."""
        return self._sync.resident_limit

    @resident_limit.setter
    def resident_limit(self, value: int) -> None:
        self._sync.resident_limit = value

    # -- writing --------------------------------------------------------------------

    def add(self, messages: Sequence[StoredMessage], scope: Scope) -> None:
        """Store the messages with text in one of ``roles`` as records."""
        scope.require_user(f"the {self.name!r} memory source")
        ttl, expires_at = self.expiry.for_write()
        records = [
            NewRecord(
                source=self.name, scope=scope, text=m.text, message_ids=(m.message_id,), event_time=m.event_time,
                role=m.role, ttl=ttl, expires_at=expires_at,
                # Read by the store's session_neighbours: found as itself, never in an excerpt.
                metadata={STANDALONE_KEY: True} if m.standalone else None,
            )
            for m in messages
            if m.role in self.roles and m.text.strip()
        ]
        if not records:
            return
        self._dimensions.check_model()  # another model is refused before its records are written
        self.store.add_records(records)
        self._unflushed += len(records)
        # A bulk import indexes as it goes, a batch at a time: texts of similar length
        # are embedded together (less padding), and each batch is one Chroma write.
        if self._unflushed >= self.batch_size:
            # Once committed: a vector in Chroma must never precede its record.
            self.store.after_commit(self._flush_or_defer)

    def _flush_or_defer(self) -> None:
        """Flush; an unreachable index only defers indexing (the records are committed
        and flagged waiting): a write must not fail for that."""
        try:
            self.flush()
        except StorageError as exc:
            logger.warning("records stored, dense indexing deferred: %s", exc)

    def flush(self) -> int:
        """Embed every record still without a vector and write all waiting vectors to
        the dense index; return how many vectors were written."""
        with self._lock:
            self._unflushed = 0
            return self._sync.flush()

    def purge_expired(self) -> int:
        """Delete expired records from the record and the dense index; return how many."""
        with self._lock:
            gone = self.store.delete_expired(self.name, self.expiry.now())
            self._forget_rows(gone)
            if gone:
                self._clear_texts()
            return len(gone)

    # -- reading --------------------------------------------------------------------

    def retrieve(self, query: str, scope: Scope, k: int) -> list[MemoryRecord]:
        """The ``k`` records that best match ``query``: excerpts of consecutive messages
        when ``excerpt_messages`` > 1, else single messages. Each carries its calibrated
        ``relevance`` and, in ``metadata["evidence"]``, what it was computed from."""
        return self.retrieve_beside(query, scope, k, frozenset())

    def retrieve_beside(self, query: str, scope: Scope, k: int, shown: frozenset[str]) -> list[MemoryRecord]:
        """:meth:`retrieve`, leaving out the records whose normalised text is in
        ``shown`` (the latest messages the window shows), from the evidence too: else the
        query matches itself and any question looks like one about the user's history."""
        scope.require_user(f"the {self.name!r} memory source")
        if not query.strip() or k <= 0:
            return []
        cosines: dict[str, float] = {}
        pool = max(k * self.candidate_factor, k)
        # Each record is read once per retrieval, whoever asks for it (the hop, the
        # candidates set apart, the excerpts): docs/benchmarks.md, "The second hop's cost".
        reads = RecordReads(self.store, scope, self.name, self._lines)
        # The window's own messages are left out of every search, and the user's own
        # earlier questions set apart: they take no statement's place among the candidates
        # or the second hop's seeds, and come after every statement (retrieval/apart.py).
        apart = SetApart(reads, shown, self._window_ids(shown, scope) if shown else None, self._aside_share)
        ranked, aside = self._search.search_apart(
            query, scope, pool, apart, exclude=apart.excluded, spare=apart.spare(pool), dense_weight=self.dense_weight,
            lexical_weight=self.lexical_weight, cosines=cosines,
        )
        self._aside_share = apart.note(pool, len(aside))
        ranked = self._hop(query, scope, self._topic(query, scope, ranked, apart), k, reads, apart)
        ranked += [(i, score) for i, score in aside if i not in apart.own]
        # The system of record has the last word: a vector whose row is gone, or has
        # expired, is skipped, and get_records checks the user again.
        alive_at = self.expiry.now()
        # What the store's word counts must not count: read for the calibration alone.
        own_texts = apart.own_texts(query) if shown and self.calibration is not None else []
        for i in apart.own:
            cosines.pop(i, None)
        if self.excerpt_messages > 1:
            results = self._excerpts(ranked, scope, k, alive_at, reads)
        else:
            results = self._single(ranked, k, alive_at, reads)
        if self.expiry.refresh_on_read and results:
            read = [p.id for r in results for p in (r.parts or [r]) if p.id]
            self.store.refresh_expiry(read, alive_at)
        self._calibrate(query, results, cosines, scope, own_texts, reads)
        ranked_results = self.salience.rerank(results, alive_at)
        # Recency must not lift the user's latest questions back over the statements.
        asking = [asks_only(r) for r in ranked_results]
        return [r for r, a in zip(ranked_results, asking) if not a] + [r for r, a in zip(ranked_results, asking) if a]

    def _calibrate(
        self, query: str, records: Sequence[MemoryRecord], cosines: Mapping[str, float], scope: Scope,
        left_out: Sequence[str], reads: RecordReads,
    ) -> None:  # fmt: skip
        """Set each record's ``relevance`` from its hit's evidence (candidates read light
        through ``reads``, to tell the user's own questions apart)."""
        if self.calibration is None:
            return

        def hit(record: MemoryRecord) -> tuple[Optional[str], str]:
            part = hit_of(record)
            return part.id, part.text

        def word_counts(words: Sequence[str]) -> tuple[int, dict[str, int]]:
            return self.store.word_counts(words, scope)

        def holders(word: str, n: int) -> list[tuple[str, bool]]:
            found = self.store.search_text(word, scope, self.name, n)
            return list(reads.questions([i for i, _ in found]).values())

        calibrate(query, records, cosines, word_counts, self.calibration, hit, left_out, reads.questions, holders)

    def record_vectors(self, ids: Sequence[str], scope: Scope, dimension: int) -> dict[str, np.ndarray]:
        """The vectors of some of the user's records, by id (held in memory, copied in
        the store, or in the dense index); none for a record not embedded yet or of
        another ``dimension``."""
        owner = (scope.tenant_id, scope.require_user(f"the {self.name!r} memory source"))
        wanted = list(dict.fromkeys(i for i in ids if i))
        if not wanted:
            return {}
        resident = self._sync.resident(owner, dimension)
        found = self._sync.known_vectors(owner, wanted, dimension, resident).items()
        # The dense index may hold vectors of another model (before a change of model).
        return {i: v for i, v in ((i, np.asarray(v, dtype=np.float32)) for i, v in found) if v.size == dimension}

    def query_vector(self, text: str) -> np.ndarray:
        """``text`` embedded as a query, through the model's shared vector cache."""
        return self._dimensions.query(text)

    def embed_ahead(self, texts: Sequence[str]) -> None:
        """Start embedding ``texts`` as queries in the background (the offline model
        only: :meth:`~llama_memory.embeddings.store_model.VectorCache.embed_ahead`); a
        retrieval for one of them takes its vector, the same as embedded when asked."""
        self._vectors.embed_ahead(texts)

    def recent(self, scope: Scope, k: int, span: Optional[tuple[float, float]] = None) -> list[MemoryRecord]:
        """The latest messages of ``span``, or of the latest earlier session, one excerpt
        per session, marked ``metadata["retrieved_by"] = "time"`` (``relevance`` None)."""
        scope.require_user(f"the {self.name!r} memory source")
        if k <= 0:
            return []
        rows = self.store.recent_records(
            scope, self.name, math.ceil(self.excerpt_messages * k), span, self.expiry.now()
        )
        by_session: dict[Optional[str], list[MemoryRecord]] = {}
        for row in rows:
            # A standalone statement is an excerpt of its own (keyed by its id: no session's).
            alone = row.metadata.get(STANDALONE_KEY) is True
            by_session.setdefault(f"standalone:{row.id}" if alone else row.session_id, []).append(row)
        results = []
        for parts in list(by_session.values())[-k:]:
            record = join_parts(parts, parts[-1])
            record.metadata["retrieved_by"] = "time"
            results.append(record)
        return results

    def _excerpts(
        self, ranked: list[tuple[str, float]], scope: Scope, k: int, alive_at: float, reads: RecordReads,
    ) -> list[MemoryRecord]:  # fmt: skip
        """Up to ``k`` excerpts around the best live records of ``ranked``."""
        neighbourhoods = WideNeighbourhoods(
            lambda ids, radius: self.store.session_neighbours(ids, scope, self.name, radius), JOIN_GAP
        )
        for attempt in range(2):
            excerpts = pack_excerpts(ranked, neighbourhoods, k, math.ceil(self.excerpt_messages * k))
            members = reads.get([i for e in excerpts for i in e.record_ids], alive_at)
            results = [r for r in (e.as_record(members) for e in excerpts) if r is not None]
            if len(results) == len(excerpts) or attempt:
                return results
            # A hit had expired or gone: pack again from the live candidates only.
            alive = reads.get([i for i, _ in ranked], alive_at)
            ranked = [(i, score) for i, score in ranked if i in alive]
        return results

    def _single(
        self, ranked: list[tuple[str, float]], k: int, alive_at: float, reads: RecordReads
    ) -> list[MemoryRecord]:
        """The ``k`` best live records of ``ranked``, one message each."""
        ids = [record_id for record_id, _ in ranked]
        rows = reads.get(ids[:k], alive_at)
        if len(rows) < len(ids[:k]):  # some expired or gone: look further down
            rows = reads.get(ids, alive_at)
        results: list[MemoryRecord] = []
        for record_id, score in ranked:
            record = rows.get(record_id)
            if record is not None and len(results) < k:
                record.score = score
                results.append(record)
        return results

    def _topic(
        self, query: str, scope: Scope, ranked: list[tuple[str, float]], apart: SetApart
    ) -> list[tuple[str, float]]:
        """``ranked`` with the messages nearest to the topic of a question asking for a
        set (:func:`~llama_memory.retrieval.topic.topic_hop`); unchanged otherwise."""
        if self.topic_weight <= 0 or self.dense_weight <= 0 or not ranked or not asks_for_a_set(query):
            return ranked

        def nearest(topic: str, count: int) -> list[tuple[str, float]]:
            first = count + apart.spare(count)
            return search_beside(self._search.dense_hits(topic, scope, apart.excluded, first), apart, count, first)

        return topic_hop(query, ranked, nearest, self.topic_weight)

    def _hop(
        self, query: str, scope: Scope, ranked: list[tuple[str, float]], k: int, reads: RecordReads, apart: SetApart,
    ) -> list[tuple[str, float]]:  # fmt: skip
        """``ranked`` with the second hop's candidates (none when the lexical side is off);
        what ``apart`` sets apart is neither found nor scaled by the hop."""
        if self.hop_weight <= 0 or self.lexical_weight <= 0 or not ranked:
            return ranked
        found = HOP_FOUND * k
        first = found + apart.spare(found)
        return second_hop(
            query, ranked, reads.texts([i for i, _ in ranked[:SEEDS]]),
            lambda words: self.store.word_counts(words, scope),
            lambda text: search_beside(
                self.store.rank_text(text, scope, self.name, apart.excluded, first), apart, found, first
            ),
            reads.texts, self.hop_weight, seeds=SEEDS,
        )

    # -- forgetting -------------------------------------------------------------------

    def reset(self, scope: Scope) -> None:
        """Delete the scope's user's records from the record and the index."""
        user = scope.require_user(f"resetting the {self.name!r} memory source")
        with self._lock:
            self.store.delete_user(scope, source=self.name)
            self._vectors.clear()  # it holds recent texts, the user's among them
            self._clear_texts()
            self._sync.forget((scope.tenant_id, user))

    def forget_records(self, ids: Sequence[str], scope: Scope) -> None:
        """Drop the vectors of the user's records already deleted from the store (dense
        index, overlay, vectors in memory)."""
        user = scope.require_user(f"the {self.name!r} memory source")
        self._sync.forget((scope.tenant_id, user), list(ids))
        self._clear_texts()

    def _clear_texts(self) -> None:
        """Drop the caches that may hold deleted records' texts."""
        content_stems.cache_clear()
        self._lines.clear()
        self._window_ids.clear()

