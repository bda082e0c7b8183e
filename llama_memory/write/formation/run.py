"""Running one formation pass, applied once whatever happens (a reopen, a worker killed
mid-pass, two workers on one session): the cursor moves in the parts' transaction, only
if it is still where the pass started. :func:`run_parts` is a pass with no cursor.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Any, Optional

from llama_index.core.base.llms.types import ChatMessage

from ...core.types import Scope
from ...sources.base import Extracting, Stored
from ...storage.codec import dump_message
from ...storage.ports.base import user_meta_key
from ...storage.sql.store import Storage
from .answer import ask_pass, observed
from .parts import PassPart, Proposing, apply_pass, pass_window

logger = logging.getLogger(__name__)


def run_parts(sources: Sequence[Any], scope: Scope, llm: Any, messages: Sequence[ChatMessage]) -> dict[str, Any]:
    """A formation pass over ``messages`` with no cursor (``memory.extract(messages=...)``,
    a memory without a store): the parts, then the sources with their own ``extract``;
    returns the parts' parsed answers."""
    window = pass_window(scope, messages)
    parts = [s for s in sources if isinstance(s, PassPart)]
    parsed = ask_pass(llm, parts, window)
    apply_pass(parts, parsed, window)
    for source in sources:
        if not isinstance(source, PassPart) and isinstance(source, Extracting):
            extract = source.extract
            observed(source, window, lambda: extract(messages, llm, scope))
    return parsed


def cursor_key(scope: Scope) -> str:
    """The meta key of a session's formation cursor (forgotten with the user; its text,
    ``extraction_cursor``, is stored: it stays)."""
    return user_meta_key("extraction_cursor", scope)


def _fingerprint(message: ChatMessage) -> str:
    return hashlib.sha256(dump_message(message).encode()).hexdigest()[:16]


def cursor_position(history: Sequence[ChatMessage], cursor: Optional[str]) -> int:
    """Where the messages no pass has covered yet start in ``history``; 0 when the
    cursor's last message (count and fingerprint) is not where it says (a reset)."""
    if not cursor:
        return 0
    try:
        data = json.loads(cursor)
        upto, last = int(data["upto"]), str(data["last"])
    except (ValueError, KeyError, TypeError):
        logger.warning("unreadable extraction cursor %r: extracting the session from its start", cursor)
        return 0
    if 0 < upto <= len(history) and _fingerprint(history[upto - 1]) == last:
        return upto
    return 0


def run_pass(
    store: Storage, sources: Sequence[Any], scope: Scope, llm: Any, history: Sequence[ChatMessage],
    lock: Optional[AbstractContextManager[Any]] = None,
) -> int:  # fmt: skip
    """One formation pass over the session's messages after its cursor; return how
    many it covered (0: nothing new, or another worker applied it first). The LLM is
    asked **once**, holding no lock, and every answer parsed (a bad one raises); then
    under ``lock`` (the memory's: its sources' locks come after it) the parts are applied
    and the cursor moved in one transaction, only if the cursor has not moved meanwhile.
    A :class:`Proposing` source asks before the lock and writes in the transaction; one
    with only ``extract`` writes on its own under ``lock`` (its LLM call holds it).
    """
    key = cursor_key(scope)
    before = store.get_meta(key)
    todo = list(history[cursor_position(history, before) :])
    if not todo:
        return 0
    window = pass_window(scope, todo)
    parts = [s for s in sources if isinstance(s, PassPart)]
    parsed = ask_pass(llm, parts, window)
    rest = [s for s in sources if not isinstance(s, PassPart)]

    def propose(source: Proposing) -> Optional[Callable[[], Any]]:
        return observed(source, window, lambda: source.propose(todo, llm, scope))

    applies = [(s, propose(s)) for s in rest if isinstance(s, Proposing)]
    others = [s for s in rest if isinstance(s, Extracting) and not isinstance(s, Proposing)]
    cursor = json.dumps({"upto": len(history), "last": _fingerprint(history[-1])})
    with lock or nullcontext():
        if store.get_meta(key) != before:
            return 0  # applied meanwhile by another worker: never twice
        for other in others:
            extract = other.extract
            observed(other, window, lambda: extract(todo, llm, scope))
        # A source on another store cannot join this transaction (its connection would
        # wait for this one's lock): it writes first, on its own, as in put().
        def apart(source: Any) -> bool:
            return isinstance(source, Stored) and source.store is not store

        apply_pass([p for p in parts if apart(p)], parsed, window)
        for source, write in applies:
            if write is not None and apart(source):
                write()
        with store.transaction("apply an extraction pass"):
            if store.get_meta(key) != before:
                return 0
            apply_pass([p for p in parts if not apart(p)], parsed, window)
            for source, write in applies:
                if write is not None and not apart(source):
                    write()
            store.set_meta(key, cursor)
    return len(todo)
