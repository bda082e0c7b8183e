"""The primary memory: this conversation, token-limited and lossless.

:class:`ChatBuffer` is a drop-in replacement for LlamaIndex's ``ChatMemoryBuffer``
(it is a :class:`~llama_index.core.memory.BaseMemory`, so it can be handed to an
agent as ``memory=``). It differs from the stock buffer in these ways:

* **Tokens are counted once.** Each message is tokenized when it enters the
  buffer and the count is cached, so :meth:`ChatBuffer.get` costs time
  proportional to the window it returns, not to the length of the history.
* **Truncation keeps turns whole.** A leading system message is always kept, and
  a truncated window always starts at a user message, so a tool result is never
  separated from the assistant tool call that produced it.
* **Optional write-through persistence.** Given a :class:`ChatLog`, the buffer
  loads the conversation from it and writes every change to it *before* changing
  memory, so a storage failure raises and leaves the buffer as it was.
* **One conversation, one window.** Given a :class:`SharedChatLog` (the SQLite chat
  log is one), every buffer on the same conversation (threads, processes) sees the
  messages the others commit, in commit order, at a cost that follows what is new.

Messages are stored as given (the same objects come back from ``get()``), so
content blocks, tool calls and ``additional_kwargs`` are kept losslessly.

Here: the buffer and the window it returns (:func:`fit_window`: whole turns, the latest
that fit, a leading system message kept). A message's count is
:func:`~llama_memory.core.messages.message_tokens`; saving and copying a buffer
(``to_dict``, copies, pickles) is :mod:`llama_memory.write.buffer_restore`.
"""

from __future__ import annotations

