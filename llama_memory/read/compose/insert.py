"""Where the block goes: into the system message or the latest user message, an earlier
block replaced, and the conversation without it."""

from __future__ import annotations

import re
from collections.abc import Sequence

from llama_index.core.base.llms.types import ChatMessage, MessageRole, TextBlock

from ...core.messages import message_text
from .render import BLOCK_CLOSE, BLOCK_OPEN

_BLOCK_PATTERN = re.compile(r"\s*" + re.escape(BLOCK_OPEN) + r".*?" + re.escape(BLOCK_CLOSE), re.S)


def strip_block(text: str) -> str:
    """Remove an earlier memory block from a text, so blocks never stack."""
    return _BLOCK_PATTERN.sub("", text).rstrip()


def remove_block(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """``messages`` without the memory block :func:`insert_block` put in them: the
    conversation alone, for a step that works on it rather than on what the memory
    recalled (a chat engine condensing it into a standalone question). A system message
    that held only the block is left out; the inputs are not modified."""
    out: list[ChatMessage] = []
    for message in messages:
        texts = [b.text for b in message.blocks if isinstance(b, TextBlock)]
        if not any(BLOCK_OPEN in t for t in texts):
            out.append(message)
            continue
        if message.role == MessageRole.SYSTEM:
            # "system": the block was appended to the whole text (see insert_block).
            base = strip_block(message_text(message))
            if base:
                out.append(message.model_copy(update={"blocks": [TextBlock(text=base)]}))
            continue
        # "user": the block is a text block of its own before the message's blocks.
        kept = [
            b for b in message.blocks
            if not (isinstance(b, TextBlock) and b.text.lstrip().startswith(BLOCK_OPEN)
                    and not strip_block(b.text))
        ]
        out.append(message.model_copy(update={"blocks": kept}))
    return out


def insert_block(
    messages: Sequence[ChatMessage], block: str, insert_method: str
) -> list[ChatMessage]:
    """Return ``messages`` with the block injected; the inputs are not modified.

    ``"system"``: appended to the first message when it is a system message (an
    earlier block there is replaced), else a new system message is put first.
    ``"user"``: prepended to the latest user message (falls back to ``"system"``
    when there is none).
    """
    out = list(messages)
    if not block:
        return out
    if insert_method == "user":
        for i in range(len(out) - 1, -1, -1):
            if out[i].role == MessageRole.USER:
                original = out[i]
                out[i] = original.model_copy(
                    update={"blocks": [TextBlock(text=block + "\n\n"), *original.blocks]}
                )
                return out
    if out and out[0].role == MessageRole.SYSTEM:
        first = out[0]
        base = strip_block(message_text(first))
        text = f"{base}\n\n{block}" if base else block
        out[0] = first.model_copy(update={"blocks": [TextBlock(text=text)]})
    else:
        out.insert(0, ChatMessage(role=MessageRole.SYSTEM, content=block))
    return out
