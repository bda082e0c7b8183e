"""Building a memory: the composition root, where backends are chosen and wired.

:meth:`ComposableMemory.from_defaults <llama_memory.memory.ComposableMemory.from_defaults>`
lands here. This module opens the store (SQLite under ``path``, or PostgreSQL with
pgvector from ``store=``) and the dense index (embedded Chroma, a given client, a
Chroma server from its address, or pgvector in the PostgreSQL store), builds the
default sources (past messages, profile, triples) on them, and hands the memory the
ports it works through. The memory class itself knows no backend: a second backend
is wired in here.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, TypeVar, Union

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.utils import get_tokenizer

from .arguments import short
from .buffer import ChatBuffer
from .errors import StorageError
from .formation import warm_up
from .instructions import Instructions
from .settings import MemorySettings
from .sources.base import ProfileHolder, TripleHolder
from .sources.dimension import forget_embedding_model
from .sources.profile import ProfileSource
from .sources.triples import TRIPLE_COLLECTION, TripleSource
from .sources.vector import VectorSource
from .storage.chroma import (
    CHROMA_DIRNAME,
    http_client,
    open_index,
    persistent_client,
    server_address,
)
from .storage.expiry import Expiry
from .storage.ports import Storage
from .storage.sqlite import DB_FILENAME, SQLiteStore, memory_path, store_exists
from .storage.sqlite.driver import sqlite_driver
from .storage.sqlite.profile import SQLiteProfileRows
from .storage.sqlite.triples import SQLiteTripleTimeline
from .types import Scope

if TYPE_CHECKING:
    from .memory import ComposableMemory

logger = logging.getLogger(__name__)

M = TypeVar("M", bound="ComposableMemory")

#: Collection-name prefix of the default vector source (one collection per user).
VECTOR_COLLECTION = "llama_memory_vector"
#: Every kind of dense-index collection the default sources keep for a user:
#: ``forget()`` drops them all, also those of sources the memory was not opened with.
DENSE_COLLECTIONS = (VECTOR_COLLECTION, TRIPLE_COLLECTION)


def build_memory(cls: type[M], settings: MemorySettings, history: Sequence[ChatMessage] = ()) -> M:
    """What :meth:`ComposableMemory.from_defaults` does (its docstring says what each
    setting means): open the store and the dense index, build the default sources,
    construct the memory, then reconcile, re-embed or set the history it was asked to."""
    postgres = settings.store is not None
    path = settings.path
    if path is not None:
        memory_path(path)  # a URL fails here, before anything is created
        # Absolute at creation: a saved dict (a workflow Context) restored from another
        # working directory must reopen this store, not a new one there.
        path = os.path.abspath(os.path.expanduser(path))
    tokenizer = settings.tokenizer_fn or get_tokenizer()
    scope = Scope(user_id=settings.user_id, session_id=settings.session_id, tenant_id=settings.tenant_id)
    clock = {"clock": settings.clock} if settings.clock else {}
    expiry = Expiry(ttl=settings.ttl, refresh_on_read=settings.refresh_on_read, **clock)
    chroma_client = settings.chroma_client
    server = None if postgres else chroma_server(settings)
    if server is not None:
        chroma_client = http_client(*server)
    store: Any = open_postgres(settings.store) if postgres else open_sqlite(path, settings)
    try:
        primary_memory = settings.primary_memory
        if primary_memory is None:
            primary_memory = ChatBuffer.from_defaults(
                token_limit=settings.token_limit,
                tokenizer_fn=tokenizer,
                chat_log=store.chat_log(scope) if path is not None or postgres else None,
            )
        sources = settings.secondary_memory_sources
        default_sources = sources is None
        # The one model of the default sources, recorded by to_dict.
        model = resolve_embed_model(settings.embed_model) if default_sources or settings.triples else None
        if settings.reembed:
            forget_embedding_model(store, vector=default_sources, triples=settings.triples)
        if sources is None:
            scope.require_user("the default long-term (vector) memory")
            sources = [
                postgres_vector_source(store, model, expiry)
                if postgres
                else default_vector_source(store, path, model, chroma_client, expiry)
            ]
        profile = settings.profile
        if profile is not False and (default_sources or profile is not None):
            scope.require_user("the profile memory")
            if not any(isinstance(s, ProfileHolder) for s in sources):
                schema = profile if isinstance(profile, type) else None
                sources = [*sources, (
                    ProfileSource(postgres_profile_rows(store), schema=schema, expiry=expiry)
                    if postgres
                    else default_profile_source(store, schema=schema, expiry=expiry)
                )]
        if settings.triples and not any(isinstance(s, TripleHolder) for s in sources):
            scope.require_user("the knowledge-triple memory")
            sources = [*sources, (
                postgres_triple_source(store, resolve_embed_model(model), expiry)
                if postgres
                else default_triple_source(store, path, resolve_embed_model(model), chroma_client, expiry=expiry)
            )]
        # The settings as opened, which to_dict writes: the URL of a PostgreSQL store
        # without its password, a Chroma server by its URL.
        url = f"{'https' if server[2] else 'http'}://{server[0]}:{server[1]}" if server else None
        opened = settings.model_copy(update={
            "path": path, "embed_model": model,
            "store": store.url if isinstance(settings.store, str) else settings.store,
            **({"chroma_host": None, "chroma_port": 8000, "chroma_url": url} if server else {}),
        })
        memory = cls(**{
            **{name: getattr(opened, name) for name in cls.model_fields if name in MemorySettings.model_fields},
            "primary_memory": primary_memory, "secondary_memory_sources": sources, "tokenizer_fn": tokenizer,
        })
        memory._opened(
            store,
            opened,
            # PostgreSQL: the vectors are rows that delete_user removed in its transaction.
            drop_dense=(lambda owner: None) if postgres
            else lambda owner: drop_dense_collections(memory.path, chroma_client, store, owner),
            instructions=open_instructions(store, scope, settings.clock),
        )
    except BaseException:
        store.close()  # a source refused (another embedding model...): no store left open
        raise
    if settings.reembed:
        try:
            count = memory.reindex()
        except Exception:
            memory.close()
            raise
        logger.info("store %s re-embedded with %s: %d records", path, model, count)
    elif chroma_client is not None and settings.user_id:
        # An index on a server (or any given client) can drift from the record while
        # this store is closed: catch this user's up now (one Chroma read per
        # source). Missing vectors are flagged and embedded on the first read;
        # orphans are deleted at once. Other users: reconcile().
        try:
            reports = memory._reconcile_sources(False, memory.scope)
        except Exception:
            memory.close()  # do not leave the store open behind a failed open
            raise
        logger.info("dense index of %r reconciled on open: %s", settings.user_id, reports)
    if history:
        try:
            memory.set(list(history))
        except Exception:
            memory.close()  # as above: no store left open behind a failed open
            raise
    if settings.llm is not None and settings.extract_in == "thread" and (
        settings.extract_every or settings.extract_after_quiet
    ):
        # The first pass's one-time Python work, paid here rather than by the worker
        # thread while put() and get() run (it holds the GIL): see docs/benchmarks.md.
        warm_up(memory._pass_parts())
    return memory


# Hook (SQLite bundle): how a SQLite store opens its file (encryption key, owner-only modes).
def open_sqlite(path: Optional[str], settings: MemorySettings) -> SQLiteStore:
    """The SQLite store under ``path`` (None: in memory), opened as the settings ask:
    through SQLCipher with ``encryption_key`` (or the environment's key), its files
    owner-only unless ``owner_only=False``."""
    if path is None:
        return SQLiteStore(None)
    return SQLiteStore(path, driver=sqlite_driver(settings.encryption_key, owner_only=settings.owner_only))


def open_postgres(store: Any) -> Any:
    """A :class:`~llama_memory.storage.postgres.PostgresStore` on ``store`` (a
    ``postgresql://`` URL or a ``psycopg_pool.ConnectionPool``); ImportError naming the
    extra to install when psycopg is missing."""
    if any(cls.__name__ == "PostgresStore" for cls in type(store).__mro__):  # (psycopg may be missing)
        raise TypeError(
            "store takes a PostgreSQL URL or a psycopg_pool.ConnectionPool, not a PostgresStore "
            "(a memory opens its own): to share connections among memories, or to pass pool "
            "settings such as prepare_threshold, pass a pool, e.g. "
            "ConnectionPool(url, kwargs={'prepare_threshold': None})"
        )
    if not isinstance(store, str) and type(store).__module__.split(".")[0] != "psycopg_pool":
        raise TypeError(
            f"store takes a PostgreSQL URL ('postgresql://user@host:5432/dbname') or a "
            f"psycopg_pool.ConnectionPool, not {type(store).__name__} {short(store)}; for a "
            "SQLite directory pass path= instead"
        )
    try:
        from .storage.postgres import PostgresStore
    except ImportError as exc:
        raise ImportError(
            f"store= needs the PostgreSQL driver ({exc}): pip install 'llama-memory[postgres]'"
        ) from exc
    return PostgresStore(store)


def postgres_vector_source(store: Any, embed_model: Optional[BaseEmbedding], expiry: Expiry) -> VectorSource:
    """The default long-term source on a PostgreSQL store, its vectors in pgvector."""
    from .storage.postgres import PgVectorIndex

    index = PgVectorIndex(store, VECTOR_COLLECTION)
    return VectorSource(store, index, resolve_embed_model(embed_model), expiry=expiry)


def postgres_profile_rows(store: Any, document: str = "profile") -> Any:
    """The profile rows port on a PostgreSQL store (``document``: ``"profile"`` or
    ``"instructions"``)."""
    from .storage.postgres import PostgresProfileRows

    return PostgresProfileRows(store, document)


def open_instructions(store: Any, scope: Scope, clock: Optional[Callable[[], float]] = None) -> Optional[Instructions]:
    """The user's instructions (procedural memory) in ``store`` (SQLite or PostgreSQL),
    or None for a memory without a user (instructions are a user's)."""
    if scope.user_id is None:
        return None
    rows = (
        SQLiteProfileRows(store, document="instructions")
        if isinstance(store, SQLiteStore)
        else postgres_profile_rows(store, "instructions")
    )
    return Instructions(rows, scope, **({"clock": clock} if clock else {}))


def postgres_triple_source(store: Any, embed_model: BaseEmbedding, expiry: Expiry) -> Any:
    """The triple source on a PostgreSQL store, its vectors in pgvector."""
    from .sources.triples import TripleSource
    from .storage.postgres import PgVectorIndex, PostgresTripleTimeline

    index = PgVectorIndex(store, TRIPLE_COLLECTION)
    return TripleSource(PostgresTripleTimeline(store), index, embed_model, expiry=expiry)


def default_vector_source(
    store: SQLiteStore,
    path: Optional[Union[str, Path]],
    embed_model: Optional[BaseEmbedding],
    chroma_client: Any = None,
    expiry: Optional[Expiry] = None,
) -> VectorSource:
    """The default long-term source: past messages in SQLite + a Chroma index (on
    ``chroma_client`` when given, with collections named after the store's id)."""
    namespace = store.store_id if chroma_client is not None else None
    index = open_index(VECTOR_COLLECTION, path, chroma_client, namespace)
    return VectorSource(store, index, resolve_embed_model(embed_model), expiry=expiry or Expiry())


def default_triple_source(
    store: SQLiteStore,
    path: Optional[Union[str, Path]],
    embed_model: BaseEmbedding,
    chroma_client: Any = None,
    **kwargs: Any,
) -> TripleSource:
    """A :class:`TripleSource` on ``store``'s triple timeline with a Chroma index beside
    it: the given client (a server's; collections named after the store's id), else the
    persistent one under ``path``, else (in memory) collections of its own in the
    process-wide ephemeral client. ``kwargs`` go to the source."""
    namespace = store.store_id if chroma_client is not None else None
    index = open_index(TRIPLE_COLLECTION, path, chroma_client, namespace)
    return TripleSource(SQLiteTripleTimeline(store), index, embed_model, **kwargs)


def default_profile_source(store: SQLiteStore, **kwargs: Any) -> ProfileSource:
    """A :class:`ProfileSource` on ``store``'s profile rows (the table is created or
    migrated on open). ``kwargs`` go to the source (``schema``, ``expiry``...)."""
    return ProfileSource(SQLiteProfileRows(store), **kwargs)


def drop_dense_collections(
    path: Optional[str], client: Any, store: SQLiteStore, owner: tuple[str, str]
) -> None:
    """Drop one (tenant, user)'s collections of every kind the default sources keep, on
    the store's Chroma (its namespace on a given client or server, else the embedded
    index under ``path``): a source the memory was not opened with (triples) may have
    written some. An in-memory store shares its collections with no one."""
    namespace = store.store_id if client is not None else None
    if client is None:
        if path is None or not (Path(path) / CHROMA_DIRNAME).is_dir():
            return  # no Chroma index was ever created beside this store
        client = persistent_client(path)
    for prefix in DENSE_COLLECTIONS:
        open_index(prefix, None, client, namespace).drop(*owner)


def check_restorable(path: Optional[str]) -> None:
    """StorageError unless ``path`` (a restored memory's) holds a store: restoring
    never opens a new, empty memory in its place."""
    if path is not None and not store_exists(path):
        raise StorageError(
            f"cannot restore this memory: its store {path} does not exist (no "
            f"{DB_FILENAME} there; moved or deleted?). Pass path= to from_dict with where "
            "the store is now; restoring never opens a new, empty memory in its place "
            "(ComposableMemory.from_defaults starts one)"
        )


def chroma_server(settings: MemorySettings) -> Optional[tuple[str, int, bool]]:
    """``(host, port, ssl)`` of the Chroma server the settings ask for, or None;
    ValueError for contradicting settings."""
    host, url = settings.chroma_host, settings.chroma_url
    if host is None and url is None:
        return None
    if host is not None and url is not None:
        raise ValueError("pass chroma_host (and chroma_port) or chroma_url, not both")
    if settings.chroma_client is not None:
        raise ValueError("pass chroma_client or a Chroma server address, not both")
    if settings.path is None:
        raise ValueError(
            "server mode needs path=: SQLite under path is the system of record, and "
            "vectors on a shared server must not outlive an in-memory store"
        )
    if url is not None:
        return server_address(url)
    return host, int(settings.chroma_port), False


def resolve_embed_model(embed_model: Optional[BaseEmbedding]) -> BaseEmbedding:
    """The given model, else ``Settings.embed_model`` if one was set, else the offline default."""
    if embed_model is not None:
        return embed_model
    from llama_index.core import Settings

    configured = getattr(Settings, "_embed_model", None)
    if configured is not None:
        return configured
    from .embeddings import default_embedding

    return default_embedding()


def open_queue(path: Union[str, Path]) -> Storage:
    """The existing store under ``path`` (or the PostgreSQL store at a ``postgresql://``
    URL), for a worker process to claim jobs from; StorageError when a directory holds
    none (a worker never creates an empty store)."""
    if isinstance(path, str) and path.startswith(("postgresql://", "postgres://")):
        return open_postgres(path)  # type: ignore[no-any-return]
    check_restorable(os.fspath(path))
    return SQLiteStore(path)
