"""What takes part in a formation pass: the window it reads (:class:`PassWindow`), the
parts that own one key of its JSON answer (:class:`PassPart`), and user-supplied sources
that join its transaction (:class:`Proposing`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional, Protocol, runtime_checkable

from llama_index.core.base.llms.types import ChatMessage

from ...core.messages import declared_message_id
from ...core.types import Scope


@runtime_checkable
class Proposing(Protocol):
    """A source that forms memories in two halves, so the LLM call holds no lock and
    the writes join the formation pass's transaction (a user-supplied source that is
    not a :class:`PassPart`)."""

    def propose(self, messages: Sequence[ChatMessage], llm: Any, scope: Scope) -> Optional[Callable[[], Any]]:
        """Ask ``llm`` about ``messages`` without writing; return what writes the
        answer (joining an open transaction), or None when there is nothing to write."""


@dataclass(frozen=True)
class PassWindow:
    """What a formation pass read: the session's messages after its cursor."""

    scope: Scope  # tenant, user, session
    messages: list[ChatMessage]  # in order
    message_ids: list[str]  # their record ids in the records table, same order ("" where unknown)
    now: float  # the pass's time (seconds since the epoch)


@runtime_checkable
class PassPart(Protocol):
    """A part of a formation pass's one structured LLM call, owning one key of the JSON
    answer (``"triples"``). The pass parses every part (all or nothing), then applies
    them and moves the cursor in one transaction."""

    @property
    def pass_field(self) -> str:
        """The key of the JSON answer this part owns (a plain attribute will do)."""

    def pass_prompt(self, window: PassWindow) -> str:
        """What the LLM must put under :attr:`pass_field`: one paragraph and the JSON
        shape (with current state, e.g. known triples, if useful)."""

    def parse_pass(self, value: Any, window: PassWindow) -> Any:
        """Validate the answer under :attr:`pass_field`; raise ``ValueError`` naming what
        is wrong. Writes nothing."""

    def apply_pass(self, parsed: Any, window: PassWindow) -> None:
        """Write what :meth:`parse_pass` returned, joining the pass's open transaction."""


def pass_window(scope: Scope, messages: Sequence[ChatMessage], at: Optional[float] = None) -> PassWindow:
    """The window of a formation pass over ``messages`` (record ids as the application
    declared them, "" where it did not)."""
    return PassWindow(
        scope=scope, messages=list(messages),
        message_ids=[declared_message_id(m) or "" for m in messages],
        now=time.time() if at is None else at,
    )  # fmt: skip


def apply_pass(parts: Sequence[PassPart], parsed: dict[str, Any], window: PassWindow) -> None:
    """Apply every part's parsed answer (inside the caller's transaction, if any)."""
    for part in parts:
        if part.pass_field in parsed:
            part.apply_pass(parsed[part.pass_field], window)
