"""The parts of the docs test (tests/docs/test_doc_snippets.py): the fenced-block collector, the
markers a page uses to talk to it, and the offline stand-ins for OpenAI.

A page's blocks are found by :func:`parse_page`. What the test does with a block is said by
``<!-- docs-test: ... -->`` comments on the lines right above its opening fence (blank lines
between are allowed); they are invisible on the rendered page:

* ``<!-- docs-test: skip — <reason> -->``: the block is illustrative only; the test reports
  it as skipped with the reason. No ``python`` block is skipped without one.
* ``<!-- docs-test: llm <JSON list> -->``: replies queued for the page's scripted LLM before
  the block runs, in order: a string is a text reply, ``{"tool_name": ..., "tool_kwargs":
  ...}`` a tool call. A call with nothing queued gets :data:`DEFAULT_REPLY`.
* ``<!-- docs-test: llm-receives -->`` on a non-Python block: the block must be exactly the
  messages of the last call the page's LLM received (``--- role ---`` then the text), dates
  and times in the memory block aside, so a sample shown to readers is the real format.
* ``<!-- docs-test: output -->`` on a non-Python block: the block must be exactly what the
  Python block above it printed (dates and times in memory-block lines aside).
* ``<!-- docs-test: postgres — <why> -->``: the block reads the environment variable
  ``DATABASE_URL``; the test sets it (for the whole page) to a database of the tests' real
  PostgreSQL server (the ``postgres_server`` fixture).

``python`` blocks run; every other language (``bash``, plain output) is not run unless it
carries ``llm-receives``.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.bridge.pydantic import PrivateAttr

from llama_memory.testing import LLMCall, ScriptedLLM, ToolCallReply, message_plain_text

MARKER = re.compile(r"^<!--\s*docs-test:\s*(?P<key>[\w-]+)\s*[—:-]?\s*(?P<arg>.*?)\s*-->$")
FENCE = re.compile(r"^```(?P<lang>[\w+-]*)\s*$")
MARKER_KEYS = ("skip", "llm", "llm-receives", "output", "postgres")
#: Markers that make the test check a non-Python block.
CHECKS = ("llm-receives", "output")
#: What the scripted LLM answers when the page queued nothing for a call.
DEFAULT_REPLY = "OK."


class MarkerError(ValueError):
    """A ``docs-test`` marker that is misspelt, malformed or not right above a fence."""


@dataclass
class Block:
    """One fenced code block of a page.

    Attributes:
        page: the page, relative to the repository root (``docs/profile.md``).
        line: the 1-based line of the opening fence.
        lang: the fence's language (``""`` when none).
        code: the block's text, without the fences.
        markers: the ``docs-test`` markers above it, as ``(key, argument)``.
    """

    page: str
    line: int
    lang: str
    code: str
    markers: list[tuple[str, str]] = field(default_factory=list)

    @property
    def id(self) -> str:
        """``page:line``: where a failure points."""
        return f"{self.page}:{self.line}"

    def marker(self, key: str) -> Optional[str]:
        """The argument of the marker ``key``, or None when the block has none."""
        return next((arg for k, arg in self.markers if k == key), None)

    @property
    def runs(self) -> bool:
        """Whether the docs test does something with this block."""
        return self.lang == "python" or any(self.marker(key) is not None for key in CHECKS)


def parse_page(text: str, page: str) -> list[Block]:
    """Every fenced block of a markdown page, with its markers.

    Raises :class:`MarkerError` for an unknown marker, a skip without a reason, or a
    marker that is not directly above an opening fence.
    """
    lines = text.splitlines()
    blocks: list[Block] = []
    pending: list[tuple[int, str, str]] = []  # markers waiting for their fence
    index = 0
    while index < len(lines):
        stripped = lines[index].strip()
        marker = MARKER.match(stripped)
        fence = FENCE.match(stripped)
        if marker:
            key, arg = marker["key"], marker["arg"]
            if key not in MARKER_KEYS:
                raise MarkerError(
                    f"{page}:{index + 1}: unknown docs-test marker {key!r}; "
                    f"use one of {', '.join(MARKER_KEYS)}"
                )
            if key == "skip" and not arg:
                raise MarkerError(
                    f"{page}:{index + 1}: a skip marker needs a reason: "
                    "<!-- docs-test: skip — why this block is not run -->"
                )
            pending.append((index + 1, key, arg))
        elif fence:
            end = next((j for j in range(index + 1, len(lines)) if lines[j].strip() == "```"), None)
            if end is None:
                raise MarkerError(f"{page}:{index + 1}: a code fence that is never closed")
            blocks.append(
                Block(
                    page,
                    index + 1,
                    fence["lang"],
                    "\n".join(lines[index + 1 : end]),
                    [(key, arg) for _, key, arg in pending],
                )
            )
            pending = []
            index = end
        elif stripped and pending:
            raise MarkerError(
                f"{page}:{pending[0][0]}: a docs-test marker must be right above "
                "a code fence (only blank lines between)"
            )
        index += 1
    if pending:
        raise MarkerError(f"{page}:{pending[0][0]}: a docs-test marker with no code fence after it")
    return blocks


def scripted_replies(arg: str, where: str) -> list[Any]:
    """The replies of an ``llm`` marker: a JSON list of strings and tool calls."""
    try:
        items = json.loads(arg)
    except json.JSONDecodeError as exc:
        raise MarkerError(f"{where}: the llm marker needs a JSON list of replies: {exc}") from exc
    if not isinstance(items, list):
        raise MarkerError(f"{where}: the llm marker needs a JSON list, got {type(items).__name__}")
    replies: list[Any] = []
    for item in items:
        if isinstance(item, str):
            replies.append(item)
        elif isinstance(item, dict) and set(item) <= {"tool_name", "tool_kwargs"}:
            replies.append(ToolCallReply(item["tool_name"], item.get("tool_kwargs", {})))
        else:
            raise MarkerError(
                f"{where}: an llm reply is a string or "
                f'{{"tool_name": ..., "tool_kwargs": {{...}}}}, got {item!r}'
            )
    return replies


def render_call(call: LLMCall) -> str:
    """The messages of one LLM call as the README shows them: ``--- role ---`` then text."""
    return "\n".join(f"--- {m.role.value} ---\n{message_plain_text(m)}" for m in call.messages)


_BLOCK_TIME = re.compile(r"\[(\w+), \d{4}-\d{2}-\d{2} \d{2}:\d{2}\]")


def without_times(text: str) -> str:
    """``text`` with the event times of memory-block lines replaced by a placeholder."""
    return _BLOCK_TIME.sub(r"[\1, <time>]", text.strip())


# --------------------------------------------------------------------------- OpenAI stand-ins


class PageLLM(ScriptedLLM):
    """The scripted LLM of one page: replies come from the page's shared queue (its ``llm``
    markers), then :data:`DEFAULT_REPLY`; every call is also recorded for the page."""

    _page_calls: list[LLMCall] = PrivateAttr(default_factory=list)

    def _next(self, method: str, messages: Any, kwargs: dict) -> ChatMessage:
        if not self._script:
            self._script.append(DEFAULT_REPLY)
        message = super()._next(method, messages, kwargs)
        self._page_calls.append(self.calls[-1])
        return message


def openai_modules(queue: list[Any], calls: list[LLMCall]) -> dict[str, types.ModuleType]:
    """Fake ``llama_index.llms.openai`` and ``llama_index.embeddings.openai`` modules whose
    ``OpenAI`` is a :class:`PageLLM` on ``queue`` and whose ``OpenAIEmbedding`` embeds
    offline, at the real models' dimensions."""

    def make_llm(*args: Any, model: str = "gpt-4o-mini", **kwargs: Any) -> PageLLM:
        llm = PageLLM()
        llm._script = queue  # shared: one queue per page, whichever OpenAI(...) answers
        llm._page_calls = calls
        return llm

    llms = types.ModuleType("llama_index.llms.openai")
    llms.OpenAI = make_llm  # type: ignore[attr-defined]
    embeddings = types.ModuleType("llama_index.embeddings.openai")
    embeddings.OpenAIEmbedding = OpenAIEmbedding  # type: ignore[attr-defined]
    return {"llama_index.llms.openai": llms, "llama_index.embeddings.openai": embeddings}


