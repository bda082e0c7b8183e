"""Spans and events through LlamaIndex's instrumentation (the root dispatcher), so every
observability tool sees the memory's work inside the agent run that caused it: spans for
``get``, ``put_messages``, ``search``, ``extract`` and each ``retrieve_from``, and the
events below, carrying ids, sources, counts and timings, never stored text beyond the
query (docs/howto/observability.md).
"""

from __future__ import annotations

from typing import Optional

from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.events import BaseEvent
from pydantic import Field

#: The package's dispatcher; it propagates to LlamaIndex's root dispatcher.
dispatcher = get_dispatcher("llama_memory")

__all__ = [
    "MemoryBlockEvent", "MemoryEvent", "MemoryExtractionEvent", "MemoryPutEvent",
    "MemoryRetrievalEvent", "dispatcher",
]


class MemoryEvent(BaseEvent):
    """What every memory event carries: whose memory, and how long the work took."""

    tenant_id: str = Field(default="default", description="The memory's tenant.")
    user_id: Optional[str] = Field(default=None, description="The memory's user.")
    session_id: Optional[str] = Field(default=None, description="The memory's conversation.")
    duration_ms: float = Field(default=0.0, description="Wall time of the work, in ms.")

    @classmethod
    def class_name(cls) -> str:
        """Name of the event, as LlamaIndex handlers report it: its class's."""
        return cls.__name__


class MemoryRetrievalEvent(MemoryEvent):
    """One source's answer to a query: record ids, best first, with their scores."""

    source: str = Field(description="The source asked (vector, triples, profile...).")
    query: str = Field(default="", description="What was searched for.")
    k: int = Field(default=0, description="How many records were asked for.")
    record_ids: list[Optional[str]] = Field(default_factory=list, description="Ids, best first.")
    scores: list[float] = Field(default_factory=list, description="Their scores, same order.")


class MemoryBlockEvent(MemoryEvent):
    """What one ``get()`` injected: the records shown, by id and source, the block's
    tokens, and how many records were left out as duplicates or for the budget."""

    query: str = Field(default="", description="What the block was built for.")
    record_ids: list[Optional[str]] = Field(default_factory=list, description="Records shown.")
    sources: list[str] = Field(default_factory=list, description="Their sources, same order.")
    token_count: int = Field(default=0, description="Tokens of the injected block.")
    token_limit: int = Field(default=0, description="The block's budget.")
    dropped_duplicates: int = Field(default=0, description="Left out: already shown.")
    dropped_for_budget: int = Field(default=0, description="Left out: over the budget.")
    window_messages: int = Field(default=0, description="Messages of the window returned.")


class MemoryPutEvent(MemoryEvent):
    """Messages written to the conversation and to every long-term source."""

    messages: int = Field(default=0, description="How many messages.")
    roles: list[str] = Field(default_factory=list, description="Their roles, in order.")
    message_ids: list[str] = Field(default_factory=list, description="Their ids, in order.")


class MemoryExtractionEvent(MemoryEvent):
    """One LLM call of memory formation (``source`` ``"pass:triples+profile..."`` for a
    pass's one call, else a source's own): messages, tokens, time and ``error``. (The name
    predates the word "formation" and is kept: handlers match on it.)"""

    source: str = Field(description="The pass, or the source that formed memories.")
    messages: int = Field(default=0, description="Messages it read.")
    error: Optional[str] = Field(default=None, description="The failure, if any.")
    tokens_sent: int = Field(
        default=0, description="Prompt tokens of its LLM calls (as the LLM reported them, else counted)."
    )
    tokens_received: int = Field(default=0, description="Answer tokens of its LLM calls (likewise).")
    llm_calls: int = Field(default=0, description="LLM calls it made.")
