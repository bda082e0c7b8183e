"""A scripted, recording LLM for offline demos and tests: not for production.

``ScriptedLLM`` (a ``FunctionCallingLLM``) drives LlamaIndex's real agents without a
network or API key. Every chat entry point (``chat``, ``achat``, ``stream_chat``,
``astream_chat``, and the ``*_with_tools`` variants) records a deep copy of the messages
received, then replies with the next item of its script:

* a ``str``: a plain text reply (for ``ReActAgent``, in ReAct format: ``"Thought:
  ...\\nAnswer: ..."``);
* a :class:`ToolCallReply`: a tool call (for ``FunctionAgent``), in a ``ToolCallBlock``
  and in ``additional_kwargs["tool_calls"]``, as real integrations do;
* a callable ``(messages) -> str | ToolCallReply | ChatMessage``.

The completion entry points (used by chat engines to condense) record the prompt as one
user message and reply with the next item's text. When the script runs out the LLM
raises, so a test notices an unexpected call.
"""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncGenerator, Callable, Generator, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Union
from uuid import uuid4

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    MessageRole,
    TextBlock,
    ToolCallBlock,
)
from llama_index.core.bridge.pydantic import PrivateAttr
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.function_calling import FunctionCallingLLM
from llama_index.core.llms.llm import ToolSelection

from .write.formation.answer import PASS_ANSWER


@dataclass
class ToolCallReply:
    """A scripted assistant reply that calls one tool.

    Attributes:
        tool_name: the tool to call, as the agent knows it.
        tool_kwargs: its arguments.
        tool_call_id: the call's id (a random one by default).
    """

    tool_name: str
    tool_kwargs: dict[str, Any] = field(default_factory=dict)
    tool_call_id: str = field(default_factory=lambda: f"call_{uuid4().hex[:12]}")


ScriptItem = Union[str, ToolCallReply, ChatMessage, Callable[[list[ChatMessage]], Any]]


@dataclass
class LLMCall:
    """One call the LLM received.

    Attributes:
        method: ``chat``, ``achat``, ``stream_chat``, ``astream_chat``, or a completion:
            ``complete``, ``acomplete``, ``stream_complete``, ``astream_complete``.
        messages: the messages, deep-copied when received.
        tool_names: the names of the tools the agent offered.
    """

    method: str
    messages: list[ChatMessage]
    tool_names: list[str]

    def text(self) -> str:
        """Every message's text blocks joined (role-prefixed), for substring checks."""
        return "\n".join(f"{m.role.value}: {message_plain_text(m)}" for m in self.messages)

    def system_texts(self) -> list[str]:
        """The text of every system message, in order."""
        return [message_plain_text(m) for m in self.messages if m.role == MessageRole.SYSTEM]

    def user_texts(self) -> list[str]:
        """The text of every user message, in order."""
        return [message_plain_text(m) for m in self.messages if m.role == MessageRole.USER]


def message_plain_text(message: ChatMessage) -> str:
    """A message's text blocks joined by newlines (tool calls and images left out)."""
    return "\n".join(b.text for b in message.blocks if isinstance(b, TextBlock))


def _to_message(item: Any) -> ChatMessage:
    if isinstance(item, ChatMessage):
        return item
    if isinstance(item, str):
        return ChatMessage(role=MessageRole.ASSISTANT, content=item)
    if isinstance(item, ToolCallReply):
        call = {
            "id": item.tool_call_id, "type": "function",
            "function": {"name": item.tool_name, "arguments": json.dumps(item.tool_kwargs)},
        }  # fmt: skip
        block = ToolCallBlock(tool_call_id=item.tool_call_id, tool_name=item.tool_name, tool_kwargs=dict(item.tool_kwargs))
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[block], additional_kwargs={"tool_calls": [call]})
    raise TypeError(f"unsupported script item: {item!r}")


class ScriptExhausted(AssertionError):
    """The agent called the LLM more often than the script foresaw."""


