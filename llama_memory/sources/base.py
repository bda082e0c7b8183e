"""The protocol every memory source implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, Optional

from llama_index.core.base.llms.types import ChatMessage

from ..storage.reconcile import ReconcileReport
from ..types import MemoryRecord, Scope, StoredMessage


class MemorySource(ABC):
    """A secondary memory: it receives the conversation and retrieves records for a query.

    A source does four things: ``add`` messages, ``retrieve`` records for a
    query, ``reset`` what it holds for a scope, and ``forget`` a user entirely.
    Scope is strict: a source never returns records of a user other than
    ``scope.user_id``.

    Optional hooks, with defaults that do nothing: ``tools`` (LlamaIndex tools
    an agent may call, bound to the scope), ``extract`` (turn conversation into
    structured memories with an LLM), ``priority`` (sources with a higher
    priority are served first from the memory block's budget), ``reconcile``
    (bring a derived index back in line with the record) and ``purge_expired``
    (delete records whose time to live is over).
    """

    #: Short name shown next to each injected item (``"vector"``, ``"triples"``...).
    name: str = "source"
    #: Order in the memory block: higher first; equal priorities share round-robin.
    priority: int = 0
    #: True for a source whose records do not depend on the query (a profile): they go
    #: into every memory block, but not into ``search`` results, which rank by relevance.
    query_independent: bool = False

    @abstractmethod
    def add(self, messages: Sequence[StoredMessage], scope: Scope) -> None:
        """Take in new conversation messages."""

    @abstractmethod
    def retrieve(self, query: str, scope: Scope, k: int) -> list[MemoryRecord]:
        """Up to ``k`` records relevant to ``query``, best first, all within ``scope``.

        ``query`` may be empty (a conversation with no user message yet): a source
        whose records do not depend on the query (a profile) still returns them.
        """

    @abstractmethod
    def reset(self, scope: Scope) -> None:
        """Remove what this source holds for the scope's user."""

    def forget(self, scope: Scope) -> None:
        """Remove every trace of the scope's user, in every index the source keeps and
        in every cache (by default the same as :meth:`reset`). ``memory.forget()``
        calls it for the right to be forgotten."""
        self.reset(scope)

    def reconcile(self, catch_up: bool = True, scope: Optional[Scope] = None) -> ReconcileReport:
        """Bring derived indexes in line with the system of record, for every user or
        for the scope's user only; with ``catch_up``, write what is missing now. The
        default keeps no derived index."""
        return ReconcileReport()

    def purge_expired(self) -> int:
        """Delete records whose time to live is over; return how many (default: none)."""
        return 0

    def tools(self, scope: Scope) -> list[Any]:
        """LlamaIndex tools for agents, acting within ``scope`` (none by default).

        The scope comes from the memory, never from the LLM's arguments. Inside an
        agent run, a tool of ``memory.tools()`` calls this again on the source of the
        same class and name in the run's memory, with that memory's scope, and uses
        the tool of the same name: keep it cheap and the tool names fixed.
        """
        return []

    def extract(self, messages: Sequence[ChatMessage], llm: Any, scope: Scope) -> Any:
        """Derive structured memories from ``messages`` with ``llm``; may return what it
        stored (nothing by default)."""
        return None

    def close(self) -> None:
        """Release resources (connections); the default holds none."""
