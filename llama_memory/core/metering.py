"""What the LLM calls of a piece of work cost in tokens, through LlamaIndex's
instrumentation (every LLM reports its end events, whatever the route). ``with
metering() as meter:`` counts the calls in that block (this thread or task; meters nest):
the usage the response reported (OpenAI, Anthropic, Ollama keys), else the text counted
with LlamaIndex's tokenizer (``meter.estimated``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Optional

from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.events.llm import LLMChatEndEvent, LLMCompletionEndEvent

__all__ = ["TokenMeter", "metering", "reported_usage"]


class TokenMeter:
    """Tokens of the LLM calls made inside a :func:`metering` block.

    Attributes:
        sent: prompt tokens.
        received: answer tokens.
        calls: LLM calls seen.
        estimated: calls whose response reported no usage (counted with the tokenizer).
    """

    def __init__(self) -> None:
        self.sent = self.received = self.calls = self.estimated = 0
        self._lock = threading.Lock()

    def add(self, sent: int, received: int, estimated: bool) -> None:
        """Count one LLM call."""
        with self._lock:
            self.sent += sent
            self.received += received
            self.calls += 1
            self.estimated += int(estimated)


_active: ContextVar[tuple[TokenMeter, ...]] = ContextVar("llama_memory_meters", default=())
_installed = threading.Lock()
_handler: Optional[BaseEventHandler] = None


@contextmanager
def metering() -> Iterator[TokenMeter]:
    """Count the tokens of the LLM calls made inside the block (see the module)."""
    _install()
    meter = TokenMeter()
    token = _active.set((*_active.get(), meter))
    try:
        yield meter
    finally:
        _active.reset(token)


class _MeterHandler(BaseEventHandler):
    """Adds each LLM call's tokens to the meters active where it was made."""

    @classmethod
    def class_name(cls) -> str:
        """Name of the handler, as LlamaIndex lists it."""
        return "LlamaMemoryTokenMeter"

    def handle(self, event: BaseEvent, **kwargs: Any) -> Any:
        """Count an LLM chat or completion end event (nothing else; nothing when no
        meter is active)."""
        meters = _active.get()
        if not meters or not isinstance(event, (LLMChatEndEvent, LLMCompletionEndEvent)):
            return None
        usage = reported_usage(event.response)
        estimated = usage is None
        if usage is None:
            sent_text = (
                "\n".join(_message_text(m) for m in event.messages)
                if isinstance(event, LLMChatEndEvent) else str(event.prompt)
            )  # fmt: skip
            usage = (_count(sent_text), _count(_response_text(event.response)))
        for meter in meters:
            meter.add(usage[0], usage[1], estimated=estimated)
        return None


def _install() -> None:
    """Register the handler on LlamaIndex's root dispatcher, once per process."""
    global _handler
    with _installed:
        if _handler is None:
            _handler = _MeterHandler()
            get_dispatcher().add_event_handler(_handler)


def reported_usage(response: Any) -> Optional[tuple[int, int]]:
    """``(prompt tokens, answer tokens)`` as the LLM reported them in a LlamaIndex
    ``ChatResponse``/``CompletionResponse``; None when it did not."""
    raw, extra = getattr(response, "raw", None), getattr(response, "additional_kwargs", None)
    return _usage_of(raw) or _usage_of(extra)


_PAIRS = (("prompt_tokens", "completion_tokens"), ("input_tokens", "output_tokens"), ("prompt_eval_count", "eval_count"))


def _usage_of(value: Any, depth: int = 0) -> Optional[tuple[int, int]]:
    if value is None or depth > 2:
        return None
    for sent_key, received_key in _PAIRS:
        sent, received = _field(value, sent_key), _field(value, received_key)
        if isinstance(sent, int) and isinstance(received, int):
            return sent, received
    for nested in ("usage", "usage_metadata", "token_usage"):
        inner = _field(value, nested)
        if inner is not None and inner is not value:
            found = _usage_of(inner, depth + 1)
            if found is not None:
                return found
    return None


def _field(value: Any, key: str) -> Any:
    if isinstance(value, Mapping):
        return value.get(key)
    try:
        return getattr(value, key, None)
    except Exception:  # a raw response object with odd properties
        return None


def _message_text(message: Any) -> str:
    text = getattr(message, "content", None) or ""
    calls = getattr(message, "additional_kwargs", {}).get("tool_calls")
    return str(text) + (json.dumps(calls, default=str) if calls else "")


def _response_text(response: Any) -> str:
    message = getattr(response, "message", None)
    if message is not None:
        return _message_text(message)
    return str(getattr(response, "text", "") or "")


def _count(text: str) -> int:
    from llama_index.core.utils import get_tokenizer

    return len(get_tokenizer()(text)) if text else 0
