"""What a serialised ``ComposableMemory`` carries of its live parts, and the hook for the
parts a dict cannot carry: workflows rebuild a memory with ``from_dict(data)`` and no
arguments, so classes are named by import path, components by their ``to_dict``, and what
cannot be written down by a marker that makes restoring ask for it.
"""

from __future__ import annotations

import importlib
import json
import pickle
import threading
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Optional, TypeVar

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory.types import BaseMemory

from ..core.errors import EncryptionError, LlamaMemoryError, NotPicklableError, RestoreWarning
from ..core.text import short
from ..storage.privacy import ENCRYPTION_KEY_ENV, environment_key
from ..storage.registry import require_store
from .settings import MemorySettings, check_formation, qualified_name

if TYPE_CHECKING:
    from .runtime import Facade

M = TypeVar("M", bound="Facade")

#: Called by ``ComposableMemory.from_dict`` with the serialised dict; returns keyword
#: arguments for ``from_dict`` (``llm=``, ``embed_model=``, ``secondary_memory_sources=``...).
RestoreHook = Callable[[dict[str, Any]], Optional[Mapping[str, Any]]]

_hook_lock = threading.Lock()
_hook: Optional[RestoreHook] = None

# Field names (split on "_") that hold credentials: never written into a saved context.
_SECRET_WORDS = frozenset({"secret", "password", "token", "apikey", "credential", "credentials"})
_SECRET_PAIRS = (("api", "key"), ("access", "key"), ("private", "key"))


def set_restore_hook(hook: Optional[RestoreHook]) -> Optional[RestoreHook]:
    """Set the process-wide hook that supplies what a memory's dict cannot carry.

    ``Context.from_dict(agent, data)`` rebuilds a memory with
    ``ComposableMemory.from_dict(data)`` and no arguments: a live LLM, custom sources, a
    Chroma client or a custom tokenizer can then only come from here. The hook receives
    the memory's dict and returns keyword arguments for ``from_dict`` (or None);
    arguments passed to ``from_dict`` itself win.

    Args:
        hook: the function, or None to remove it.

    Returns:
        The hook set before (to put it back later).
    """
    global _hook
    if hook is not None and not callable(hook):
        raise TypeError(
            f"set_restore_hook takes a function of the memory's dict returning keyword "
            f"arguments (or None to remove it), not {hook!r}"
        )
    with _hook_lock:
        previous, _hook = _hook, hook
    return previous


