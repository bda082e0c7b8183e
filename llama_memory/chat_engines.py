"""LlamaIndex chat engines over a memory that injects a block.

``ContextChatEngine`` and ``SimpleChatEngine`` take a
:class:`~llama_memory.memory.composable.ComposableMemory` as they are: each turn they call
``memory.get(input=message)``, send what it returns (the block included) to the LLM,
then ``put`` the user's message and the reply.

``CondensePlusContextChatEngine`` also uses what ``get`` returns as the conversation
to condense the message into a standalone question, an LLM call of its own whenever
that list is not empty. With a memory block the list is never empty, not even on the
first turn of a new chat: the engine would make an extra LLM call with the block
inside the condense prompt. The class here is LlamaIndex's engine, whose condense step
looks at the conversation only (:func:`~llama_memory.read.compose.remove_block`); the
answer still gets the block on every turn.
"""

from __future__ import annotations

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.chat_engine import CondensePlusContextChatEngine as _LlamaIndexEngine

from .read.compose import remove_block

__all__ = ["CondensePlusContextChatEngine"]


class CondensePlusContextChatEngine(_LlamaIndexEngine):
    """LlamaIndex's ``CondensePlusContextChatEngine`` (same constructor and
    ``from_defaults``) that condenses the conversation without the memory block: no
    condense call on a first turn, and no recalled records in the condense prompt
    (the memory retrieves for the user's own words; the answer gets the block)."""

    def _condense_question(self, chat_history: list[ChatMessage], latest_message: str) -> str:
        return super()._condense_question(remove_block(chat_history), latest_message)

    async def _acondense_question(self, chat_history: list[ChatMessage], latest_message: str) -> str:
        return await super()._acondense_question(remove_block(chat_history), latest_message)
