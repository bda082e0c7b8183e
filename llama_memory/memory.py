"""``ComposableMemory``: a drop-in, long-term ``SimpleComposableMemory`` for LlamaIndex."""

from __future__ import annotations

import asyncio
import difflib
import inspect
import logging
import os
import threading
import warnings
from collections import Counter, deque
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any, ContextManager, Literal, Optional, Union
from uuid import uuid4

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.bridge.pydantic import Field, PrivateAttr, SerializeAsAny, field_validator
from llama_index.core.memory.types import BaseMemory
from llama_index.core.utils import get_tokenizer
from pydantic import BaseModel

from .agents import RunMemoryTool, drops_leading_system_message
from .buffer import ChatBuffer
from .compose import (
    LeftOut,
    MemoryBlock,
    deduplicate,
    fit_block,
    insert_block,
    interleave,
    window_texts,
)
from .errors import LlamaMemoryError, MemoryClosedError, RestoreWarning, StorageError
from .expiry import TTL, Expiry, ttl_seconds
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
from .restore import (
    embedding_from_dict,
    embedding_to_dict,
    import_class,
    primary_from_dict,
    primary_to_dict,
    qualified_name,
    restore_hook_arguments,
)
from .sources.base import MemorySource
from .sources.dimension import forget_embedding_model
from .sources.llama_index import LlamaIndexMemorySource
from .sources.profile import ProfileSource
from .sources.triples import (
    TRIPLE_COLLECTION,
    KnowledgeTriple,
    TripleSource,
    default_triple_source,
)
from .sources.vector import VectorSource
from .storage.chroma import (
    CHROMA_DIRNAME,
    http_client,
    open_index,
    persistent_client,
    server_address,
)
from .storage.reconcile import ReconcileReport
from .storage.sqlite import (
    DB_FILENAME,
    SQLiteChatLog,
    SQLiteStore,
    memory_path,
    store_exists,
)
from .types import MemoryRecord, Scope, StoredMessage, now
from .views import RecordList

logger = logging.getLogger(__name__)

InsertMethod = Literal["system", "user"]
Source = Union[MemorySource, BaseMemory]