def restore_hook_arguments(data: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments the restore hook gives for ``data`` ({} without a hook)."""
    hook = _hook
    if hook is None:
        return {}
    given = hook(dict(data))
    if given is None:
        return {}
    if not isinstance(given, Mapping):
        raise TypeError(
            f"the restore hook must return a mapping of from_dict keyword arguments or "
            f"None, not {type(given).__name__}"
        )
    return dict(given)


def import_class(name: str, what: str, instead: str) -> type:
    """The class named ``"module:QualName"``; LlamaMemoryError saying ``what`` could not be
    rebuilt and what to pass ``instead`` when it cannot be imported."""
    module_name, _, qualname = name.partition(":")
    if "<locals>" in qualname:
        raise LlamaMemoryError(
            f"cannot rebuild {what}: its class {name!r} was defined inside a function, so it "
            f"cannot be imported; define it at the top level of a module, or pass {instead}"
        )
    try:
        found: Any = importlib.import_module(module_name)
        for part in qualname.split("."):
            found = getattr(found, part)
    except (ImportError, AttributeError, ValueError) as exc:
        raise LlamaMemoryError(
            f"cannot rebuild {what}: its class {name!r} cannot be imported here ({exc}); "
            f"install or import it, or pass {instead}"
        ) from exc
    if not isinstance(found, type):
        raise LlamaMemoryError(f"cannot rebuild {what}: {name!r} is not a class; pass {instead}")
    return found


# -- embedding models ---------------------------------------------------------------------


def embedding_to_dict(model: BaseEmbedding) -> dict[str, Any]:
    """The model's class and its own ``to_dict()``, without credentials; by class only
    when its configuration is not plain data (restoring then asks for ``embed_model=``).
    """
    entry: dict[str, Any] = {"qualified_name": qualified_name(type(model))}
    try:
        config = model.to_dict()
    except Exception as exc:  # a component whose fields do not serialise
        entry["error"] = f"its to_dict() failed: {exc}"
        return entry
    dropped = sorted(k for k in config if _is_secret(k))
    config = {k: v for k, v in config.items() if k not in dropped}
    try:
        json.dumps(config)
    except (TypeError, ValueError) as exc:
        entry["error"] = f"its configuration is not plain data: {exc}"
        return entry
    entry["config"] = config
    if dropped:
        entry["dropped"] = dropped
    return entry


def embedding_from_dict(entry: Mapping[str, Any]) -> BaseEmbedding:
    """The model :func:`embedding_to_dict` described (the shared offline default, or its
    class rebuilt); LlamaMemoryError asking for ``embed_model=`` when it cannot be."""
    name = str(entry.get("qualified_name"))
    instead = "embed_model= to from_dict (or through set_restore_hook)"
    what = f"the embedding model {name!r} this memory's vectors were made with"
    if "error" in entry:
        raise LlamaMemoryError(f"cannot rebuild {what}: {entry['error']}; pass {instead}")
    cls = import_class(name, what, instead)
    if not issubclass(cls, BaseEmbedding):
        raise LlamaMemoryError(f"cannot rebuild {what}: it is not a BaseEmbedding; pass {instead}")
    config = dict(entry.get("config") or {})
    from ..embeddings.offline import OfflineEmbedding, default_embedding

    if cls is OfflineEmbedding and config == OfflineEmbedding().to_dict():
        return default_embedding()  # one loaded model per process
    try:
        return cls.from_dict(config)
    except Exception as exc:
        dropped = entry.get("dropped")
        hint = f" (its {', '.join(dropped)} were not saved: set them in the environment)" if dropped else ""
        raise LlamaMemoryError(f"cannot rebuild {what}: {exc}{hint}; pass {instead}") from exc


def _is_secret(field: str) -> bool:
    words = field.lower().split("_")
    pairs = set(zip(words, words[1:]))
    return bool(_SECRET_WORDS.intersection(words)) or any(p in pairs for p in _SECRET_PAIRS)


# -- primary memories -----------------------------------------------------------------------


def primary_to_dict(memory: BaseMemory) -> Optional[dict[str, Any]]:
    """A primary memory LlamaIndex can serialise, as data (a ``ChatMemoryBuffer`` by its
    token limit and messages: its own ``to_dict`` fails once it holds one), else None."""
    from llama_index.core.memory import ChatMemoryBuffer
    from llama_index.core.storage.chat_store import SimpleChatStore

    name = qualified_name(type(memory))
    if "<locals>" in name:
        return None
    if isinstance(memory, ChatMemoryBuffer):
        if type(memory.chat_store) is not SimpleChatStore:
            return None  # a database-backed chat store is a live client
        return {
            "qualified_name": name, "token_limit": memory.token_limit, "chat_store_key": memory.chat_store_key,
            "chat_history": [m.model_dump(mode="json") for m in memory.get_all()],
        }  # fmt: skip
    try:
        data = memory.to_dict()
        json.dumps(data)
    except Exception:
        return None
    return {"qualified_name": name, "data": data}


def primary_from_dict(entry: Mapping[str, Any]) -> BaseMemory:
    """The primary memory :func:`primary_to_dict` wrote down."""
    name = str(entry.get("qualified_name"))
    instead = "primary_memory= to from_dict (or through set_restore_hook)"
    what = f"the primary memory {name!r}"
    cls = import_class(name, what, instead)
    if not issubclass(cls, BaseMemory):
        raise LlamaMemoryError(f"cannot rebuild {what}: it is not a BaseMemory; pass {instead}")
    try:
        if "chat_history" in entry:
            settings = {k: entry[k] for k in ("token_limit", "chat_store_key") if k in entry}
            history = [ChatMessage.model_validate(m) for m in entry["chat_history"]]
            return cls.from_defaults(chat_history=history, **settings)
        return cls.from_dict(dict(entry.get("data") or {}))
    except Exception as exc:
        raise LlamaMemoryError(f"cannot rebuild {what}: {exc}; pass {instead}") from exc


def restore_live_parts(config: dict[str, Any]) -> None:
    """Turn what ``to_dict`` wrote of the primary memory, sources and live objects back
    into ``from_defaults`` arguments, in place; refuse or warn for what is not given."""
    for part, argument in (("primary", "primary_memory"), ("sources", "secondary_memory_sources")):
        kind = config.pop(part, "default")
        if argument in config:
            continue
        if isinstance(kind, dict):
            config[argument] = primary_from_dict(kind)
        elif kind == "custom":
            raise _not_carried(f"was built with a custom {argument}", f"{argument}=...")
        elif kind == "none":
            config[argument] = []
    if isinstance(config.get("embed_model"), dict):
        config["embed_model"] = embedding_from_dict(config["embed_model"])
    if isinstance(config.get("profile"), str):
        config["profile"] = import_class(config["profile"], "the profile schema", "profile=YourSchema to from_dict")
    if isinstance(client := config.get("chroma_client"), dict):
        raise _not_carried(f"used a Chroma client of its own ({client.get('qualified_name')})", "chroma_client=...")
    if isinstance(pool := config.get("store"), dict):
        used = f"used a connection pool of the application's ({pool.get('qualified_name')} on {pool.get('url')})"
        raise _not_carried(used, "store=pool) (or the database URL")
    if isinstance(config.get("encryption_key"), dict):
        config.pop("encryption_key")
        if environment_key() is None:  # an EncryptionError, as from_defaults' missing key is
            raise EncryptionError(
                f"this ComposableMemory's store ({config.get('path')}) is encrypted, and its key is "
                f"never written into a dict or a pickle: pass it again, "
                f"ComposableMemory.from_dict(data, encryption_key=...), set {ENCRYPTION_KEY_ENV}, "
                "or return it from a restore hook (llama_memory.set_restore_hook)"
            )
    if isinstance(config.get("llm"), dict):
        marker = config.pop("llm")
        warnings.warn(
            f"this ComposableMemory had an llm ({marker.get('qualified_name')}), a live object "
            "a dict cannot carry; the restored memory has none, so nothing is extracted "
            f"(extract_every={config.get('extract_every', 0)} does nothing) until you pass "
            "llm= to from_dict or return it from a restore hook (llama_memory.set_restore_hook)",
            RestoreWarning,
            stacklevel=3,
        )
    if isinstance(config.get("tokenizer_fn"), dict):
        marker = config.pop("tokenizer_fn")
        warnings.warn(
            f"this ComposableMemory counted tokens with a tokenizer_fn of its own "
            f"({marker.get('name')}), which a dict cannot carry; the restored memory counts "
            "with the default until you pass tokenizer_fn= to from_dict or return it from a "
            "restore hook (llama_memory.set_restore_hook)",
            RestoreWarning,
            stacklevel=3,
        )


def _not_carried(what: str, again: str) -> LlamaMemoryError:
    """The error for a live part of the memory (``what`` it was) that a dict cannot carry,
    saying to pass it ``again``."""
    return LlamaMemoryError(
        f"this ComposableMemory {what}, a live object a dict cannot carry: pass it again, "
        f"ComposableMemory.from_dict(data, {again}), or from a restore hook (llama_memory.set_restore_hook)"
    )


def memory_to_dict(memory: Facade) -> dict[str, Any]:
    """The body of :meth:`ComposableMemory.to_dict`: settings as data, markers for live
    parts, an in-memory conversation whole."""
    settings = memory.settings
    data = {"class_name": memory.class_name(), **settings.data(), **live_markers(memory, settings)}
    # The buffer's limit now: a program may change it (memory.primary_memory.token_limit = n).
    if isinstance(limit := getattr(memory.primary_memory, "token_limit", None), int):
        data["token_limit"] = limit
    # The conversation, so that a copy resets as the original would: reset() of a memory
    # that chose its session id starts a new session; a conversation reset with its session
    # id kept began at conversation_since (the session's records stored before are the reset one's).
    if not memory.runtime.session_id_given:
        data["session_id_chosen"] = True
    if memory.runtime.conversation_since is not None:
        data["conversation_since"] = memory.runtime.conversation_since
    if not settings.persistent and data["primary"] == "default":
        data["chat_history"] = [m.model_dump(mode="json") for m in memory.get_all()]
    return data


#: The keys of ``to_dict()`` that belong to the one conversation a memory holds, not to
#: the store and options it shares with the user's other conversations.
CONVERSATION_KEYS = ("session_id", "chat_history", "session_id_chosen", "conversation_since")


def live_markers(memory: Facade, settings: MemorySettings) -> dict[str, Any]:
    """What ``to_dict`` writes of the live objects: the primary memory and sources by kind
    ("default", "none", "custom", or data), the embedding model by class, a URL without
    its password, and a marker for what cannot be written down (an llm, a tokenizer, a
    client, a pool), which ``from_dict`` asks for."""
    sources = settings.secondary_memory_sources
    default_primary = settings.primary_memory is None and not memory.runtime.primary_changed
    markers: dict[str, Any] = {
        "primary": "default" if default_primary else primary_to_dict(memory.primary_memory) or "custom",
        "sources": "custom" if sources or memory.runtime.sources_changed else "default" if sources is None else "none",
    }
    if settings.embed_model is not None:
        markers["embed_model"] = embedding_to_dict(settings.embed_model)
    if settings.llm is not None:
        markers["llm"] = {"qualified_name": qualified_name(type(settings.llm))}
    if settings.tokenizer_fn is not None:
        markers["tokenizer_fn"] = {"name": getattr(settings.tokenizer_fn, "__qualname__", "?")}
    if settings.chroma_client is not None:
        markers["chroma_client"] = {"qualified_name": qualified_name(type(settings.chroma_client))}
    if getattr(getattr(memory.runtime.store, "driver", None), "encrypted", False):
        # The key itself is never written: from_dict asks for it again.
        markers["encryption_key"] = {"required": True, "environment_variable": ENCRYPTION_KEY_ENV}
    if isinstance(settings.store, str):
        markers["store"] = settings.store
    elif settings.store is not None:
        markers["store"] = {"qualified_name": qualified_name(type(settings.store)), "url": getattr(memory.runtime.store, "url", None)}
    return markers


def memory_from_dict(cls: type[M], data: dict[str, Any], kwargs: dict[str, Any]) -> M:
    """The body of :meth:`ComposableMemory.from_dict`: ``data`` under the hook's
    arguments and ``kwargs``, parts rebuilt, opened with ``from_defaults``."""
    if not isinstance(data, Mapping):
        # Often the dict saved as JSON text (json.dumps) and read back without json.loads.
        fix = "pass json.loads(text) if it was saved as JSON" if isinstance(data, (str, bytes)) else "pass that dict"
        raise TypeError(
            f"from_dict takes the dict memory.to_dict() returned, not {type(data).__name__} {short(data)}: {fix}"
        )
    config = {**data, **restore_hook_arguments(data), **kwargs}
    config.pop("class_name", None)
    # A session id given now is the application's: reset() keeps it.
    chosen = bool(config.pop("session_id_chosen", False)) and "session_id" not in kwargs
    since = config.pop("conversation_since", None)
    llm_left_behind = isinstance(config.get("llm"), dict)
    restore_live_parts(config)
    # Restored without its llm (the RestoreWarning says formation is off): the
    # memory keeps its formation settings, for to_dict and a later restore with an
    # llm, without the ValueError a new memory built that way gets.
    idle = {k: config.pop(k) for k in ("extract_every", "extract_after_quiet") if k in config} if (
        llm_left_behind and config.get("extract_in", "thread") == "thread"
    ) else {}
    if config.get("path") is not None:  # never a new, empty memory in place of a store moved or deleted
        require_store(config["path"])
    history = config.pop("chat_history", None)
    memory = cls.from_defaults(**config)
    memory.runtime.change(**idle)
    memory.runtime.session_id_given = not chosen
    if since is not None and memory.settings.session_id == data.get("session_id"):
        memory.runtime.conversation_since = float(since)
    if history and not memory.settings.persistent:
        memory.primary_memory.set([ChatMessage.model_validate(m) for m in history])
    return memory


# -- pickling -----------------------------------------------------------------------------

# What pickling says when it must refuse: the way that works for what it cannot carry.
_INSTEAD = (
    "; save the configuration with memory.to_dict() and reopen it with "
    "ComposableMemory.from_dict(data, ...), passing what the dict cannot carry"
)


def pickled_memory(memory: Facade) -> tuple[dict[str, Any], dict[str, Any]]:
    """What a pickle of ``memory`` carries: its :func:`memory_to_dict` and the live parts
    that pickle themselves, as ``from_dict`` arguments;
    :class:`~llama_memory.core.errors.NotPicklableError` when the copy could not reopen the
    same memory."""
    memory.runtime.check_open()
    data = memory_to_dict(memory)
    if not memory.settings.persistent:
        raise NotPicklableError(
            "cannot pickle an in-memory ComposableMemory (path=None): its store lives in this "
            "process, and a copy could not reach it. Give it a path= (or a PostgreSQL store=) "
            "to pickle it" + _INSTEAD
        )
    for part, argument in (("sources", "secondary_memory_sources"), ("primary", "primary_memory")):
        if data.get(part) == "custom":
            raise NotPicklableError(
                f"cannot pickle a ComposableMemory built with a custom {argument} (live objects "
                f"on a store of their own)" + _INSTEAD + f" ({argument}=...)"
            )
    for key in ("chroma_client", "store"):
        if isinstance(data.get(key), dict):
            raise NotPicklableError(
                f"cannot pickle a ComposableMemory on a {key} object of the application's "
                f"({data[key].get('qualified_name')}), a live connection" + _INSTEAD + f" ({key}=...)"
            )
    try:
        options = memory.settings
        check_formation(options.llm, options.extract_every, options.extract_after_quiet, options.extract_in)
    except ValueError as exc:  # restored without its llm: a copy could not be built so
        raise NotPicklableError(
            f"cannot pickle this ComposableMemory: it was restored without its llm ({exc})" + _INSTEAD
            + " (llm=...)"
        ) from None
    live: dict[str, Any] = {}
    if memory.settings.llm is not None:
        live["llm"] = _picklable_part(memory.settings.llm, "its llm", "llm")
    if "tokenizer_fn" in data:
        live["tokenizer_fn"] = _picklable_part(memory.tokenizer_fn, "its tokenizer_fn", "tokenizer_fn")
    model = data.get("embed_model")
    if isinstance(model, dict) and "error" in model:
        live["embed_model"] = _picklable_part(
            memory.settings.embed_model, f"its embedding model ({model['error']})", "embed_model"
        )
    return data, live


def unpickle_memory(cls: type[M], data: dict[str, Any], live: dict[str, Any]) -> M:
    """The memory a pickle made by :func:`pickled_memory` describes, reopened on its store
    (``cls.from_dict(data, **live)``)."""
    return cls.from_dict(data, **live)


def _picklable_part(value: Any, what: str, argument: str) -> Any:
    """``value`` if it pickles, else NotPicklableError saying what it is and what to do."""
    try:
        pickle.dumps(value)
    except Exception as exc:
        raise NotPicklableError(
            f"cannot pickle this ComposableMemory: {what}, {type(value).__name__}, cannot be "
            f"pickled ({exc})" + _INSTEAD + f" ({argument}=...)"
        ) from exc
    return value