import logging
from typing import (
    Any,
    Callable,
    Optional,
    Sequence,
    cast,
)

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
    messages: Sequence[ChatMessage],
    counts: Sequence[int],
    total: int,
    token_limit: int,
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
    """Token-limited, lossless memory of one conversation.

    ``get()`` returns the most recent messages that fit in ``token_limit``:

    * everything, unchanged, when the whole history fits;
    * otherwise a leading SYSTEM message (if the history starts with one; its
      tokens count against the limit) followed by the longest recent run of
      messages that fits *and starts with a USER message*: a truncated window
      never starts with an ASSISTANT or TOOL message, so no tool result is cut
      off from the tool call that produced it.
    * **Overflow** (not even the last user turn fits): the system message (if
      any) plus the whole last user turn, from the last USER message to the
      end, even though it exceeds the limit. The model then gets a well-formed
      request and the provider reports "context too long" explicitly, instead of
      the agent silently receiving an empty or malformed history. With no USER
      message at all, it is the system message plus the last message, as
      LlamaIndex's ``ChatMemoryBuffer`` does.

    **Token counting.** ``token_limit`` means what it means for
    ``ChatMemoryBuffer``: the tokens of the messages' content. A message counts
    ``len(tokenizer_fn(text))``, its text as ``ChatMemoryBuffer`` counts it (no role
    prefix, no per-message overhead), so at the same ``token_limit`` both keep the
    same messages. Two deliberate differences: the window's count is the sum of its
    messages' counts (``ChatMemoryBuffer`` tokenizes their contents joined by spaces,
    which can differ by a token at a boundary, and re-tokenizes the whole window on
    every step), and a message's tool calls (``additional_kwargs["tool_calls"]`` and
    ``ToolCallBlock`` blocks) count too, as their JSON on a new line, because they
    are sent to the LLM (``ChatMemoryBuffer`` counts a tool-call message with no
    text as the string ``"None"``). Images and other media are not counted. The
    count is taken once, when the message enters the buffer, and cached; messages
    are stored as given: mutating a message after putting it does not update its
    count.

    **Several writers.** With a :class:`SharedChatLog` (e.g. the SQLite chat log of
    ``ComposableMemory``), every read first asks the log what other buffers on the
    same conversation committed since the last read (with SQLite: one
    ``PRAGMA data_version``; when something changed, the new rows only, by index)
    and applies it: their messages are added in commit order (and counted once), a
    ``set()``/``reset()`` by another writer replaces the history. A write appends
    after whatever others committed first, in the same transaction. Messages this
    buffer wrote are never read back.

    Thread-safe: writes are serialized and every read sees a consistent state.
    Reads never wait for this buffer's own chat-log writes: a read that finds one
    under way skips the check (the write brings in what others committed). With a
    shared log a read does the change check above, which is I/O (cheap) and raises
    if the storage fails.
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
    # `_lock` guards the in-memory lists and is only held for list operations;
    # `_write_lock` serializes writers across "write the log, then memory" so the
    # log and memory see writes in the same order. Readers take only `_lock`, so
    # a slow chat-log write never blocks get() (or the event loop in aget()).
    # (Held by one thread or one bridged async call: see llama_memory.core.asyncbridge.)
    _lock: Any = PrivateAttr(default_factory=BridgeSafeRLock)
    _write_lock: Any = PrivateAttr(default_factory=BridgeSafeRLock)
    _loop_locks: LoopLocks = PrivateAttr(default_factory=LoopLocks)  # serialise async calls

    def __init__(
        self,
        *,
        chat_history: Optional[Sequence[ChatMessage]] = None,
        chat_log: Optional[ChatLog] = None,
        **data: Any,
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
        cls,
        chat_history: Optional[Sequence[ChatMessage]] = None,
        token_limit: Optional[int] = None,
        tokenizer_fn: Optional[Callable[[str], Sequence[Any]]] = None,
        chat_log: Optional[ChatLog] = None,
        **kwargs: Any,
    ) -> "ChatBuffer":
        """Create a buffer; unknown keyword arguments (``llm``, ...) are ignored.

        Accepting and ignoring them keeps the signature compatible with code
        written for ``ChatMemoryBuffer.from_defaults``.
        """
        return cls(
            chat_history=chat_history,
            chat_log=chat_log,
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
        starting from what it holds: a memory's ``reset()`` moves its buffer to the log
        of its new session. The log left behind is not changed."""
        with self._write_lock:
            self._attach(log)
            self._replace_state([], [])
            self._load()

    # ------------------------------------------------------------------ reading

    def _window(self, initial_token_count: int) -> tuple[bool, int]:
        """``(keep_system, start)``: the window is ``[system?] + messages[start:]``.

        Must be called with ``_lock`` held. Costs O(window), not O(history).
        """
        return fit_window(self._messages, self._counts, self._total, self.token_limit, initial_token_count)

    def get(
        self, input: Optional[str] = None, initial_token_count: int = 0, **kwargs: Any
    ) -> list[ChatMessage]:
        """The most recent messages that fit in ``token_limit - initial_token_count``.

        ``input`` and other keyword arguments are accepted for compatibility and
        ignored. Raises ``ValueError`` if ``initial_token_count > token_limit``.
        See the class docstring for the truncation rules and the overflow case.
        """
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
        # No lock of this buffer is held while the log is asked: a writer holds the
        # log's storage while it waits for `_write_lock`, so holding that lock here
        # would deadlock.
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
        self,
        changes: Optional[ChatLogChanges],
        own: Sequence[ChatMessage] = (),
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

    def set(self, messages: Sequence[ChatMessage]) -> None:
        """Replace the whole history with ``messages``.

        Messages already in the buffer (the same objects) keep their cached
        counts, so ``set(buffer.get_all()[-10:])`` does not re-tokenize.
        """
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
    # Everything in memory is fast, so without a chat log the sync methods run
    # directly on the event loop (no thread hop per call). With a log on a store whose
    # I/O can be awaited (PostgreSQL from a URL) they run on the loop through
    # llama_memory.core.asyncbridge, no thread; with another log (a SQLite file) writes go to
    # a worker thread and reads, which never wait for a log write, run directly.

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
