"""Secondary memory sources: what the memory remembers beyond this conversation."""

from .base import MemorySource
from .llama_index import LlamaIndexMemorySource
from .vector import VectorSource

__all__ = ["LlamaIndexMemorySource", "MemorySource", "VectorSource"]