#: Default token limit of the primary chat buffer (the same as ``ChatMemoryBuffer``'s).
DEFAULT_TOKEN_LIMIT = 3000
#: Default token budget of the injected memory block.
DEFAULT_MEMORY_TOKEN_LIMIT = 1500
#: Default number of records each source retrieves per query.
DEFAULT_TOP_K = 10
#: Collection-name prefix of the default vector source (one collection per user).
VECTOR_COLLECTION = "llama_memory_vector"
#: Every kind of dense-index collection the default sources keep for a user:
#: ``forget()`` drops them all, also those of sources the memory was not opened with.
DENSE_COLLECTIONS = (VECTOR_COLLECTION, TRIPLE_COLLECTION)
#: The keyword arguments LlamaIndex itself passes to a memory (llama-index-core 0.14):
#: chat engines call ``memory_cls.from_defaults(chat_history=..., token_limit=...)``,
#: agents build their default memory with ``from_defaults(llm=...)``, and chat engines
#: call ``get(initial_token_count=...)``. ``from_defaults`` honours the first three (any
#: other unknown keyword argument is a TypeError); ``get`` passes its extra keyword
#: arguments to the primary memory.
LLAMA_INDEX_KWARGS = ("chat_history", "token_limit", "llm", "initial_token_count")
# ChatMemoryBuffer.from_defaults arguments that have no meaning here, with what to do
# instead (said in the TypeError rather than ignored: the conversation would silently
# not be where the user thinks it is).
_NOT_SUPPORTED = {
    "chat_store": "the conversation is kept in SQLite under path=; pass path=...",
    "chat_store_key": "pass session_id= (and user_id=) to name the conversation",
}


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
        default=0, description="Run extraction every N user turns when llm is set (0: on demand)."
    )

    _sources: list[MemorySource] = PrivateAttr(default_factory=list)
    _store: Optional[SQLiteStore] = PrivateAttr(default=None)
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
    # The Chroma client the default sources were given (None: the embedded one under
    # path): forget() drops the user's collections of every kind on it.
    _dense_client: Any = PrivateAttr(default=None)
    _user_turns_pending: int = PrivateAttr(default=0)  # user messages not yet extracted from
    _extracted_upto: int = PrivateAttr(default=0)  # get_all() index extraction has reached
    # What to_dict says of server mode and expiry (from_defaults arguments).
    _config: dict[str, Any] = PrivateAttr(default_factory=dict)

    @field_validator("memory_token_limit", "top_k", "extract_every")
    @classmethod
    def _non_negative(cls, value: int) -> int:
        if value < 0:
            raise ValueError(f"must be zero or more, got {value}")
        return value

    def __init__(self, **data: Any) -> None:
        """Build a memory from its fields (:meth:`from_defaults` is the usual way);
        TypeError naming an unknown keyword argument and the closest valid one."""
        _reject_unknown("ComposableMemory()", data, [*type(self).model_fields, "class_name"])
        super().__init__(**data)

    def model_post_init(self, __context: Any) -> None:
        """Wrap LlamaIndex memories given as secondary sources so all speak one protocol."""
        self._source_kind = "none" if not self.secondary_memory_sources else "custom"
        self._sources = [
            s if isinstance(s, MemorySource) else LlamaIndexMemorySource(s, f"{s.class_name()}#{i + 1}")
            for i, s in enumerate(self.secondary_memory_sources)
        ]
        for s in self.secondary_memory_sources:
            if not isinstance(s, (MemorySource, BaseMemory)):
                raise TypeError(
                    "secondary_memory_sources takes llama-memory sources or LlamaIndex "
                    f"BaseMemory objects, not {type(s).__name__}"
                )

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
            path: a directory for the SQLite file and Chroma index; ``None`` keeps
                everything in memory.
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
            extract_every: with ``llm``, extract automatically every this many user
                turns (0: only when :meth:`extract` is called).
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
            **kwargs: none is accepted: an unknown keyword argument is a TypeError
                naming it and the closest valid one. Of what LlamaIndex itself passes
                to a memory (:data:`LLAMA_INDEX_KWARGS`), ``chat_history``,
                ``token_limit`` and ``llm`` are honoured here, and
                ``initial_token_count`` is for :meth:`get`.

        Raises:
            TypeError: an unknown keyword argument, an ``embed_model`` that is not an
                embedding object (such as a model name), a ``chat_history`` that is
                not a list of ``ChatMessage``.
            ValueError: a ``path`` that is a database URL (``path`` is a directory).
        """
        if kwargs:
            _reject_unknown("ComposableMemory.from_defaults()", kwargs, _parameters(cls.from_defaults))
        _check_embed_model(embed_model)
        if path is not None:
            memory_path(path)  # a URL or a non-path fails here, before anything is created
        history = _messages_arg(chat_history, "chat_history") if chat_history is not None else []
        tokenizer = tokenizer_fn or get_tokenizer()
        session_id = session_id or uuid4().hex
        scope = Scope(user_id=user_id, session_id=session_id, tenant_id=tenant_id)
        expiry = Expiry(
            ttl=ttl_seconds(ttl), refresh_on_read=refresh_on_read, **({"clock": clock} if clock else {})
        )
        server = _server(chroma_host, chroma_port, chroma_url, chroma_client, path)
        given_client = chroma_client is not None
        if server is not None:
            chroma_client = http_client(*server)
        if path is not None:
            # Absolute at creation: a saved dict (a workflow Context) restored from another
            # working directory must reopen this store, not a new one there.
            path = os.path.abspath(os.path.expanduser(os.fspath(path)))
        store = SQLiteStore(path)
        built_primary = primary_memory is None
        if primary_memory is None:
            primary_memory = ChatBuffer.from_defaults(
                token_limit=token_limit,
                tokenizer_fn=tokenizer,
                chat_log=SQLiteChatLog(store, scope) if path is not None else None,
            )
        default_sources = secondary_memory_sources is None
        # The one model of the default sources, recorded by to_dict.
        model = resolve_embed_model(embed_model) if default_sources or triples else None
        if reembed:
            forget_embedding_model(store, vector=default_sources, triples=triples)
        # Everything in an empty list comes from the flags below, which to_dict records.
        no_sources = secondary_memory_sources == []
        if secondary_memory_sources is None:
            scope.require_user("the default long-term (vector) memory")
            secondary_memory_sources = [
                default_vector_source(store, path, model, chroma_client, expiry)
            ]
        if not (
            profile is None
            or isinstance(profile, bool)
            or (isinstance(profile, type) and issubclass(profile, BaseModel))
        ):
            raise TypeError(f"profile takes True, False, None or a pydantic model class, not {profile!r}")
        if profile is not False and (default_sources or profile is not None):
            scope.require_user("the profile memory")
            if not any(isinstance(s, ProfileSource) for s in secondary_memory_sources):
                schema = profile if isinstance(profile, type) else None
                secondary_memory_sources = [
                    *secondary_memory_sources, ProfileSource(store, schema=schema, expiry=expiry)
                ]
        if triples and not any(isinstance(s, TripleSource) for s in secondary_memory_sources):
            scope.require_user("the knowledge-triple memory")
            secondary_memory_sources = [
                *secondary_memory_sources,
                default_triple_source(
                    store, path, resolve_embed_model(model), chroma_client, expiry=expiry
                ),
            ]
        memory = cls(
            primary_memory=primary_memory,
            secondary_memory_sources=secondary_memory_sources,
            user_id=user_id,
            session_id=session_id,
            tenant_id=tenant_id,
            path=path,
            memory_token_limit=memory_token_limit,
            top_k=top_k,
            insert_method=insert_method,
            tokenizer_fn=tokenizer,
            llm=llm,
            extract_every=extract_every,
        )
        memory._store = store
        memory._dense_client = chroma_client
        memory._primary_default = built_primary
        if model is not None:
            memory._config["embed_model"] = embedding_to_dict(model)
        # Live objects a dict cannot carry: to_dict leaves a marker, from_dict asks for them.
        if llm is not None:
            memory._config["llm"] = {"qualified_name": qualified_name(type(llm))}
        if tokenizer_fn is not None:
            memory._config["tokenizer_fn"] = {"name": getattr(tokenizer_fn, "__qualname__", "?")}
        if given_client:
            memory._config["chroma_client"] = {"qualified_name": qualified_name(type(chroma_client))}
        if default_sources:
            memory._source_kind = "default"
        elif no_sources:
            memory._source_kind = "none"
        if server is not None:
            host, port, secure = server
            memory._config["chroma_url"] = f"{'https' if secure else 'http'}://{host}:{port}"
        if expiry.ttl is not None or refresh_on_read:
            memory._config.update(ttl=expiry.ttl, refresh_on_read=refresh_on_read)
        if reembed:
            try:
                with memory._lock:
                    count = memory.reindex()
            except Exception:
                memory.close()
                raise
            logger.info("store %s re-embedded with %s: %d records", path, model, count)
        elif chroma_client is not None and user_id:
            # An index on a server (or any given client) can drift from the record while
            # this store is closed: catch this user's up now (one Chroma read per
            # source). Missing vectors are flagged and embedded on the first read;
            # orphans are deleted at once. Other users: reconcile().
            try:
                with memory._lock:
                    reports = {s.name: s.reconcile(False, memory.scope) for s in memory._sources}
            except Exception:
                memory.close()  # do not leave the store open behind a failed open
                raise
            logger.info("dense index of %r reconciled on open: %s", user_id, reports)
        if history:
            try:
                memory.set(history)
            except Exception:
                memory.close()  # as above: no store left open behind a failed open
                raise
        return memory

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
    def sources(self) -> list[MemorySource]:
        """The secondary sources as :class:`MemorySource` objects (LlamaIndex memories wrapped)."""
        return list(self._sources)

    @property
    def last_block(self) -> MemoryBlock:
        """The memory block built by the latest ``get``, with what was left out and why."""
        return self._last_block

    # -- reading ------------------------------------------------------------------------

    def source(self, name: str) -> MemorySource:
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
            RunMemoryTool(self, source, tool) for source in self._sources for tool in source.tools(scope)
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
                f"get() input must be a str or None, not {type(input).__name__} {_short(input)}: "
                "pass the text to retrieve for, e.g. the user's message"
            )
        watch = Stopwatch()
        with self._lock:
            self._check_open()
            window = self.primary_memory.get(input=input, **kwargs)
            query = input if input else self._latest_user_text(window)
            block = self._compose(query, window)
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
            raise TypeError(f"search() query must be a str, not {type(query).__name__} {_short(query)}")
        with self._lock:
            self._check_open()
            relevant = [s for s in self._sources if not s.query_independent]
            records, _ = deduplicate(self._retrieve(query, k, relevant))
            return RecordList(records[:k])

    def _retrieve(
        self, query: str, k: int, sources: Optional[Sequence[MemorySource]] = None
    ) -> list[MemoryRecord]:
        scope = self.scope
        sources = self._sources if sources is None else sources
        merged: list[MemoryRecord] = []
        for priority in sorted({s.priority for s in sources}, reverse=True):
            tier = [s for s in sources if s.priority == priority]
            merged.extend(interleave(self.retrieve_from(source, query, scope, k) for source in tier))
        return merged

    @dispatcher.span
    def retrieve_from(self, source: MemorySource, query: str, scope: Scope, k: int) -> list[MemoryRecord]:
        """One source's records for ``query`` (a span and a
        :class:`~llama_memory.instrumentation.MemoryRetrievalEvent` of its own)."""
        watch = Stopwatch()
        records = source.retrieve(query, scope, k)
        dispatcher.event(
            retrieval_event(self._event_scope(), source.name, query, k, records, watch.elapsed_ms)
        )
        return records

    def _compose(self, query: Optional[str], window: Sequence[ChatMessage]) -> MemoryBlock:
        if not self._sources:
            return MemoryBlock()
        query = query or ""
        shown = window_texts(window)
        # What the window already shows is dropped afterwards, so ask for more than top_k:
        # as many more as the window showed last time, at least one (the latest user
        # message, the usual query, is stored too and comes back first), and at most
        # top_k more.
        most = self.top_k + min(len(window), self.top_k)
        fetch = min(most, self.top_k + max([1 if window else 0, *self._window_overlaps]))
        records = self._retrieve(query, fetch)
        left_out: list[LeftOut] = []
        kept, duplicates = deduplicate(records, shown, left_out)
        if duplicates and fetch < most and _short_of(records, kept, fetch, self.top_k):
            # The window shows more of what was found than last time: ask once more,
            # for as many more as it showed.
            records = self._retrieve(query, min(most, fetch + duplicates))
            left_out = []
            kept, duplicates = deduplicate(records, shown, left_out)
        self._window_overlaps.append(duplicates)
        return fit_block(
            kept,
            token_limit=self.memory_token_limit,
            tokenizer=self.tokenizer_fn,
            duplicates=duplicates,
            session_id=self.session_id,
            left_out=left_out,
        )

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
            raise TypeError(_not_a_message("put()", message, many=False))
        self.put_messages([message])

    @dispatcher.span
    def put_messages(self, messages: list[ChatMessage]) -> None:
        """Add messages (one batch for the buffer and for each source)."""
        messages = _messages_arg(messages, "put_messages()")
        if not messages:
            return
        watch = Stopwatch()
        stored = self._stored(messages)  # validates (e.g. timestamps) before anything is written
        with self._lock:
            self._check_open()
            with self._one_write("put messages"):
                self._add_to_sources(stored)
                self.primary_memory.put_messages(list(messages))
            dispatcher.event(
                MemoryPutEvent(
                    **self._event_scope(),
                    messages=len(stored),
                    roles=[m.role for m in stored],
                    message_ids=[m.message_id for m in stored],
                    duration_ms=watch.elapsed_ms,
                )
            )
            self._user_turns_pending += sum(m.role == "user" for m in stored)
            if self.llm is not None and 0 < self.extract_every <= self._user_turns_pending:
                try:
                    self.extract()
                except LlamaMemoryError as exc:
                    # The messages are stored; a bad LLM answer must not fail the agent's
                    # run. The same messages are tried again at the next extraction.
                    logger.warning("automatic extraction failed, will retry: %s", exc)

    @dispatcher.span
    def extract(
        self, messages: Optional[Sequence[ChatMessage]] = None, llm: Any = None
    ) -> None:
        """Let every source derive structured memories (triples, profile...) with an LLM.

        Args:
            messages: what to extract from; default the conversation's messages
                not extracted from yet.
            llm: default the memory's ``llm``.
        """
        llm = llm or self.llm
        if llm is None:
            raise ValueError("extract() needs an LLM: pass llm=, or build the memory with llm=")
        with self._lock:
            self._check_open()
            history = self.primary_memory.get_all()
            automatic = messages is None
            if messages is None:
                messages = history[min(self._extracted_upto, len(history)) :]
            scope = self.scope
            for source in self._sources:
                self._extract_with(source, messages, llm, scope)
            # Advance only once every source succeeded: a failed extraction is retried.
            if automatic:
                self._extracted_upto = len(history)
            self._user_turns_pending = 0

    def _extract_with(
        self, source: MemorySource, messages: Sequence[ChatMessage], llm: Any, scope: Scope
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
                    source=source.name,
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
            if isinstance(source, TripleSource):
                return source
        raise LlamaMemoryError(
            "this memory has no knowledge-triple source: build it with "
            "ComposableMemory.from_defaults(..., triples=True) or pass a TripleSource"
        )

    @property
    def profile(self) -> ProfileSource:
        """The user-profile source (``get_profile``, ``set_field``, ``history``...);
        LlamaMemoryError when this memory has none."""
        for source in self._sources:
            if isinstance(source, ProfileSource):
                return source
        raise LlamaMemoryError(
            "this memory has no profile source: build it with the default sources, or "
            "ComposableMemory.from_defaults(..., profile=True), or pass a ProfileSource"
        )

    def set(self, messages: list[ChatMessage]) -> None:
        """Replace the conversation; messages new to it also reach the long-term sources.

        (``SimpleComposableMemory.set`` appends all of them to the secondaries again,
        duplicating what they already hold; here only new messages are added.)
        """
        messages = _messages_arg(messages, "set()")
        with self._lock:
            self._check_open()
            stored = self._stored(_new_messages(self.primary_memory.get_all(), messages))
            with self._one_write("set messages"):
                self._add_to_sources(stored)
                self.primary_memory.set(list(messages))

    def _one_write(self, action: str) -> ContextManager[Any]:
        """One SQLite transaction for the chat history and the sources' records, so a
        crash or an error keeps all of a batch or none of it. The sources write first:
        the in-memory buffer changes last, once nothing else can fail but the commit.

        Only when every store written to is the memory's own (the default): a second
        connection to the same file would wait for this transaction's lock forever.
        """
        log = getattr(self.primary_memory, "chat_log", None)
        writers = [getattr(log, "store", None)] + [getattr(s, "store", None) for s in self._sources]
        stores = {id(w) for w in writers if isinstance(w, SQLiteStore)}
        if self._store is None or stores - {id(self._store)}:
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
            try:
                source.forget(scope)
            except StorageError as exc:
                failures.append(f"{source.name}: {exc}")
        try:
            self._drop_dense_collections(scope)
        except StorageError as exc:
            failures.append(f"dense index: {exc}")
        if failures:
            raise StorageError(
                f"forget: user {user!r} was removed from the system of record, but not yet "
                f"from every index ({'; '.join(failures)}); call reconcile() once it is "
                "reachable again"
            )

    def _drop_dense_collections(self, scope: Scope) -> None:
        """Drop the user's collections of every kind the default sources keep, on this
        store's Chroma (its namespace on a given client or server, else the embedded
        index under ``path``): a source this memory was not opened with (triples) may
        have written some. An in-memory store shares its collections with no one."""
        client = self._dense_client
        if client is None:
            if self.path is None or not (Path(self.path) / CHROMA_DIRNAME).is_dir():
                return  # no Chroma index was ever created beside this store
            client = persistent_client(self.path)
        namespace = self._store.store_id if self._dense_client is not None and self._store else None
        for prefix in DENSE_COLLECTIONS:
            open_index(prefix, None, client, namespace).drop(scope.tenant_id, scope.require_user())

    def purge_expired(self) -> int:
        """Delete the records whose time to live is over from every source and index;
        return how many. (Expired records are never retrieved anyway; this frees the
        space and removes them for good.)"""
        with self._lock:
            self._check_open()
            return sum(source.purge_expired() for source in self._sources)

    # -- maintenance --------------------------------------------------------------------

    def reconcile(self, catch_up: bool = True) -> dict[str, ReconcileReport]:
        """Bring every derived dense index in line with the system of record: vectors
        missing from Chroma are written again (``catch_up``, else on the next read),
        vectors and collections without a record are deleted, for every user of the
        store. Opening a memory in server mode does it for its own user; call this after
        a Chroma server was down, wiped or restored, or a forget() could not reach it.
        Returns what each source did, by name."""
        with self._lock:
            self._check_open()
            return {source.name: source.reconcile(catch_up) for source in self._sources}

    def reindex(self) -> int:
        """Rebuild every derived dense index from the system of record; return records indexed."""
        with self._lock:
            self._check_open()
            return sum(
                s.reindex() for s in self._sources if isinstance(s, (VectorSource, TripleSource))
            )

    def close(self) -> None:
        """Write what is waiting to the indexes and release the sources' and the store's
        resources. Closing twice is harmless; other calls after it raise
        :class:`~llama_memory.errors.MemoryClosedError` ("this memory is closed")."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                for source in self._sources:
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

        A memory with a ``path`` (absolute) is restored from its files; an in-memory
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
            if isinstance(source, ProfileSource):
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
            "token_limit": getattr(self.primary_memory, "token_limit", DEFAULT_TOKEN_LIMIT),
            "primary": primary if primary is not None else "custom",
            "sources": self._source_kind,
            "triples": any(isinstance(s, TripleSource) for s in self._sources),
            "profile": profile,
            **self._config,
        }
        if self.path is None and self._primary_default:
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
        _restore_live_parts(config)
        path = config.get("path")
        if path is not None and not store_exists(path):
            raise StorageError(
                f"cannot restore this memory: its store {path} does not exist (no "
                f"{DB_FILENAME} there; moved or deleted?). Pass path= to from_dict with where "
                "the store is now; restoring never opens a new, empty memory in its place "
                "(ComposableMemory.from_defaults starts one)"
            )
        history = config.pop("chat_history", None)
        memory = cls.from_defaults(**config)
        if history and memory.path is None:
            memory.primary_memory.set([ChatMessage.model_validate(m) for m in history])
        return memory