class ScriptedLLM(FunctionCallingLLM):
    """Replies from a script and records every list of messages it receives.

    Args:
        script: the replies, in order (see the module docstring for the kinds).
        function_calling: whether the LLM says it can call tools (``FunctionAgent``
            needs it; pass ``False`` to drive a ``ReActAgent`` in text mode).
        **kwargs: passed to ``FunctionCallingLLM`` (callback manager...).

    Example:
        ```python
        llm = ScriptedLLM([ToolCallReply("save_knowledge", {"triples": [...]}), "Noted."])
        agent = FunctionAgent(llm=llm, tools=memory.tools())
        await agent.run("My friend John likes pizza", memory=memory)
        llm.calls[0].system_texts()  # what the memory showed the LLM
        ```
    """

    _script: list[Any] = PrivateAttr(default_factory=list)
    _calls: list[LLMCall] = PrivateAttr(default_factory=list)
    _function_calling: bool = PrivateAttr(default=True)

    def __init__(self, script: Sequence[ScriptItem] = (), *, function_calling: bool = True, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._script = list(script)
        self._function_calling = function_calling

    @classmethod
    def class_name(cls) -> str:
        """Class name, as LlamaIndex components report it."""
        return "ScriptedLLM"

    # -- script and records ----------------------------------------------------------

    @property
    def calls(self) -> list[LLMCall]:
        """Every call received so far, oldest first."""
        return self._calls

    @property
    def remaining(self) -> int:
        """How many scripted replies are left."""
        return len(self._script)

    def add_script(self, *items: ScriptItem) -> None:
        """Append replies to the script."""
        self._script.extend(items)

    def reset_calls(self) -> None:
        """Forget the recorded calls (the script is kept)."""
        self._calls = []

    def _next(self, method: str, messages: Sequence[ChatMessage], kwargs: dict) -> ChatMessage:
        tools = kwargs.get("tools") or []
        self._calls.append(LLMCall(method, copy.deepcopy(list(messages)), [t.metadata.get_name() for t in tools]))
        if not self._script:
            raise ScriptExhausted(f"ScriptedLLM: call #{len(self._calls)} ({method}) but the script is empty")
        item = self._script.pop(0)
        if callable(item) and not isinstance(item, (ToolCallReply, ChatMessage)):
            item = item(list(messages))
        return _to_message(item)

    # -- metadata --------------------------------------------------------------------

    @property
    def metadata(self) -> LLMMetadata:
        """A chat model with a large context window; function calling as constructed."""
        return LLMMetadata(
            context_window=200_000, num_output=1024, is_chat_model=True,
            is_function_calling_model=self._function_calling, model_name="scripted",
        )  # fmt: skip

    # -- chat --------------------------------------------------------------------------

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """Record the messages and reply with the next scripted item."""
        message = self._next("chat", messages, kwargs)
        return ChatResponse(message=message, raw={"content": message.content or ""})

    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        """Record the messages and reply with the next scripted item."""
        message = self._next("achat", messages, kwargs)
        return ChatResponse(message=message, raw={"content": message.content or ""})

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        """Record the messages and reply with the next scripted item."""
        message = self._next("stream_chat", messages, kwargs)

        def gen() -> Generator[ChatResponse, None, None]:
            yield ChatResponse(message=message, delta=message.content or "")

        return gen()

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        """Record the messages and reply with the next scripted item."""
        message = self._next("astream_chat", messages, kwargs)

        async def gen() -> AsyncGenerator[ChatResponse, None]:
            yield ChatResponse(message=message, delta=message.content or "")

        return gen()

    # -- completion: chat engines condense and some response synthesizers complete -------

    def _complete(self, method: str, prompt: str, kwargs: dict) -> str:
        """Record ``prompt`` as one user message and give the next scripted reply's text
        (a reply that calls a tool cannot be a completion)."""
        message = self._next(method, [ChatMessage(role=MessageRole.USER, content=prompt)], kwargs)
        if any(isinstance(b, ToolCallBlock) for b in message.blocks):
            raise TypeError(f"ScriptedLLM: call #{len(self._calls)} ({method}) is a completion, "
                            "but the script's reply calls a tool: script a str there")
        return message_plain_text(message)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        """Record the prompt (as one user message) and reply with the next scripted item."""
        return CompletionResponse(text=self._complete("complete", prompt, kwargs))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        """Record the prompt (as one user message) and reply with the next scripted item,
        in one chunk."""
        text = self._complete("stream_complete", prompt, kwargs)

        def gen() -> Generator[CompletionResponse, None, None]:
            yield CompletionResponse(text=text, delta=text)

        return gen()

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        """Record the prompt (as one user message) and reply with the next scripted item."""
        return CompletionResponse(text=self._complete("acomplete", prompt, kwargs))

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseAsyncGen:
        """Record the prompt (as one user message) and reply with the next scripted item,
        in one chunk."""
        text = self._complete("astream_complete", prompt, kwargs)

        async def gen() -> AsyncGenerator[CompletionResponse, None]:
            yield CompletionResponse(text=text, delta=text)

        return gen()

    # -- function calling ----------------------------------------------------------------

    def _prepare_chat_with_tools(
        self, tools: Sequence[Any], user_msg: Optional[Union[str, ChatMessage]] = None,
        chat_history: Optional[list[ChatMessage]] = None, verbose: bool = False,
        allow_parallel_tool_calls: bool = False, tool_required: bool = False, **kwargs: Any,
    ) -> dict[str, Any]:  # fmt: skip
        messages = list(chat_history or [])
        if isinstance(user_msg, str):
            user_msg = ChatMessage(role=MessageRole.USER, content=user_msg)
        if user_msg is not None:
            messages.append(user_msg)
        return {"messages": messages, "tools": tools}

    def get_tool_calls_from_response(
        self, response: ChatResponse, error_on_no_tool_call: bool = True, **kwargs: Any
    ) -> list[ToolSelection]:
        """The tool calls in a scripted reply (ValueError when there is none and
        ``error_on_no_tool_call``)."""
        selections = [
            ToolSelection(
                tool_id=block.tool_call_id or "", tool_name=block.tool_name,
                tool_kwargs=block.tool_kwargs if isinstance(block.tool_kwargs, dict) else json.loads(block.tool_kwargs or "{}"),
            )  # fmt: skip
            for block in response.message.blocks
            if isinstance(block, ToolCallBlock)
        ]
        if not selections and error_on_no_tool_call:
            raise ValueError("expected a tool call in the response, got none")
        return selections


def pass_answer(**parts: Any) -> ToolCallReply:
    """What a function-calling LLM answers to a formation pass: one keyword per part
    (``triples={"new": [...], "retracted": [...]}``, ``profile=[...]``). Script the same
    JSON as a ``str`` for ``ScriptedLLM(function_calling=False)``."""
    return ToolCallReply(PASS_ANSWER, dict(parts))
