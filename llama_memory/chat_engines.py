"""LlamaIndex chat engines over a memory that injects a block. ``ContextChatEngine`` and
``SimpleChatEngine`` take a :class:`~llama_memory.memory.composable.ComposableMemory` as
they are. ``CondensePlusContextChatEngine`` would condense the block with the
conversation (an extra LLM call even on a first turn): the class here condenses the
conversation only (:func:`~llama_memory.read.compose.remove_block`).
"""

from __future__ import annotations

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.chat_engine import CondensePlusContextChatEngine as _LlamaIndexEngine

from .read.compose import remove_block

__all__ = ["CondensePlusContextChatEngine"]


class CondensePlusContextChatEngine(_LlamaIndexEngine):
    """LlamaIndex's ``CondensePlusContextChatEngine`` (same constructor and
    ``from_defaults``) that condenses the conversation without the memory block: no
    condense call on a first turn, no recalled records in the condense prompt."""

    def _condense_question(self, chat_history: list[ChatMessage], latest_message: str) -> str:
        return super()._condense_question(remove_block(chat_history), latest_message)

    async def _acondense_question(self, chat_history: list[ChatMessage], latest_message: str) -> str:
        return await super()._acondense_question(remove_block(chat_history), latest_message)
