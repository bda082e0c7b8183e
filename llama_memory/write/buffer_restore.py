"""How a :class:`~llama_memory.write.buffer.ChatBuffer` is saved and copied (dicts,
strings, copies, pickles), off the read and write paths. Locks never travel; the
tokenizer and the chat log are live handles, shared by copies, left out of dicts, and
pickled only when they pickle.
"""

from __future__ import annotations

import copy
import json
import logging
import pickle
from typing import TYPE_CHECKING, Any, Callable, Optional, Sequence

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory.types import BaseMemory
from typing_extensions import Self

from ..storage.ports.chat import ChatLog

# The buffer's own logger: its warnings keep the name they always had.
logger = logging.getLogger("llama_memory.write.buffer")

if TYPE_CHECKING:
    _Saved = BaseMemory
else:
    _Saved = object


def _picklable(value: Any) -> bool:
    """Whether ``value`` survives ``pickle.dumps``."""
    try:
        pickle.dumps(value)
    except Exception:
        return False
    return True


class BufferRestore(_Saved):
    """What :class:`~llama_memory.write.buffer.ChatBuffer` adds to LlamaIndex's
    ``BaseMemory`` to be saved and copied (a base class of it, before ``BaseMemory``)."""

    if TYPE_CHECKING:  # what the buffer has, for the type checker
        tokenizer_fn: Callable[[str], Sequence[Any]]
        _messages: list[ChatMessage]
        _counts: list[int]
        _lock: Any
        _log: Optional[ChatLog]
        _cursor: Any

        def _attach(self, log: Optional[ChatLog]) -> None: ...
        def _replace_state(self, messages: list[ChatMessage], counts: list[int]) -> None: ...
        def _count_tokens(self, message: ChatMessage) -> int: ...

    def to_dict(self, **kwargs: Any) -> dict[str, Any]:
        """The fields plus ``chat_history`` (messages as JSON-ready dicts), without the
        tokenizer and the chat log; workflow contexts serialize their memory with it."""
        data = super().to_dict(**kwargs)
        data["chat_history"] = [m.model_dump(mode="json") for m in self.get_all()]
        return data

    def to_string(self) -> str:
        """:meth:`to_dict` as a JSON string (``ChatMemoryBuffer.to_string``)."""
        return json.dumps(self.to_dict())

    @classmethod
    def from_string(cls, json_str: str, **kwargs: Any) -> Self:
        """Inverse of :meth:`to_string`; ``kwargs`` as for :meth:`from_dict`."""
        return cls.from_dict(json.loads(json_str), **kwargs)

    @classmethod
    def from_dict(cls, data: dict[str, Any], **kwargs: Any) -> Self:
        """Inverse of :meth:`to_dict`. With ``chat_log=`` the log is the source of truth
        (the serialized ``chat_history`` may be stale). A ``ChatMemoryBuffer``'s dict
        loads too, from its ``SimpleChatStore``; another chat store raises ``ValueError``
        (pass ``chat_history=`` then).
        """
        data = {**data, **kwargs}
        data.pop("class_name", None)
        store = data.pop("chat_store", None)
        key = data.pop("chat_store_key", "chat_history")
        history = data.pop("chat_history", None)
        if store is not None and history is None:
            # Loading it as nothing would be a silent loss of the conversation.
            held = store.get("store") if isinstance(store, dict) else None
            if not isinstance(held, dict):
                raise ValueError(
                    "ChatBuffer.from_dict reads a ChatMemoryBuffer's history from a "
                    f"SimpleChatStore only, got chat_store={store!r}: pass the messages as "
                    "chat_history= (e.g. chat_history=old_buffer.get_all())"
                )
            history = held.get(key, [])
        if data.get("chat_log") is None and history is not None:
            data["chat_history"] = [
                m if isinstance(m, ChatMessage) else ChatMessage.model_validate(m)
                for m in history
            ]
        return cls(**data)

    def _clone(self, fields: dict[str, Any], messages: list[ChatMessage]) -> Self:
        # model_construct skips __init__ (the log is not re-read); fresh locks.
        with self._lock:
            counts = list(self._counts)
        clone = type(self).model_construct(_fields_set=set(self.model_fields_set), **fields)
        clone._attach(self._log)
        clone._cursor = self._cursor  # same messages, read as far
        clone._replace_state(messages, counts)
        return clone

    def __copy__(self) -> Self:
        """A new buffer with the same messages (same objects), its own lists and locks,
        sharing the tokenizer and the chat log."""
        return self._clone(dict(self.__dict__), self.get_all())

    def __deepcopy__(self, memo: Optional[dict[int, Any]] = None) -> Self:
        """A new buffer with deep copies of the messages and its own locks, sharing the
        tokenizer (slow to copy) and the chat log (it names external storage)."""
        memo = {} if memo is None else memo
        fields = {
            name: value
            if name == "tokenizer_fn" or getattr(type(self).model_fields.get(name), "exclude", False)
            else copy.deepcopy(value, memo)
            for name, value in self.__dict__.items()
        }
        return self._clone(fields, copy.deepcopy(self.get_all(), memo))

    def __getstate__(self) -> dict[str, Any]:
        """Pickle state: the fields, the messages and their counts; the tokenizer and
        the chat log only when they pickle (else the default tokenizer, and the log
        dropped with a warning)."""
        with self._lock:
            messages = [m.model_dump(mode="json") for m in self._messages]
            counts = list(self._counts)
        fields = {k: v for k, v in self.__dict__.items() if k != "tokenizer_fn"}
        tokenizer = self.tokenizer_fn if _picklable(self.tokenizer_fn) else None
        log = self._log
        if log is not None and not _picklable(log):
            logger.warning("ChatBuffer pickled without its chat log (it cannot be pickled)")
            log = None
        return {
            "fields": fields, "tokenizer_fn": tokenizer, "messages": messages, "counts": counts,
            "chat_log": log,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore from :meth:`__getstate__` without re-reading the chat log."""
        self.__init__(**state["fields"], tokenizer_fn=state["tokenizer_fn"])  # type: ignore[misc]
        messages = [ChatMessage.model_validate(m) for m in state["messages"]]
        counts = list(state["counts"])
        if state["tokenizer_fn"] is None:
            # A different (default) tokenizer now: the cached counts are stale.
            counts = [self._count_tokens(m) for m in messages]
        self._replace_state(messages, counts)
        # A log that travelled is the source of truth again: the next read reloads it.
        self._attach(state["chat_log"])
