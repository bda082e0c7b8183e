"""``ComposableMemory``: a drop-in, long-term ``SimpleComposableMemory`` for LlamaIndex."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any, Optional, cast

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import Field, PrivateAttr, SerializeAsAny
from llama_index.core.memory.types import BaseMemory
from llama_index.core.utils import get_tokenizer

from ..core.errors import LlamaMemoryError, NotPicklableError, StorageError
from ..core.instrumentation import dispatcher
from ..core.messages import not_a_message
from ..core.types import TTL, MemoryRecord, Scope
from ..read import pipeline as read
from ..read.compose import MemoryBlock
from ..sources import base
from ..sources.base import Closable, Expiring, ProfileHolder, Reindexable, TripleHolder
from ..sources.base import Source as SourceProtocol
from ..sources.episodic import EpisodicMemory
from ..sources.instructions import Instructions
from ..sources.llama_index import as_sources
from ..sources.profile import ProfileSource
from ..sources.summarise import SUMMARY_SENTENCES
from ..sources.triples import KnowledgeTriple, TripleSource
from ..sources.vector import VectorSource
from ..sources.views import RecordList
from ..storage.reconcile import ReconcileReport
from ..write import pipeline as write
from ..write.formation import passes
from . import DEFAULT_TOP_K
from .agents import RunMemoryTool, drops_leading_system_message
from .arguments import closest, count_arg, query_arg, reject_unknown
from .from_defaults import MemoryFromDefaults
from .restore import memory_from_dict, memory_to_dict, pickled_memory, unpickle_memory
from .runtime import Runtime
from .settings import MemorySettings

#: The keyword arguments LlamaIndex itself passes to a memory (llama-index-core 0.14):
#: chat engines call ``memory_cls.from_defaults(chat_history=..., token_limit=...)``,
#: agents build their default memory with ``from_defaults(llm=...)``, and chat engines
#: call ``get(initial_token_count=...)``. ``from_defaults`` honours the first three (any
#: other unknown keyword argument is a TypeError); ``get`` passes its extra keyword
#: arguments to the primary memory.
LLAMA_INDEX_KWARGS = ("chat_history", "token_limit", "llm", "initial_token_count")


class ComposableMemory(MemoryFromDefaults):
    """A chat buffer for this conversation plus long-term sources, composed into one memory.

    Pass it as ``memory=`` to a LlamaIndex agent, or use it directly. Every ``get``
    returns the primary memory's messages with a block of records from the secondary
    sources injected (into the system message by default), built for ``input`` or else
    the latest user message, deduplicated and within the memory's token budget.

    Build it with :meth:`from_defaults`. Same API as LlamaIndex's
    ``SimpleComposableMemory``: ``primary_memory``, ``secondary_memory_sources``,
    ``get``, ``get_all``, ``put``, ``put_messages``, ``set``, ``reset``.
    """

    primary_memory: SerializeAsAny[BaseMemory] = Field(
        description="This conversation: a token-limited buffer returned on every get."
    )
    secondary_memory_sources: list[Any] = Field(
        default_factory=list, description="Long-term sources (llama-memory sources or any LlamaIndex BaseMemory).",
    )  # fmt: skip
    tokenizer_fn: Callable[[str], Sequence] = Field(
        default_factory=get_tokenizer, exclude=True, description="Counts the block's tokens."
    )

    # The parts, options and state the pipelines (read/pipeline.py, write/pipeline.py,
    # write/formation/passes.py) work on: built here, its store attached by
    # wiring.build_memory.
    _rt: Runtime = PrivateAttr(default=None)  # type: ignore[assignment]

    def __init__(self, **data: Any) -> None:
        """Build a memory from its parts and options (:meth:`from_defaults` is the usual
        way): any option of :class:`~llama_memory.memory.settings.MemorySettings`,
        checked there; TypeError naming an unknown keyword argument and the closest
        valid one."""
        fields = type(self).model_fields
        reject_unknown("ComposableMemory()", data, [*fields, *MemorySettings.model_fields, "class_name"])
        options = {name: data.pop(name) for name in list(data) if name not in fields and name != "class_name"}
        super().__init__(**data)
        primary = self.primary_memory
        if hasattr(primary, "token_limit"):
            options.setdefault("token_limit", primary.token_limit)
        settings = MemorySettings(
            primary_memory=primary, secondary_memory_sources=list(self.secondary_memory_sources), **options
        )
        # LlamaIndex memories given as secondary sources are wrapped, so all speak one protocol.
        self._rt = Runtime(self, as_sources(self.secondary_memory_sources), settings)
        self._rt.session_id_given = bool(options.get("session_id"))

    def __getattr__(self, name: str) -> Any:
        """An option (``memory.set_spread``...): its value in :attr:`settings`;
        ``token_limit`` is the buffer's own, which may have been changed
        (``memory.primary_memory.token_limit = 500``)."""
        if name == "token_limit":
            return getattr(self.primary_memory, "token_limit", self._rt.settings.token_limit)
        if name in MemorySettings.model_fields:
            return getattr(self._rt.settings, name)
        return super().__getattr__(name)  # type: ignore[misc]

    def __setattr__(self, name: str, value: Any) -> None:
        """Changing an option (``memory.set_spread = 1``) changes :attr:`settings`, checked;
        the next call reads it. AttributeError for an option read only when the memory
        was built (``user_id``, ``path``, ``token_limit``, ``tokenizer_fn``...: see
        :data:`~llama_memory.memory.settings.LIVE_OPTIONS`), and for a name that is no
        option (a typo would otherwise do nothing), naming the closest. The buffer and
        the sources may be replaced, as in ``SimpleComposableMemory``."""
        if name in ("primary_memory", "secondary_memory_sources"):
            if value is None:  # the defaults when building; an open memory builds nothing now
                raise TypeError(f"{name} of an open memory takes a memory or a list of sources, not None")
            MemorySettings(**{name: value})  # checked as from_defaults checks it: TypeError otherwise
            super().__setattr__(name, value)
        elif name in MemorySettings.model_fields:
            self._rt.settings = self._rt.settings.changed(name, value)
        elif name in type(self).model_fields or name.startswith("_") or hasattr(type(self), name):
            super().__setattr__(name, value)
        else:
            hint = closest(name, list(MemorySettings.model_fields), "its options are")
            raise AttributeError(f"ComposableMemory has no attribute {name!r} to set; {hint}")

    def __deepcopy__(self, memo: Optional[dict[int, Any]] = None) -> "ComposableMemory":
        """Refused, as ``copy.copy`` is (NotPicklableError, a TypeError): a memory is a live
        handle on its store and conversation, and a copy would write beside it. A
        workflow's ``edit_state`` then shares it, as it shares other live handles."""
        raise NotPicklableError(
            "a ComposableMemory is not copied (copy.copy, copy.deepcopy, model_copy): it is a live "
            "handle on its store and conversation. Share the one object (agents, chat engines and "
            "a workflow's state do), or open another memory on the same store with "
            "ComposableMemory.from_dict(memory.to_dict()), as pickle does"
        )

    __copy__ = __deepcopy__

    @classmethod
    def class_name(cls) -> str:
        """Class name, as LlamaIndex components report it."""
        return "ComposableMemory"

    @property
    def runtime(self) -> Runtime:
        """What this memory's pipelines work on (:class:`~llama_memory.memory.runtime.Runtime`),
        for the library's own modules; an application uses the memory's methods."""
        return self._rt

    @property
    def settings(self) -> MemorySettings:
        """This memory's options (:class:`~llama_memory.memory.settings.MemorySettings`),
        resolved; each is also an attribute that may be changed after it opens
        (``memory.set_spread = 1``)."""
        return self._rt.settings

    # -- scope and sources ------------------------------------------------------------

    def __repr__(self) -> str:
        """Who, where and how much, in one line (not every field, as pydantic's would)."""
        if self._rt.closed:
            messages = "closed"
        else:
            try:
                messages = str(len(self.primary_memory.get_all()))
            except Exception as exc:  # a repr must not fail, least of all in a traceback
                messages = f"unreadable ({type(exc).__name__})"
        return (
            f"ComposableMemory(user_id={self.user_id!r}, session_id={self.session_id!r}, "
            f"tenant_id={self.tenant_id!r}, path={self.path!r}, "
            f"sources={[s.name for s in self._rt.sources]!r}, messages={messages})"
        )

    def __str__(self) -> str:
        """The same one line as :meth:`__repr__`."""
        return repr(self)

    @property
    def scope(self) -> Scope:
        """The tenant, user and session this memory reads and writes."""
        return self._rt.scope

    @property
    def sources(self) -> list[SourceProtocol]:
        """The secondary sources (LlamaIndex memories wrapped as :class:`MemorySource`)."""
        return list(self._rt.sources)

    @property
    def last_block(self) -> MemoryBlock:
        """The memory block built by the latest ``get``, with what was left out and why."""
        return self._rt.last_block

    # -- reading ------------------------------------------------------------------------

    def source(self, name: str) -> SourceProtocol:
        """The secondary source called ``name`` (``"vector"``...); KeyError naming the
        available ones otherwise."""
        self._rt.check_open()
        for source in self._rt.sources:
            if source.name == name:
                return source
        raise KeyError(f"no source named {name!r}; this memory has {[s.name for s in self._rt.sources]}")

    def tools(self) -> list[RunMemoryTool]:
        """Every source's agent tools (LlamaIndex ``FunctionTool``s), for ``tools=``.

        Inside an agent run each acts for the run's memory (its ``memory=``), so an agent
        built once serves every user; called directly, for this memory's user. A run
        whose memory lacks the tool's source gets a ScopeError as the tool's result
        (see :class:`RunMemoryTool`).
        """
        self._rt.check_open()
        scope = self.scope
        return [
            RunMemoryTool(self, holder, tool, ComposableMemory)
            for holder in self._rt.tool_holders()
            for tool in holder.tools(scope)
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
        return read.get(self._rt, input, self.insert_method, **kwargs)

    def get_all(self) -> list[ChatMessage]:
        """Every message of this conversation (the primary memory's ``get_all``)."""
        self._rt.check_open()
        return self.primary_memory.get_all()

    @dispatcher.span
    def search(self, query: str, k: int = DEFAULT_TOP_K) -> RecordList:
        """Up to ``k`` long-term records for ``query``, with their provenance (a list that
        shows as a table in Jupyter): higher priorities first, round-robin within one,
        duplicates dropped. Query-independent sources (the profile) are left out.
        ``k`` is a whole number of at least 1 (TypeError or ValueError otherwise); an
        empty or blank ``query`` is a ValueError (as in ``llama-memory search``).
        """
        return read.search(self._rt, query_arg(query, "search()"), count_arg(k, "search() k"))

    @dispatcher.span
    def retrieve_from(
        self, source: SourceProtocol, query: str, scope: Scope, k: int, shown: frozenset[str] = frozenset()
    ) -> list[MemoryRecord]:
        """One source's records for ``query``, in a span and event of its own; a
        ``WindowAware`` source leaves out the records whose normalised text is in
        ``shown``."""
        return read.retrieve_one(self._rt, source, query, scope, k, shown)

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
        write.put_messages(self._rt, messages)

    def flush(self, timeout: Optional[float] = None) -> None:
        """Wait until the queued extraction passes that may run now are done (for tests,
        notebooks and shutdown); a failed pass waiting for its retry is not waited for.

        Args:
            timeout: seconds to wait at most; TimeoutError past it.

        With ``extract_in="worker"`` it waits for worker processes (``llama-memory
        worker``) to run this session's passes, polling the queue every 0.1 s (with no
        worker, until ``timeout``). Without ``llm`` in thread mode it returns at once.
        """
        passes.flush(self._rt, timeout)

    async def aflush(self, timeout: Optional[float] = None) -> None:
        """Async :meth:`flush`, in a worker thread on every store: it waits for the
        extraction worker or runs the LLM pass itself."""
        await asyncio.to_thread(self.flush, timeout)

    @dispatcher.span
    def extract(self, messages: Optional[Sequence[ChatMessage]] = None, llm: Any = None) -> None:
        """Let every source derive structured memories (triples, profile...) with an LLM,
        now, in the calling thread.

        Args:
            messages: what to extract from; default the conversation's messages not
                extracted from yet (this pass moves the session's cursor).
            llm: default the memory's ``llm``.
        """
        passes.extract(self._rt, messages, llm)

    def add_triples(
        self, triples: Sequence[Any], *, event_time: Any = None, message_ids: Sequence[str] = (),
        ttl: Optional[TTL] = None,
    ) -> list[KnowledgeTriple]:  # fmt: skip
        """Store knowledge triples for this memory's user (see
        :meth:`TripleSource.add_triples`), kept ``ttl`` (default the memory's ``ttl``).
        Needs ``from_defaults(..., triples=True)``."""
        with self._rt.lock:
            self._rt.check_open()
            return self.triple_source.add_triples(
                triples, self.scope, event_time=event_time, message_ids=message_ids, ttl=ttl
            )

    @property
    def triple_source(self) -> TripleSource:
        """The knowledge-triple source (``history``, ``to_networkx``, ``plot``...);
        LlamaMemoryError when this memory has none."""
        return cast("TripleSource", self._rt.source_of(
            TripleHolder,
            "this memory has no knowledge-triple source: build it with "
            "ComposableMemory.from_defaults(..., triples=True) or pass a TripleSource",
        ))

    @property
    def profile(self) -> ProfileSource:
        """The user-profile source (``get_profile``, ``set_field``, ``history``...);
        LlamaMemoryError when this memory has none."""
        return cast("ProfileSource", self._rt.source_of(
            ProfileHolder,
            "this memory has no profile source: build it with the default sources, or "
            "ComposableMemory.from_defaults(..., profile=True), or pass a ProfileSource",
        ))

    @property
    def instructions(self) -> Instructions:
        """The standing instructions the assistant follows for this user: ``current()``,
        ``history()``, ``add(text)``, ``remove(text_or_id)``, ``replace(old, new)``;
        shown first in the block. LlamaMemoryError for a memory without a user or store."""
        self._rt.check_open()
        if self._rt.instructions is None:
            raise LlamaMemoryError(
                "this memory keeps no instructions: they need a user and a store, e.g. "
                "ComposableMemory.from_defaults(user_id='alice', path='./memory')"
            )
        return self._rt.instructions

    @property
    def episodic(self) -> EpisodicMemory:
        """The session summaries (episodic memory); LlamaMemoryError when there are none."""
        source = self._rt.source_of(
            VectorSource,
            "this memory has no vector source of past messages to keep session summaries in: "
            "build it with ComposableMemory.from_defaults(...) or pass a VectorSource",
        )
        return EpisodicMemory(cast(VectorSource, source))

    def summarise(self, session_id: Optional[str] = None, sentences: int = SUMMARY_SENTENCES) -> Optional[str]:
        """Summarise a session offline (extractive, no LLM) and keep it as the session's
        summary; return its record id, or None when there is nothing to sum up.

        Args:
            session_id: the session (default: this memory's).
            sentences: how many sentences the summary keeps.
        """
        if session_id is not None and (not isinstance(session_id, str) or not session_id):
            raise ValueError(f"summarise() session_id must be a non-empty str or None, got {session_id!r}")
        with self._rt.lock:
            self._rt.check_open()
            scope = Scope(self.user_id, session_id or self.session_id, self.tenant_id)
            return self.episodic.summarise(scope, sentences)

    def set(self, messages: list[ChatMessage]) -> None:
        """Replace the conversation; only messages new to it reach the long-term sources
        (``SimpleComposableMemory.set`` adds them all again)."""
        write.set_messages(self._rt, messages)

    def reset(self) -> None:
        """Start this conversation afresh: clear the primary memory and this session's
        stored messages. Long-term memory stays (as LlamaIndex's ``Memory.reset()``
        keeps its blocks); unlike ``SimpleComposableMemory.reset()``, the sources are
        not cleared: use :meth:`forget` or one source's ``reset`` for that.

        A memory that chose its own session id moves to a new random ``session_id``; one
        given by the application stays, and only records stored from now on count as
        this conversation's. Extraction starts again from the empty conversation.
        """
        write.reset(self._rt)

    def forget(self, user_id: Optional[str] = None) -> None:
        """Remove a user's records from every source and every index: the right to be
        forgotten.

        Args:
            user_id: whose records; default this memory's user. Only this memory's
                tenant is touched, and no other user.

        Deletes the user from every table of the store (chat sessions, records, profile,
        triples, with their histories) and their dense collections in this store's
        namespace, and clears this conversation when it is the user's. The store is
        cleaned first: if the dense index cannot be reached, a StorageError says so and
        :meth:`reconcile` drops the vectors once it is back.
        """
        rt, own = self._rt, self._rt.settings.user_id
        user = user_id if user_id is not None else own
        scope = Scope(user_id=user, tenant_id=rt.settings.tenant_id)
        scope.require_user("forget()")
        with rt.lock:
            rt.check_open()
            if user == own:
                rt.primary.reset()
                rt.formed_upto = rt.user_turns_pending = 0
            if rt.store is not None:
                rt.store.delete_user(scope)  # every table, any source, every session
            # Every source's forget, then the user's collections of every kind: the
            # failures are raised together.
            failures = base.forget_in_each(rt.sources, scope)
            try:
                if rt.drop_dense is not None:
                    rt.drop_dense((scope.tenant_id, scope.require_user()))
            except StorageError as exc:
                failures.append(f"dense index: {exc}")
            if failures:
                raise StorageError(
                    f"forget: user {user!r} was removed from the system of record, but not yet "
                    f"from every index ({'; '.join(failures)}); call reconcile() once it is "
                    "reachable again"
                )

    def purge_expired(self) -> int:
        """Delete the records whose time to live is over from every source and index
        (they are never retrieved anyway); return how many."""
        with self._rt.lock:
            self._rt.check_open()
            return sum(s.purge_expired() for s in self._rt.sources if isinstance(s, Expiring))

    # -- maintenance --------------------------------------------------------------------

    def reconcile(self, catch_up: bool = True) -> dict[str, ReconcileReport]:
        """Bring every dense index in line with the system of record, for every user:
        missing vectors written again (``catch_up``, else on the next read), orphans
        deleted. Call it after a Chroma server was down, wiped or restored. Returns what
        each source did, by name."""
        return self._rt.reconcile(catch_up, None)

    def reindex(self) -> int:
        """Rebuild every derived dense index from the system of record; return records indexed."""
        with self._rt.lock:
            self._rt.check_open()
            return sum(s.reindex() for s in self._rt.sources if isinstance(s, Reindexable))

    def __enter__(self) -> "ComposableMemory":
        """``with ComposableMemory.from_defaults(...) as memory:`` closes it on leaving."""
        return self

    def __exit__(self, *exc: Any) -> None:
        """Close the memory (:meth:`close`), also when the block raised."""
        self.close()

    async def __aenter__(self) -> "ComposableMemory":
        """``async with``: the same as ``with``, for async code."""
        return self

    async def __aexit__(self, *exc: Any) -> None:
        """Close the memory (:meth:`aclose`), also when the block raised."""
        await self.aclose()

    async def aclose(self) -> None:
        """Async :meth:`close`, once the memory's calls under way are done: bridged on
        PostgreSQL (its loop's pool closed there), else in a worker thread (closing
        writes what waits for the indexes)."""
        await self._rt.run(self.close)

    def close(self) -> None:
        """Stop the extraction thread (queued passes stay in the store: :meth:`flush`
        first to run them), write what waits to the indexes and release resources.
        Closing twice is harmless; other calls after it raise
        :class:`~llama_memory.core.errors.MemoryClosedError`."""
        rt = self._rt
        if (worker := rt.worker) is not None:
            worker.stop()  # before taking the lock: the job running now applies its pass under it
        with rt.lock:
            if rt.closed:
                return
            rt.closed = True
            try:
                try:
                    if rt.usage is not None:
                        rt.usage.write()
                finally:  # the sources close even if the last uses could not be written
                    for source in rt.sources:
                        if isinstance(source, Closable):
                            source.close()
            finally:
                if rt.store is not None:
                    rt.store.close()

    # -- async: the sync work, awaited on the loop (PostgreSQL) or in a thread -----------
    # On a PostgreSQL store opened from a URL the sync body runs on the event loop
    # through llama_memory.core.asyncbridge, each statement awaited on an AsyncConnectionPool:
    # no thread per call. On SQLite/Chroma (local files, their own sync clients) and on
    # an application's sync ConnectionPool it runs in a worker thread. Either way one
    # memory's calls run one at a time.

    @dispatcher.span
    async def aget(self, input: Optional[str] = None, **kwargs: Any) -> list[ChatMessage]:
        """Async :meth:`get` (what agents call): on the event loop on a PostgreSQL store
        opened from a URL, else in a worker thread. In a ``ReActAgent`` step without a
        ``system_prompt``, the block goes into the latest user message (that agent drops
        a leading system message).
        """
        react = await drops_leading_system_message()
        insert_method = "user" if react else self.insert_method
        return cast(list[ChatMessage], await self._rt.run(read.get, self._rt, input, insert_method, **kwargs))

    async def aget_all(self) -> list[ChatMessage]:
        """Async :meth:`get_all` (bridged on PostgreSQL, as :meth:`aget`)."""
        return cast(list[ChatMessage], await self._rt.run(self.get_all))

    async def aput(self, message: ChatMessage) -> None:
        """Async :meth:`put` (bridged on PostgreSQL, as :meth:`aget`)."""
        await self._rt.run(self.put, message)

    async def aput_messages(self, messages: list[ChatMessage]) -> None:
        """Async :meth:`put_messages` (bridged on PostgreSQL, as :meth:`aget`)."""
        await self._rt.run(self.put_messages, messages)

    async def aset(self, messages: list[ChatMessage]) -> None:
        """Async :meth:`set` (bridged on PostgreSQL, as :meth:`aget`)."""
        await self._rt.run(self.set, messages)

    async def areset(self) -> None:
        """Async :meth:`reset` (bridged on PostgreSQL, as :meth:`aget`)."""
        await self._rt.run(self.reset)

    async def asearch(self, query: str, k: int = DEFAULT_TOP_K) -> list[MemoryRecord]:
        """Async :meth:`search` (bridged on PostgreSQL, as :meth:`aget`)."""
        return cast(list[MemoryRecord], await self._rt.run(self.search, query, k))

    # -- serialisation: restorable from configuration, not from live objects -------------

    def to_dict(self, **kwargs: Any) -> dict[str, Any]:
        """The configuration that reopens this memory (see :meth:`from_dict`), as plain
        JSON data (what a workflow ``Context`` saves).

        A memory with a ``path`` is restored from its files, one on PostgreSQL from its
        database (the URL without its password; a pool is passed again), an in-memory one
        carries its chat history. The embedding model, a profile schema and a
        serialisable primary memory are carried by class; live objects (an LLM, custom
        sources, a client, a tokenizer function) are marked, and :meth:`from_dict` asks
        for them.
        """
        return memory_to_dict(self)

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as the configuration that reopens this memory (:meth:`to_dict`) plus the
        live parts that pickle (the ``llm``, a ``tokenizer_fn``): the copy reopens the
        same store.

        Raises:
            NotPicklableError: (a TypeError) the copy could not reopen this memory (an
                in-memory store, custom sources or primary memory, a client or pool
                object, an ``llm`` that does not pickle); the message names
                ``to_dict()``/``from_dict()``.
            MemoryClosedError: the memory is closed.
        """
        data, live = pickled_memory(self)
        return (unpickle_memory, (type(self), data, live))

    @classmethod
    def from_dict(cls, data: dict[str, Any], **kwargs: Any) -> "ComposableMemory":
        """Rebuild a memory from :meth:`to_dict`'s output.

        What the dict cannot carry comes from, in order of precedence: keyword
        arguments here (``llm=``, ``embed_model=``, ``primary_memory=``,
        ``secondary_memory_sources=``, ``chroma_client=``, ``tokenizer_fn=``, or any
        other ``from_defaults`` argument, which override the dict), then the
        process-wide hook of :func:`~llama_memory.memory.restore.set_restore_hook` (the only
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
        return memory_from_dict(cls, data, kwargs)

