"""Every option of a :class:`~llama_memory.memory.composable.ComposableMemory`, written once:
:class:`MemorySettings`. How to add an option: docs/architecture.md ("Settings: every
option once").
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Annotated, Any, Literal, Optional
from uuid import uuid4

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.memory.types import BaseMemory
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    ValidationInfo,
    field_serializer,
    field_validator,
)

from ..core.text import short
from ..core.types import ttl_seconds
from ..retrieval.excerpts import SET_SPREAD
from ..retrieval.relevance import DEFAULT_MIN_RELEVANCE
from ..sources.llama_index import check_sources
from ..storage.privacy import check_passphrase
from ..storage.registry import check_path
from . import DEFAULT_MEMORY_TOKEN_LIMIT, DEFAULT_TOKEN_LIMIT, DEFAULT_TOP_K
from .arguments import option_error, reject_unknown

__all__ = ["LIVE_OPTIONS", "MemorySettings", "check_formation", "qualified_name"]

InsertMethod = Literal["system", "user"]
ExtractIn = Literal["thread", "worker"]


def _relevance(value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise ValueError(
            f"min_relevance is a calibrated relevance between 0 and 1 (0 keeps every "
            f"record), got {value}"
        )
    return value


def _spread(value: float) -> float:
    if not value >= 1.0:
        raise ValueError(f"set_spread is 1 (a set question gets top_k records like any other) or more, got {value}")
    return value


def _non_negative(value: Any) -> Any:
    if value < 0:
        raise ValueError(f"must be zero or more, got {value}")
    return value


def _positive_tokens(value: int) -> int:
    if value <= 0:  # checked here, before the store opens, not by the buffer after it
        raise ValueError(f"token_limit must be a positive number of tokens, got {value}")
    return value


#: Field types with their checks.
Relevance = Annotated[float, AfterValidator(_relevance)]
Spread = Annotated[float, AfterValidator(_spread)]
Count = Annotated[int, AfterValidator(_non_negative)]
Seconds = Annotated[float, AfterValidator(_non_negative)]
#: What each check allows, said with the type when a value is not even of that type.
ALLOWED = {_relevance: "from 0 to 1", _spread: "of 1 or more", _non_negative: "of 0 or more",
           _positive_tokens: "of 1 or more"}  # fmt: skip


def check_formation(llm: Any, extract_every: int, extract_after_quiet: float, extract_in: str) -> None:
    """ValueError when automatic formation is asked for and nothing would run it
    (``extract_in="thread"`` needs an ``llm``; workers bring theirs)."""
    if llm is not None or extract_in != "thread" or not (extract_every or extract_after_quiet):
        return
    asked = f"extract_every={extract_every}" if extract_every else f"extract_after_quiet={extract_after_quiet}"
    raise ValueError(
        f"{asked} asks for automatic extraction passes, but this memory has no llm to run "
        "them: pass llm= (a LlamaIndex LLM), or extract_in='worker' when `llama-memory "
        "worker` processes run the passes with an LLM of their own; without either, "
        "leave extract_every and extract_after_quiet at 0 (memory.extract(llm=...) runs "
        "a pass on demand)"
    )


def qualified_name(cls: type) -> str:
    """``"module:QualName"`` of a class, the form :func:`~llama_memory.memory.restore.import_class` reads."""
    return f"{cls.__module__}:{cls.__qualname__}"


#: The options the pipelines read at every call: changed on an open memory
#: (``memory.top_k = 5``), each holds from the next call. Every other option is read once,
#: when the memory is built (whose memory and which conversation, where it is stored, the
#: buffer's size, the sources and their model): an open memory refuses a change of one
#: rather than go on with the old value while showing the new.
LIVE_OPTIONS = frozenset({
    "memory_token_limit", "top_k", "min_relevance", "set_spread", "insert_method",
    "llm", "extract_every", "extract_in", "extract_after_quiet", "formation_token_budget",
})  # fmt: skip
#: The live options checked together (:func:`check_formation`).
_FORMATION = ("llm", "extract_every", "extract_after_quiet", "extract_in")


class MemorySettings(BaseModel):
    """Every option of a memory, once, grouped: identity, location, budgets, retrieval,
    formation, expiry, sources. The keyword arguments of
    :meth:`ComposableMemory.from_defaults <llama_memory.memory.composable.ComposableMemory.from_defaults>`,
    checked when the settings are made: an unknown name is a TypeError naming the
    closest valid one, a bad value a TypeError or ValueError saying what was wrong,
    before anything opens.

    Frozen: ``memory.settings`` says what a memory was built with, resolved (its session
    id, absolute path, embedding model). Live objects (an llm, a client, a pool, custom
    sources) are fields too, left out of :meth:`data`.

    Example:
        ```python
        from llama_memory import MemorySettings

        settings = MemorySettings(user_id="alice", top_k=5)
        assert settings.data()["top_k"] == 5 and settings.tenant_id == "default"
        ```
    """

    # Each field's docstring is its description (use_attribute_docstrings): what
    # ComposableMemory.from_defaults' users read in the API reference and in help().
    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True, use_attribute_docstrings=True)

    # -- identity: whose memory, which conversation ----------------------------------------
    user_id: Optional[str] = None
    """Whose memory this is; required by long-term sources."""
    session_id: str = Field(default=None, validate_default=True)
    """This conversation; a new random id by default. Reopening a ``path`` with the same
    ``session_id`` resumes the conversation, and memory objects open on it at once
    (threads, web workers) share one window: each sees every committed message, in
    commit order."""
    tenant_id: str = "default"
    """Separates applications that share one store."""

    # -- location: where the store is ----------------------------------------------------
    path: Optional[str] = None
    """A directory for the SQLite file and Chroma index; ``None`` (and no ``store``) keeps
    everything in memory."""
    store: Any = Field(default=None, exclude=True)
    """A PostgreSQL database instead of ``path``: a URL
    (``"postgresql://user@host:5432/dbname"``; install
    ``llama-index-memory-composable[postgres]``) or an open ``psycopg_pool.ConnectionPool``.
    Everything is kept there: chat logs, records, vectors (pgvector), profile, triples,
    jobs; app servers on several machines share one memory. Not with ``path`` or a Chroma
    argument (ValueError). ``to_dict()`` keeps the URL without its password: on restore,
    libpq reads it from ``PGPASSWORD`` or ``~/.pgpass``, or pass ``store=`` to
    ``from_dict`` (or return it from a restore hook)."""
    chroma_client: Any = Field(default=None, exclude=True)
    """A Chroma client to use instead of the embedded one (its collections are named after
    the store's id, as in server mode)."""
    chroma_host: Optional[str] = None
    """Server mode: keep the vectors of the default vector and triple sources on the Chroma
    server on this host (``chromadb.HttpClient``), shared by several processes. SQLite
    under ``path`` (required) stays the system of record. StorageError naming the address
    when the server cannot be reached. While it is down, reads raise and writes still
    land in SQLite (indexing waits). On open, this user's index is reconciled with the
    record (see ``ComposableMemory.reconcile``). ``chroma_client`` (any client) works the
    same way."""
    chroma_port: int = 8000
    """The server's port, with ``chroma_host``."""
    chroma_url: Optional[str] = None
    """The server as a URL, ``"http://host:port"`` (instead of ``chroma_host``/``chroma_port``)."""

    # -- privacy on disk: who can read the files under path -------------------------------
    owner_only: bool = True
    """The store under ``path`` is private to the account that runs the process: a new
    memory directory is ``0700``, its SQLite file and Chroma index ``0600``/``0700``,
    whatever the umask; opening a store others can read logs one warning with the command
    that tightens it. ``False`` leaves the modes to the umask (you manage permissions
    yourself). See docs/security.md."""
    # A live secret: never in data(), to_dict() or a pickle (to_dict writes a marker that
    # makes from_dict ask for it again, or read it from the environment).
    encryption_key: Optional[SecretStr] = Field(default=None, exclude=True, repr=False)
    """Encrypt the SQLite store under ``path`` at rest (SQLCipher; install
    ``llama-index-memory-composable[encrypted]``) with this passphrase. ``None``: the
    ``LLAMA_MEMORY_ENCRYPTION_KEY`` environment variable when it is set, else a plain
    file. A wrong key, an encrypted store opened without one, or a plain store opened with
    one raise :class:`~llama_memory.core.errors.EncryptionError` saying which, before
    anything is written; ``llama-memory encrypt --store PATH`` encrypts an existing store.
    The key is never written: ``to_dict()`` and pickles mark that one is needed, and
    ``from_dict()`` asks for it again (or reads the environment variable). The Chroma
    index (vectors) is not encrypted (docs/security.md)."""

    # -- budgets: how much is kept and shown ---------------------------------------------
    token_limit: Annotated[int, AfterValidator(_positive_tokens)] = DEFAULT_TOKEN_LIMIT
    """Token limit of the default chat buffer."""
    memory_token_limit: Count = DEFAULT_MEMORY_TOKEN_LIMIT
    """Token budget of the injected memory block."""
    top_k: Count = DEFAULT_TOP_K
    """Records retrieved per source."""

    # -- retrieval: what goes into the block, and where ----------------------------------
    min_relevance: Relevance = DEFAULT_MIN_RELEVANCE
    """Records whose calibrated ``relevance`` (0..1, see :mod:`llama_memory.retrieval.relevance`)
    is below this stay out of the memory block; 0 keeps everything retrieved. Records not
    ranked by relevance (the profile, a custom source's records) are always kept."""
    set_spread: Spread = SET_SPREAD
    """A question that asks for a set ("what activities...", "how many...",
    :mod:`llama_memory.retrieval.excerpts`) gets ``set_spread`` x ``top_k`` records in
    the block (1: as many as any other question)."""
    insert_method: InsertMethod = "system"
    """``"system"`` (into the system message) or ``"user"`` (into the latest user message)."""

    # -- formation: who forms structured memories, and when ------------------------------
    llm: Any = Field(default=None, exclude=True)
    """A LlamaIndex LLM for sources that extract structured memories from the conversation
    (see ``ComposableMemory.extract``)."""
    extract_every: Count = 0
    """Every this many user turns, ``put()`` queues an extraction pass (0: only when
    ``extract()`` is called); it runs in the background and never makes ``put()`` wait
    (see docs/formation.md). ``flush()`` waits for it."""
    extract_in: ExtractIn = "thread"
    """Who runs the queued passes: ``"thread"`` (default), a thread of this memory, with
    ``llm`` (``extract_every`` or ``extract_after_quiet`` without ``llm`` is a
    ValueError); ``"worker"``: ``llama-memory worker --store PATH`` processes, which bring
    their own LLM (this memory needs none, but a ``path`` or ``store`` they can open)."""
    extract_after_quiet: Seconds = 0.0
    """Seconds of quiet after which a pass falls due (debounce, as LangGraph's
    ``ReflectionExecutor``): each ``put()`` pushes the session's queued pass back to now +
    this (0: off). With ``extract_every`` too, whichever comes first."""
    formation_token_budget: Count = 0
    """LLM tokens (sent and received) the queued extraction passes of one user may use per
    day (UTC), whoever runs them; a pass due past it waits for the next day (nothing is
    lost). 0: no budget. A pass that starts under it runs whole (see docs/formation.md)."""

    # -- expiry: how long long-term records live ------------------------------------------
    ttl: Optional[float] = None
    """Time to live (seconds or a ``timedelta``) of the long-term records the default
    sources write: past messages, triples, profile values. ``None``: kept until forgotten.
    Expired records are never retrieved; ``purge_expired()`` deletes them."""
    refresh_on_read: bool = False
    """A record returned by ``get``/``search`` lives ``ttl`` from then (like LangGraph's
    ``TTLConfig(refresh_on_read=True)``)."""
    clock: Optional[Callable[[], float]] = Field(default=None, exclude=True)
    """Epoch seconds now, for expiry (default ``time.time``)."""

    # -- sources: the conversation's buffer and the long-term memories --------------------
    primary_memory: Any = Field(default=None, exclude=True)
    """This conversation's memory; default a :class:`~llama_memory.write.buffer.ChatBuffer`
    of ``token_limit`` tokens, persisted under ``path`` per session."""
    secondary_memory_sources: Optional[list[Any]] = Field(default=None, exclude=True)
    """Long-term sources (llama-memory sources or any LlamaIndex ``BaseMemory``); default
    one :class:`~llama_memory.sources.vector.VectorSource` of past messages (needs
    ``user_id``). Pass ``[]`` for a buffer-only memory."""
    embed_model: Any = Field(default=None, exclude=True)
    """Any LlamaIndex embedding; default ``Settings.embed_model`` when one was set
    explicitly, else the offline MiniLM ONNX model."""
    tokenizer_fn: Optional[Callable[[str], Sequence]] = Field(default=None, exclude=True)
    """Counts tokens (default tiktoken, as LlamaIndex)."""
    profile: Any = None
    """The user-profile source (:class:`~llama_memory.sources.profile.ProfileSource`) on this
    memory's store. ``None``: part of the default sources only; ``True`` or a pydantic
    model class (the profile's schema): also added to custom ``secondary_memory_sources``;
    ``False``: no profile."""
    triples: bool = False
    """Also keep a knowledge-triple memory (:class:`~llama_memory.sources.triples.TripleSource`,
    on this memory's store and Chroma client), added to the default or the given sources
    unless one is there already; needs ``user_id``."""
    # An action on open, not a setting: a copy restored from to_dict must not repeat it.
    reembed: bool = Field(default=False, exclude=True)
    """Switch the store to ``embed_model``: forget the model it recorded and embed every
    record of the default sources again from the system of record (the dense index is
    rebuilt) before returning. The way out of an
    :class:`~llama_memory.core.errors.EmbeddingModelError`; close the memories still open
    on the store with the old model first."""

    def __init__(self, **data: Any) -> None:
        """Settings from keyword arguments; TypeError naming an unknown one and the
        closest valid one, TypeError or ValueError for a bad value."""
        reject_unknown("MemorySettings()", data, list(type(self).model_fields))
        try:
            super().__init__(**data)
        except ValidationError as error:  # pydantic's own words, with its dump and URL
            raise option_error(error, type(self).model_fields, ALLOWED) from None
        self._check_together()

    def _check_together(self) -> None:
        """ValueError for options that contradict each other (raised as such, not
        wrapped in a ValidationError)."""
        check_formation(self.llm, self.extract_every, self.extract_after_quiet, self.extract_in)
        if not self.tenant_id.strip():
            raise ValueError(
                f"tenant_id names the application the memory belongs to, and {self.tenant_id!r} "
                "is blank: leave it at 'default' or pass a name"
            )
        if self.path is not None:
            check_path(self.path)
        if self.encryption_key is not None:
            check_passphrase(self.encryption_key.get_secret_value(), "encryption_key")
        if self.encryption_key is not None and self.path is None:
            raise ValueError(
                "encryption_key encrypts the SQLite file under path=, and this memory has none "
                + ("(a PostgreSQL store= is protected by the server: rights, TLS and disk "
                   "encryption, see docs/security.md)" if self.store is not None
                   else "(an in-memory store writes nothing to disk)")
            )  # fmt: skip
        if self.store is not None:
            if self.path is not None:
                raise ValueError(
                    f"pass path= (a directory for SQLite and Chroma) or store= (a PostgreSQL URL or "
                    f"pool), not both: got path={self.path!r} and store=..."
                )
            if self.chroma_client is not None or self.chroma_host is not None or self.chroma_url is not None:
                raise ValueError(
                    "with store= the vectors live in PostgreSQL (pgvector), in the same database: "
                    "chroma_client, chroma_host and chroma_url go with path= only; drop them"
                )
        elif self.path is None and self.extract_in == "worker" and (self.extract_every or self.extract_after_quiet):
            raise ValueError(
                "extract_in='worker' queues the passes for `llama-memory worker` processes, which "
                "cannot reach an in-memory store: give the memory a path= (or a PostgreSQL "
                "store=), or run the passes in this process (extract_in='thread' with llm=)"
            )

    @field_validator("user_id", "session_id", "tenant_id", mode="before")
    @classmethod
    def _an_id(cls, value: Any, info: ValidationInfo) -> Any:
        # An application's ids are often numbers (a database key): said with the fix,
        # not as a validator's "Input should be a valid string".
        if value is not None and not isinstance(value, str):
            raise TypeError(
                f"{info.field_name} takes a string, not {type(value).__name__} {short(value)}: "
                f"pass {info.field_name}={str(value)!r}"
            )
        if info.field_name == "session_id":
            return value or uuid4().hex  # a new conversation
        return value

    @field_validator("path", mode="before")
    @classmethod
    def _a_directory(cls, value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, os.PathLike):
            return os.fspath(value)
        raise TypeError(
            f"path takes a directory as a str or pathlib.Path, not {type(value).__name__} "
            f"{value!r}: pass e.g. path='./memory'"
        )

    @field_validator("encryption_key", mode="before")
    @classmethod
    def _a_passphrase(cls, value: Any) -> Any:
        if value is None or isinstance(value, SecretStr):
            return value
        if not isinstance(value, str):
            raise TypeError(f"encryption_key takes a passphrase (a string), not {type(value).__name__}")
        return value  # an empty or blank one: ValueError in _check_together, as such

    @field_validator("secondary_memory_sources")
    @classmethod
    def _sources(cls, value: Any) -> Any:
        if value is not None:
            check_sources(value)
        return value

    @field_validator("primary_memory")
    @classmethod
    def _a_memory(cls, value: Any) -> Any:
        if value is None or isinstance(value, BaseMemory):
            return value
        # A str first (from_defaults("alice", ...)) was most likely meant as the user.
        raise TypeError(
            f"primary_memory takes a LlamaIndex memory (a BaseMemory such as ChatMemoryBuffer), "
            f"not {type(value).__name__} {short(value)}"
            + (f"; to name the user, pass user_id={value!r}" if isinstance(value, str) else "")
        )

    @field_validator("ttl", mode="before")
    @classmethod
    def _in_seconds(cls, value: Any) -> Optional[float]:
        return ttl_seconds(value)

    @field_validator("embed_model")
    @classmethod
    def _an_embedding(cls, value: Any) -> Any:
        if value is None or isinstance(value, BaseEmbedding):
            return value
        if isinstance(value, str) and (value == "default" or value.split(":")[0] == "local"):
            # LlamaIndex's own shorthands (resolve_embed_model), which name no OpenAI model.
            raise TypeError(
                f"embed_model takes an embedding object, not LlamaIndex's shorthand {value!r}: "
                "leave embed_model out for the offline default (all-MiniLM-L6-v2, no download), "
                f"or pass e.g. HuggingFaceEmbedding(model_name={repr(value.partition(':')[2]) if ':' in value else '...'}) (from "
                "llama_index.embeddings.huggingface), or any LlamaIndex BaseEmbedding"
            )
        if isinstance(value, str):
            raise TypeError(
                f"embed_model takes an embedding object, not the model name {value!r}: pass "
                f"e.g. OpenAIEmbedding(model={value!r}) (from llama_index.embeddings.openai), "
                "or any LlamaIndex BaseEmbedding"
            )
        raise TypeError(
            f"embed_model takes a LlamaIndex embedding (a BaseEmbedding such as "
            f"OpenAIEmbedding(...)), not {type(value).__name__} {short(value)}"
        )

    @field_validator("llm")
    @classmethod
    def _an_llm(cls, value: Any) -> Any:
        # Only a name is refused: custom sources may take an LLM-like object of their own.
        if isinstance(value, str):
            raise TypeError(
                f"llm takes an LLM object, not the model name {value!r}: pass e.g. "
                f"OpenAI(model={value!r}) (from llama_index.llms.openai), or any LlamaIndex LLM"
            )
        return value

    @field_validator("profile")
    @classmethod
    def _a_profile(cls, value: Any) -> Any:
        if value is None or isinstance(value, bool) or (isinstance(value, type) and issubclass(value, BaseModel)):
            return value
        raise TypeError(f"profile takes True, False, None or a pydantic model class, not {value!r}")

    @field_serializer("profile")
    def _profile_by_name(self, value: Any) -> Any:
        return qualified_name(value) if isinstance(value, type) else value

    def needs_user(self) -> Optional[str]:
        """What of these settings needs a ``user_id`` (named for the error): the default
        sources, a profile or triples; None for a buffer-only memory."""
        if self.secondary_memory_sources is None:
            return "the default long-term (vector) memory"
        if self.profile is not None and self.profile is not False:
            return "the profile memory"
        if self.triples:
            return "the knowledge-triple memory"
        return None

    @property
    def persistent(self) -> bool:
        """Whether the store outlives this process (a ``path`` or a PostgreSQL ``store``)."""
        return self.path is not None or self.store is not None

    def changed(self, name: str, value: Any) -> MemorySettings:
        """These settings with the option ``name`` set to ``value`` on an open memory
        (``memory.<name> = value``), checked as when settings are made (TypeError or
        ValueError saying what was wrong). AttributeError for an option not in
        :data:`LIVE_OPTIONS`: the memory read it when it was built."""
        if name not in LIVE_OPTIONS:
            whose = " (whose conversation and records it reads and writes)"
            raise AttributeError(
                f"{name} is fixed when a memory opens, and this one keeps the value it opened "
                f"with{whose if name in ('user_id', 'session_id', 'tenant_id') else ''}: for another "
                f"value, open another memory, ComposableMemory.from_defaults(..., {name}=...). "
                f"An open memory can change {', '.join(sorted(LIVE_OPTIONS))}"
            )
        checked = type(self)(**{**{option: getattr(self, option) for option in _FORMATION}, name: value})
        return self.model_copy(update={name: getattr(checked, name)})

    def data(self) -> dict[str, Any]:
        """The options as plain JSON data (live objects left out: see
        :func:`~llama_memory.memory.restore.live_markers`); ``MemorySettings(**data)`` reads
        them back, with a profile schema given as its class."""
        return self.model_dump(mode="json")

