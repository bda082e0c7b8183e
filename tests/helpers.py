"""Small message constructors shared by the tests."""

from __future__ import annotations

from llama_index.core.base.llms.types import ChatMessage, MessageRole


def user(text: str, **kwargs) -> ChatMessage:
    """A user message."""
    return ChatMessage(role=MessageRole.USER, content=text, additional_kwargs=kwargs)


def assistant(text: str, **kwargs) -> ChatMessage:
    """An assistant message."""
    return ChatMessage(role=MessageRole.ASSISTANT, content=text, additional_kwargs=kwargs)