def _restore_live_parts(config: dict[str, Any]) -> None:
    """Turn what :meth:`ComposableMemory.to_dict` wrote of live objects back into
    ``from_defaults`` arguments, in place: rebuild what can be (the embedding model, the
    profile schema), refuse or warn for what was not given again."""
    if isinstance(config.get("embed_model"), dict):
        config["embed_model"] = embedding_from_dict(config["embed_model"])
    if isinstance(config.get("profile"), str):
        config["profile"] = import_class(
            config["profile"], "the profile schema", "profile=YourSchema to from_dict"
        )
    if isinstance(config.get("chroma_client"), dict):
        raise LlamaMemoryError(
            f"this ComposableMemory used a Chroma client of its own "
            f"({config['chroma_client'].get('qualified_name')}), a live object a dict cannot "
            "carry: pass it again, ComposableMemory.from_dict(data, chroma_client=...), or "
            "from a restore hook (llama_memory.set_restore_hook)"
        )
    if isinstance(config.get("llm"), dict):
        marker = config.pop("llm")
        warnings.warn(
            f"this ComposableMemory had an llm ({marker.get('qualified_name')}), a live object "
            "a dict cannot carry; the restored memory has none, so nothing is extracted "
            f"(extract_every={config.get('extract_every', 0)} does nothing) until you pass "
            "llm= to from_dict or return it from a restore hook (llama_memory.set_restore_hook)",
            RestoreWarning,
            stacklevel=3,
        )
    if isinstance(config.get("tokenizer_fn"), dict):
        marker = config.pop("tokenizer_fn")
        warnings.warn(
            f"this ComposableMemory counted tokens with a tokenizer_fn of its own "
            f"({marker.get('name')}), which a dict cannot carry; the restored memory counts "
            "with the default until you pass tokenizer_fn= to from_dict or return it from a "
            "restore hook (llama_memory.set_restore_hook)",
            RestoreWarning,
            stacklevel=3,
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


def _parameters(function: Callable[..., Any]) -> list[str]:
    """The names a function takes as keyword arguments (not ``*args``/``**kwargs``)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in inspect.signature(function).parameters.values() if p.kind in kinds]


def _reject_unknown(where: str, given: Sequence[str] | dict[str, Any], valid: Sequence[str]) -> None:
    """TypeError for the first name of ``given`` not in ``valid``, naming the closest
    valid one (a typo must not be ignored: ``memory_token_limt=10`` would do nothing)."""
    for name in given:
        if name in valid:
            continue
        hint = _NOT_SUPPORTED.get(name)
        if hint is None:
            close = difflib.get_close_matches(name, valid, n=1)
            hint = f"did you mean {close[0]!r}?" if close else f"valid ones: {', '.join(sorted(valid))}"
        raise TypeError(f"{where} got an unexpected keyword argument {name!r}; {hint}")


def _check_embed_model(embed_model: Any) -> None:
    """TypeError unless ``embed_model`` is None or a LlamaIndex embedding object."""
    if embed_model is None or isinstance(embed_model, BaseEmbedding):
        return
    if isinstance(embed_model, str):
        raise TypeError(
            f"embed_model takes an embedding object, not the model name {embed_model!r}: pass "
            f"e.g. OpenAIEmbedding(model={embed_model!r}) (from llama_index.embeddings.openai), "
            "or any LlamaIndex BaseEmbedding"
        )
    raise TypeError(
        f"embed_model takes a LlamaIndex embedding (a BaseEmbedding such as "
        f"OpenAIEmbedding(...)), not {type(embed_model).__name__} {_short(embed_model)}"
    )


def _short(value: Any, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _not_a_message(where: str, value: Any, many: bool, position: int = 0) -> str:
    """What was wrong with a value given where a ChatMessage was expected, and what to pass."""
    takes = "ChatMessage objects" if many else "a ChatMessage"
    what = f"message {position} is" if many else "it was given"
    if isinstance(value, str):
        fix = f"pass ChatMessage(role=\"user\", content={_short(value)})"
    elif isinstance(value, dict):
        fix = "pass ChatMessage(**message) or ChatMessage.model_validate(message)"
    elif not many and isinstance(value, (list, tuple)):
        fix = "for several messages call put_messages(messages)"
    else:
        fix = "pass a llama_index.core.llms.ChatMessage"
    return f"{where} takes {takes}; {what} a {type(value).__name__} ({_short(value)}): {fix}"


def _messages_arg(messages: Any, where: str) -> list[ChatMessage]:
    """``messages`` as a list of ChatMessage; TypeError naming the first bad one (before
    anything is written)."""
    if isinstance(messages, ChatMessage):
        raise TypeError(
            f"{where} takes a list of ChatMessage, not one ChatMessage: pass [message]"
        )
    if isinstance(messages, (str, bytes, dict)) or not isinstance(messages, (list, tuple, deque)):
        raise TypeError(
            f"{where} takes a list of ChatMessage, not {type(messages).__name__} "
            f"{_short(messages)}: pass e.g. [ChatMessage(role=\"user\", content=\"...\")]"
        )
    for position, message in enumerate(messages):
        if not isinstance(message, ChatMessage):
            raise TypeError(_not_a_message(where, message, many=True, position=position))
    return list(messages)


def default_vector_source(
    store: SQLiteStore,
    path: Optional[Union[str, Path]],
    embed_model: Optional[BaseEmbedding],
    chroma_client: Any = None,
    expiry: Optional[Expiry] = None,
) -> VectorSource:
    """The default long-term source: past messages in SQLite + a Chroma index (on
    ``chroma_client`` when given, with collections named after the store's id)."""
    namespace = store.store_id if chroma_client is not None else None
    index = open_index(VECTOR_COLLECTION, path, chroma_client, namespace)
    return VectorSource(store, index, resolve_embed_model(embed_model), expiry=expiry or Expiry())


def _server(
    host: Optional[str],
    port: int,
    url: Optional[str],
    client: Any,
    path: Optional[Union[str, Path]],
) -> Optional[tuple[str, int, bool]]:
    """``(host, port, ssl)`` of the Chroma server asked for, or None; ValueError for
    contradicting arguments."""
    if host is None and url is None:
        return None
    if host is not None and url is not None:
        raise ValueError("pass chroma_host (and chroma_port) or chroma_url, not both")
    if client is not None:
        raise ValueError("pass chroma_client or a Chroma server address, not both")
    if path is None:
        raise ValueError(
            "server mode needs path=: SQLite under path is the system of record, and "
            "vectors on a shared server must not outlive an in-memory store"
        )
    if url is not None:
        return server_address(url)
    return str(host), int(port), False


def resolve_embed_model(embed_model: Optional[BaseEmbedding]) -> BaseEmbedding:
    """The given model, else ``Settings.embed_model`` if one was set, else the offline default."""
    if embed_model is not None:
        return embed_model
    from llama_index.core import Settings

    configured = getattr(Settings, "_embed_model", None)
    if configured is not None:
        return configured
    from .embeddings import default_embedding

    return default_embedding()
