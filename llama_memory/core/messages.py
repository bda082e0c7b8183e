"""Helpers for LlamaIndex ``ChatMessage``: text, lossless JSON, ids and event times.

Messages are stored losslessly: ``model_dump(mode="json")`` keeps content blocks,
tool calls and ``additional_kwargs`` (``tool_call_id``, ...), and
``ChatMessage.model_validate`` brings them back unchanged.
"""

from __future__ import annotations

import uuid
from datetime import date, datetime, timezone
from typing import Any, Optional

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock

from ..storage.codec import dump_message as dump_message  # re-exported: formation, admin
from ..storage.codec import load_message as load_message  # re-exported: its old home
from .text import check_text

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
    """The text a message is stored and searched by: its text (:func:`message_text`), or
    for a message of media only (a photo the user sent, a voice note) a placeholder per
    block, ``"[image]"``, ``"[audio]"``: the message is then a record like any other, so
    an excerpt shows the user's turn between the assistant's replies instead of two
    replies in a row. A message with neither (a tool call) stays ''."""
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


def to_epoch(value: Any) -> float:
    """Convert a timestamp to seconds since the epoch (UTC).

    Accepts a ``datetime`` (naive ones are taken as UTC), a ``date``, a number of
    seconds, or an ISO 8601 string. Anything else raises ``ValueError`` saying
    what was given.
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
