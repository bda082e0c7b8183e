"""What a memory's pipelines work on: :class:`Runtime`, the parts a
:class:`~llama_memory.memory.composable.ComposableMemory` was opened with and the state it
keeps between calls. The read and write pipelines, formation and maintenance take the
runtime, never the facade's private state.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict
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
from ..sources.llama_index import as_sources, check_sources
from ..sources.vector import VectorSource
from ..storage.reconcile import ReconcileReport
from ..storage.sql.store import Storage
from ..write.formation.parts import PassPart
from ..write.formation.worker import FormationWorker
from .settings import MemorySettings

#: Ids noted before a ``get()`` writes them itself (one UPDATE batch, one commit).
USAGE_BATCH = 256


class UsageLog:
    """Ids shown in blocks and when, waiting to be written as each record's ``last_used``:
    inside the next ``put()``'s transaction, on their own once :data:`USAGE_BATCH` wait,
    and on ``flush()``/``close()`` (a note lost with the process only makes a record look
    a little less recent). ``store`` None notes nothing.
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
        """Write the waiting notes (joining an open transaction); return how many ids. On
        a storage failure they stay noted and it raises."""
        if self.store is None:
            return 0
        with self._lock:
            pending, self._pending = self._pending, {}
        by_time: dict[float, list[str]] = {}
        for record_id, at in pending.items():
            by_time.setdefault(at, []).append(record_id)
        try:
            for n, (at, ids) in enumerate(sorted(by_time.items())):
                # The first statement names every id (the later ones raise theirs): it takes
                # all their row locks at once, in one order, so two writers never deadlock.
                self.store.mark_used(list(pending) if n == 0 else ids, at)
        except Exception:
            with self._lock:  # keep them for the next write, newer notes win
                self._pending = {**pending, **self._pending}
            raise
        return len(pending)


class Facade(Protocol):
    """The public face of the memory a runtime serves, described once for the modules
    below it: the pipelines call its tokenizer, serialisation and instrumented methods
    (span handlers know :meth:`retrieve_from` and :meth:`extract` by name)."""

    primary_memory: BaseMemory
    secondary_memory_sources: list[Any]

    @property
    def runtime(self) -> Runtime: ...  # noqa: D102

    @property
    def settings(self) -> MemorySettings: ...  # noqa: D102

    @property
    def scope(self) -> Scope: ...  # noqa: D102

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
        settings: its options, resolved; read at each call, so a change (:meth:`change`)
            holds from the next call.
        sources: the secondary sources: the facade's ``secondary_memory_sources``, a
            LlamaIndex memory wrapped (kept in step with that list).
        store: the store every write of a batch joins; None for a memory built by hand.
        instructions: the user's standing instructions (with a user and a store).
        drop_dense: drops a (tenant, user)'s dense collections of every kind.
        lock: held by one thread or one bridged async call (greenlets of the loop's
            thread, which a ``threading.RLock`` would not tell apart).
        loop_locks: serialise the memory's async calls on each event loop.
        last_block: the block built by the latest ``get``.
        usage: the records shown in blocks, waiting to be written as their last use.
        window_overlaps: how many retrieved records the window showed at the last few
            ``get`` calls: the next asks for that many more per source.
        worker: the formation worker thread, started by the first job.
        job_payload: the payload of this memory's formation jobs, by scope.
        user_turns_pending: user messages no formation pass has been queued for yet.
        formed_upto: without a store, where formation is in the conversation.
        session_id_given: the application chose the session id (``reset()`` keeps it).
        conversation_since: when this memory last reset its conversation (records of
            the session stored before belong to the conversation reset).
        closed: ``close()`` was called.
        warned_not_atomic: the "writes are not atomic" warning was logged.
    """

    def __init__(self, facade: Facade, sources: Sequence[Source], settings: MemorySettings) -> None:
        """A runtime over ``sources`` with no store yet (a memory built by hand has none;
        :func:`~llama_memory.memory.wiring.build_memory` attaches one)."""
        self.facade = facade
        self.settings = settings
        self._sources: list[Source] = list(sources)
        self._given: list[Any] = list(facade.secondary_memory_sources)  # what _sources wraps
        self._opened_with = list(self._given)
        self._opened_primary = facade.primary_memory
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

    @property
    def sources(self) -> list[Source]:
        """The secondary sources. A source appended to the facade's
        ``secondary_memory_sources`` (or a list assigned to it) is used from the next
        call, as ``SimpleComposableMemory`` does; a source kept keeps its wrapper."""
        given = self.facade.secondary_memory_sources
        if not _same_items(given, self._given):
            check_sources(given)
            kept = {id(g): s for g, s in zip(self._given, self._sources)}
            fresh = as_sources(given)
            self._sources = [kept.get(id(g), f) for g, f in zip(given, fresh)]
            self._given = list(given)
        return self._sources

    @property
    def sources_changed(self) -> bool:
        """Whether ``secondary_memory_sources`` was changed after the memory opened
        (``to_dict`` then cannot describe them as the defaults or none)."""
        given = self.facade.secondary_memory_sources
        return not _same_items(given, self._opened_with)

    @property
    def primary_changed(self) -> bool:
        """Whether ``primary_memory`` was replaced after the memory opened (``to_dict``
        then describes the one it holds now)."""
        return self.facade.primary_memory is not self._opened_primary

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
        return asdict(self.scope)

    def change(self, **options: Any) -> None:
        """Change options the memory itself moves on (a new session id after ``reset``),
        unchecked; an application's ``memory.<option> = value`` goes through
        :meth:`MemorySettings.changed`."""
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
        """Run the sync ``fn`` from a coroutine: on the event loop (PostgreSQL from a URL)
        or in a worker thread."""
        return await run_io(self.loop_locks, self.store, fn, *args, **kwargs)

    # -- what the sources offer ----------------------------------------------------------

    def usage_log(self) -> UsageLog:
        """The log of records shown in blocks (made on first use, on the store)."""
        if self.usage is None:
            self.usage = UsageLog(self.store)
        return self.usage

    def source_of(self, kind: type, missing: str) -> Source:
        """The first source that implements the protocol ``kind``; LlamaMemoryError
        saying ``missing`` when none does; MemoryClosedError once closed."""
        self.check_open()
        for source in self.sources:
            if isinstance(source, kind):
                return source
        raise LlamaMemoryError(missing)

    def pass_parts(self) -> list[Any]:
        """What a formation pass asks about: the sources, the instructions and the
        session summary (these two ride on a call made for another part, never one of
        their own)."""
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
        """What offers agent tools: the sources that have some, and the instructions."""
        holders: list[Any] = [s for s in self.sources if isinstance(s, WithTools)]
        return holders if self.instructions is None else [*holders, self.instructions]


def _same_items(given: Sequence[Any], seen: Sequence[Any]) -> bool:
    """Whether ``given`` holds the very objects of ``seen``, in order (a source is known
    by identity: two sources alike are still two)."""
    return len(given) == len(seen) and all(a is b for a, b in zip(given, seen))