_OPENAI_DIMENSIONS = {
    "text-embedding-ada-002": 1536,
    "text-embedding-3-small": 1536,
    "text-embedding-3-large": 3072,
}


class OpenAIEmbedding(BaseEmbedding):
    """An offline stand-in for LlamaIndex's ``OpenAIEmbedding``: the same class name and
    model names, vectors of the real dimension (so a store built with it is told apart from
    one built with the offline MiniLM model), made from hashed words."""

    dimensions: Optional[int] = None

    def __init__(
        self, model: str = "text-embedding-ada-002", dimensions: Optional[int] = None, **kwargs: Any
    ) -> None:
        kwargs.pop("api_key", None)  # nothing leaves the machine
        super().__init__(model_name=model, **kwargs)
        self.dimensions = dimensions or _OPENAI_DIMENSIONS[model]

    @classmethod
    def class_name(cls) -> str:
        """As the real class reports it."""
        return "OpenAIEmbedding"

    def _vector(self, text: str) -> list[float]:
        vector = np.zeros(self.dimensions or 1536, dtype=np.float32)
        for word in re.findall(r"\w+", text.lower()):
            digest = hashlib.blake2b(word.encode(), digest_size=8).digest()
            vector[int.from_bytes(digest, "little") % len(vector)] += 1.0
        vector[0] += 1e-3  # never the zero vector
        return (vector / np.linalg.norm(vector)).tolist()

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vector(text)

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)


def install_modules(modules: dict[str, types.ModuleType], setitem: Callable[..., None]) -> None:
    """Put the fake modules into ``sys.modules`` with ``setitem`` (monkeypatch's, so they are
    gone after the test)."""
    for name, module in modules.items():
        setitem(sys.modules, name, module)


def repo_pages(root: Path) -> list[Path]:
    """README.md and every page under docs/, in a stable order."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
