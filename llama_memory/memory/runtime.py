"""What a memory's pipelines work on: :class:`Runtime`.

A :class:`~llama_memory.memory.composable.ComposableMemory` is the LlamaIndex-facing facade; the
parts it was opened with (the store, the sources, the user's instructions) and the state
it keeps between calls (the last block, the usage log, the formation worker, the lock)
live in one runtime. :func:`~llama_memory.memory.wiring.build_memory` attaches what it opened
(:meth:`Runtime.attach`); :mod:`llama_memory.read.pipeline` (``get``), :mod:`llama_memory.write.pipeline`
(``put``), :mod:`llama_memory.write.formation.passes` (formation passes) and
the memory's maintenance methods take the runtime, never the facade's private state.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Optional, Protocol

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory.types import BaseMemory

from ..core.asyncbridge import BridgeSafeRLock, LoopLocks, run_io
from ..core.errors import LlamaMemoryError, MemoryClosedError
from ..core.types import MemoryRecord, Scope
from ..read.compose import MemoryBlock
from ..sources.base import Reconcilable, Source, WithTools
from ..sources.episodic import EpisodicMemory
from ..sources.instructions import Instructions
from ..sources.vector import VectorSource
from ..storage.reconcile import ReconcileReport
from ..storage.sql.store import Storage
from ..write.formation.parts import PassPart
from ..write.formation.worker import FormationWorker
from .settings import MemorySettings

#: Ids noted before a ``get()`` writes them itself (one UPDATE batch, one commit).
USAGE_BATCH = 256


class UsageLog:
    """Ids shown in blocks and when, waiting to be written to the record store as each
    record's ``last_used``.

    A ``get()`` only notes the ids in memory; the notes are written inside the next
    ``put()``'s transaction (no commit of their own), or on their own once
    :data:`USAGE_BATCH` ids wait, and on ``flush()`` and ``close()``. A note lost with
    the process only makes a record look a little less recently used: the ranking's
    recency term (:mod:`llama_memory.retrieval.ranking`) is a small one.

    Args:
        store: where records live (``None``: a memory without a store notes nothing).
        batch: how many ids wait before :meth:`note` writes them itself.
    """

    def __init__(self, store: Optional[Storage], batch: int = USAGE_BATCH) -> None:
        if batch <= 0:
            raise ValueError(f"batch must be positive, got {batch}")
        self.store = store
        self.batch = batch
        self._pending: dict[str, float] = {}
        self._lock = threading.Lock()

    def note(self, records: Iterable[MemoryRecord], at: float) -> None:
        """Note that these records (and their parts) were shown at ``at``; write the
        notes if a batch is full."""
        if self.store is None:
            return
        with self._lock:
            for record in records:
                for part in (record, *record.parts):
                    if part.id:
                        self._pending[part.id] = at
            full = len(self._pending) >= self.batch
        if full:
            self.write()

    @property
    def pending(self) -> int:
        """How many ids wait to be written."""
        return len(self._pending)

    def write(self) -> int:
        """Write the waiting notes (joining the store's open transaction, if any);
        return how many ids. On a storage failure they stay noted and it raises."""
        if self.store is None:
            return 0
        with self._lock:
            pending, self._pending = self._pending, {}
        by_time: dict[float, list[str]] = {}
        for record_id, at in pending.items():
            by_time.setdefault(at, []).append(record_id)
        try:
            for at, ids in by_time.items():
                self.store.mark_used(ids, at)
        except Exception:
            with self._lock:  # keep them for the next write, newer notes win
                self._pending = {**pending, **self._pending}
            raise
        return len(pending)


class Facade(Protocol):
    """The public face of the memory a runtime serves
    (:class:`~llama_memory.memory.composable.ComposableMemory` is one), described once for the
    modules below it (it imports them): the pipelines call its resolved tokenizer, its
    serialisation and the instrumented methods (:meth:`retrieve_from`, :meth:`extract`: span
    handlers know them by those names); the wiring attaches the runtime and re-embeds, sets
    the history or closes a memory it built; restoring and pickling read its settings and
    conversation and call its constructors; an agent tool acts for its user."""

    primary_memory: BaseMemory

    @property
    def runtime(self) -> Runtime: ...  # noqa: D102

    @property
    def settings(self) -> MemorySettings: ...  # noqa: D102

    @property
    def scope(self) -> Scope: ...  # noqa: D102

    @property
    def user_id(self) -> Optional[str]: ...  # noqa: D102

    @property
    def tokenizer_fn(self) -> Callable[[str], Sequence]: ...  # noqa: D102

    def get_all(self) -> list[ChatMessage]: ...  # noqa: D102

    def set(self, messages: list[ChatMessage]) -> None: ...  # noqa: D102

    def reindex(self) -> int: ...  # noqa: D102

    def close(self) -> None: ...  # noqa: D102

    def to_dict(self, **kwargs: Any) -> dict[str, Any]: ...  # noqa: D102

    def extract(self, messages: Optional[Sequence[ChatMessage]] = None, llm: Any = None) -> None: ...  # noqa: D102

    def retrieve_from(  # noqa: D102
        self, source: Source, query: str, scope: Scope, k: int, shown: frozenset[str] = frozenset()
    ) -> list[MemoryRecord]: ...

    @classmethod
    def class_name(cls) -> str: ...  # noqa: D102

    @classmethod
    def from_defaults(cls, *args: Any, **kwargs: Any) -> Any: ...  # noqa: D102

    @classmethod
    def from_dict(cls, data: dict[str, Any], **kwargs: Any) -> Any: ...  # noqa: D102


class Runtime:
    """One memory's parts and the state it keeps between calls.

    Attributes:
        facade: the memory's public face.
        settings: its options, resolved (see
            :attr:`ComposableMemory.settings <llama_memory.memory.composable.ComposableMemory.settings>`):
            the pipelines read them at each call, so an option changed after the memory
            opened (:meth:`change`) holds from the next call.
        sources: the secondary sources, each speaking :class:`~llama_memory.sources.base.Source`.
        store: the store every write of a batch joins; None for a memory built by hand.
        instructions: the user's standing instructions, when the memory has a user and a store.
        drop_dense: drops a (tenant, user)'s dense collections of every kind (``forget``).
        lock: held by one thread or one bridged async call (``aget``/``aput`` on
            PostgreSQL run as greenlets of the loop's thread, which a
            ``threading.RLock`` would not tell apart).
        loop_locks: serialise the memory's async calls on each event loop.
        last_block: the block built by the latest ``get``.
        usage: the records shown in blocks, waiting to be written as their last use.
        window_overlaps: how many retrieved records the window already showed at the
            last few ``get`` calls: the next one asks for the most of them more than
            the records per source (the window changes little between turns, and asking again costs
            a whole retrieval).
        worker: the formation worker thread, started by the first job.
        job_payload: the payload of this memory's formation jobs, by scope.
        user_turns_pending: user messages no formation pass has been queued for yet.
        formed_upto: without a store, where formation is in the conversation.
        session_id_given: the application chose the session id (``from_defaults(session_id=...)``,
            a restore, a memory built by hand with one): ``reset()`` keeps it. When the
            memory chose it, ``reset()`` starts a new session.
        conversation_since: when this memory last reset its conversation (epoch
            seconds; None: never): records of the session stored before it belong to
            the conversation reset, not to this one.
        closed: ``close()`` was called.
        warned_not_atomic: the "writes are not atomic" warning was logged.
    """

    def __init__(self, facade: Facade, sources: Sequence[Source], settings: MemorySettings) -> None:
        """A runtime over ``sources`` with no store yet (a memory built by hand has none;
        :func:`~llama_memory.memory.wiring.build_memory` attaches one)."""
        self.facade = facade
        self.settings = settings
        self.sources: list[Source] = list(sources)
        self.store: Optional[Storage] = None
        self.instructions: Optional[Instructions] = None
        self.drop_dense: Optional[Callable[[tuple[str, str]], None]] = None
        self.lock: Any = BridgeSafeRLock()
        self.loop_locks = LoopLocks()
        self.last_block = MemoryBlock()
        self.usage: Optional[UsageLog] = None
        self.window_overlaps: deque[int] = deque(maxlen=4)
        self.worker: Optional[FormationWorker] = None
        self.job_payload: Optional[tuple[tuple[Any, ...], dict[str, Any]]] = None
        self.user_turns_pending = 0
        self.formed_upto = 0
        self.session_id_given = True
        self.conversation_since: Optional[float] = None
        self.closed = False
        self.warned_not_atomic = False

    def attach(self, store: Storage, *, drop_dense: Callable[[tuple[str, str]], None]) -> None:
        """Attach the store :func:`~llama_memory.memory.wiring.build_memory` opened (the
        transaction port every write of a batch joins) and how to drop a user's dense
        collections of every kind."""
        self.store = store
        self.drop_dense = drop_dense

    # -- who and whether ---------------------------------------------------------------

    @property
    def primary(self) -> BaseMemory:
        """This conversation's memory (the facade's ``primary_memory``)."""
        return self.facade.primary_memory

    @property
    def scope(self) -> Scope:
        """The tenant, user and session the memory reads and writes."""
        s = self.settings
        return Scope(user_id=s.user_id, session_id=s.session_id, tenant_id=s.tenant_id)

    def event_scope(self) -> dict[str, Any]:
        """Whose memory, for the instrumentation events."""
        s = self.settings
        return {"tenant_id": s.tenant_id, "user_id": s.user_id, "session_id": s.session_id}

    def change(self, **options: Any) -> None:
        """Change options after the memory opened (``memory.<option> = value``): the
        next call reads them. Not validated here, as an attribute of a LlamaIndex memory
        is not: a bad value fails where it is used."""
        self.settings = self.settings.model_copy(update=options)

    def check_open(self) -> None:
        """MemoryClosedError once ``close()`` was called."""
        if self.closed:
            raise MemoryClosedError(
                "this memory is closed (close() was called): open a new one, e.g. "
                "ComposableMemory.from_defaults(...) with the same path and ids"
            )

    def reconcile(self, catch_up: bool, scope: Optional[Scope]) -> dict[str, ReconcileReport]:
        """Every derived index's ``reconcile``, for every user or the scope's."""
        with self.lock:
            self.check_open()
            return {s.name: s.reconcile(catch_up, scope) for s in self.sources if isinstance(s, Reconcilable)}

    async def run(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run the sync ``fn`` from a coroutine: on the event loop (a PostgreSQL store
        opened from a URL) or in a worker thread (:func:`~llama_memory.core.asyncbridge.run_io`)."""
        return await run_io(self.loop_locks, self.store, fn, *args, **kwargs)

    # -- what the sources offer ----------------------------------------------------------

    def usage_log(self) -> UsageLog:
        """The log of records shown in blocks (made on first use, on the store)."""
        if self.usage is None:
            self.usage = UsageLog(self.store)
        return self.usage

    def source_of(self, kind: type, missing: str) -> Source:
        """The first source that implements the protocol ``kind``; LlamaMemoryError
        saying ``missing`` when none does."""
        for source in self.sources:
            if isinstance(source, kind):
                return source
        raise LlamaMemoryError(missing)

    def pass_parts(self) -> list[Any]:
        """What a formation pass asks about: the sources, the user's instructions (the
        pass's ``"instructions"`` part) and the session's summary (``"summary"``, kept by
        the vector source of past messages). These two ride on the pass's one structured
        call made for another part (the profile, the triples): alone they never make a
        call of their own, so a memory of user-supplied sources only keeps its sources'
        own formation (``extract``) and LLM calls as they were."""
        parts: list[Any] = list(self.sources)
        if not any(isinstance(s, PassPart) for s in parts):
            return parts
        if self.instructions is not None:
            parts.append(self.instructions)
        vector = next((s for s in self.sources if isinstance(s, VectorSource)), None)
        if vector is not None and self.settings.user_id is not None:  # the session's summary, episodic memory
            parts.append(EpisodicMemory(vector))
        return parts

    def tool_holders(self) -> list[Any]:
        """What offers agent tools: the sources that have some, and the instructions
        (``update_instructions``). A :class:`~llama_memory.memory.agents.RunMemoryTool` finds
        its tool's holder in a run's memory here."""
        holders: list[Any] = [s for s in self.sources if isinstance(s, WithTools)]
        return holders if self.instructions is None else [*holders, self.instructions]
