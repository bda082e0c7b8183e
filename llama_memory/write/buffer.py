"""The primary memory: this conversation, token-limited and lossless (:class:`ChatBuffer`,
a drop-in ``ChatMemoryBuffer``), and the window it returns (:func:`fit_window`). Saving
and copying a buffer is :mod:`llama_memory.write.buffer_restore`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Callable, Optional, Sequence, cast

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.bridge.pydantic import (
    ConfigDict,
    Field,
    PrivateAttr,
    field_validator,
    model_validator,
)
from llama_index.core.memory.types import BaseMemory
from llama_index.core.utils import get_tokenizer

from ..core.asyncbridge import BridgeSafeRLock, LoopLocks, run_io
from ..core.messages import message_tokens
from ..memory import DEFAULT_TOKEN_LIMIT
from ..storage.ports.chat import ChatLog, ChatLogChanges, SharedChatLog
from .buffer_restore import BufferRestore

__all__ = ["ChatBuffer", "ChatLog", "ChatLogChanges", "SharedChatLog"]

logger = logging.getLogger(__name__)


def fit_window(
    messages: Sequence[ChatMessage], counts: Sequence[int], total: int, token_limit: int,
    initial_token_count: int,
) -> tuple[bool, int]:
    """``(keep_system, start)``: the window is ``[system?] + messages[start:]``, for
    ``messages`` whose token ``counts`` sum to ``total``, within ``token_limit`` less
    ``initial_token_count``. Costs O(window), not O(history)."""
    if initial_token_count > token_limit:
        raise ValueError(
            f"Initial token count exceeds token limit ({initial_token_count} > "
            f"{token_limit})"
        )
    budget = token_limit - initial_token_count
    n = len(messages)
    if total <= budget:
        return False, 0  # everything fits: the history, unchanged

    keep_system = messages[0].role == MessageRole.SYSTEM
    floor = 1 if keep_system else 0
    remaining = budget - (counts[0] if keep_system else 0)
    start = n
    while start > floor and counts[start - 1] <= remaining:
        start -= 1
        remaining -= counts[start]
    # The history was truncated: start at a user turn, so the window never
    # opens with an assistant reply or a tool result whose call was cut off.
    while start < n and messages[start].role != MessageRole.USER:
        start += 1
    if start < n:
        return keep_system, start

    # Overflow: not even the last user turn fits. Return it whole anyway so
    # the LLM sees an explicit overflow rather than an empty history.
    last_user = n - 1
    while last_user >= floor and messages[last_user].role != MessageRole.USER:
        last_user -= 1
    if last_user >= floor:
        return keep_system, last_user
    return keep_system, max(floor, n - 1)  # no user message: the stock fallback


class ChatBuffer(BufferRestore, BaseMemory):
    """Token-limited, lossless memory of one conversation, a drop-in
    ``ChatMemoryBuffer`` (a ``BaseMemory``: hand it to an agent as ``memory=``).
    Messages are stored as given, so content blocks, tool calls and
    ``additional_kwargs`` come back unchanged.

    ``get()`` returns everything when the history fits; otherwise a leading system
    message (its tokens counted) and the longest recent run that fits *and starts with
    a user message*, so no tool result is cut off from its call. On overflow (not even
    the last user turn fits) that turn is returned whole, so the provider reports
    "context too long" rather than the agent getting an empty history; with no user
    message, the system message and the last message, as ``ChatMemoryBuffer`` does.

    **Tokens** are counted as ``ChatMemoryBuffer`` counts them (``len(tokenizer_fn(text))``,
    no role prefix), once per message and cached, so ``get()`` costs O(window). The
    window counts the sum of its messages (``ChatMemoryBuffer`` tokenizes them joined,
    a token apart at a boundary), and tool calls count as their JSON (they are sent to
    the LLM); media are not counted, and mutating a message after putting it does not
    update its count.

    **Persistence.** A :class:`ChatLog` is written *before* memory, so a storage failure
    raises and leaves the buffer as it was. With a :class:`SharedChatLog` every read
    first brings in what other buffers on the conversation committed (SQLite: one
    ``PRAGMA data_version``, then the new rows only), in commit order; a write appends
    after them in the same transaction; a read that raises means the storage failed.

    Thread-safe; reads never wait for this buffer's own log writes (they skip the
    check: the write brings the news in).
    """

    # Validate assignments too: `buffer.token_limit = 0` must fail like the constructor.
    model_config = ConfigDict(validate_assignment=True)

    token_limit: int = Field(
        default=DEFAULT_TOKEN_LIMIT,
        description="Most tokens get() returns (minus initial_token_count).",
    )
    tokenizer_fn: Callable[[str], Sequence[Any]] = Field(
        default_factory=get_tokenizer,
        exclude=True,  # a live callable: not data, never serialized
        description="Maps text to a sequence of tokens; only its length is used.",
    )

    # The conversation and a parallel list of cached token counts (same length).
    _messages: list[ChatMessage] = PrivateAttr(default_factory=list)
    _counts: list[int] = PrivateAttr(default_factory=list)
    _total: int = PrivateAttr(default=0)
    _log: Optional[ChatLog] = PrivateAttr(default=None)
    # With a SharedChatLog: the log's cursor (how far this buffer has read).
    _shared: bool = PrivateAttr(default=False)
    _cursor: Any = PrivateAttr(default=None)
    # `_lock` guards the in-memory lists, held for list operations only; `_write_lock`
    # serializes writers across "write the log, then memory" so both see one order.
    # Readers take only `_lock`: a slow log write never blocks get() (or aget()).
    _lock: Any = PrivateAttr(default_factory=BridgeSafeRLock)
    _write_lock: Any = PrivateAttr(default_factory=BridgeSafeRLock)
    _loop_locks: LoopLocks = PrivateAttr(default_factory=LoopLocks)  # serialise async calls

    def __init__(
        self, *, chat_history: Optional[Sequence[ChatMessage]] = None,
        chat_log: Optional[ChatLog] = None, **data: Any,
    ) -> None:
        """Create a buffer.

        Args:
            chat_history: initial messages. With a ``chat_log`` they replace what
                the log holds (like :meth:`set`).
            chat_log: where to persist the conversation. Without ``chat_history``
                the buffer starts with the messages the log holds.
            **data: the fields, ``token_limit`` and ``tokenizer_fn``.
        """
        super().__init__(**data)
        self._attach(chat_log)
        if chat_history is not None:
            self.set(chat_history)
        elif chat_log is not None:
            self._load()

    def _attach(self, log: Optional[ChatLog]) -> None:
        self._log = log
        self._shared = isinstance(log, SharedChatLog)
        self._cursor = None

    def _load(self) -> None:
        """Read the whole conversation from the log."""
        log = self._log
        if log is None:
            return
        with self._write_lock:
            if isinstance(log, SharedChatLog):
                self._apply(log.changes(None))
            else:
                messages = list(log.load())
                self._replace_state(messages, [self._count_tokens(m) for m in messages])

    @model_validator(mode="before")
    @classmethod
    def _default_tokenizer(cls, values: Any) -> Any:
        # None means "the default" (from_defaults and from_dict pass it through).
        if isinstance(values, dict) and values.get("tokenizer_fn") is None:
            values = {k: v for k, v in values.items() if k != "tokenizer_fn"}
        return values

    @field_validator("token_limit")
    @classmethod
    def _check_token_limit(cls, value: int) -> int:
        if isinstance(value, bool) or value <= 0:
            raise ValueError(f"token_limit must be a positive number of tokens, got {value!r}")
        return value

    @classmethod
    def class_name(cls) -> str:
        """The name used in serialized data."""
        return "ChatBuffer"

    @classmethod
    def from_defaults(
        cls, chat_history: Optional[Sequence[ChatMessage]] = None,
        token_limit: Optional[int] = None,
        tokenizer_fn: Optional[Callable[[str], Sequence[Any]]] = None,
        chat_log: Optional[ChatLog] = None, **kwargs: Any,
    ) -> "ChatBuffer":
        """Create a buffer; unknown keyword arguments (``llm``, ...) are ignored, as code
        written for ``ChatMemoryBuffer.from_defaults`` passes them."""
        return cls(
            chat_history=chat_history, chat_log=chat_log,
            token_limit=DEFAULT_TOKEN_LIMIT if token_limit is None else token_limit,
            tokenizer_fn=tokenizer_fn,
        )

    # ------------------------------------------------------------------ counting

    def count_tokens(self, message: ChatMessage) -> int:
        """Tokens ``message`` would count for in this buffer (tokenizes it now)."""
        return self._count_tokens(message)

    def _count_tokens(self, message: ChatMessage) -> int:
        return message_tokens(message, self.tokenizer_fn)

    @property
    def token_count(self) -> int:
        """Total tokens of the whole history (from the cached counts)."""
        self._refresh()
        with self._lock:
            return self._total

    @property
    def chat_log(self) -> Optional[ChatLog]:
        """The chat log this buffer writes through to, or None."""
        return self._log

    def move_to(self, log: Optional[ChatLog]) -> None:
        """Hold the conversation kept in ``log`` from now on (None: in memory only),
        starting from what it holds; the log left behind is not changed."""
        with self._write_lock:
            self._attach(log)
            self._replace_state([], [])
            self._load()

    # ------------------------------------------------------------------ reading

    def _window(self, initial_token_count: int) -> tuple[bool, int]:
        """``(keep_system, start)`` of :func:`fit_window`; call with ``_lock`` held."""
        return fit_window(self._messages, self._counts, self._total, self.token_limit, initial_token_count)

    def get(
        self, input: Optional[str] = None, initial_token_count: int = 0, **kwargs: Any
    ) -> list[ChatMessage]:
        """The most recent messages that fit in ``token_limit - initial_token_count``
        (the class says how); ``input`` and other keywords are ignored. ValueError if
        ``initial_token_count > token_limit``."""
        self._refresh()
        with self._lock:
            keep_system, start = self._window(initial_token_count)
            head = self._messages[:1] if keep_system else []
            return head + self._messages[start:]

    def window_token_count(
        self, input: Optional[str] = None, initial_token_count: int = 0, **kwargs: Any
    ) -> int:
        """Tokens of the messages ``get()`` would return (not incl. ``initial_token_count``)."""
        self._refresh()
        with self._lock:
            keep_system, start = self._window(initial_token_count)
            head = self._counts[0] if keep_system else 0
            return head + sum(self._counts[start:])

    def get_all(self) -> list[ChatMessage]:
        """The whole history, oldest first (a new list of the stored messages)."""
        self._refresh()
        with self._lock:
            return list(self._messages)

    # ------------------------------------------------------------------ other writers

    def _refresh(self) -> None:
        """Bring in what other writers committed to a shared log since the last read."""
        if not self._shared:
            return
        # No lock of this buffer is held while the log is asked: a writer holds the log's
        # storage while it waits for `_write_lock` (a deadlock).
        cursor = self._cursor
        changes = cast(SharedChatLog, self._log).changes(cursor)
        if changes is None:
            return
        # A write of this buffer under way brings the others' messages in itself: do
        # not wait for it (reads never wait on this buffer's log writes).
        if not self._write_lock.acquire(blocking=False):
            return
        try:
            if self._cursor is cursor:  # else another read or a write got there first
                self._apply(changes)
        finally:
            self._write_lock.release()

    def _shared_log(self) -> Optional[SharedChatLog]:
        return cast(SharedChatLog, self._log) if self._shared else None

    def _apply(
        self, changes: Optional[ChatLogChanges], own: Sequence[ChatMessage] = (),
        own_counts: Sequence[int] = (),
    ) -> None:
        """Apply what others committed, then this buffer's own ``own`` messages
        (already in the log). Must be called with ``_write_lock`` held."""
        if changes is None:
            return
        theirs = list(changes.messages)
        counts = [self._count_tokens(m) for m in theirs]  # outside _lock: reads go on
        with self._lock:
            if changes.replaced:
                self._messages, self._counts, self._total = theirs, counts, sum(counts)
            else:
                self._messages.extend(theirs)
                self._counts.extend(counts)
                self._total += sum(counts)
            self._messages.extend(own)
            self._counts.extend(own_counts)
            self._total += sum(own_counts)
            self._cursor = changes.cursor

    # ------------------------------------------------------------------ writing

    def _replace_state(self, messages: list[ChatMessage], counts: list[int]) -> None:
        with self._lock:
            self._messages = messages
            self._counts = counts
            self._total = sum(counts)

    @staticmethod
    def _checked(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
        batch = list(messages)
        for message in batch:
            if not isinstance(message, ChatMessage):
                raise TypeError(f"expected a ChatMessage, got {type(message).__name__}: {message!r}")
        return batch

    def put(self, message: ChatMessage) -> None:
        """Append one message."""
        self.put_messages([message])

    def put_messages(self, messages: Sequence[ChatMessage]) -> None:
        """Append messages, in order, as one batch (one chat-log append)."""
        batch = self._checked(messages)
        if not batch:
            return
        # Tokenize before taking the locks: it needs no shared state.
        counts = [self._count_tokens(m) for m in batch]
        with self._write_lock:
            shared = self._shared_log()
            if shared is not None:
                # After whatever others committed since the last read, in one write.
                changes = shared.append_after(self._cursor, batch)
                self._apply(changes, batch, counts)
                return
            if self._log is not None:
                self._log.append(batch)  # first: if it raises, memory is untouched
            with self._lock:
                self._messages.extend(batch)
                self._counts.extend(counts)
                self._total += sum(counts)

    @contextmanager
    def undone_if_raises(self, kept: Callable[[], bool] = lambda: False) -> Iterator[None]:
        """What the body adds to this buffer is taken back if it raises (unless ``kept()``,
        asked then, says it was stored): a batch whose transaction rolled back is not shown."""
        with self._write_lock:
            messages, counts = self._messages, self._counts
            saved = len(messages), self._total, self._cursor
            try:
                yield
            except BaseException:
                if not kept():
                    # Appends extend the lists in place; a replacement (set, another's
                    # replace_all) makes new ones and leaves these as they were.
                    with self._lock:
                        del messages[saved[0]:], counts[saved[0]:]
                        self._messages, self._counts = messages, counts
                        _, self._total, self._cursor = saved
                raise

    def set(self, messages: Sequence[ChatMessage]) -> None:
        """Replace the whole history with ``messages``; those already in the buffer keep
        their cached counts (``set(buffer.get_all()[-10:])`` does not re-tokenize)."""
        batch = self._checked(messages)
        with self._lock:
            # Keep the message itself next to its count: ids are only unique
            # among live objects.
            known = {id(m): (m, c) for m, c in zip(self._messages, self._counts)}
        counts: list[int] = []
        for message in batch:
            entry = known.get(id(message))
            counts.append(
                entry[1] if entry is not None and entry[0] is message else self._count_tokens(message)
            )
        with self._write_lock:
            cursor, shared = self._cursor, self._shared_log()
            if shared is not None:
                cursor = shared.replace_all(batch)
            elif self._log is not None:
                self._log.replace(batch)
            self._replace_state(batch, counts)
            self._cursor = cursor

    def reset(self) -> None:
        """Delete the whole history (and clear the chat log)."""
        with self._write_lock:
            cursor, shared = self._cursor, self._shared_log()
            if shared is not None:
                cursor = shared.replace_all([])
            elif self._log is not None:
                self._log.clear()
            self._replace_state([], [])
            self._cursor = cursor

    # ------------------------------------------------------------------ async
    # Without a chat log the sync methods run on the event loop (all in memory); with a
    # log whose I/O can be awaited (PostgreSQL from a URL) through the bridge; with
    # another log writes go to a worker thread, reads (which never wait) run directly.

    def _log_store(self) -> Any:
        return getattr(self._log, "store", None)

    async def _write(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self._log is None:
            return fn(*args)
        return await run_io(self._loop_locks, self._log_store(), fn, *args)

    async def _read(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if self._log is not None and getattr(self._log_store(), "supports_async", False):
            return await run_io(self._loop_locks, self._log_store(), fn, *args, **kwargs)
        return fn(*args, **kwargs)

    async def aget(
        self, input: Optional[str] = None, initial_token_count: int = 0, **kwargs: Any
    ) -> list[ChatMessage]:
        """Async :meth:`get` (on the event loop; a PostgreSQL log's reads awaited)."""
        return cast(
            list[ChatMessage],
            await self._read(self.get, input=input, initial_token_count=initial_token_count, **kwargs),
        )

    async def aget_all(self) -> list[ChatMessage]:
        """Async :meth:`get_all` (as :meth:`aget`)."""
        return cast(list[ChatMessage], await self._read(self.get_all))

    async def aput(self, message: ChatMessage) -> None:
        """Async :meth:`put`: bridged on a PostgreSQL log, a worker thread on another."""
        await self._write(self.put, message)

    async def aput_messages(self, messages: Sequence[ChatMessage]) -> None:
        """Async :meth:`put_messages` (as :meth:`aput`)."""
        await self._write(self.put_messages, list(messages))

    async def aset(self, messages: Sequence[ChatMessage]) -> None:
        """Async :meth:`set` (as :meth:`aput`)."""
        await self._write(self.set, list(messages))

    async def areset(self) -> None:
        """Async :meth:`reset` (as :meth:`aput`)."""
        await self._write(self.reset)
