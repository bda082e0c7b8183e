"""Helpers for LlamaIndex ``ChatMessage``: its text, role, id, event time and token count
(its lossless JSON, as stores keep it, is :mod:`llama_memory.storage.codec`).
"""

from __future__ import annotations

import json
import uuid
from collections import deque
from collections.abc import Callable, Sequence
from datetime import date, datetime, timezone
from typing import Any, Optional

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock, ToolCallBlock

from .text import check_text, short
from .types import STANDALONE_KEY

#: ``additional_kwargs`` keys read for a message's id (the first one present wins).
MESSAGE_ID_KEYS = ("message_id", "id")
#: ``additional_kwargs`` key read for a message's event time.
TIMESTAMP_KEY = "timestamp"


def message_text(message: ChatMessage) -> str:
    """The plain text of a message: its text blocks joined, '' when it has none."""
    parts = [block.text for block in message.blocks if isinstance(block, TextBlock)]
    return "\n".join(p for p in parts if p)


#: What stands for a content block that holds no text, by its ``block_type``, in the text
#: stored for a message that has no text of its own.
PLACEHOLDERS = {"image": "[image]", "audio": "[audio]", "video": "[video]", "document": "[document]"}


def stored_text(message: ChatMessage) -> str:
    """The text a message is stored and searched by: its text, or for a message of media
    only a placeholder per block (``"[image]"``, ``"[audio]"``), so it is a record like any
    other; '' for neither (a tool call)."""
    text = message_text(message)
    if text:
        return text
    return " ".join(
        PLACEHOLDERS[kind] for kind in (getattr(b, "block_type", None) for b in message.blocks) if kind in PLACEHOLDERS
    )


def role_name(message: ChatMessage) -> str:
    """The message's role as a plain string (``"user"``, ``"assistant"``, ...)."""
    role = message.role
    return role.value if isinstance(role, MessageRole) else str(role)


def check_storable(message: ChatMessage, position: int = 0) -> None:
    """Raise ``ValueError`` naming the message if it holds a character no store can
    hold (:func:`check_text`). Checked before anything is written."""
    check_text(message.model_dump(mode="json"), f"message {position} ({role_name(message)})", "nothing was stored")


def declared_message_id(message: ChatMessage) -> Optional[str]:
    """The id the application gave a message in ``additional_kwargs``, or None."""
    for key in MESSAGE_ID_KEYS:
        value = message.additional_kwargs.get(key)
        if value not in (None, ""):
            return str(value)
    return None


def message_id(message: ChatMessage) -> str:
    """The id a message carries in ``additional_kwargs``, or a new random one."""
    return declared_message_id(message) or uuid.uuid4().hex


def is_standalone(message: ChatMessage) -> bool:
    """Whether the message is marked a standalone statement (``additional_kwargs``
    :data:`STANDALONE_KEY`); ValueError for a mark that is not true or false."""
    value = message.additional_kwargs.get(STANDALONE_KEY, False)
    if not isinstance(value, bool):
        raise ValueError(
            f"additional_kwargs[{STANDALONE_KEY!r}] must be True or False, got {value!r}; nothing was stored"
        )
    return value


def to_epoch(value: Any) -> float:
    """Convert a timestamp to seconds since the epoch (UTC): a ``datetime`` (naive taken
    as UTC), a ``date``, a number, or an ISO 8601 string; ValueError saying what was
    given otherwise.
    """
    if isinstance(value, bool):
        raise ValueError(f"timestamp must be a datetime, date, number or ISO string, not {value!r}")
    if isinstance(value, datetime):
        dt = value if value.tzinfo else value.replace(tzinfo=timezone.utc)
        return dt.timestamp()
    if isinstance(value, date):
        return datetime(value.year, value.month, value.day, tzinfo=timezone.utc).timestamp()
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text)
        except ValueError:
            pass
        try:
            return to_epoch(datetime.fromisoformat(text.replace("Z", "+00:00")))
        except ValueError:
            pass
    raise ValueError(
        f"cannot read timestamp {value!r}: give a datetime, a date, seconds since the "
        "epoch, or an ISO 8601 string such as '2023-05-08T13:56:00'"
    )


def message_time(message: ChatMessage, default: float) -> float:
    """The event time of a message: ``additional_kwargs["timestamp"]`` or ``default``."""
    value = message.additional_kwargs.get(TIMESTAMP_KEY)
    return default if value is None else to_epoch(value)


def _json_default(value: Any) -> Any:
    """Make tool-call objects (pydantic models, dataclasses, ...) JSON-encodable."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if hasattr(value, "__dict__"):
        return vars(value)
    return str(value)


def _tool_call_payload(message: ChatMessage) -> list[Any]:
    """The tool calls a message carries: ``additional_kwargs`` ones, then block ones."""
    calls: list[Any] = []
    legacy = message.additional_kwargs.get("tool_calls")
    if legacy:
        calls.extend(legacy if isinstance(legacy, (list, tuple)) else [legacy])
    calls.extend(block.model_dump(mode="json") for block in message.blocks if isinstance(block, ToolCallBlock))
    return calls


def message_tokens(message: ChatMessage, tokenizer_fn: Callable[[str], Sequence[Any]]) -> int:
    """The tokens ``message`` counts for: ``len(tokenizer_fn(...))`` of its text, with
    its tool calls as JSON on a new line when it has any."""
    # One tokenizer call per message: callers (and tests) rely on it. The text
    # alone, as ChatMemoryBuffer counts it, so token_limit means the same.
    text = message_text(message)
    calls = _tool_call_payload(message)
    if calls:
        text += "\n" + json.dumps(calls, sort_keys=True, ensure_ascii=False, default=_json_default)
    return len(tokenizer_fn(text))


def not_a_message(where: str, value: Any, many: bool, position: int = 0) -> str:
    """What was wrong with a value given where a ChatMessage was expected, and what to pass."""
    takes = "ChatMessage objects" if many else "a ChatMessage"
    what = f"message {position} is" if many else "it was given"
    if isinstance(value, str):
        fix = f"pass ChatMessage(role=\"user\", content={short(value)})"
    elif isinstance(value, dict):
        fix = "pass ChatMessage(**message) or ChatMessage.model_validate(message)"
    elif not many and isinstance(value, (list, tuple)):
        fix = "for several messages call put_messages(messages)"
    else:
        fix = "pass a llama_index.core.llms.ChatMessage"
    return f"{where} takes {takes}; {what} a {type(value).__name__} ({short(value)}): {fix}"


def messages_arg(messages: Any, where: str) -> list[ChatMessage]:
    """``messages`` as a list of ChatMessage; TypeError naming the first bad one (before
    anything is written)."""
    if isinstance(messages, ChatMessage):
        raise TypeError(f"{where} takes a list of ChatMessage, not one ChatMessage: pass [message]")
    if isinstance(messages, (str, bytes, dict)) or not isinstance(messages, (list, tuple, deque)):
        raise TypeError(
            f"{where} takes a list of ChatMessage, not {type(messages).__name__} "
            f"{short(messages)}: pass e.g. [ChatMessage(role=\"user\", content=\"...\")]"
        )
    for position, message in enumerate(messages):
        if not isinstance(message, ChatMessage):
            raise TypeError(not_a_message(where, message, many=True, position=position))
    return list(messages)
