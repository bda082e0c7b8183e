"""llama-memory: drop-in long-term memory for LlamaIndex agents.

``ComposableMemory`` combines a token-limited chat buffer (this conversation)
with long-term sources that remember across conversations of the same user,
and injects what they retrieve, deduplicated and within a token budget, into
the prompt::

    from llama_memory import ComposableMemory

    memory = ComposableMemory.from_defaults(user_id="alice", path="./memory")
    response = await agent.run("Where should I eat tonight?", memory=memory)
"""

from .admin import MemoryAdmin
from .agents import RunMemoryTool
from .buffer import ChatBuffer, ChatLog, ChatLogChanges, SharedChatLog
from .compose import MemoryBlock
from .embeddings import OfflineEmbedding, default_embedding
from .errors import (
    EmbeddingDimensionError,
    EmbeddingMismatchError,
    EmbeddingModelError,
    LlamaMemoryError,
    MemoryClosedError,
    ModelIntegrityError,
    RestoreWarning,
    ScopeError,
    StorageError,
)
from .expiry import Expiry
from .extraction import ExtractionError
from .memory import ComposableMemory
from .restore import set_restore_hook
from .sources import LlamaIndexMemorySource, MemorySource, ProfileSource, VectorSource
from .sources.profile import ProfileUpdateError
from .sources.triples import KnowledgeTriple, TripleError, TripleSource
from .storage.reconcile import ReconcileReport
from .types import MemoryRecord, Scope, StoredMessage

__version__ = "0.1.0"

__all__ = [
    "ChatBuffer",
    "ChatLog",
    "ChatLogChanges",
    "ComposableMemory",
    "EmbeddingDimensionError",
    "EmbeddingMismatchError",
    "EmbeddingModelError",
    "Expiry",
    "ExtractionError",
    "KnowledgeTriple",
    "LlamaIndexMemorySource",
    "LlamaMemoryError",
    "MemoryAdmin",
    "MemoryBlock",
    "MemoryClosedError",
    "MemoryRecord",
    "MemorySource",
    "ModelIntegrityError",
    "OfflineEmbedding",
    "ProfileSource",
    "ProfileUpdateError",
    "ReconcileReport",
    "RestoreWarning",
    "RunMemoryTool",
    "Scope",
    "ScopeError",
    "SharedChatLog",
    "StorageError",
    "StoredMessage",
    "TripleError",
    "TripleSource",
    "VectorSource",
    "default_embedding",
    "set_restore_hook",
]
