"""Ask questions of a built store the ways an application does, and say what the block
showed (for ``bench.locomo --flows``, ``bench.noise --flow`` and ``bench.budget``).

Three flows (:data:`FLOWS`):

* ``get``: ``get(question)`` from one session (``"eval"``), as the benchmarks asked so far;
* ``agent``: each question the first message of a new conversation (a new session), as
  an agent asks it: ``put(user message)`` then ``get()`` with no input; afterwards the
  question is taken back out of the store (its records deleted through
  :class:`llama_memory.MemoryAdmin`), so every question meets the same store;
* ``kept``: as ``agent``, but the question stays in the store, as in real use: later
  questions find the user's earlier questions in their history. The records a block
  shows whose messages are all earlier questions are counted apart
  (:attr:`Shown.question_records`, :attr:`Shown.question_tokens`).

Each question of the ``agent`` and ``kept`` flows opens its own memory on the store
(about 10 ms) and closes it, as a new conversation of a web app does.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

#: The ways of asking, in report order.
FLOWS = ("get", "agent", "kept")
#: What each flow is, for the reports.
FLOW_TITLES = {
    "get": "get(question), one session",
    "agent": "agent: new session, put then get(), question taken back",
    "kept": "kept: new session, put then get(), questions kept in history",
}
#: The message ids given to the questions the agent flows put (``asked-<n>``).
ASKED_PREFIX = "asked-"


@dataclass
class Shown:
    """What one question's block showed.

    Attributes:
        tokens: the block's tokens (``last_block.token_count``).
        records: the records it showed.
        ids: the message ids behind them (as ``credit`` gives them).
        question_records: records whose messages are all the user's earlier questions
            (``kept`` flow; 0 otherwise).
        question_tokens: the tokens of their lines in the block.
        get_ms: the time of ``get()``.
        inspected: what the ``inspect`` callback of :meth:`Asker.ask` returned.
    """

    tokens: int
    records: int
    ids: list[str]
    question_records: int
    question_tokens: int
    get_ms: float
    inspected: Any = None

    @property
    def beyond_questions(self) -> int:
        """Tokens the block spends on anything but the user's earlier questions (0 when it
        shows nothing else: its fixed lines are then the questions' cost too)."""
        if self.records == self.question_records:
            return 0
        return self.tokens - self.question_tokens


class Asker:
    """Asks questions of the store under ``path`` as ``user_id``, in one flow.

    ``memory_token_limit``, ``top_k`` and ``min_relevance`` are the asking memory's
    (None: the library's defaults). ``credit`` turns a shown record into the message ids
    it is scored for (default its ``message_ids``)."""

    def __init__(
        self,
        path: Path,
        user_id: str,
        flow: str,
        *,
        top_k: Optional[int] = None,
        memory_token_limit: Optional[int] = None,
        min_relevance: Optional[float] = None,
        credit: Optional[Callable[[Any], list[str]]] = None,
    ) -> None:
        if flow not in FLOWS:
            raise ValueError(f"unknown flow {flow!r}: choose from {', '.join(FLOWS)}")
        self.path, self.user_id, self.flow = Path(path), user_id, flow
        self.options: dict[str, Any] = {
            name: value for name, value in (("top_k", top_k), ("memory_token_limit", memory_token_limit),
                                            ("min_relevance", min_relevance)) if value is not None
        }
        self.credit = credit or (lambda record: list(record.message_ids))
        self.asked = 0
        self._kept_ids: set[str] = set()
        self._session_memory: Any = None  # the "get" flow's one session
        self._admin: Any = None  # the "agent" flow's, which takes questions back

    def open(self, session_id: str) -> Any:
        """A memory of this user on the store, in conversation ``session_id``."""
        from llama_memory import ComposableMemory

        return ComposableMemory.from_defaults(
            user_id=self.user_id, session_id=session_id, path=self.path, **self.options
        )

    def ask(self, text: str, inspect: Optional[Callable[[Any], Any]] = None) -> Shown:
        """Ask ``text``; ``inspect(memory)`` runs after ``get()``, before the question is
        taken back (``agent``), with the memory that asked."""
        from llama_index.core.base.llms.types import ChatMessage, MessageRole

        if self.flow == "get":
            if self._session_memory is None:
                self._session_memory = self.open("eval")
            memory = self._session_memory
            started = time.perf_counter()
            memory.get(text)
            get_ms = (time.perf_counter() - started) * 1000
            return self._shown(memory, get_ms, inspect)
        message_id = f"{ASKED_PREFIX}{self.asked}"
        self.asked += 1
        memory = self.open(message_id)  # a new conversation per question
        try:
            memory.put(ChatMessage(role=MessageRole.USER, content=text,
                                   additional_kwargs={"message_id": message_id}))
            started = time.perf_counter()
            memory.get()
            get_ms = (time.perf_counter() - started) * 1000
            shown = self._shown(memory, get_ms, inspect)
            session_id = memory.session_id
        finally:
            memory.close()
        if self.flow == "agent":
            self._take_back(session_id)
        else:
            self._kept_ids.add(message_id)
        return shown

    def _shown(self, memory: Any, get_ms: float, inspect: Optional[Callable[[Any], Any]]) -> Shown:
        block = memory.last_block
        questions = [r for r in block.records if r.message_ids and set(r.message_ids) <= self._kept_ids]
        lines = block.text.splitlines()
        return Shown(
            tokens=block.token_count, records=len(block.records),
            ids=[i for r in block.records for i in self.credit(r)],
            question_records=len(questions),
            question_tokens=sum(line_tokens(r.text, lines, memory.tokenizer_fn) for r in questions),
            get_ms=get_ms, inspected=inspect(memory) if inspect is not None else None,
        )

    def _take_back(self, session_id: str) -> None:
        """Delete what the question's session wrote (its records, from every index)."""
        from llama_memory import MemoryAdmin

        if self._admin is None:
            self._admin = MemoryAdmin(self.path)
        for record in self._admin.records(self.user_id, session_id=session_id):
            self._admin.delete_record(self.user_id, record.id)

    def close(self) -> None:
        """Close the ``get`` flow's memory (the other flows close theirs per question)."""
        for held in (self._session_memory, self._admin):
            if held is not None:
                held.close()
        self._session_memory = self._admin = None


def line_tokens(text: str, lines: list[str], tokenizer: Callable[[str], Any]) -> int:
    """The tokens of the block line that quotes ``text`` (plus its newline); the text's
    own tokens when no line quotes it as JSON does."""
    quoted = json.dumps(text, ensure_ascii=False)
    for line in lines:
        if quoted in line:
            return len(tokenizer(line)) + 1
    return len(tokenizer(text)) + 1
