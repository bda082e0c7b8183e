"""Building a memory: the composition root. It asks the backend registry to open the
store at the location given, builds the default sources on the backend's parts, and hands
the memory its ports, never knowing which backend it is.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, TypeVar, Union, cast

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory.types import BaseMemory
from llama_index.core.utils import get_tokenizer

from ..core.types import Expiry, Scope
from ..embeddings.store_model import forget_embedding_model
from ..sources.base import ProfileHolder, TripleHolder
from ..sources.instructions import Instructions
from ..sources.profile import ProfileSource
from ..sources.triples import TRIPLE_COLLECTION, TripleSource
from ..sources.vector import VectorSource
from ..storage.backend import Location, OpenBackend
from ..storage.registry import backend_of, open_backend
from ..storage.sql.store import Storage
from ..write.buffer import ChatBuffer
from ..write.formation.answer import warm_up
from .settings import MemorySettings

if TYPE_CHECKING:
    from .runtime import Facade

logger = logging.getLogger(__name__)


#: The memory class built: a LlamaIndex memory (a pydantic model) whose fields that are
#: settings too are set from the settings, and that is a
#: :class:`~llama_memory.memory.runtime.Facade`.
M = TypeVar("M", bound=BaseMemory)

#: Collection-name prefix of the default vector source (one collection per user).
VECTOR_COLLECTION = "llama_memory_vector"
#: Every kind of dense-index collection the default sources keep for a user:
#: ``forget()`` drops them all, also those of sources the memory was not opened with.
DENSE_COLLECTIONS = (VECTOR_COLLECTION, TRIPLE_COLLECTION)


def build_memory(
    cls: type[M], settings: MemorySettings, history: Sequence[ChatMessage] = (), *, session_id_given: bool = True
) -> M:
    """What :meth:`ComposableMemory.from_defaults` does: open the store at the settings'
    location, build the memory on it (:func:`memory_on`), then reconcile, re-embed or set
    the history asked for. ``session_id_given``: the application chose the session id."""
    needing = settings.needs_user()
    if needing is not None:  # refused before the store is created: nothing left on disk
        example = "user_id='alice'"
        if settings.secondary_memory_sources is None:  # SimpleComposableMemory's default is no source
            example += ", or secondary_memory_sources=[] for this conversation's buffer alone"
        Scope(settings.user_id, settings.session_id, settings.tenant_id).require_user(needing, example)
    # The backend of the location given; a bad path or contradicting index settings
    # fail here, before anything is created.
    backend = open_backend(Location.of(settings))
    store, path = backend.store, backend.path
    try:
        built = memory_on(cls, settings, backend, session_id_given=session_id_given)
        memory = cast("Facade", built)
        memory.runtime.store = store
        memory.runtime.drop_dense = lambda owner: backend.drop_dense(owner, DENSE_COLLECTIONS)
    except BaseException:
        store.close()  # a source refused (another embedding model...): no store left open
        raise
    try:  # re-embed, catch up or set the history asked for; no store left open behind a failure
        if settings.reembed:
            count = memory.reindex()
            logger.info("store %s re-embedded with %s: %d records", path, memory.runtime.settings.embed_model, count)
        elif backend.index_drifts and settings.user_id:
            # An index on a server (or any given client) can drift from the record while
            # this store is closed: catch this user's up now (one Chroma read per
            # source). Missing vectors are flagged and embedded on the first read;
            # orphans are deleted at once. Other users: reconcile().
            reports = memory.runtime.reconcile(False, memory.scope)
            logger.info("dense index of %r reconciled on open: %s", settings.user_id, reports)
        if history:
            memory.set(list(history))
    except Exception:
        memory.close()
        raise
    if settings.llm is not None and settings.extract_in == "thread" and (
        settings.extract_every or settings.extract_after_quiet
    ):
        # The first pass's one-time Python work, paid here rather than by the worker
        # thread while put() and get() run (it holds the GIL): see docs/benchmarks.md.
        warm_up(memory.runtime.pass_parts())
    return built


def memory_on(cls: type[M], settings: MemorySettings, backend: OpenBackend, *, session_id_given: bool = True) -> M:
    """The memory ``settings`` describe on an open backend's parts: its primary memory,
    the sources given or the default ones, the user's instructions. The store is not
    attached (:func:`build_memory` attaches the one it opened)."""
    tokenizer = settings.tokenizer_fn or get_tokenizer()
    scope = Scope(user_id=settings.user_id, session_id=settings.session_id, tenant_id=settings.tenant_id)
    clock = {"clock": settings.clock} if settings.clock else {}
    expiry = Expiry(ttl=settings.ttl, refresh_on_read=settings.refresh_on_read, **clock)
    primary_memory = settings.primary_memory
    if primary_memory is None:
        primary_memory = ChatBuffer.from_defaults(
            token_limit=settings.token_limit, tokenizer_fn=tokenizer, chat_log=backend.chat_log(scope)
        )
    sources = settings.secondary_memory_sources
    default_sources = sources is None
    # The one model of the default sources, recorded by to_dict.
    model = resolve_embed_model(settings.embed_model) if default_sources or settings.triples else None
    if settings.reembed:
        forget_embedding_model(backend.store, vector=default_sources, triples=settings.triples)
    # (A user is named: the settings refused long-term sources without one.)
    if sources is None:
        sources = [vector_source(backend, model, expiry)]
    profile = settings.profile
    if profile is not False and (default_sources or profile is not None):
        if not any(isinstance(s, ProfileHolder) for s in sources):
            schema = profile if isinstance(profile, type) else None
            sources = [*sources, ProfileSource(backend.profile_rows(), schema=schema, expiry=expiry)]
    if settings.triples and not any(isinstance(s, TripleHolder) for s in sources):
        sources = [*sources, triple_source(backend, resolve_embed_model(model), expiry=expiry)]
    parts: dict[str, Any] = {
        "primary_memory": primary_memory, "secondary_memory_sources": sources, "tokenizer_fn": tokenizer,
    }
    built = cls(**parts)
    runtime = cast("Facade", built).runtime
    # The settings as opened, which to_dict writes: the location as its backend writes
    # it (an absolute path, a URL without its password, a server by its URL).
    runtime.settings = settings.model_copy(update={"embed_model": model, **backend.settings})
    runtime.instructions = open_instructions(backend, scope, settings.clock)
    runtime.session_id_given = session_id_given
    return built


def open_instructions(
    backend: OpenBackend, scope: Scope, clock: Optional[Callable[[], float]] = None
) -> Optional[Instructions]:
    """The user's instructions (procedural memory) in the backend's store, or None for
    a memory without a user (instructions are a user's)."""
    if scope.user_id is None:
        return None
    rows = backend.profile_rows("instructions")
    return Instructions(rows, scope, **({"clock": clock} if clock else {}))


def vector_source(backend: OpenBackend, embed_model: Optional[BaseEmbedding], expiry: Expiry) -> VectorSource:
    """The default long-term source: past messages in the backend's store, their
    vectors in its dense index."""
    index = backend.vector_index(VECTOR_COLLECTION)
    return VectorSource(backend.store, index, resolve_embed_model(embed_model), expiry=expiry)


def triple_source(backend: OpenBackend, embed_model: BaseEmbedding, **kwargs: Any) -> TripleSource:
    """The triple source on the backend's triple timeline and its dense index.
    ``kwargs`` go to the source."""
    index = backend.vector_index(TRIPLE_COLLECTION)
    return TripleSource(backend.triple_timeline(), index, embed_model, **kwargs)


def default_vector_source(
    store: Storage, path: Optional[Union[str, Path]], embed_model: Optional[BaseEmbedding], chroma_client: Any = None,
    expiry: Optional[Expiry] = None,
) -> VectorSource:  # fmt: skip
    """The default long-term source on an open store: past messages in it, their vectors
    in its backend's dense index."""
    backend = backend_of(store, Location(path=_text(path), chroma_client=chroma_client))
    return vector_source(backend, embed_model, expiry or Expiry())


def default_triple_source(
    store: Storage, path: Optional[Union[str, Path]], embed_model: BaseEmbedding, chroma_client: Any = None,
    **kwargs: Any,
) -> TripleSource:  # fmt: skip
    """A :class:`TripleSource` on ``store``'s triple timeline and its backend's dense
    index; ``kwargs`` go to the source."""
    backend = backend_of(store, Location(path=_text(path), chroma_client=chroma_client))
    return triple_source(backend, embed_model, **kwargs)


def default_profile_source(store: Storage, **kwargs: Any) -> ProfileSource:
    """A :class:`ProfileSource` on ``store``'s profile rows (the table is created or
    migrated on open). ``kwargs`` go to the source (``schema``, ``expiry``...)."""
    return ProfileSource(backend_of(store).profile_rows(), **kwargs)


def _text(path: Optional[Union[str, Path]]) -> Optional[str]:
    return None if path is None else os.fspath(path)


def resolve_embed_model(embed_model: Optional[BaseEmbedding]) -> BaseEmbedding:
    """The given model, else ``Settings.embed_model`` if one was set, else the offline default."""
    if embed_model is not None:
        return embed_model
    from llama_index.core import Settings

    configured = getattr(Settings, "_embed_model", None)
    if configured is not None:
        return configured
    from ..embeddings.offline import default_embedding

    return default_embedding()
