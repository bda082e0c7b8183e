"""``ComposableMemory``: a drop-in, long-term ``SimpleComposableMemory`` for LlamaIndex."""

from __future__ import annotations

import asyncio
import logging
import threading
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

from .buffer import ChatBuffer
from .compose import (
    MemoryBlock,
    deduplicate,
    fit_block,
    insert_block,
    interleave,
    window_texts,
)
from .errors import LlamaMemoryError, StorageError
from .expiry import TTL, Expiry, ttl_seconds
from .messages import (
    check_storable,
    dump_message,
    message_id,
    message_text,
    message_time,
    role_name,
)
from .sources.base import MemorySource
from .sources.llama_index import LlamaIndexMemorySource
from .sources.profile import ProfileSource
from .sources.triples import KnowledgeTriple, TripleSource, default_triple_source
from .sources.vector import VectorSource
from .storage.chroma import http_client, open_index, server_address
from .storage.reconcile import ReconcileReport
from .storage.sqlite import SQLiteChatLog, SQLiteStore
from .types import MemoryRecord, Scope, StoredMessage, now

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
    _closed: bool = PrivateAttr(default=False)
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
            **kwargs: ignored (chat engines pass extra arguments).
        """
        tokenizer = tokenizer_fn or get_tokenizer()
        session_id = session_id or uuid4().hex
        scope = Scope(user_id=user_id, session_id=session_id, tenant_id=tenant_id)
        expiry = Expiry(
            ttl=ttl_seconds(ttl), refresh_on_read=refresh_on_read, **({"clock": clock} if clock else {})
        )
        server = _server(chroma_host, chroma_port, chroma_url, chroma_client, path)
        if server is not None:
            chroma_client = http_client(*server)
        store = SQLiteStore(path)
        if primary_memory is None:
            primary_memory = ChatBuffer.from_defaults(
                token_limit=token_limit,
                tokenizer_fn=tokenizer,
                chat_log=SQLiteChatLog(store, scope) if path is not None else None,
            )
        default_sources = secondary_memory_sources is None
        # Everything in an empty list comes from the flags below, which to_dict records.
        no_sources = secondary_memory_sources == []
        if secondary_memory_sources is None:
            scope.require_user("the default long-term (vector) memory")
            secondary_memory_sources = [
                default_vector_source(store, path, embed_model, chroma_client, expiry)
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
                    store, path, resolve_embed_model(embed_model), chroma_client, expiry=expiry
                ),
            ]
        memory = cls(
            primary_memory=primary_memory,
            secondary_memory_sources=secondary_memory_sources,
            user_id=user_id,
            session_id=session_id,
            tenant_id=tenant_id,
            path=str(path) if path is not None else None,
            memory_token_limit=memory_token_limit,
            top_k=top_k,
            insert_method=insert_method,
            tokenizer_fn=tokenizer,
            llm=llm,
            extract_every=extract_every,
        )
        memory._store = store
        if default_sources:
            memory._source_kind = "default"
        elif no_sources:
            memory._source_kind = "none"
        if server is not None:
            host, port, secure = server
            memory._config["chroma_url"] = f"{'https' if secure else 'http'}://{host}:{port}"
        if expiry.ttl is not None or refresh_on_read:
            memory._config.update(ttl=expiry.ttl, refresh_on_read=refresh_on_read)
        if chroma_client is not None and user_id:
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
        return memory

    # -- scope and sources ------------------------------------------------------------

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

    def tools(self) -> list[Any]:
        """Every source's agent tools (LlamaIndex ``FunctionTool``s), bound to this
        memory's user: pass them to an agent as ``tools=``."""
        scope = self.scope
        return [tool for source in self._sources for tool in source.tools(scope)]

    def get(self, input: Optional[str] = None, **kwargs: Any) -> list[ChatMessage]:
        """The primary memory's messages with the memory block injected.

        Args:
            input: what to retrieve for; default the latest user message, so an
                agent's first ``get()`` of a run (which passes no input) still
                retrieves.
            **kwargs: passed to the primary memory (e.g. ``initial_token_count``).
        """
        with self._lock:
            window = self.primary_memory.get(input=input, **kwargs)
            query = input if input else self._latest_user_text(window)
            block = self._compose(query, window)
            self._last_block = block
            return insert_block(window, block.text, self.insert_method)

    def get_all(self) -> list[ChatMessage]:
        """Every message of this conversation (the primary memory's ``get_all``)."""
        return self.primary_memory.get_all()

    def search(self, query: str, k: int = DEFAULT_TOP_K) -> list[MemoryRecord]:
        """Up to ``k`` long-term records for ``query``, with their provenance.

        Sources of higher priority come first; within a priority, rankings are
        merged round-robin; duplicates are dropped. Query-independent sources (the profile) are left out: they are not ranked
        by relevance; read them from the source (``memory.source("profile")``).
        """
        with self._lock:
            relevant = [s for s in self._sources if not s.query_independent]
            records, _ = deduplicate(self._retrieve(query, k, relevant))
            return records[:k]

    def _retrieve(
        self, query: str, k: int, sources: Optional[Sequence[MemorySource]] = None
    ) -> list[MemoryRecord]:
        scope = self.scope
        sources = self._sources if sources is None else sources
        merged: list[MemoryRecord] = []
        for priority in sorted({s.priority for s in sources}, reverse=True):
            tier = [s for s in sources if s.priority == priority]
            merged.extend(interleave(source.retrieve(query, scope, k) for source in tier))
        return merged

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
        kept, duplicates = deduplicate(records, shown)
        if duplicates and fetch < most and _short_of(records, kept, fetch, self.top_k):
            # The window shows more of what was found than last time: ask once more,
            # for as many more as it showed.
            records = self._retrieve(query, min(most, fetch + duplicates))
            kept, duplicates = deduplicate(records, shown)
        self._window_overlaps.append(duplicates)
        return fit_block(
            kept,
            token_limit=self.memory_token_limit,
            tokenizer=self.tokenizer_fn,
            duplicates=duplicates,
            session_id=self.session_id,
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
        self.put_messages([message])

    def put_messages(self, messages: list[ChatMessage]) -> None:
        """Add messages (one batch for the buffer and for each source)."""
        if not messages:
            return
        stored = self._stored(messages)  # validates (e.g. timestamps) before anything is written
        with self._lock:
            with self._one_write("put messages"):
                self._add_to_sources(stored)
                self.primary_memory.put_messages(list(messages))
            self._user_turns_pending += sum(m.role == "user" for m in stored)
            if self.llm is not None and 0 < self.extract_every <= self._user_turns_pending:
                try:
                    self.extract()
                except LlamaMemoryError as exc:
                    # The messages are stored; a bad LLM answer must not fail the agent's
                    # run. The same messages are tried again at the next extraction.
                    logger.warning("automatic extraction failed, will retry: %s", exc)

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
            history = self.primary_memory.get_all()
            automatic = messages is None
            if messages is None:
                messages = history[min(self._extracted_upto, len(history)) :]
            scope = self.scope
            for source in self._sources:
                source.extract(messages, llm, scope)
            # Advance only once every source succeeded: a failed extraction is retried.
            if automatic:
                self._extracted_upto = len(history)
            self._user_turns_pending = 0

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

    def set(self, messages: list[ChatMessage]) -> None:
        """Replace the conversation; messages new to it also reach the long-term sources.

        (``SimpleComposableMemory.set`` appends all of them to the secondaries again,
        duplicating what they already hold; here only new messages are added.)
        """
        with self._lock:
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
        """Clear this conversation and this user's records in every source.

        To clear only the conversation, call ``memory.primary_memory.reset()``.
        As with :meth:`forget`, an unreachable dense index does not stop the other
        sources: the records are deleted, and a StorageError says the index is behind.
        """
        with self._lock:
            self.primary_memory.reset()
            self._clear_sources(self.scope, "reset", self.user_id)

    def forget(self, user_id: Optional[str] = None) -> None:
        """Remove a user's records from every source and every index: the right to be
        forgotten.

        Args:
            user_id: whose records; default this memory's user. Only this
                memory's tenant is touched, and no other user.

        Deletes the user's chat sessions (all of them), their long-term records in
        SQLite (text, lexical index, provenance, profile history, triples) and their
        Chroma collections, and clears the conversation in this memory when it is
        the user's. The system of record is cleaned first: if the dense index cannot
        be reached, nothing of the user can be retrieved any more, a StorageError
        says so, and :meth:`reconcile` drops their vectors once the index is back
        (as does opening a memory of that user in server mode).
        """
        user = user_id if user_id is not None else self.user_id
        scope = Scope(user_id=user, tenant_id=self.tenant_id)
        scope.require_user("forget()")
        with self._lock:
            if user == self.user_id:
                self.primary_memory.reset()
                self._extracted_upto = self._user_turns_pending = 0
            if self._store is not None:
                self._store.delete_user(scope)  # records of any source, every session
            self._clear_sources(scope, "forget", user)

    def _clear_sources(self, scope: Scope, method: Literal["reset", "forget"], user: Any) -> None:
        """Call every source's ``reset`` or ``forget``; one whose index cannot be reached
        does not stop the others, and the failures are raised together at the end."""
        failures: list[str] = []
        for source in self._sources:
            try:
                getattr(source, method)(scope)
            except StorageError as exc:
                failures.append(f"{source.name}: {exc}")
        if failures:
            raise StorageError(
                f"{method}: user {user!r} was removed from the system of record, but not yet "
                f"from every index ({'; '.join(failures)}); call reconcile() once it is "
                "reachable again"
            )

    def purge_expired(self) -> int:
        """Delete the records whose time to live is over from every source and index;
        return how many. (Expired records are never retrieved anyway; this frees the
        space and removes them for good.)"""
        with self._lock:
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
            return {source.name: source.reconcile(catch_up) for source in self._sources}

    def reindex(self) -> int:
        """Rebuild every derived dense index from the system of record; return records indexed."""
        with self._lock:
            return sum(
                s.reindex() for s in self._sources if isinstance(s, (VectorSource, TripleSource))
            )

    def close(self) -> None:
        """Write what is waiting to the indexes and release the sources' and the store's
        resources. Closing twice is harmless; other calls after it raise StorageError."""
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

    async def aget(self, input: Optional[str] = None, **kwargs: Any) -> list[ChatMessage]:
        """Async :meth:`get`."""
        return await asyncio.to_thread(self.get, input, **kwargs)

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
        """The configuration that reopens this memory (see :meth:`from_dict`).

        A memory with a ``path`` is restored from its files; an in-memory one
        carries its chat history in the dict. A custom primary memory or custom
        sources are live objects a dict cannot carry: the dict says so, and
        :meth:`from_dict` asks for them instead of silently building defaults.
        """
        data: dict[str, Any] = {
            "class_name": self.class_name(),
            "user_id": self.user_id,
            "session_id": self.session_id,
            "tenant_id": self.tenant_id,
            "path": self.path,
            "memory_token_limit": self.memory_token_limit,
            "top_k": self.top_k,
            "insert_method": self.insert_method,
            "token_limit": getattr(self.primary_memory, "token_limit", DEFAULT_TOKEN_LIMIT),
            "primary": "default" if isinstance(self.primary_memory, ChatBuffer) else "custom",
            "sources": self._source_kind,
            "triples": any(isinstance(s, TripleSource) for s in self._sources),
            "profile": any(isinstance(s, ProfileSource) for s in self._sources),
            **self._config,
        }
        if self.path is None:
            data["chat_history"] = [m.model_dump(mode="json") for m in self.get_all()]
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any], **kwargs: Any) -> "ComposableMemory":
        """Rebuild a memory from :meth:`to_dict`'s output.

        Keyword arguments override the dict; a memory built with a custom
        ``primary_memory`` or custom ``secondary_memory_sources`` needs them passed
        again (a :class:`~llama_memory.errors.LlamaMemoryError` says so otherwise).
        """
        config = {k: v for k, v in {**data, **kwargs}.items() if k != "class_name"}
        for part, argument in (("primary", "primary_memory"), ("sources", "secondary_memory_sources")):
            kind = config.pop(part, "default")
            if kind == "custom" and argument not in config:
                raise LlamaMemoryError(
                    f"this ComposableMemory was built with a custom {argument}, a live object "
                    f"a dict cannot carry: pass it again, ComposableMemory.from_dict(data, "
                    f"{argument}=...)"
                )
            if kind == "none":
                config.setdefault(argument, [])
        history = config.pop("chat_history", None)
        memory = cls.from_defaults(**config)
        if history and memory.path is None:
            memory.primary_memory.set([ChatMessage.model_validate(m) for m in history])
        return memory


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
