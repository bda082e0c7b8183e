"""llama-memory: drop-in long-term memory for LlamaIndex agents.

``ComposableMemory`` combines a token-limited chat buffer (this conversation)
with long-term sources that remember across conversations of the same user,
and injects what they retrieve, deduplicated and within a token budget, into
the prompt::

    from llama_memory import ComposableMemory

    memory = ComposableMemory.from_defaults(user_id="alice", path="./memory")
    response = await agent.run("Where should I eat tonight?", memory=memory)
"""

from typing import TYPE_CHECKING, Any

# Where each public name lives. They are imported on first use (PEP 562), so that
# `import llama_memory` and the command line's --help stay fast: the full package
# pulls in LlamaIndex, Chroma and the embedding runtime (about a second).
_EXPORTS: dict[str, str] = {
    "ChatBuffer": ".write.buffer",
    "ChatLog": ".write.buffer",
    "ChatLogChanges": ".write.buffer",
    "ComposableMemory": ".memory.composable",
    "EmbeddingDimensionError": ".core.errors",
    "EmbeddingMismatchError": ".core.errors",
    "EmbeddingModelError": ".core.errors",
    "EncryptionError": ".core.errors",
    "Expiry": ".storage.expiry",
    "ExtractionError": ".core.errors",
    "KnowledgeTriple": ".sources.triples",
    "LlamaIndexMemorySource": ".sources",
    "LlamaMemoryError": ".core.errors",
    "MemoryAdmin": ".admin.memory_admin",
    "MemoryBlock": ".read.compose",
    "MemoryClosedError": ".core.errors",
    "MemoryRecord": ".core.types",
    "MemorySettings": ".memory.settings",
    "MemorySource": ".sources",
    "NotPicklableError": ".core.errors",
    "ModelIntegrityError": ".core.errors",
    "OfflineEmbedding": ".embeddings.offline",
    "ProfileSource": ".sources",
    "ProfileUpdateError": ".sources.profile",
    "ReconcileReport": ".storage.reconcile",
    "RestoreWarning": ".core.errors",
    "RunMemoryTool": ".memory.agents",
    "Scope": ".core.types",
    "ScopeError": ".core.errors",
    "SharedChatLog": ".write.buffer",
    "StorageError": ".core.errors",
    "StoredMessage": ".core.types",
    "TripleError": ".sources.triples",
    "TripleSource": ".sources.triples",
    "VectorSource": ".sources",
    "default_embedding": ".embeddings.offline",
    "set_restore_hook": ".memory.restore",
}

if TYPE_CHECKING:  # what type checkers and IDEs see: the eager imports
    from .admin.memory_admin import MemoryAdmin
    from .core.errors import (
        EmbeddingDimensionError,
        EmbeddingMismatchError,
        EmbeddingModelError,
        EncryptionError,
        ExtractionError,
        LlamaMemoryError,
        MemoryClosedError,
        ModelIntegrityError,
        NotPicklableError,
        RestoreWarning,
        ScopeError,
        StorageError,
    )
    from .core.types import MemoryRecord, Scope, StoredMessage
    from .embeddings.offline import OfflineEmbedding, default_embedding
    from .memory.agents import RunMemoryTool
    from .memory.composable import ComposableMemory
    from .memory.restore import set_restore_hook
    from .memory.settings import MemorySettings
    from .read.compose import MemoryBlock
    from .sources import LlamaIndexMemorySource, MemorySource, ProfileSource, VectorSource
    from .sources.profile import ProfileUpdateError
    from .sources.triples import KnowledgeTriple, TripleError, TripleSource
    from .storage.expiry import Expiry
    from .storage.reconcile import ReconcileReport
    from .write.buffer import ChatBuffer, ChatLog, ChatLogChanges, SharedChatLog


def __getattr__(name: str) -> Any:
    """Import a public name from its module on first use, then keep it here."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__version__ = "0.1.0"

__all__ = [
    "ChatBuffer",
    "ChatLog",
    "ChatLogChanges",
    "ComposableMemory",
    "EmbeddingDimensionError",
    "EmbeddingMismatchError",
    "EmbeddingModelError",
    "EncryptionError",
    "Expiry",
    "ExtractionError",
    "KnowledgeTriple",
    "LlamaIndexMemorySource",
    "LlamaMemoryError",
    "MemoryAdmin",
    "MemoryBlock",
    "MemoryClosedError",
    "MemoryRecord",
    "MemorySettings",
    "MemorySource",
    "ModelIntegrityError",
    "NotPicklableError",
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
