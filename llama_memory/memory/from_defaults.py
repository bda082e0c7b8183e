"""How a memory is made from its options: ``ComposableMemory.from_defaults``, which
:class:`~llama_memory.memory.composable.ComposableMemory` inherits from :class:`MemoryFromDefaults`.

Its keyword arguments are the options of :class:`~llama_memory.memory.settings.MemorySettings`
(the signature and the documentation LlamaIndex users read); it checks them and hands
over to :func:`~llama_memory.memory.wiring.build_memory`, which opens the store and builds the
sources. (``from_dict`` and pickling make a memory again from what ``to_dict`` wrote:
:mod:`llama_memory.memory.restore`.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Optional, Union

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory.types import BaseMemory
from pydantic import BaseModel
from typing_extensions import Self

from ..retrieval.relevance import DEFAULT_MIN_RELEVANCE
from ..retrieval.set_questions import SET_SPREAD
from ..sources.base import MemorySource
from ..storage.expiry import TTL
from .arguments import messages_arg, parameters, reject_unknown
from .defaults import DEFAULT_MEMORY_TOKEN_LIMIT, DEFAULT_TOKEN_LIMIT, DEFAULT_TOP_K
from .settings import ExtractIn, InsertMethod, MemorySettings
from .wiring import build_memory

#: What ``secondary_memory_sources`` holds: llama-memory sources or LlamaIndex memories.
Source = Union[MemorySource, BaseMemory]


class MemoryFromDefaults(BaseMemory):
    """A LlamaIndex memory built from its options by :meth:`from_defaults`, each one a
    setting. :class:`~llama_memory.memory.composable.ComposableMemory` is the memory; this class
    holds no state of its own."""

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
        :class:`~llama_memory.memory.settings.MemorySettings`, checked before anything opens;
        the memory keeps them as :attr:`~llama_memory.memory.composable.ComposableMemory.settings`.

        Args:
            primary_memory: this conversation's memory; default a :class:`~llama_memory.write.buffer.ChatBuffer`
                of ``token_limit`` tokens, persisted under ``path`` per session.
            secondary_memory_sources: long-term sources; default one
                :class:`~llama_memory.sources.vector.VectorSource` of past messages (needs ``user_id``). Pass
                ``[]`` for a buffer-only memory.
            user_id: whose memory this is; required by long-term sources.
            session_id: this conversation; a new random id by default. Reopening a
                ``path`` with the same ``session_id`` resumes the conversation, and
                memory objects open on it at once (threads, web workers) share one
                window: each sees every committed message, in commit order.
            tenant_id: separates applications that share one store.
            path: a directory for the SQLite file and Chroma index; ``None`` (and no
                ``store``) keeps everything in memory.
            store: a PostgreSQL database instead of ``path``: a URL
                (``"postgresql://user@host:5432/dbname"``; install
                ``llama-index-memory-composable[postgres]``) or an open ``psycopg_pool.ConnectionPool``.
                Everything is kept there: chat logs, records, vectors (pgvector),
                profile, triples, jobs; app servers on several machines share one
                memory. Not with ``path`` or a Chroma argument (ValueError).
                :meth:`~llama_memory.memory.composable.ComposableMemory.to_dict` keeps the URL without its password: on restore, libpq
                reads it from ``PGPASSWORD`` or ``~/.pgpass``, or pass ``store=`` to
                :meth:`~llama_memory.memory.composable.ComposableMemory.from_dict` (or return it from a restore hook).
            embed_model: any LlamaIndex embedding; default ``Settings.embed_model``
                when one was set explicitly, else the offline MiniLM ONNX model.
            token_limit: token limit of the default chat buffer.
            memory_token_limit: token budget of the injected memory block.
            top_k: records retrieved per source.
            insert_method: ``"system"`` (into the system message) or ``"user"``
                (into the latest user message).
            tokenizer_fn: counts tokens (default tiktoken, as LlamaIndex).
            chroma_client: a Chroma client to use instead of the embedded one (its
                collections are named after the store's id, as in server mode).
            llm: a LlamaIndex LLM for sources that extract structured memories from
                the conversation (see :meth:`~llama_memory.memory.composable.ComposableMemory.extract`).
            extract_every: every this many user turns, ``put()`` queues an extraction
                pass (0: only when :meth:`~llama_memory.memory.composable.ComposableMemory.extract` is called); it runs in the
                background and never makes ``put()`` wait (see docs/formation.md).
                :meth:`~llama_memory.memory.composable.ComposableMemory.flush` waits for it.
            extract_after_quiet: seconds of quiet after which a pass falls due
                (debounce, as LangGraph's ``ReflectionExecutor``): each ``put()``
                pushes the session's queued pass back to now + this (0: off). With
                ``extract_every`` too, whichever comes first.
            formation_token_budget: LLM tokens (sent and received) the queued
                extraction passes of one user may use per day (UTC), whoever runs them;
                a pass due past it waits for the next day (nothing is lost). 0: no
                budget. A pass that starts under it runs whole (see docs/formation.md).
            extract_in: who runs the queued passes: ``"thread"`` (default), a thread
                of this memory, with ``llm`` (``extract_every`` or
                ``extract_after_quiet`` without ``llm`` is a ValueError);
                ``"worker"``: ``llama-memory worker --store PATH`` processes, which
                bring their own LLM (this memory needs none, but a ``path`` or
                ``store`` they can open).
            profile: the user-profile source (:class:`~llama_memory.sources.profile.ProfileSource`) on this
                memory's store. ``None``: part of the default sources only; ``True``
                or a pydantic model class (the profile's schema): also added to
                custom ``secondary_memory_sources``; ``False``: no profile.
            triples: also keep a knowledge-triple memory (:class:`~llama_memory.sources.triples.TripleSource`, on
                this memory's store and Chroma client), added to the default or the
                given sources unless one is there already; needs ``user_id``.
            chroma_host: server mode: keep the vectors of the default vector and
                triple sources on the Chroma server on this host
                (``chromadb.HttpClient``), shared by several processes. SQLite under
                ``path`` (required) stays the system of record. StorageError naming
                the address when the server cannot be reached. While it is down,
                reads raise and writes still land in SQLite (indexing waits). On
                open, this user's index is reconciled with the record (see
                :meth:`~llama_memory.memory.composable.ComposableMemory.reconcile`). ``chroma_client`` (any client) works the same way.
            chroma_port: the server's port, with ``chroma_host``.
            chroma_url: the server as a URL, ``"http://host:port"`` (instead of
                ``chroma_host``/``chroma_port``).
            ttl: time to live (seconds or a ``timedelta``) of the long-term records
                the default sources write: past messages, triples, profile values.
                ``None``: kept until forgotten. Expired records are never
                retrieved; :meth:`~llama_memory.memory.composable.ComposableMemory.purge_expired` deletes them.
            refresh_on_read: a record returned by ``get``/``search`` lives ``ttl``
                from then (like LangGraph's ``TTLConfig(refresh_on_read=True)``).
            clock: epoch seconds now, for expiry (default ``time.time``).
            chat_history: messages that start the conversation, as
                ``ChatMemoryBuffer.from_defaults(chat_history=...)`` takes them (chat
                engines pass it): like :meth:`~llama_memory.memory.composable.ComposableMemory.set`, they replace the session's stored
                messages and those new to it reach the long-term sources. An empty
                list changes nothing (a resumed session keeps its messages).
            reembed: switch the store to ``embed_model``: forget the model it recorded
                and embed every record of the default sources again from the system of
                record (the dense index is rebuilt) before returning. The way out of an
                :class:`~llama_memory.core.errors.EmbeddingModelError`; close the memories
                still open on the store with the old model first.
            min_relevance: records whose calibrated ``relevance`` (0..1, see
                :mod:`llama_memory.retrieval.relevance`) is below this stay out of the memory
                block; 0 keeps everything retrieved. Records not ranked by relevance
                (the profile, a custom source's records) are always kept.
            set_spread: a question that asks for a set ("what activities...", "how
                many...", :mod:`llama_memory.retrieval.set_questions`) gets ``set_spread`` x
                ``top_k`` records in the block (1: as many as any other question).
            owner_only: the store under ``path`` is private to the account that runs
                the process: a new memory directory is ``0700``, its SQLite file and
                Chroma index ``0600``/``0700``, whatever the umask; opening a store others
                can read logs one warning with the command that tightens it. ``False``
                leaves the modes to the umask (you manage permissions yourself). See
                docs/security.md.
            encryption_key: encrypt the SQLite store under ``path`` at rest (SQLCipher;
                install ``llama-index-memory-composable[encrypted]``) with this passphrase. ``None``: the
                ``LLAMA_MEMORY_ENCRYPTION_KEY`` environment variable when it is set, else
                a plain file. A wrong key, an encrypted store opened without one, or a
                plain store opened with one raise
                :class:`~llama_memory.core.errors.EncryptionError` saying which, before
                anything is written; ``llama-memory encrypt --store PATH`` encrypts an
                existing store. The key is never written: :meth:`~llama_memory.memory.composable.ComposableMemory.to_dict` and pickles
                mark that one is needed, and :meth:`~llama_memory.memory.composable.ComposableMemory.from_dict` asks for it again (or
                reads the environment variable). The Chroma index (vectors) is not
                encrypted (docs/security.md).
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
