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
    "Expiry": ".core.types",
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
    "ToolArgumentError": ".core.errors",
    "TripleError": ".sources.triples",
    "TripleSource": ".sources.triples",
    "VectorSource": ".sources",
    "default_embedding": ".embeddings.offline",
    "set_restore_hook": ".memory.restore",
}

# What type checkers and IDEs see: the eager imports, each public ("X as X"; isort would
# write one import per name).
# isort: off
if TYPE_CHECKING:
    from .admin.memory_admin import MemoryAdmin as MemoryAdmin
    from .core.errors import (
        EmbeddingDimensionError as EmbeddingDimensionError,
        EmbeddingMismatchError as EmbeddingMismatchError,
        EmbeddingModelError as EmbeddingModelError,
        EncryptionError as EncryptionError,
        ExtractionError as ExtractionError,
        LlamaMemoryError as LlamaMemoryError,
        MemoryClosedError as MemoryClosedError,
        ModelIntegrityError as ModelIntegrityError,
        NotPicklableError as NotPicklableError,
        RestoreWarning as RestoreWarning,
        ScopeError as ScopeError,
        StorageError as StorageError,
        ToolArgumentError as ToolArgumentError,
    )
    from .core.types import (
        MemoryRecord as MemoryRecord,
        Scope as Scope,
        StoredMessage as StoredMessage,
    )
    from .embeddings.offline import (
        OfflineEmbedding as OfflineEmbedding,
        default_embedding as default_embedding,
    )
    from .memory.agents import RunMemoryTool as RunMemoryTool
    from .memory.composable import ComposableMemory as ComposableMemory
    from .memory.restore import set_restore_hook as set_restore_hook
    from .memory.settings import MemorySettings as MemorySettings
    from .read.compose import MemoryBlock as MemoryBlock
    from .sources import (
        LlamaIndexMemorySource as LlamaIndexMemorySource,
        MemorySource as MemorySource,
        ProfileSource as ProfileSource,
        VectorSource as VectorSource,
    )
    from .sources.profile import ProfileUpdateError as ProfileUpdateError
    from .sources.triples import (
        KnowledgeTriple as KnowledgeTriple,
        TripleError as TripleError,
        TripleSource as TripleSource,
    )
    from .core.types import Expiry as Expiry
    from .storage.reconcile import ReconcileReport as ReconcileReport
    from .write.buffer import (
        ChatBuffer as ChatBuffer,
        ChatLog as ChatLog,
        ChatLogChanges as ChatLogChanges,
        SharedChatLog as SharedChatLog,
    )
# isort: on


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

#: The public names: those of _EXPORTS (the imports above say the same to type checkers).
__all__ = sorted(_EXPORTS)
