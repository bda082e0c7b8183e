"""Small message constructors shared by the tests."""

from __future__ import annotations

from collections.abc import Iterable

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from llama_memory import MemoryRecord


def user(text: str, **kwargs) -> ChatMessage:
    """A user message."""
    return ChatMessage(role=MessageRole.USER, content=text, additional_kwargs=kwargs)


def assistant(text: str, **kwargs) -> ChatMessage:
    """An assistant message."""
    return ChatMessage(role=MessageRole.ASSISTANT, content=text, additional_kwargs=kwargs)


def message_texts(records: Iterable[MemoryRecord]) -> list[str]:
    """The texts of the messages behind records, in order: an excerpt's parts one by one."""
    return [part.text for record in records for part in (record.parts or [record])]
