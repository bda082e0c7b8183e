"""``ComposableMemory``: a drop-in, long-term ``SimpleComposableMemory`` for LlamaIndex."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter, deque
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any, ContextManager, Literal, Optional, Union, cast
from uuid import uuid4

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.bridge.pydantic import Field, PrivateAttr, SerializeAsAny, field_validator
from llama_index.core.memory.types import BaseMemory
from llama_index.core.utils import get_tokenizer
from pydantic import BaseModel

from .agents import RunMemoryTool, drops_leading_system_message
from .arguments import messages_arg, not_a_message, parameters, reject_unknown, short
from .compose import (
    IRRELEVANT,
    LeftOut,
    MemoryBlock,
    deduplicate,
    fit_block,
    insert_block,
    interleave,
    window_texts,
)
from .config import DENSE_COLLECTIONS as DENSE_COLLECTIONS  # re-exported: their old home
from .config import VECTOR_COLLECTION as VECTOR_COLLECTION
from .config import build_memory, check_restorable
from .config import default_vector_source as default_vector_source
from .config import resolve_embed_model as resolve_embed_model
from .errors import LlamaMemoryError, MemoryClosedError, StorageError
from .expiry import TTL
from .formation import (
    EXTRACT_JOB,
    MAX_ATTEMPTS,
    FormationWorker,
    cursor_key,
    job_key,
    run_pass,
    unextracted_from,
)
from .instrumentation import (
    MemoryBlockEvent,
    MemoryExtractionEvent,
    MemoryPutEvent,
    Stopwatch,
    dispatcher,
    retrieval_event,
)
from .messages import (
    check_storable,
    dump_message,
    message_id,
    message_text,
    message_time,
    role_name,
)
from .relevance import DEFAULT_MIN_RELEVANCE, QueryPlan, choose_query
from .restore import (
    primary_from_dict,
    primary_to_dict,
    qualified_name,
    restore_hook_arguments,
    restore_live_parts,
)
from .sources.base import (
    Closable,
    Expiring,
    Extracting,
    Forgettable,
    MemorySource,
    ProfileHolder,
    Recent,
    Reconcilable,
    Reindexable,
    Stored,
    TripleHolder,
    WithTools,
)
from .sources.base import Source as SourceProtocol
from .sources.llama_index import LlamaIndexMemorySource
from .sources.profile import ProfileSource
from .sources.triples import KnowledgeTriple, TripleSource
from .storage.ports import Storage
from .storage.ports.jobs import Job
from .storage.reconcile import ReconcileReport
from .types import MemoryRecord, Scope, StoredMessage, now
from .views import RecordList

logger = logging.getLogger(__name__)

InsertMethod = Literal["system", "user"]
ExtractIn = Literal["thread", "worker"]
Source = Union[MemorySource, BaseMemory]

#: Default token limit of the primary chat buffer (the same as ``ChatMemoryBuffer``'s).
DEFAULT_TOKEN_LIMIT = 3000
#: Default token budget of the injected memory block.
DEFAULT_MEMORY_TOKEN_LIMIT = 1500
#: Default number of records each source retrieves per query.
DEFAULT_TOP_K = 10
#: The keyword arguments LlamaIndex itself passes to a memory (llama-index-core 0.14):
#: chat engines call ``memory_cls.from_defaults(chat_history=..., token_limit=...)``,
#: agents build their default memory with ``from_defaults(llm=...)``, and chat engines
#: call ``get(initial_token_count=...)``. ``from_defaults`` honours the first three (any
#: other unknown keyword argument is a TypeError); ``get`` passes its extra keyword
#: arguments to the primary memory.
LLAMA_INDEX_KWARGS = ("chat_history", "token_limit", "llm", "initial_token_count")
class ComposableMemory(BaseMemory):
    """A chat buffer for this conversation plus long-term sources, composed into one memory.

    Pass it as ``memory=`` to a LlamaIndex agent, or use it directly. Every
    ``get`` returns the primary memory's messages with a block of records from
    the secondary sources injected (into the system message by default), built
    for the given ``input`` or, when there is none, for the latest user message.
    The block is deduplicated against the window and across sources and never
    exceeds ``memory_token_limit`` tokens.

    Build it with :meth:`from_defaults`. Same API as LlamaIndex's
    ``SimpleComposableMemory``: ``primary_memory``, ``secondary_memory_sources``,
    ``get``, ``get_all``, ``put``, ``put_messages``, ``set``, ``reset``.
    """

    primary_memory: SerializeAsAny[BaseMemory] = Field(
        description="This conversation: a token-limited buffer returned on every get."
    )
    secondary_memory_sources: list[Any] = Field(
        default_factory=list,
        description="Long-term sources (llama-memory sources or any LlamaIndex BaseMemory).",
    )
    user_id: Optional[str] = Field(default=None, description="Whose memory this is.")
    session_id: str = Field(default_factory=lambda: uuid4().hex, description="This conversation.")
    tenant_id: str = Field(default="default", description="Separates applications in one store.")
    path: Optional[str] = Field(default=None, description="Memory directory; None is in-memory.")
    memory_token_limit: int = Field(
        default=DEFAULT_MEMORY_TOKEN_LIMIT, description="Token budget of the injected block."
    )
    top_k: int = Field(default=DEFAULT_TOP_K, description="Records retrieved per source.")
    insert_method: InsertMethod = Field(
        default="system", description='Where the block goes: "system" or "user" message.'
    )
    tokenizer_fn: Callable[[str], Sequence] = Field(
        default_factory=get_tokenizer, exclude=True, description="Counts the block's tokens."
    )
    llm: Optional[Any] = Field(
        default=None, exclude=True, description="LLM for sources that extract structured memories."
    )
    extract_every: int = Field(
        default=0, description="Queue an extraction pass every N user turns (0: on demand)."
    )
    extract_in: ExtractIn = Field(
        default="thread",
        description='Who runs queued passes: "thread" (this memory, with llm) or "worker" '
        "(llama-memory worker processes).",
    )
    min_relevance: float = Field(
        default=DEFAULT_MIN_RELEVANCE,
        description="Records whose calibrated relevance is below this stay out of the block.",
    )

    _sources: list[SourceProtocol] = PrivateAttr(default_factory=list)
    _store: Optional[Storage] = PrivateAttr(default=None)
    _lock: Any = PrivateAttr(default_factory=threading.RLock)
    _last_block: MemoryBlock = PrivateAttr(default_factory=MemoryBlock)
    # How many retrieved records the window already showed at the last few get() calls:
    # the next one asks for the most of them more than top_k (the window changes little
    # between turns, and asking again costs a whole retrieval).
    _window_overlaps: deque[int] = PrivateAttr(default_factory=lambda: deque(maxlen=4))
    # What to_dict can say of the sources: "default" (rebuilt by from_defaults),
    # "none" (buffer only) or "custom" (live objects a dict cannot carry).
    _source_kind: str = PrivateAttr(default="custom")
    _primary_default: bool = PrivateAttr(default=False)  # built by from_defaults
    _closed: bool = PrivateAttr(default=False)
    _warned_not_atomic: bool = PrivateAttr(default=False)
    # Drops a (tenant, user)'s dense collections of every kind the default sources keep
    # (forget()); set by config.build_memory, which knows where they are.
    _drop_dense: Optional[Callable[[tuple[str, str]], None]] = PrivateAttr(default=None)
    _user_turns_pending: int = PrivateAttr(default=0)  # user messages not yet extracted from
    _extracted_upto: int = PrivateAttr(default=0)  # without a store: where extraction is
    _worker: Optional[FormationWorker] = PrivateAttr(default=None)  # started by the first job
    # What to_dict says of server mode and expiry (from_defaults arguments).
    _config: dict[str, Any] = PrivateAttr(default_factory=dict)

    @field_validator("min_relevance")
    @classmethod
    def _a_relevance(cls, value: float) -> float:
        if not 0.0 <= value <= 1.0:
            raise ValueError(
                f"min_relevance is a calibrated relevance between 0 and 1 (0 keeps every "
                f"record), got {value}"
            )
        return value

    @field_validator("memory_token_limit", "top_k", "extract_every")
    @classmethod
    def _non_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"must be zero or more, got {value}")
        return value

    def __init__(self, **data: Any) -> None:
        """Build a memory from its fields (:meth:`from_defaults` is the usual way);
        TypeError naming an unknown keyword argument and the closest valid one."""
        reject_unknown("ComposableMemory()", data, [*type(self).model_fields, "class_name"])
        super().__init__(**data)

    def model_post_init(self, __context: Any) -> None:
        """Wrap LlamaIndex memories given as secondary sources so all speak one protocol."""
        self._source_kind = "none" if not self.secondary_memory_sources else "custom"
        for s in self.secondary_memory_sources:
            if not isinstance(s, (SourceProtocol, BaseMemory)):
                raise TypeError(
                    "secondary_memory_sources takes llama-memory sources (name, priority, add, "
                    "retrieve: see llama_memory.sources.base.Source) or LlamaIndex BaseMemory "
                    f"objects, not {type(s).__name__}"
                )
        # A LlamaIndex memory is wrapped so that all speak the one source protocol.
        self._sources = [
            LlamaIndexMemorySource(s, f"{s.class_name()}#{i + 1}") if isinstance(s, BaseMemory) else s
            for i, s in enumerate(self.secondary_memory_sources)
        ]

    @classmethod
    def class_name(cls) -> str:
        """Class name, as LlamaIndex components report it."""
        return "ComposableMemory"

    @classmethod
    def from_defaults(  # type: ignore[override]
        cls,
        primary_memory: Optional[BaseMemory] = None,
        secondary_memory_sources: Optional[list[Source]] = None,
        *,
        user_id: Optional[str] = None,
        session_id: Optional[str] = None,
        tenant_id: str = "default",
        path: Optional[Union[str, Path]] = None,
        embed_model: Optional[BaseEmbedding] = None,
        token_limit: int = DEFAULT_TOKEN_LIMIT,
        memory_token_limit: int = DEFAULT_MEMORY_TOKEN_LIMIT,
        top_k: int = DEFAULT_TOP_K,
        insert_method: InsertMethod = "system",
        tokenizer_fn: Optional[Callable[[str], Sequence]] = None,
        chroma_client: Any = None,
        llm: Any = None,
        extract_every: int = 0,
        extract_in: ExtractIn = "thread",
        profile: Union[bool, type[BaseModel], None] = None,
        triples: bool = False,
        chroma_host: Optional[str] = None,
        chroma_port: int = 8000,
        chroma_url: Optional[str] = None,
        ttl: Optional[TTL] = None,
        refresh_on_read: bool = False,
        clock: Optional[Callable[[], float]] = None,
        chat_history: Optional[Sequence[ChatMessage]] = None,
        reembed: bool = False,
        min_relevance: float = DEFAULT_MIN_RELEVANCE,
        store: Any = None,
        **kwargs: Any,
    ) -> "ComposableMemory":
        """Build a memory with sensible defaults.

        Args:
            primary_memory: this conversation's memory; default a :class:`ChatBuffer`
                of ``token_limit`` tokens, persisted under ``path`` per session.
            secondary_memory_sources: long-term sources; default one
                :class:`VectorSource` of past messages (needs ``user_id``). Pass
                ``[]`` for a buffer-only memory.
            user_id: whose memory this is; required by long-term sources.
            session_id: this conversation; a new random id by default. Reopening a
                ``path`` with the same ``session_id`` resumes the conversation, and
                memory objects open on it at once (threads, web workers) share one
                window: each sees every committed message, in commit order.
            tenant_id: separates applications that share one store.
            path: a directory for the SQLite file and Chroma index; ``None`` (and no
                ``store``) keeps everything in memory.
            store: a PostgreSQL database instead of ``path``: a URL
                (``"postgresql://user@host:5432/dbname"``; install
                ``llama-memory[postgres]``) or an open ``psycopg_pool.ConnectionPool``.
                Everything is kept there: chat logs, records, vectors (pgvector),
                profile, triples, jobs; app servers on several machines share one
                memory. Not with ``path`` or a Chroma argument (ValueError).
                :meth:`to_dict` keeps the URL without its password: on restore, libpq
                reads it from ``PGPASSWORD`` or ``~/.pgpass``, or pass ``store=`` to
                :meth:`from_dict` (or return it from a restore hook).
            embed_model: any LlamaIndex embedding; default ``Settings.embed_model``
                when one was set explicitly, else the offline MiniLM ONNX model.
            token_limit: token limit of the default chat buffer.
            memory_token_limit: token budget of the injected memory block.
            top_k: records retrieved per source.
            insert_method: ``"system"`` (into the system message) or ``"user"``
                (into the latest user message).
            tokenizer_fn: counts tokens (default tiktoken, as LlamaIndex).
            chroma_client: a Chroma client to use instead of the embedded one (its
                collections are named after the store's id, as in server mode).
            llm: a LlamaIndex LLM for sources that extract structured memories from
                the conversation (see :meth:`extract`).
            extract_every: every this many user turns, ``put()`` queues an extraction
                pass (0: only when :meth:`extract` is called); it runs in the
                background and never makes ``put()`` wait (see docs/formation.md).
                :meth:`flush` waits for it.
            extract_in: who runs the queued passes: ``"thread"`` (default), a thread
                of this memory, with ``llm`` (without ``llm`` nothing is queued);
                ``"worker"``: ``llama-memory worker --store PATH`` processes, which
                bring their own LLM (this memory needs none).
            profile: the user-profile source (:class:`ProfileSource`) on this
                memory's store. ``None``: part of the default sources only; ``True``
                or a pydantic model class (the profile's schema): also added to
                custom ``secondary_memory_sources``; ``False``: no profile.
            triples: also keep a knowledge-triple memory (:class:`TripleSource`, on
                this memory's store and Chroma client), added to the default or the
                given sources unless one is there already; needs ``user_id``.
            chroma_host: server mode: keep the vectors of the default vector and
                triple sources on the Chroma server on this host
                (``chromadb.HttpClient``), shared by several processes. SQLite under
                ``path`` (required) stays the system of record. StorageError naming
                the address when the server cannot be reached. While it is down,
                reads raise and writes still land in SQLite (indexing waits). On
                open, this user's index is reconciled with the record (see
                :meth:`reconcile`). ``chroma_client`` (any client) works the same way.
            chroma_port: the server's port, with ``chroma_host``.
            chroma_url: the server as a URL, ``"http://host:port"`` (instead of
                ``chroma_host``/``chroma_port``).
            ttl: time to live (seconds or a ``timedelta``) of the long-term records
                the default sources write: past messages, triples, profile values.
                ``None``: kept until forgotten. Expired records are never
                retrieved; :meth:`purge_expired` deletes them.
            refresh_on_read: a record returned by ``get``/``search`` lives ``ttl``
                from then (like LangGraph's ``TTLConfig(refresh_on_read=True)``).
            clock: epoch seconds now, for expiry (default ``time.time``).
            chat_history: messages that start the conversation, as
                ``ChatMemoryBuffer.from_defaults(chat_history=...)`` takes them (chat
                engines pass it): like :meth:`set`, they replace the session's stored
                messages and those new to it reach the long-term sources. An empty
                list changes nothing (a resumed session keeps its messages).
            reembed: switch the store to ``embed_model``: forget the model it recorded
                and embed every record of the default sources again from the system of
                record (the dense index is rebuilt) before returning. The way out of an
                :class:`~llama_memory.errors.EmbeddingModelError`; close the memories
                still open on the store with the old model first.
            min_relevance: records whose calibrated ``relevance`` (0..1, see
                :mod:`llama_memory.relevance`) is below this stay out of the memory
                block; 0 keeps everything retrieved. Records not ranked by relevance
                (the profile, a custom source's records) are always kept.
            **kwargs: none is accepted: an unknown keyword argument is a TypeError
                naming it and the closest valid one. Of what LlamaIndex itself passes
                to a memory (:data:`LLAMA_INDEX_KWARGS`), ``chat_history``,
                ``token_limit`` and ``llm`` are honoured here, and
                ``initial_token_count`` is for :meth:`get`.

        Raises:
            TypeError: an unknown keyword argument, an ``embed_model`` that is not an
                embedding object (such as a model name), a ``chat_history`` that is
                not a list of ``ChatMessage``.
            ValueError: a ``path`` that is a database URL (``path`` is a directory),
                ``path`` and ``store`` both given.
        """
        if kwargs:
            reject_unknown("ComposableMemory.from_defaults()", kwargs, parameters(cls.from_defaults))
        return build_memory(
            cls,
            primary_memory=primary_memory,
            secondary_memory_sources=secondary_memory_sources,
            user_id=user_id,
            session_id=session_id,
            tenant_id=tenant_id,
            path=path,
            embed_model=embed_model,
            token_limit=token_limit,
            memory_token_limit=memory_token_limit,
            top_k=top_k,
            insert_method=insert_method,
            tokenizer_fn=tokenizer_fn,
            chroma_client=chroma_client,
            llm=llm,
            extract_every=extract_every,
            extract_in=extract_in,
            profile=profile,
            triples=triples,
            chroma_host=chroma_host,
            chroma_port=chroma_port,
            chroma_url=chroma_url,
            ttl=ttl,
            refresh_on_read=refresh_on_read,
            clock=clock,
            history=messages_arg(chat_history, "chat_history") if chat_history is not None else [],
            reembed=reembed,
            min_relevance=min_relevance,
            store_at=store,
        )

    def _opened(
        self,
        storage: Storage,
        *,
        drop_dense: Callable[[tuple[str, str]], None],
        primary_default: bool,
        source_kind: str,
        config: dict[str, Any],
    ) -> None:
        """Attach what :func:`~llama_memory.config.build_memory` opened: the store (the
        transaction port every write of a batch joins), how to drop a user's dense
        collections of every kind, and what :meth:`to_dict` says of the build."""
        self._store = storage
        self._drop_dense = drop_dense
        self._primary_default = primary_default
        self._source_kind = source_kind
        self._config.update(config)

    # -- scope and sources ------------------------------------------------------------

    def __repr__(self) -> str:
        """Who, where and how much, in one line (pydantic's repr would print every
        field, the whole conversation among them)."""
        if self._closed:
            messages = "closed"
        else:
            try:
                messages = str(len(self.primary_memory.get_all()))
            except Exception as exc:  # a repr must not fail, least of all in a traceback
                messages = f"unreadable ({type(exc).__name__})"
        return (
            f"ComposableMemory(user_id={self.user_id!r}, session_id={self.session_id!r}, "
            f"tenant_id={self.tenant_id!r}, path={self.path!r}, "
            f"sources={[s.name for s in self._sources]!r}, messages={messages})"
        )

    def __str__(self) -> str:
        """The same one line as :meth:`__repr__`."""
        return repr(self)

    def _check_open(self) -> None:
        if self._closed:
            raise MemoryClosedError(
                "this memory is closed (close() was called): open a new one, e.g. "
                "ComposableMemory.from_defaults(...) with the same path and ids"
            )

    @property
    def scope(self) -> Scope:
        """The tenant, user and session this memory reads and writes."""
        return Scope(user_id=self.user_id, session_id=self.session_id, tenant_id=self.tenant_id)

    @property
    def sources(self) -> list[SourceProtocol]:
        """The secondary sources (LlamaIndex memories wrapped as :class:`MemorySource`)."""
        return list(self._sources)

    @property
    def last_block(self) -> MemoryBlock:
        """The memory block built by the latest ``get``, with what was left out and why."""
        return self._last_block

    # -- reading ------------------------------------------------------------------------

    def source(self, name: str) -> SourceProtocol:
        """The secondary source called ``name`` (``"vector"``...); KeyError naming the
        available ones otherwise."""
        for source in self._sources:
            if source.name == name:
                return source
        raise KeyError(f"no source named {name!r}; this memory has {[s.name for s in self._sources]}")

    def tools(self) -> list[RunMemoryTool]:
        """Every source's agent tools (LlamaIndex ``FunctionTool``s): pass them to an
        agent as ``tools=``.

        Inside an agent run each acts for the run's memory (the ``memory=`` of that
        run, read from the workflow ``Context``), so an agent built once serves every
        user; called directly, for this memory's user. A run whose memory is not a
        ``ComposableMemory`` with the tool's source gets a ScopeError as the tool's
        result, never a write into this memory (see :class:`RunMemoryTool`).
        """
        self._check_open()
        scope = self.scope
        return [
            RunMemoryTool(self, source, tool, ComposableMemory)
            for source in self._sources
            if isinstance(source, WithTools)
            for tool in source.tools(scope)
        ]

    @dispatcher.span
    def get(self, input: Optional[str] = None, **kwargs: Any) -> list[ChatMessage]:
        """The primary memory's messages with the memory block injected.

        Args:
            input: what to retrieve for; default the latest user message, so an
                agent's first ``get()`` of a run (which passes no input) still
                retrieves.
            **kwargs: passed to the primary memory (e.g. ``initial_token_count``).
        """
        return self._get(input, self.insert_method, **kwargs)

    def _get(self, input: Optional[str], insert_method: InsertMethod, **kwargs: Any) -> list[ChatMessage]:
        if input is not None and not isinstance(input, str):
            raise TypeError(
                f"get() input must be a str or None, not {type(input).__name__} {short(input)}: "
                "pass the text to retrieve for, e.g. the user's message"
            )
        watch = Stopwatch()
        with self._lock:
            self._check_open()
            window = self.primary_memory.get(input=input, **kwargs)
            query = input if input else self._latest_user_text(window)
            block = self._compose(self._plan(query, window), window)
            self._last_block = block
            messages = insert_block(window, block.text, insert_method)
        dispatcher.event(
            MemoryBlockEvent(
                **self._event_scope(),
                query=query or "",
                record_ids=[r.id for r in block.records],
                sources=[r.source for r in block.records],
                token_count=block.token_count,
                token_limit=self.memory_token_limit,
                dropped_duplicates=block.dropped_duplicates,
                dropped_for_budget=block.dropped_for_budget,
                window_messages=len(window),
                duration_ms=watch.elapsed_ms,
            )
        )
        return messages

    def _event_scope(self) -> dict[str, Any]:
        """Whose memory, for the instrumentation events."""
        return {"tenant_id": self.tenant_id, "user_id": self.user_id, "session_id": self.session_id}

    def get_all(self) -> list[ChatMessage]:
        """Every message of this conversation (the primary memory's ``get_all``)."""
        self._check_open()
        return self.primary_memory.get_all()

    @dispatcher.span
    def search(self, query: str, k: int = DEFAULT_TOP_K) -> RecordList:
        """Up to ``k`` long-term records for ``query``, with their provenance (a list that
        shows as a table in Jupyter).

        Sources of higher priority come first; within a priority, rankings are
        merged round-robin; duplicates are dropped. Query-independent sources (the profile) are left out: they are not ranked
        by relevance; read them from the source (``memory.profile``).
        """
        if not isinstance(query, str):
            raise TypeError(f"search() query must be a str, not {type(query).__name__} {short(query)}")
        with self._lock:
            self._check_open()
            # A query-independent source (a profile) is not ranked by relevance.
            relevant = [s for s in self._sources if not getattr(s, "query_independent", False)]
            records, _ = deduplicate(self._retrieve(query, k, relevant))
            return RecordList(records[:k])

    def _retrieve(
        self, query: str, k: int, sources: Optional[Sequence[SourceProtocol]] = None
    ) -> list[MemoryRecord]:
        scope = self.scope
        sources = self._sources if sources is None else sources
        merged: list[MemoryRecord] = []
        for priority in sorted({s.priority for s in sources}, reverse=True):
            tier = [s for s in sources if s.priority == priority]
            merged.extend(interleave(self.retrieve_from(source, query, scope, k) for source in tier))
        return merged

    @dispatcher.span
    def retrieve_from(self, source: SourceProtocol, query: str, scope: Scope, k: int) -> list[MemoryRecord]:
        """One source's records for ``query`` (a span and a
        :class:`~llama_memory.instrumentation.MemoryRetrievalEvent` of its own)."""
        watch = Stopwatch()
        records = source.retrieve(query, scope, k)
        dispatcher.event(
            retrieval_event(self._event_scope(), source.name, query, k, records, watch.elapsed_ms)
        )
        return records

    def _plan(self, query: Optional[str], window: Sequence[ChatMessage]) -> QueryPlan:
        """What to retrieve for (:func:`~llama_memory.relevance.choose_query`)."""
        # The two latest user messages are all it looks at (the latest is usually the query).
        latest = [m for m in reversed(window) if m.role == MessageRole.USER][:2]
        return choose_query(query, [message_text(m) for m in reversed(latest)])

    def _compose(self, plan: QueryPlan, window: Sequence[ChatMessage]) -> MemoryBlock:
        if not self._sources:
            return MemoryBlock()
        left_out: list[LeftOut] = []
        if plan.kind == "none":  # small talk: only what does not depend on the query
            sources = [s for s in self._sources if getattr(s, "query_independent", False)]
            records, duplicates = deduplicate(
                self._retrieve("", self.top_k, sources), window_texts(window), left_out
            )
            return fit_block(
                records, token_limit=self.memory_token_limit, tokenizer=self.tokenizer_fn,
                duplicates=duplicates, session_id=self.session_id, left_out=left_out,
            )
        shown = window_texts(window)
        # What the window already shows is dropped afterwards, so ask for more than top_k:
        # as many more as the window showed last time, at least one (the latest user
        # message, the usual query, is stored too and comes back first), and at most
        # top_k more.
        most = self.top_k + min(len(window), self.top_k)
        fetch = min(most, self.top_k + max([1 if window else 0, *self._window_overlaps]))
        # Irrelevant records go first, so that one never stands for a fact in the
        # near-duplicate merge and then leaves the block with it.
        records = self._retrieve_for(plan, fetch)
        relevant, left_out = self._relevant(records)
        kept, duplicates = deduplicate(relevant, shown, left_out)
        if duplicates and fetch < most and _short_of(relevant, kept, fetch, self.top_k):
            # The window shows more of what was found than last time: ask once more,
            # for as many more as it showed.
            records = self._retrieve_for(plan, min(most, fetch + duplicates))
            relevant, left_out = self._relevant(records)
            kept, duplicates = deduplicate(relevant, shown, left_out)
        self._window_overlaps.append(duplicates)
        block = fit_block(
            kept,
            token_limit=self.memory_token_limit,
            tokenizer=self.tokenizer_fn,
            duplicates=duplicates,
            session_id=self.session_id,
            left_out=left_out,
        )
        block.dropped_irrelevant = len(records) - len(relevant)
        return block

    def _relevant(self, records: Sequence[MemoryRecord]) -> tuple[list[MemoryRecord], list[LeftOut]]:
        """The records at or above ``min_relevance`` (those without a relevance stay),
        and the others as left out, :data:`~llama_memory.compose.IRRELEVANT`."""
        kept: list[MemoryRecord] = []
        dropped: list[LeftOut] = []
        for r in records:
            if r.relevance is None or r.relevance >= self.min_relevance:
                kept.append(r)
            else:
                dropped.append(LeftOut(r, IRRELEVANT))
        return kept, dropped

    def _retrieve_for(self, plan: QueryPlan, k: int) -> list[MemoryRecord]:
        """The sources' records for a plan: by its text, and, for a message that refers
        back in time, first what each source holds of that time (:class:`Recent`)."""
        if plan.kind != "time":
            return self._retrieve(plan.text, k)
        by_text = self._retrieve(plan.text, k) if plan.text else self._retrieve("", k, [
            s for s in self._sources if getattr(s, "query_independent", False)
        ])
        scope, span = self.scope, plan.span(now())
        by_time = [r for s in self._sources if isinstance(s, Recent) for r in s.recent(scope, k, span)]
        return by_time + by_text

    def _latest_user_text(self, window: Sequence[ChatMessage]) -> Optional[str]:
        for messages in (window, self.primary_memory.get_all()):
            for message in reversed(messages):
                if message.role == MessageRole.USER and message_text(message).strip():
                    return message_text(message)
        return None

    # -- writing ------------------------------------------------------------------------

    def put(self, message: ChatMessage) -> None:
        """Add a message to the conversation and to every long-term source."""
        if not isinstance(message, ChatMessage):
            raise TypeError(not_a_message("put()", message, many=False))
        self.put_messages([message])

    @dispatcher.span
    def put_messages(self, messages: list[ChatMessage]) -> None:
        """Add messages (one batch for the buffer and for each source). When an
        extraction pass falls due (``extract_every`` user turns), it is queued in the
        same transaction and runs in the background: ``put`` never waits for an LLM."""
        messages = messages_arg(messages, "put_messages()")
        if not messages:
            return
        watch = Stopwatch()
        stored = self._stored(messages)  # validates (e.g. timestamps) before anything is written
        with self._lock:
            self._check_open()
            turns = self._user_turns_pending + sum(m.role == "user" for m in stored)
            due = 0 < self.extract_every <= turns and (self.llm is not None or self.extract_in == "worker")
            with self._one_write("put messages"):
                self._add_to_sources(stored)
                self.primary_memory.put_messages(list(messages))
                if due and self._store is not None:
                    # In the messages' transaction: a crash cannot keep them and lose the pass.
                    self._queue_pass(self.scope, self._job_payload())
            dispatcher.event(
                MemoryPutEvent(
                    **self._event_scope(),
                    messages=len(stored),
                    roles=[m.role for m in stored],
                    message_ids=[m.message_id for m in stored],
                    duration_ms=watch.elapsed_ms,
                )
            )
            self._user_turns_pending = 0 if due else turns
            if not due:
                return
            if self._store is None:  # built by hand, without a store: no queue
                try:
                    self.extract()
                except LlamaMemoryError as exc:
                    logger.warning("automatic extraction failed, will retry: %s", exc)
                return
            if self.extract_in == "thread":
                self._formation_worker().wake()

    def _job_payload(self) -> dict[str, Any]:
        """Whose pass a job is, and (for a worker process) how to open the memory."""
        return {
            "tenant_id": self.tenant_id,
            "user_id": self.user_id,
            "session_id": self.session_id,
            # A worker process rebuilds the sources from this (a memory on disk only).
            "memory": self.to_dict() if self.path is not None else None,
        }

    def _queue_pass(self, scope: Scope, payload: dict[str, Any]) -> None:
        """Queue the session's pass unless one is waiting or running already."""
        assert self._store is not None
        self._store.enqueue(
            EXTRACT_JOB, payload, tenant_id=scope.tenant_id, user_id=scope.user_id,
            max_attempts=MAX_ATTEMPTS, dedup_key=job_key(scope),
        )  # fmt: skip

    def _follow_up(self, job: Job) -> None:
        """After a pass is acknowledged: messages that arrived while it ran found it
        running (their put queued nothing), so queue the session's next pass for them."""
        scope = _job_scope(job)
        history = self._history(scope)
        assert self._store is not None
        if unextracted_from(history, self._store.get_meta(cursor_key(scope))) < len(history):
            self._queue_pass(scope, job.payload)

    def _history(self, scope: Scope) -> list[ChatMessage]:
        """The scope's conversation: this memory's own, or one from the store."""
        assert self._store is not None
        if scope == self.scope:
            with self._lock:
                self._check_open()
                return self.primary_memory.get_all()
        return self._store.chat_log(scope).load()

    def _formation_worker(self) -> FormationWorker:
        """This memory's worker thread, started on first use."""
        if self._worker is None:
            assert self._store is not None
            self._worker = FormationWorker(self._store, self._run_job, after=self._follow_up)
            self._worker.start()
        return self._worker

    def _run_job(self, job: Job) -> int:
        """Run one ``extract`` job with this memory's sources and LLM (any session of
        the store: the sources take the scope as an argument)."""
        scope = _job_scope(job)
        if self.llm is None:
            raise LlamaMemoryError("this worker has no LLM to extract with: give the memory llm=")
        return self._pass(scope, self.llm)

    def _pass(self, scope: Scope, llm: Any) -> int:
        """One extraction pass of the scope's session (see :func:`~llama_memory.formation.run_pass`)."""
        assert self._store is not None
        history = self._history(scope)
        return run_pass(self._store, self._sources, scope, llm, history, lock=self._lock)

    def flush(self, timeout: Optional[float] = None) -> None:
        """Wait until the queued extraction passes that may run now are done (for
        tests, notebooks and shutdown). A failed pass waiting for its retry is not
        waited for (``llama-memory stats`` shows failed jobs).

        Args:
            timeout: seconds to wait at most; TimeoutError past it.

        With ``extract_in="worker"`` (or without ``llm``) this memory runs no pass
        and returns at once.
        """
        self._check_open()
        if self._store is None or self.llm is None or self.extract_in != "thread":
            return
        if not self._formation_worker().flush(timeout):
            raise TimeoutError(f"flush(): extraction passes still running after {timeout} s")

    async def aflush(self, timeout: Optional[float] = None) -> None:
        """Async :meth:`flush`."""
        await asyncio.to_thread(self.flush, timeout)

    @dispatcher.span
    def extract(
        self, messages: Optional[Sequence[ChatMessage]] = None, llm: Any = None
    ) -> None:
        """Let every source derive structured memories (triples, profile...) with an LLM,
        now, in the calling thread.

        Args:
            messages: what to extract from; default the conversation's messages
                not extracted from yet (after the session's persisted cursor, which
                this pass moves).
            llm: default the memory's ``llm``.
        """
        llm = llm or self.llm
        if llm is None:
            raise ValueError("extract() needs an LLM: pass llm=, or build the memory with llm=")
        self._check_open()
        if messages is None and self._store is not None:
            self._pass(self.scope, llm)
            return
        with self._lock:
            self._check_open()
            history = self.primary_memory.get_all()
            automatic = messages is None
            if messages is None:
                messages = history[min(self._extracted_upto, len(history)) :]
            scope = self.scope
            for source in self._sources:
                if isinstance(source, Extracting):
                    self._extract_with(source, messages, llm, scope)
            # Advance only once every source succeeded: a failed extraction is retried.
            if automatic:
                self._extracted_upto = len(history)

    def _extract_with(
        self, source: Extracting, messages: Sequence[ChatMessage], llm: Any, scope: Scope
    ) -> None:
        watch = Stopwatch()
        error: Optional[str] = None
        try:
            source.extract(messages, llm, scope)
        except Exception as exc:
            error = f"{type(exc).__name__}: {exc}"
            raise
        finally:
            dispatcher.event(
                MemoryExtractionEvent(
                    **self._event_scope(),
                    source=getattr(source, "name", type(source).__name__),
                    messages=len(messages),
                    error=error,
                    duration_ms=watch.elapsed_ms,
                )
            )

    def add_triples(
        self,
        triples: Sequence[Any],
        *,
        event_time: Any = None,
        message_ids: Sequence[str] = (),
        ttl: Optional[TTL] = None,
    ) -> list[KnowledgeTriple]:
        """Store knowledge triples for this memory's user: ``KnowledgeTriple``s,
        ``(subject, predicate, object)`` tuples or mappings (see
        :meth:`TripleSource.add_triples`), kept ``ttl`` (seconds or a timedelta;
        default the memory's ``ttl``). Needs a triple source
        (``from_defaults(..., triples=True)``)."""
        with self._lock:
            self._check_open()
            return self.triple_source.add_triples(
                triples, self.scope, event_time=event_time, message_ids=message_ids, ttl=ttl
            )

    @property
    def triple_source(self) -> TripleSource:
        """The knowledge-triple source (``history``, ``to_networkx``, ``plot``...);
        LlamaMemoryError when this memory has none."""
        for source in self._sources:
            if isinstance(source, TripleHolder):
                return cast("TripleSource", source)
        raise LlamaMemoryError(
            "this memory has no knowledge-triple source: build it with "
            "ComposableMemory.from_defaults(..., triples=True) or pass a TripleSource"
        )

    @property
    def profile(self) -> ProfileSource:
        """The user-profile source (``get_profile``, ``set_field``, ``history``...);
        LlamaMemoryError when this memory has none."""
        for source in self._sources:
            if isinstance(source, ProfileHolder):
                return cast("ProfileSource", source)
        raise LlamaMemoryError(
            "this memory has no profile source: build it with the default sources, or "
            "ComposableMemory.from_defaults(..., profile=True), or pass a ProfileSource"
        )

    def set(self, messages: list[ChatMessage]) -> None:
        """Replace the conversation; messages new to it also reach the long-term sources.

        (``SimpleComposableMemory.set`` appends all of them to the secondaries again,
        duplicating what they already hold; here only new messages are added.)
        """
        messages = messages_arg(messages, "set()")
        with self._lock:
            self._check_open()
            stored = self._stored(_new_messages(self.primary_memory.get_all(), messages))
            with self._one_write("set messages"):
                self._add_to_sources(stored)
                self.primary_memory.set(list(messages))

    def _one_write(self, action: str) -> ContextManager[Any]:
        """One transaction of the memory's store for the chat history and the sources'
        records, so a crash or an error keeps all of a batch or none of it. The sources
        write first: the in-memory buffer changes last, once nothing else can fail but
        the commit.

        Every writer that writes to a store (:class:`~llama_memory.sources.base.Stored`)
        must write to this one: a writer on another store (another connection to the
        same file would wait for this transaction's lock forever) makes the batch
        non-atomic, which is logged once.
        """
        if self._store is None:
            return nullcontext()
        log = getattr(self.primary_memory, "chat_log", None)  # a ChatBuffer's; others have none
        others = [
            w for w in [log, *self._sources] if isinstance(w, Stored) and w.store is not self._store
        ]
        if others:
            if not self._warned_not_atomic:
                self._warned_not_atomic = True
                logger.warning(
                    "writes of this memory are not atomic: %s use another store than the "
                    "memory's; build them on the memory's store for all-or-nothing batches",
                    [getattr(w, "name", type(w).__name__) for w in others],
                )
            return nullcontext()
        return self._store.transaction(action)

    @staticmethod
    def _stored(messages: Sequence[ChatMessage]) -> list[StoredMessage]:
        """The messages with id, text and event time, as sources receive them."""
        received = now()
        for position, message in enumerate(messages):
            check_storable(message, position)
        return [
            StoredMessage(
                message_id=message_id(m),
                role=role_name(m),
                text=message_text(m),
                event_time=message_time(m, default=received),
                message=m,
            )
            for m in messages
        ]

    def _add_to_sources(self, stored: Sequence[StoredMessage]) -> None:
        if not stored:
            return
        scope = self.scope
        for source in self._sources:
            source.add(stored, scope)

    def reset(self) -> None:
        """Start this conversation afresh: clear the primary memory and this session's
        stored messages. Long-term memory stays: the records, profile and triples of
        this session and of every other one (as LlamaIndex's ``Memory.reset()`` keeps
        its memory blocks; chat engines call ``reset()`` for "new chat").

        Unlike ``SimpleComposableMemory.reset()``, the secondary sources are not
        cleared. To delete long-term memory, say so: :meth:`forget` (a user,
        everywhere) or one source's ``reset``, e.g.
        ``memory.source("vector").reset(memory.scope)``.

        Automatic extraction starts again from the (empty) conversation: user turns
        not yet extracted from are not extracted (they stay in the past messages).
        """
        with self._lock:
            self._check_open()
            self.primary_memory.reset()
            self._extracted_upto = self._user_turns_pending = 0
            self._window_overlaps.clear()  # they describe the window just cleared
            self._last_block = MemoryBlock()

    def forget(self, user_id: Optional[str] = None) -> None:
        """Remove a user's records from every source and every index: the right to be
        forgotten.

        Args:
            user_id: whose records; default this memory's user. Only this
                memory's tenant is touched, and no other user.

        Deletes the user from every table of the store, whichever sources this
        memory was opened with: chat sessions (all of them), long-term records
        (text, lexical index, vector copies, provenance), profile and its history,
        triples and their history and mentions; and their Chroma collections of
        every kind the default sources keep (past messages, triples), in this
        store's namespace. Clears the conversation in this memory when it is the
        user's. The system of record is cleaned first: if the dense index cannot be
        reached, nothing of the user can be retrieved any more, a StorageError says
        so, and :meth:`reconcile` drops their vectors once the index is back (as
        does opening a memory of that user in server mode).
        """
        user = user_id if user_id is not None else self.user_id
        scope = Scope(user_id=user, tenant_id=self.tenant_id)
        scope.require_user("forget()")
        with self._lock:
            self._check_open()
            if user == self.user_id:
                self.primary_memory.reset()
                self._extracted_upto = self._user_turns_pending = 0
            if self._store is not None:
                self._store.delete_user(scope)  # every table, any source, every session
            self._forget_in_indexes(scope, user)

    def _forget_in_indexes(self, scope: Scope, user: Any) -> None:
        """Call every source's ``forget``, then drop the user's collections of every
        kind; one index that cannot be reached does not stop the others, and the
        failures are raised together at the end."""
        failures: list[str] = []
        for source in self._sources:
            if not isinstance(source, Forgettable):
                continue
            try:
                source.forget(scope)
            except StorageError as exc:
                failures.append(f"{source.name}: {exc}")
        try:
            if self._drop_dense is not None:
                self._drop_dense((scope.tenant_id, scope.require_user()))
        except StorageError as exc:
            failures.append(f"dense index: {exc}")
        if failures:
            raise StorageError(
                f"forget: user {user!r} was removed from the system of record, but not yet "
                f"from every index ({'; '.join(failures)}); call reconcile() once it is "
                "reachable again"
            )

    def purge_expired(self) -> int:
        """Delete the records whose time to live is over from every source and index;
        return how many. (Expired records are never retrieved anyway; this frees the
        space and removes them for good.)"""
        with self._lock:
            self._check_open()
            return sum(s.purge_expired() for s in self._sources if isinstance(s, Expiring))

    # -- maintenance --------------------------------------------------------------------

    def reconcile(self, catch_up: bool = True) -> dict[str, ReconcileReport]:
        """Bring every derived dense index in line with the system of record: vectors
        missing from Chroma are written again (``catch_up``, else on the next read),
        vectors and collections without a record are deleted, for every user of the
        store. Opening a memory in server mode does it for its own user; call this after
        a Chroma server was down, wiped or restored, or a forget() could not reach it.
        Returns what each source did, by name."""
        return self._reconcile_sources(catch_up, None)

    def _reconcile_sources(self, catch_up: bool, scope: Optional[Scope]) -> dict[str, ReconcileReport]:
        """Every derived index's :meth:`reconcile`, for every user or the scope's."""
        with self._lock:
            self._check_open()
            return {
                s.name: s.reconcile(catch_up, scope) for s in self._sources if isinstance(s, Reconcilable)
            }

    def reindex(self) -> int:
        """Rebuild every derived dense index from the system of record; return records indexed."""
        with self._lock:
            self._check_open()
            return sum(s.reindex() for s in self._sources if isinstance(s, Reindexable))

    def close(self) -> None:
        """Stop the extraction worker thread (after the pass running now; the passes
        still queued stay in the store: call :meth:`flush` first to run them), write
        what is waiting to the indexes and release the sources' and the store's
        resources. Closing twice is harmless; other calls after it raise
        :class:`~llama_memory.errors.MemoryClosedError` ("this memory is closed")."""
        worker = self._worker
        if worker is not None:
            # Before taking the lock: the job running now applies its pass under it.
            worker.stop()
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                for source in self._sources:
                    if isinstance(source, Closable):
                        source.close()
            finally:
                if self._store is not None:
                    self._store.close()

    # -- async: the sync work runs in a thread, serialised by the memory's lock -----------

    @dispatcher.span
    async def aget(self, input: Optional[str] = None, **kwargs: Any) -> list[ChatMessage]:
        """Async :meth:`get` (what agents call).

        In a step of a ``ReActAgent`` without a ``system_prompt``, the block goes into
        the latest user message whatever ``insert_method`` says: that agent drops a
        leading system message, which would be the memory's own.
        """
        react = await drops_leading_system_message()
        return await asyncio.to_thread(self._get, input, "user" if react else self.insert_method, **kwargs)

    async def aget_all(self) -> list[ChatMessage]:
        """Async :meth:`get_all`."""
        return await asyncio.to_thread(self.get_all)

    async def aput(self, message: ChatMessage) -> None:
        """Async :meth:`put`."""
        await asyncio.to_thread(self.put, message)

    async def aput_messages(self, messages: list[ChatMessage]) -> None:
        """Async :meth:`put_messages`."""
        await asyncio.to_thread(self.put_messages, messages)

    async def aset(self, messages: list[ChatMessage]) -> None:
        """Async :meth:`set`."""
        await asyncio.to_thread(self.set, messages)

    async def areset(self) -> None:
        """Async :meth:`reset`."""
        await asyncio.to_thread(self.reset)

    async def asearch(self, query: str, k: int = DEFAULT_TOP_K) -> list[MemoryRecord]:
        """Async :meth:`search`."""
        return await asyncio.to_thread(self.search, query, k)

    # -- serialisation: restorable from configuration, not from live objects -------------

    def to_dict(self, **kwargs: Any) -> dict[str, Any]:
        """The configuration that reopens this memory (see :meth:`from_dict`); plain JSON
        data, as a workflow ``Context`` saves it.

        A memory with a ``path`` (absolute) is restored from its files, one on a
        PostgreSQL ``store`` from its database (the URL is kept without its password:
        libpq reads it from ``PGPASSWORD`` or ``~/.pgpass`` on restore; a pool is a live
        object, passed again as ``store=``); an in-memory
        one carries its chat history in the dict. The embedding model is carried by
        class and configuration (credentials left out), a profile schema by import
        path, a primary memory LlamaIndex can serialise (``ChatBuffer``,
        ``ChatMemoryBuffer``...) by class and content. Live objects (an LLM, custom
        sources, a Chroma client, a tokenizer function) are marked, and
        :meth:`from_dict` asks for them instead of silently building defaults.
        """
        primary: Any = "default" if self._primary_default else primary_to_dict(self.primary_memory)
        profile: Any = False
        for source in self._sources:
            if isinstance(source, ProfileHolder):
                schema = source.schema
                profile = qualified_name(schema) if schema is not None else True
        data: dict[str, Any] = {
            "class_name": self.class_name(),
            "user_id": self.user_id,
            "session_id": self.session_id,
            "tenant_id": self.tenant_id,
            "path": self.path,
            "memory_token_limit": self.memory_token_limit,
            "top_k": self.top_k,
            "insert_method": self.insert_method,
            "extract_every": self.extract_every,
            "min_relevance": self.min_relevance,
            "extract_in": self.extract_in,
            "token_limit": getattr(self.primary_memory, "token_limit", DEFAULT_TOKEN_LIMIT),
            "primary": primary if primary is not None else "custom",
            "sources": self._source_kind,
            "triples": any(isinstance(s, TripleHolder) for s in self._sources),
            "profile": profile,
            **self._config,
        }
        if self.path is None and "store" not in self._config and self._primary_default:
            data["chat_history"] = [m.model_dump(mode="json") for m in self.get_all()]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], **kwargs: Any) -> "ComposableMemory":
        """Rebuild a memory from :meth:`to_dict`'s output.

        What the dict cannot carry comes from, in order of precedence: keyword
        arguments here (``llm=``, ``embed_model=``, ``primary_memory=``,
        ``secondary_memory_sources=``, ``chroma_client=``, ``tokenizer_fn=``, or any
        other ``from_defaults`` argument, which override the dict), then the
        process-wide hook of :func:`~llama_memory.restore.set_restore_hook` (the only
        way when a workflow ``Context.from_dict`` calls this with no arguments).

        Raises:
            StorageError: the dict's ``path`` holds no store (moved or deleted):
                restoring never opens a new, empty memory in its place.
            LlamaMemoryError: a part cannot be rebuilt (custom sources or primary
                memory not given again, a class that cannot be imported...); the
                message says which argument to pass.

        Warns:
            RestoreWarning: the memory had an ``llm`` or a custom ``tokenizer_fn`` and
                none was given: extraction is off, tokens are counted by the default.
        """
        config = {**data, **restore_hook_arguments(data), **kwargs}
        config.pop("class_name", None)
        for part, argument in (("primary", "primary_memory"), ("sources", "secondary_memory_sources")):
            kind = config.pop(part, "default")
            if argument in config:
                continue
            if isinstance(kind, dict):
                config[argument] = primary_from_dict(kind)
            elif kind == "custom":
                raise LlamaMemoryError(
                    f"this ComposableMemory was built with a custom {argument}, a live object "
                    f"a dict cannot carry: pass it again, ComposableMemory.from_dict(data, "
                    f"{argument}=...), or from a restore hook (llama_memory.set_restore_hook)"
                )
            elif kind == "none":
                config[argument] = []
        restore_live_parts(config)
        check_restorable(config.get("path"))
        history = config.pop("chat_history", None)
        memory = cls.from_defaults(**config)
        if history and memory.path is None and "store" not in memory._config:
            memory.primary_memory.set([ChatMessage.model_validate(m) for m in history])
        return memory


def _job_scope(job: Job) -> Scope:
    """Whose session an ``extract`` job is for."""
    payload = job.payload
    return Scope(
        user_id=payload.get("user_id"), session_id=payload["session_id"],
        tenant_id=payload.get("tenant_id", "default"),
    )


def _short_of(
    records: Sequence[MemoryRecord], kept: Sequence[MemoryRecord], fetch: int, top_k: int
) -> bool:
    """Whether a source gave all ``fetch`` records asked for (so it may have more) but
    fewer than ``top_k`` of them survived deduplication."""
    found = Counter(r.source for r in records)
    left = Counter(r.source for r in kept)
    return any(n >= fetch and left[source] < top_k for source, n in found.items())


def _new_messages(before: Sequence[ChatMessage], messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """The messages not already in ``before``: by identity, else by serialised content
    (linear; comparing pydantic messages pairwise is quadratic)."""
    same_object = {id(m) for m in before}
    candidates = [m for m in messages if id(m) not in same_object]
    if not candidates:
        return []
    known = {dump_message(m) for m in before}
    return [m for m in candidates if dump_message(m) not in known]


