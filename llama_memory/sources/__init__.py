"""Secondary memory sources: what the memory remembers beyond this conversation."""

from .base import MemorySource
from .llama_index import LlamaIndexMemorySource
from .profile import ProfileSource
from .triples import KnowledgeTriple, TripleError, TripleSource
from .vector import VectorSource

__all__ = [
    "KnowledgeTriple", "LlamaIndexMemorySource", "MemorySource", "ProfileSource", "TripleError",
    "TripleSource", "VectorSource",
]
