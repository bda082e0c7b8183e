"""The chat log port: one conversation's messages, in commit order, shared by every
reader of the store (threads, processes, web workers)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NamedTuple, Optional, Protocol, runtime_checkable

if TYPE_CHECKING:  # storage imports without LlamaIndex (the command line lists users fast)
    from llama_index.core.base.llms.types import ChatMessage


@runtime_checkable
class ChatLog(Protocol):
    """Where a buffer persists its messages (one conversation)."""

    def load(self) -> list[ChatMessage]:
        """Return every stored message, oldest first."""
        ...

    def append(self, messages: Sequence[ChatMessage]) -> None:
        """Add ``messages`` (in order) after the stored ones."""
        ...

    def replace(self, messages: Sequence[ChatMessage]) -> None:
        """Make ``messages`` the whole stored conversation."""
        ...

    def clear(self) -> None:
        """Delete every stored message of this conversation."""
        ...


class ChatLogChanges(NamedTuple):
    """What other writers committed to a :class:`SharedChatLog` since a reader's cursor.

    Attributes:
        messages: the messages committed since the cursor, in commit order.
        replaced: True when ``messages`` is the whole conversation (it was replaced or
            cleared meanwhile, or the reader had read nothing yet), False when they
            follow what the reader already has.
        cursor: where the reader is now; opaque, pass it back to the log.
    """

    messages: list[ChatMessage]
    replaced: bool
    cursor: Any


@runtime_checkable
class SharedChatLog(ChatLog, Protocol):
    """A chat log that other writers (buffers, threads, processes) write to as well: a
    buffer keeps an opaque cursor of how far it has read and asks for what is new."""

    def changes(self, cursor: Any) -> Optional[ChatLogChanges]:
        """What was committed since ``cursor`` (None: from the start), or None when
        nothing changed; cheap when nothing changed (it runs on every read)."""
        ...

    def append_after(self, cursor: Any, messages: Sequence[ChatMessage]) -> ChatLogChanges:
        """Append ``messages`` atomically after whatever others committed since
        ``cursor``; return those (not ``messages``) and the cursor after ``messages``."""
        ...

    def replace_all(self, messages: Sequence[ChatMessage]) -> Any:
        """Make ``messages`` the whole conversation; return the cursor after them."""
        ...
