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
    "ChatBuffer": ".buffer",
    "ChatLog": ".buffer",
    "ChatLogChanges": ".buffer",
    "ComposableMemory": ".memory",
    "EmbeddingDimensionError": ".errors",
    "EmbeddingMismatchError": ".errors",
    "EmbeddingModelError": ".errors",
    "EncryptionError": ".errors",
    "Expiry": ".storage.expiry",
    "ExtractionError": ".errors",
    "KnowledgeTriple": ".sources.triples",
    "LlamaIndexMemorySource": ".sources",
    "LlamaMemoryError": ".errors",
    "MemoryAdmin": ".admin",
    "MemoryBlock": ".compose",
    "MemoryClosedError": ".errors",
    "MemoryRecord": ".types",
    "MemorySettings": ".settings",
    "MemorySource": ".sources",
    "NotPicklableError": ".errors",
    "ModelIntegrityError": ".errors",
    "OfflineEmbedding": ".embeddings",
    "ProfileSource": ".sources",
    "ProfileUpdateError": ".sources.profile",
    "ReconcileReport": ".storage.reconcile",
    "RestoreWarning": ".errors",
    "RunMemoryTool": ".agents",
    "Scope": ".types",
    "ScopeError": ".errors",
    "SharedChatLog": ".buffer",
    "StorageError": ".errors",
    "StoredMessage": ".types",
    "TripleError": ".sources.triples",
    "TripleSource": ".sources.triples",
    "VectorSource": ".sources",
    "default_embedding": ".embeddings",
    "set_restore_hook": ".restore",
}

if TYPE_CHECKING:  # what type checkers and IDEs see: the eager imports
    from .admin import MemoryAdmin
    from .agents import RunMemoryTool
    from .buffer import ChatBuffer, ChatLog, ChatLogChanges, SharedChatLog
    from .compose import MemoryBlock
    from .embeddings import OfflineEmbedding, default_embedding
    from .errors import (
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
    from .memory import ComposableMemory
    from .restore import set_restore_hook
    from .settings import MemorySettings
    from .sources import LlamaIndexMemorySource, MemorySource, ProfileSource, VectorSource
    from .sources.profile import ProfileUpdateError
    from .sources.triples import KnowledgeTriple, TripleError, TripleSource
    from .storage.expiry import Expiry
    from .storage.reconcile import ReconcileReport
    from .types import MemoryRecord, Scope, StoredMessage


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
