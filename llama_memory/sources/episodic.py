"""Episodic memory: one current summary per session, a record of the vector source (no
role, ``metadata["kind"] == "summary"``, ``metadata["covers"]`` its messages' record ids),
found like the messages it sums up and able to stand in for their excerpts in a tight
block. Stored under ``"summary:" + session`` so it never joins an excerpt; a newer one
replaces the older; written by a formation pass or ``memory.summarise()``
(docs/formation.md).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Optional

from ..core.types import SUMMARY_KIND, MemoryRecord, Scope, StoredMessage
from ..storage.ports import NewRecord
from ..storage.ports.base import user_meta_key
from .summarise import SUMMARY_SENTENCES, extractive_summary
from .vector import VectorSource

#: The session a summary record is stored under, for the session it sums up.
SUMMARY_SESSION_PREFIX = "summary:"
#: Messages of a session an offline summary reads at most (the first ones).
SESSION_LIMIT = 2_000


class EpisodicMemory:
    """Session summaries on a vector ``source``: write (one current per session), read,
    and the formation pass's ``"summary"`` part."""

    #: The key of a formation pass's JSON answer this part owns.
    pass_field = "summary"

    def __init__(self, source: VectorSource) -> None:
        if not isinstance(source, VectorSource):
            raise TypeError(f"EpisodicMemory needs the memory's VectorSource, not {type(source).__name__}")
        self.source = source

    # -- writing ------------------------------------------------------------------------

    def add_summary(
        self, scope: Scope, text: str, message_ids: Sequence[str], *, covers: Sequence[str] = (),
        event_time: Optional[float] = None, importance: Optional[float] = None,
    ) -> str:  # fmt: skip
        """Store ``text`` as the summary of the scope's session, replacing the previous
        one (joining an open transaction); return the record id. ``message_ids``: the chat
        messages it covers (its provenance); ``covers``: their record ids, where known;
        ``event_time``: when the last of them was said; ``importance``: 0..1, if given."""
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"a session summary must be non-empty text, got {text!r}")
        if not scope.session_id:
            raise ValueError("a session summary needs the scope's session_id: which session it sums up")
        scope.require_user("a session summary")
        store, name = self.source.store, self.source.name
        key = _summary_key(scope)
        record = NewRecord(
            source=name, scope=Scope(scope.user_id, SUMMARY_SESSION_PREFIX + scope.session_id, scope.tenant_id),
            text=text.strip(), message_ids=tuple(dict.fromkeys(message_ids)), event_time=event_time,
            metadata={"kind": SUMMARY_KIND, "session": scope.session_id, "covers": list(covers)}, importance=importance,
        )  # fmt: skip
        with store.transaction("replace a session summary"):
            old = store.get_meta(key)
            gone = store.delete_records([old], scope, name) if old else []
            [record_id] = store.add_records([record])
            store.set_meta(key, record_id)
            dropped = [g.id for g in gone if g.id != record_id]
            if dropped:  # its vector goes once the deletion is committed (the outer
                # transaction's commit, in a pass), and stays if it rolls back
                store.after_commit(lambda: self.source.forget_records(dropped, scope))
        return record_id

    def summary(self, scope: Scope) -> Optional[MemoryRecord]:
        """The current summary of the scope's session, or None."""
        record_id = self.source.store.get_meta(_summary_key(scope))
        if not record_id:
            return None
        return self.source.store.get_records([record_id], scope, self.source.name).get(record_id)

    def summarise(self, scope: Scope, sentences: int = SUMMARY_SENTENCES) -> Optional[str]:
        """Summarise the scope's session offline (its most central sentences) and store
        it; return the record id, or None when there was nothing to sum up."""
        records = self.source.store.session_records(scope, self.source.name, SESSION_LIMIT)
        messages = [
            StoredMessage(r.id or "", r.role or "", r.text, r.event_time or 0.0)
            for r in records
            if r.role and not r.metadata.get("kind")
        ]
        text = extractive_summary(messages, self.source.embed_model, sentences)
        if not text:
            return None
        return self.add_summary(
            scope, text, [m for r in records for m in r.message_ids],
            covers=[r.id for r in records if r.id],
            event_time=max((r.event_time for r in records if r.event_time is not None), default=None),
        )

    # -- the formation pass's part ---------------------------------------------------------

    def pass_prompt(self, window: Any) -> str:
        """What the pass's LLM must put under ``"summary"``: the session summary so far."""
        current = self.summary(window.scope)
        known = f" The summary so far: {json.dumps(current.text)}." if current else ""
        return (
            "A short summary of this session so far (2-5 sentences, third person, the "
            "facts and events that matter later: who, what, when), updating the summary "
            f"so far with the new messages.{known} "
            'JSON: "summary": "<text>", or null when nothing is worth summarising.'
        )

    def parse_pass(self, value: Any, window: Any) -> Optional[str]:
        """The summary text, or None for none; ValueError naming what is wrong."""
        if value is None:
            return None
        if not isinstance(value, str):
            raise ValueError(f'"summary" must be a string or null, got {type(value).__name__}: {value!r}')
        return value.strip() or None

    def apply_pass(self, parsed: Optional[str], window: Any) -> None:
        """Store the pass's summary, covering the previous summary's and the window's
        messages, in the pass's transaction."""
        if parsed is None:
            return
        scope: Scope = window.scope
        current = self.summary(scope)
        ids = [i for i in window.message_ids if i]
        read = self.source.store.get_records(ids, scope, self.source.name)
        chat_ids = [*(current.message_ids if current else []),
                    *(m for i in ids if i in read for m in read[i].message_ids)]
        covers = [*(current.metadata.get("covers", []) if current else []), *ids]
        self.add_summary(scope, parsed, chat_ids, covers=covers, event_time=window.now)


def _summary_key(scope: Scope) -> str:
    """The meta key of the session's current summary (forgotten with the user)."""
    return user_meta_key("session_summary", scope)
