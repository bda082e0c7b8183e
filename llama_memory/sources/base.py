"""The protocol every memory source implements."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from ..types import MemoryRecord, Scope, StoredMessage


class MemorySource(ABC):
    """A secondary memory: it receives the conversation and retrieves records for a query.

    A source does four things and nothing more: ``add`` messages, ``retrieve``
    records for a query, ``reset`` what it holds for a scope, and ``forget`` a
    user entirely. Scope is strict: a source never returns records of a user
    other than ``scope.user_id``.
    """

    #: Short name shown next to each injected item (``"vector"``, ``"triples"``...).
    name: str = "source"

    @abstractmethod
    def add(self, messages: Sequence[StoredMessage], scope: Scope) -> None:
        """Take in new conversation messages."""

    @abstractmethod
    def retrieve(self, query: str, scope: Scope, k: int) -> list[MemoryRecord]:
        """Up to ``k`` records relevant to ``query``, best first, all within ``scope``."""

    @abstractmethod
    def reset(self, scope: Scope) -> None:
        """Remove what this source holds for the scope's user."""

    def forget(self, scope: Scope) -> None:
        """Remove every trace of the scope's user (by default the same as :meth:`reset`)."""
        self.reset(scope)

    def close(self) -> None:
        """Release resources (connections); the default holds none."""
