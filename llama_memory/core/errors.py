"""Exceptions raised by llama-memory: every error says what was wrong, and none is
swallowed into an empty result ("nothing remembered" and "storage failed" differ).
"""

from __future__ import annotations

from typing import Optional


class LlamaMemoryError(Exception):
    """Base class of every error this library raises on purpose."""


class ScopeError(LlamaMemoryError, ValueError):
    """A long-term operation was asked for without the scope it needs (a user id)."""


class ToolArgumentError(LlamaMemoryError, ValueError):
    """An agent called a memory tool with arguments it does not take: the message says
    what was wrong and which arguments the tool takes, for the LLM to read."""


#: How to switch a store to another embedding model, said by the errors below.
SWITCH_MODEL = (
    "Open the store with the model it was built with, or switch it to the new model by "
    "re-embedding every record from the system of record: "
    "ComposableMemory.from_defaults(..., embed_model=<the new model>, reembed=True)"
)


class EmbeddingModelError(LlamaMemoryError, ValueError):
    """The embedding model is not the one whose vectors the store holds (another
    dimension, or the same dimension but another vector space)."""


class EmbeddingDimensionError(EmbeddingModelError):
    """The embedding model's vectors do not have the dimension the store was built with."""

    def __init__(self, stored_dim: int, stored_model: str, new_dim: int, new_model: str) -> None:
        self.stored_dim = stored_dim
        self.new_dim = new_dim
        super().__init__(
            f"embedding dimension mismatch: this memory store holds {stored_dim}-dimensional "
            f"vectors from {stored_model!r}, but the embedding model {new_model!r} produces "
            f"{new_dim}-dimensional vectors. {SWITCH_MODEL}, or use a new path."
        )


class EmbeddingMismatchError(EmbeddingModelError):
    """The embedding model has the store's dimension but is another model: its vector
    of a fixed probe text differs from the one recorded when the store was built."""

    def __init__(self, stored_model: str, new_model: str, similarity: Optional[float]) -> None:
        self.stored_model = stored_model
        self.new_model = new_model
        self.similarity = similarity
        why = (
            f"its vector of the store's probe text has a cosine of {similarity:.3f} with the "
            "recorded one"
            if similarity is not None
            else "the store predates model fingerprints and recorded another model name"
        )
        super().__init__(
            f"embedding model mismatch: this memory store holds vectors from {stored_model!r}, "
            f"but the embedding model given is {new_model!r}, a different model (same "
            f"dimension, but {why}): the two vector spaces cannot share one index. "
            f"{SWITCH_MODEL}."
        )


class StorageError(LlamaMemoryError, RuntimeError):
    """The system of record or the dense index failed; nothing was silently dropped."""


class MemoryClosedError(StorageError):
    """A memory was used after :meth:`~llama_memory.ComposableMemory.close`: open a new
    one (a :class:`StorageError`, as the closed database's error was)."""


class EncryptionError(StorageError):
    """A SQLite store's encryption does not match how it was opened: a wrong key, an
    encrypted store opened without one, or a plain store opened with one (the message
    says which). Raised before anything is written; the store is unchanged.

    Attributes:
        command_line: the same said to someone at the ``llama-memory`` command, whose
            key comes from the environment variable, not from a Python argument.
    """

    def __init__(self, message: str, *, command_line: Optional[str] = None) -> None:
        super().__init__(message)
        self.command_line = command_line or message


class ExtractionError(LlamaMemoryError, ValueError):
    """An LLM's structured output was malformed or rejected: the answer of a formation
    pass, or a source's own structured call. Nothing derived from it was written. (The
    name predates the word "formation" and is kept: it is public.)
    """


class RestoreWarning(UserWarning):
    """A restored memory lacks something its dict could not carry (a live LLM, a custom
    tokenizer): pass it to ``from_dict`` or through ``set_restore_hook``."""


class ModelIntegrityError(LlamaMemoryError, RuntimeError):
    """The offline embedding model's files are missing or do not match their checksum."""


class NotPicklableError(LlamaMemoryError, TypeError):
    """A memory cannot be pickled: a part of it cannot travel to another process (an
    in-memory store, custom sources, an LLM that does not pickle...); nor copied
    (``copy.copy``, ``copy.deepcopy``: it is a live handle on its store). A TypeError,
    as Python's own "cannot pickle" errors are."""
