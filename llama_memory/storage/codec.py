"""How a chat message is kept in storage: JSON, losslessly (tool calls, blocks, ids)."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when a message is loaded: listing a store needs no LlamaIndex
    from llama_index.core.base.llms.types import ChatMessage


def dump_message(message: ChatMessage) -> str:
    """Serialise a message to JSON, losslessly."""
    return json.dumps(message.model_dump(mode="json"), ensure_ascii=False)


def load_message(data: str) -> ChatMessage:
    """Inverse of :func:`dump_message`."""
    from llama_index.core.base.llms.types import ChatMessage

    return ChatMessage.model_validate(json.loads(data))
