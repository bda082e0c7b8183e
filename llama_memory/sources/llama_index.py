"""Any LlamaIndex ``BaseMemory`` (``VectorMemory``, ``ChatMemoryBuffer``...) as a source."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Optional

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory.types import BaseMemory

from ..core.messages import message_text, role_name
from ..core.types import MemoryRecord, Scope, StoredMessage
from .base import MemorySource, Source


class LlamaIndexMemorySource(MemorySource):
    """Wraps a LlamaIndex memory as a secondary source: a query returns the messages of
    ``memory.get(input=query)`` as records. It has no notion of users: give each user
    their own instance.
    """

    def __init__(self, memory: BaseMemory, name: str) -> None:
        self.memory = memory
        self.name = name
        self._owners: set[tuple[str, Optional[str]]] = set()  # whose messages it was given

    def add(self, messages: Sequence[StoredMessage], scope: Scope) -> None:
        """Put the original ``ChatMessage`` objects into the wrapped memory."""
        self._owners.add((scope.tenant_id, scope.user_id))
        originals = [m.message for m in messages if isinstance(m.message, ChatMessage)]
        if originals:
            self.memory.put_messages(originals)

    def retrieve(self, query: str, scope: Scope, k: int) -> list[MemoryRecord]:
        """The wrapped memory's messages for ``query`` (its own top-k applies), as records."""
        records = []
        for rank, message in enumerate(self.memory.get(input=query)):
            text = message_text(message)
            if text:
                records.append(
                    MemoryRecord(text=text, score=1.0 / (rank + 1), source=self.name, role=role_name(message))
                )
        return records[:k] if k > 0 else records

    def reset(self, scope: Scope) -> None:
        """Reset the wrapped memory (all of it: it has no per-user state)."""
        self.memory.reset()

    def forget(self, scope: Scope) -> None:
        """Reset the wrapped memory if it was given the user's messages (it has no
        per-user state, so forgetting someone else leaves it alone)."""
        if (scope.tenant_id, scope.user_id) in self._owners:
            self.reset(scope)
            self._owners.clear()


def check_sources(objects: Iterable[Any]) -> None:
    """TypeError naming the first of ``objects`` that is neither a llama-memory source
    nor a LlamaIndex memory."""
    for s in objects:
        if not isinstance(s, (Source, BaseMemory)):
            raise TypeError(
                "secondary_memory_sources takes llama-memory sources (name, priority, add, "
                "retrieve: see llama_memory.sources.base.Source) or LlamaIndex BaseMemory "
                f"objects, not {type(s).__name__}"
            )


def as_sources(objects: Iterable[Any]) -> list[Source]:
    """A memory's ``secondary_memory_sources`` as :class:`~llama_memory.sources.base.Source`
    objects, a LlamaIndex memory wrapped (:class:`LlamaIndexMemorySource`)."""
    return [
        LlamaIndexMemorySource(s, f"{s.class_name()}#{i + 1}") if isinstance(s, BaseMemory) else s
        for i, s in enumerate(objects)
    ]
