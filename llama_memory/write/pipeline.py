"""The write pipeline: what a ``put()`` does on a memory's
:class:`~llama_memory.memory.runtime.Runtime`: validate, then one transaction (the
sources, the chat buffer, the blocks' usage notes, and the formation pass when one falls
due), so ``put()`` never waits for an LLM (docs/architecture.md, "The path of one
put()"). ``set()`` is the first two for the messages new to the conversation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from typing import Any
from uuid import uuid4

from llama_index.core.base.llms.types import ChatMessage

from ..core.errors import LlamaMemoryError
from ..core.instrumentation import MemoryPutEvent, dispatcher
from ..core.messages import (
    check_storable,
    is_standalone,
    message_id,
    message_time,
    messages_arg,
    role_name,
    stored_text,
)
from ..core.types import Stopwatch, StoredMessage, now
from ..memory.runtime import Runtime
from ..read.compose import MemoryBlock
from ..sources.base import Stored
from ..storage.codec import dump_message
from ..storage.ports.base import Transactional
from .buffer import ChatBuffer
from .formation.passes import formation_worker, job_payload, pass_running, queue_pass

# The memory's own logger: what it logs keeps the name applications filter on.
logger = logging.getLogger("llama_memory.memory.composable")


def put_messages(rt: Runtime, messages: list[ChatMessage]) -> None:
    """The body of :meth:`ComposableMemory.put_messages`."""
    messages = messages_arg(messages, "put_messages()")
    if not messages:
        return
    watch = Stopwatch()
    stored = stored_messages(messages)  # 1. validate, before anything is written
    options = rt.settings
    with rt.lock:
        rt.check_open()
        turns = rt.user_turns_pending + sum(m.role == "user" for m in stored)
        forming = options.llm is not None or options.extract_in == "worker"
        due = forming and 0 < options.extract_every <= turns
        # Debounce: the session's pass falls due once it has been quiet long enough.
        later = forming and not due and options.extract_after_quiet > 0 and rt.store is not None
        with one_write(rt, "put messages"):  # 2. one transaction
            add_to_sources(rt, stored)
            rt.primary.put_messages(list(messages))
            if rt.usage is not None and rt.usage.pending:
                rt.usage.write()  # the blocks' notes ride on this commit
            if (due or later) and rt.store is not None and not pass_running(rt):
                # 3. queue the pass, in the messages' transaction: a crash cannot keep
                # them and lose the pass.
                run_at = time.time() + options.extract_after_quiet if later else None
                queue_pass(rt, rt.scope, job_payload(rt), run_at)
        dispatcher.event(
            MemoryPutEvent(
                **rt.event_scope(), messages=len(stored), roles=[m.role for m in stored],
                message_ids=[m.message_id for m in stored], duration_ms=watch.elapsed_ms,
            )
        )
        rt.user_turns_pending = 0 if due else turns
        if later and options.extract_in == "thread":
            formation_worker(rt)  # started, not woken: the pass is not due yet
        if not due:
            return
        if rt.store is None:  # built by hand, without a store: no queue
            try:
                rt.facade.extract()
            except LlamaMemoryError as exc:
                logger.warning("automatic extraction failed, will retry: %s", exc)
            return
        if options.extract_in == "thread":
            formation_worker(rt).wake()


def set_messages(rt: Runtime, messages: list[ChatMessage]) -> None:
    """The body of :meth:`ComposableMemory.set`."""
    messages = messages_arg(messages, "set()")
    with rt.lock:
        rt.check_open()
        stored = stored_messages(new_messages(rt.primary.get_all(), messages))
        with one_write(rt, "set messages"):
            add_to_sources(rt, stored)
            rt.primary.set(list(messages))


def one_write(rt: Runtime, action: str) -> AbstractContextManager[Any]:
    """One transaction of the memory's store for the chat history and the sources'
    records: all of a batch or none (the buffer's window too). A
    :class:`~llama_memory.sources.base.Stored` writer on another store makes the batch
    non-atomic, logged once (another connection to the same file would wait for this
    transaction's lock forever).
    """
    if rt.store is None:
        return nullcontext()
    log = getattr(rt.primary, "chat_log", None)  # a ChatBuffer's; others have none
    others = [w for w in [log, *rt.sources] if isinstance(w, Stored) and w.store is not rt.store]
    if others:
        if not rt.warned_not_atomic:
            rt.warned_not_atomic = True
            logger.warning(
                "writes of this memory are not atomic: %s use another store than the "
                "memory's; build them on the memory's store for all-or-nothing batches",
                [getattr(w, "name", type(w).__name__) for w in others],
            )
        return nullcontext()
    if isinstance(rt.primary, ChatBuffer):
        return _undone_if_rolled_back(rt.primary, rt.store, action)
    return rt.store.transaction(action)


@contextmanager
def _undone_if_rolled_back(buffer: ChatBuffer, store: Transactional, action: str) -> Iterator[None]:
    """The store's transaction; if it rolls back (a failure, or a cancelled ``aput``
    before its commit), the buffer takes the batch back: its window shows only what
    was stored."""
    committed: list[bool] = []
    with buffer.undone_if_raises(kept=lambda: bool(committed)), store.transaction(action):
        store.after_commit(lambda: committed.append(True))  # the first of the commit's callbacks
        yield


def stored_messages(messages: Sequence[ChatMessage]) -> list[StoredMessage]:
    """The messages with id, text and event time, as sources receive them."""
    received = now()
    for position, message in enumerate(messages):
        check_storable(message, position)
    return [
        StoredMessage(
            message_id=message_id(m), role=role_name(m), text=stored_text(m),
            event_time=message_time(m, default=received), message=m, standalone=is_standalone(m),
        )
        for m in messages
    ]


def add_to_sources(rt: Runtime, stored: Sequence[StoredMessage]) -> None:
    """Give a batch of stored messages to every source."""
    if not stored:
        return
    scope = rt.scope
    for source in rt.sources:
        source.add(stored, scope)


def new_messages(before: Sequence[ChatMessage], messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """The messages not already in ``before``: by identity, else by serialised content
    (linear; comparing pydantic messages pairwise is quadratic)."""
    same_object = {id(m) for m in before}
    candidates = [m for m in messages if id(m) not in same_object]
    if not candidates:
        return []
    known = {dump_message(m) for m in before}
    return [m for m in candidates if dump_message(m) not in known]


def reset(rt: Runtime) -> None:
    """The body of :meth:`ComposableMemory.reset`: the conversation starts afresh."""
    with rt.lock:
        rt.check_open()
        rt.primary.reset()
        rt.formed_upto = rt.user_turns_pending = 0
        rt.window_overlaps.clear()  # they describe the window just cleared
        rt.last_block = MemoryBlock()
        start_new_conversation(rt)


def start_new_conversation(rt: Runtime) -> None:
    """What follows a reset is another conversation, no longer labelled as the reset
    one's in the block. A session id the memory chose is replaced (its buffer moves to
    the new session's log), so everything keyed by the session tells the two apart; one
    the application chose stays (it names the conversation), and only records stored
    from now on are labelled this conversation's."""
    rt.conversation_since = now()
    buffer, store = rt.primary, rt.store
    logged = getattr(buffer, "chat_log", None) is not None
    if rt.session_id_given or (logged and (not isinstance(buffer, ChatBuffer) or store is None)):
        return  # a log the application keeps itself keeps its session too
    rt.change(session_id=uuid4().hex)
    if logged and isinstance(buffer, ChatBuffer) and store is not None:
        buffer.move_to(store.chat_log(rt.scope))
    if rt.instructions is not None:
        rt.instructions.scope = rt.scope  # the session new instructions come from
