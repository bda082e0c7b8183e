"""What a conversation costs in tokens and which of its messages fit a budget: a
message's count (its text and tool calls, as ``ChatMemoryBuffer`` counts text) and the
window :class:`~llama_memory.write.buffer.ChatBuffer` returns (whole turns, the latest that
fit, a leading system message kept). Plain functions of the messages and their cached
counts: the buffer holds the conversation, these decide what of it is shown."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Callable

from llama_index.core.base.llms.types import ChatMessage, MessageRole

from ..core.messages import message_text

try:  # ToolCallBlock only exists in recent llama-index-core releases.
    from llama_index.core.base.llms.types import ToolCallBlock as _ToolCallBlock
except ImportError:  # pragma: no cover - depends on the installed llama-index version
    _ToolCallBlock = None  # type: ignore[assignment,misc]


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
    if _ToolCallBlock is not None:
        calls.extend(
            block.model_dump(mode="json")
            for block in message.blocks
            if isinstance(block, _ToolCallBlock)
        )
    return calls


def message_tokens(message: ChatMessage, tokenizer_fn: Callable[[str], Sequence[Any]]) -> int:
    """The tokens ``message`` counts for: ``len(tokenizer_fn(...))`` of its text, with
    its tool calls as JSON on a new line when it has any."""
    # One tokenizer call per message: callers (and tests) rely on it. The text
    # alone, as ChatMemoryBuffer counts it, so token_limit means the same.
    text = message_text(message)
    calls = _tool_call_payload(message)
    if calls:
        text += "\n" + json.dumps(
            calls, sort_keys=True, ensure_ascii=False, default=_json_default
        )
    return len(tokenizer_fn(text))


def fit_window(
    messages: Sequence[ChatMessage],
    counts: Sequence[int],
    total: int,
    token_limit: int,
    initial_token_count: int,
) -> tuple[bool, int]:
    """``(keep_system, start)``: the window is ``[system?] + messages[start:]``, for
    ``messages`` whose token ``counts`` sum to ``total``, within ``token_limit`` less
    ``initial_token_count``. Costs O(window), not O(history)."""
    if initial_token_count > token_limit:
        raise ValueError(
            f"Initial token count exceeds token limit ({initial_token_count} > "
            f"{token_limit})"
        )
    budget = token_limit - initial_token_count
    n = len(messages)
    if total <= budget:
        return False, 0  # everything fits: the history, unchanged

    keep_system = messages[0].role == MessageRole.SYSTEM
    floor = 1 if keep_system else 0
    remaining = budget - (counts[0] if keep_system else 0)
    start = n
    while start > floor and counts[start - 1] <= remaining:
        start -= 1
        remaining -= counts[start]
    # The history was truncated: start at a user turn, so the window never
    # opens with an assistant reply or a tool result whose call was cut off.
    while start < n and messages[start].role != MessageRole.USER:
        start += 1
    if start < n:
        return keep_system, start

    # Overflow: not even the last user turn fits. Return it whole anyway so
    # the LLM sees an explicit overflow rather than an empty history.
    last_user = n - 1
    while last_user >= floor and messages[last_user].role != MessageRole.USER:
        last_user -= 1
    if last_user >= floor:
        return keep_system, last_user
    return keep_system, max(floor, n - 1)  # no user message: the stock fallback
