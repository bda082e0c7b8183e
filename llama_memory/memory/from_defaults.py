"""``ComposableMemory.from_defaults`` (:class:`MemoryFromDefaults`): its keyword arguments
are the options of :class:`~llama_memory.memory.settings.MemorySettings`; it checks them and
hands over to :func:`~llama_memory.memory.wiring.build_memory`.
"""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional, Union

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory.types import BaseMemory
from pydantic import BaseModel
from typing_extensions import Self

from ..core.messages import messages_arg
from ..core.types import TTL
from ..retrieval.excerpts import SET_SPREAD
from ..retrieval.relevance import DEFAULT_MIN_RELEVANCE
from ..sources.base import MemorySource
from . import DEFAULT_MEMORY_TOKEN_LIMIT, DEFAULT_TOKEN_LIMIT, DEFAULT_TOP_K
from .arguments import parameters, reject_unknown
from .settings import ExtractIn, InsertMethod, MemorySettings
from .wiring import build_memory

#: What ``secondary_memory_sources`` holds: llama-memory sources or LlamaIndex memories.
Source = Union[MemorySource, BaseMemory]


class MemoryFromDefaults(BaseMemory):
    """A LlamaIndex memory built from its options by :meth:`from_defaults` (no state of
    its own)."""

    @classmethod
    def from_defaults(  # type: ignore[override]
        cls,
        primary_memory: Optional[BaseMemory] = None,
        secondary_memory_sources: Optional[list[Source]] = None,
        *,
        user_id: Optional[str] = None,
        session_id: Optional[str] = None,
        tenant_id: str = "default",
        path: Optional[Union[str, Path]] = None,
        embed_model: Optional[BaseEmbedding] = None,
        token_limit: int = DEFAULT_TOKEN_LIMIT,
        memory_token_limit: int = DEFAULT_MEMORY_TOKEN_LIMIT,
        top_k: int = DEFAULT_TOP_K,
        insert_method: InsertMethod = "system",
        tokenizer_fn: Optional[Callable[[str], Sequence]] = None,
        chroma_client: Any = None,
        llm: Any = None,
        extract_every: int = 0,
        extract_in: ExtractIn = "thread",
        extract_after_quiet: float = 0.0,
        formation_token_budget: int = 0,
        profile: Union[bool, type[BaseModel], None] = None,
        triples: bool = False,
        chroma_host: Optional[str] = None,
        chroma_port: int = 8000,
        chroma_url: Optional[str] = None,
        ttl: Optional[TTL] = None,
        refresh_on_read: bool = False,
        clock: Optional[Callable[[], float]] = None,
        chat_history: Optional[Sequence[ChatMessage]] = None,
        reembed: bool = False,
        min_relevance: float = DEFAULT_MIN_RELEVANCE,
        store: Any = None,
        set_spread: float = SET_SPREAD,
        owner_only: bool = True,
        encryption_key: Optional[str] = None,
        **kwargs: Any,
    ) -> Self:
        """Build a memory with sensible defaults.

        Every argument but ``chat_history`` is an option of
        :class:`~llama_memory.memory.settings.MemorySettings`, which says what each one
        means (``help()`` lists them below) and checks it before anything opens; the
        memory keeps them as :attr:`~llama_memory.memory.composable.ComposableMemory.settings`.

        Args:
            chat_history: messages that start the conversation, as
                ``ChatMemoryBuffer.from_defaults(chat_history=...)`` takes them (chat
                engines pass it): like :meth:`~llama_memory.memory.composable.ComposableMemory.set`, they replace the session's stored
                messages and those new to it reach the long-term sources. An empty
                list changes nothing (a resumed session keeps its messages).
            **kwargs: none is accepted: an unknown keyword argument is a TypeError
                naming it and the closest valid one. Of what LlamaIndex itself passes
                to a memory (:data:`~llama_memory.memory.composable.LLAMA_INDEX_KWARGS`), ``chat_history``,
                ``token_limit`` and ``llm`` are honoured here, and
                ``initial_token_count`` is for :meth:`~llama_memory.memory.composable.ComposableMemory.get`.

        Every argument is checked before the store is opened or created: a refused call
        leaves nothing on disk.

        Raises:
            ScopeError: no ``user_id`` (None, empty or blank) while a long-term source
                needs one: the default sources, ``profile`` or ``triples``.
            TypeError: an unknown keyword argument, an ``embed_model`` that is not an
                embedding object (such as a model name), a ``chat_history`` that is
                not a list of ``ChatMessage``.
            ValueError: a ``path`` that is a database URL (``path`` is a directory),
                ``path`` and ``store`` both given, ``extract_every`` or
                ``extract_after_quiet`` with no one to run the passes (no ``llm`` in
                ``extract_in="thread"``, an in-memory store with ``"worker"``).
        """
        if kwargs:
            reject_unknown("ComposableMemory.from_defaults()", kwargs, parameters(cls.from_defaults))
        given = dict(locals())  # every named argument but the conversation is a setting
        history = messages_arg(chat_history, "chat_history") if chat_history is not None else []
        settings = MemorySettings(**{k: v for k, v in given.items() if k in MemorySettings.model_fields})
        return build_memory(cls, settings, history, session_id_given=bool(session_id))


def _list_options(doc: str) -> str:
    """``doc`` followed by each option and its description, from the settings (what
    ``help(ComposableMemory.from_defaults)`` shows)."""
    options = [
        f"    {name}: {textwrap.indent(field.description or '', '        ').strip()}"
        for name, field in MemorySettings.model_fields.items()
    ]
    return doc + "\n    Options (MemorySettings):\n" + "\n".join(options) + "\n"


MemoryFromDefaults.from_defaults.__func__.__doc__ = _list_options(  # type: ignore[attr-defined]
    MemoryFromDefaults.from_defaults.__doc__ or ""
)
