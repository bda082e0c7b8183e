"""The system of record of every SQL backend, as one object: its parts (meta, chat
history, records, the job queue) are written once in this package; a backend's store
class adds its connection (the :class:`~.dialect.SQLStore` port: transactions and
reads), its lexical index, its chat logs and what its records do their own way."""

from __future__ import annotations

from abc import ABC, abstractmethod

from ...core.types import Scope
from ..ports.chat import SharedChatLog
from ..ports.lexical import RankedLexicalIndex
from .chat import SQLChatTables
from .dialect import SQLStore
from .jobs import JobQueue
from .meta import MetaStore
from .records import RecordStore

__all__ = ["Storage"]


class Storage(MetaStore, SQLChatTables, RecordStore, JobQueue, SQLStore, RankedLexicalIndex, ABC):
    """Everything a memory needs from its system of record, as one object
    (``llama_memory.storage.sqlite.SQLiteStore``,
    ``llama_memory.storage.postgres.PostgresStore``). The dense index
    (:class:`~llama_memory.storage.ports.vectors.VectorIndex`) is separate: it is
    derived, and may live elsewhere (a Chroma server)."""

    @abstractmethod
    def chat_log(self, scope: Scope) -> SharedChatLog:
        """The shared log of the scope's conversation."""

    @abstractmethod
    def close(self) -> None:
        """Release the connection."""
