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
    name: module
    for module, names in {
        ".admin.memory_admin": ["MemoryAdmin"],
        ".core.errors": [
            "EmbeddingDimensionError", "EmbeddingMismatchError", "EmbeddingModelError",
            "EncryptionError", "ExtractionError", "LlamaMemoryError", "MemoryClosedError",
            "ModelIntegrityError", "NotPicklableError", "RestoreWarning", "ScopeError",
            "StorageError", "ToolArgumentError",
        ],
        ".core.types": ["Expiry", "MemoryRecord", "Scope", "StoredMessage"],
        ".embeddings.offline": ["OfflineEmbedding", "default_embedding"],
        ".memory.agents": ["RunMemoryTool"],
        ".memory.composable": ["ComposableMemory"],
        ".memory.restore": ["set_restore_hook"],
        ".memory.settings": ["MemorySettings"],
        ".read.compose": ["MemoryBlock"],
        ".sources": ["LlamaIndexMemorySource", "MemorySource", "ProfileSource", "VectorSource"],
        ".sources.profile": ["ProfileUpdateError"],
        ".sources.triples": ["KnowledgeTriple", "TripleError", "TripleSource"],
        ".storage.reconcile": ["ReconcileReport"],
        ".write.buffer": ["ChatBuffer", "ChatLog", "ChatLogChanges", "SharedChatLog"],
    }.items()
    for name in names
}

# What type checkers and IDEs see: the eager imports, each public ("X as X").
if TYPE_CHECKING:
    from .admin.memory_admin import MemoryAdmin as MemoryAdmin
    from .core.errors import EmbeddingDimensionError as EmbeddingDimensionError
    from .core.errors import EmbeddingMismatchError as EmbeddingMismatchError
    from .core.errors import EmbeddingModelError as EmbeddingModelError
    from .core.errors import EncryptionError as EncryptionError
    from .core.errors import ExtractionError as ExtractionError
    from .core.errors import LlamaMemoryError as LlamaMemoryError
    from .core.errors import MemoryClosedError as MemoryClosedError
    from .core.errors import ModelIntegrityError as ModelIntegrityError
    from .core.errors import NotPicklableError as NotPicklableError
    from .core.errors import RestoreWarning as RestoreWarning
    from .core.errors import ScopeError as ScopeError
    from .core.errors import StorageError as StorageError
    from .core.errors import ToolArgumentError as ToolArgumentError
    from .core.types import Expiry as Expiry
    from .core.types import MemoryRecord as MemoryRecord
    from .core.types import Scope as Scope
    from .core.types import StoredMessage as StoredMessage
    from .embeddings.offline import OfflineEmbedding as OfflineEmbedding
    from .embeddings.offline import default_embedding as default_embedding
    from .memory.agents import RunMemoryTool as RunMemoryTool
    from .memory.composable import ComposableMemory as ComposableMemory
    from .memory.restore import set_restore_hook as set_restore_hook
    from .memory.settings import MemorySettings as MemorySettings
    from .read.compose import MemoryBlock as MemoryBlock
    from .sources import LlamaIndexMemorySource as LlamaIndexMemorySource
    from .sources import MemorySource as MemorySource
    from .sources import ProfileSource as ProfileSource
    from .sources import VectorSource as VectorSource
    from .sources.profile import ProfileUpdateError as ProfileUpdateError
    from .sources.triples import KnowledgeTriple as KnowledgeTriple
    from .sources.triples import TripleError as TripleError
    from .sources.triples import TripleSource as TripleSource
    from .storage.reconcile import ReconcileReport as ReconcileReport
    from .write.buffer import ChatBuffer as ChatBuffer
    from .write.buffer import ChatLog as ChatLog
    from .write.buffer import ChatLogChanges as ChatLogChanges
    from .write.buffer import SharedChatLog as SharedChatLog


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
