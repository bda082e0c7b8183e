"""The profile source: the user's profile in the memory block, updates, history, forgetting."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any, Callable, Optional, Union

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.tools import FunctionTool
from llama_index.core.utils import get_tokenizer
from pydantic import BaseModel

from ...core.errors import ExtractionError
from ...core.types import NEVER, TTL, Expiry, MemoryRecord, Scope, StoredMessage, now
from ...storage.ports.profile import ProfileChange, ProfileWrite
from ...storage.sql.profile import ProfileRows
from ..base import MemorySource, require_port
from ..change_notes import CHANGED_WITHIN, is_recent, since_before, window_seconds
from ..views import ProfileView
from .ops import PART_PROMPT, Draft, ProfileOp, UpdateInput, UpdateProfileArgs, to_ops
from .paths import (
    ProfileUpdateError,
    describe_schema,
    path_problem,
    raise_if_bad_path,
    render_value,
    schema_errors,
    schema_importance,
    unflatten,
)

#: Default token share of the profile in the memory block.
DEFAULT_MAX_TOKENS = 500
#: Default cap on the number of fields shown.
DEFAULT_MAX_RECORDS = 100


class ProfileSource(MemorySource):
    """The user's profile: one current document per user, always in the memory block.

    Args:
        store: where the profile rows are kept (a
            :class:`~llama_memory.storage.sql.profile.ProfileRows`;
            :func:`llama_memory.memory.wiring.default_profile_source` builds the source).
        schema: a pydantic model the profile follows; updates are validated against it
            before anything is written (required fields may be missing).
        max_records: at most this many fields are shown in the memory block.
        max_tokens: the profile's share of the memory block, in tokens; beyond it the
            most important, then most recently changed, fields are kept and a last line
            says how many were left out.
        importance: per-path importance (higher shown first), e.g. ``{"name": 10}``; a
            path's nearest listed ancestor applies; overrides the schema fields'
            ``json_schema_extra={"importance": ...}``; default 0.
        tokenizer_fn: counts tokens for ``max_tokens`` (default LlamaIndex's).
        name: the source's name in the memory block and in ``memory.source(name)``.
        priority: the memory block serves higher priorities first; the default (10) is
            above the vector source's, so the profile is never crowded out.
        expiry: default time to live of new values, refresh on read, and the clock
            (default: kept until forgotten); ``update_profile(ttl=...)`` overrides it.
        changed_within: seconds (or a timedelta): a field set this recently is shown with
            the value it replaced, ``city: Lisbon (since 2026-03-02; before: Porto)``;
            default 90 days, 0 never.
    """

    query_independent = True  # the whole current profile, whatever the query

    def __init__(
        self, store: Any, *, schema: Optional[type[BaseModel]] = None,
        max_records: int = DEFAULT_MAX_RECORDS, max_tokens: int = DEFAULT_MAX_TOKENS,
        importance: Optional[Mapping[str, float]] = None,
        tokenizer_fn: Optional[Callable[[str], Sequence]] = None, name: str = "profile",
        priority: int = 10, expiry: Expiry = NEVER,
        changed_within: Union[float, timedelta, None] = CHANGED_WITHIN,
    ) -> None:
        if schema is not None and not (isinstance(schema, type) and issubclass(schema, BaseModel)):
            raise TypeError(f"schema must be a pydantic model class, not {schema!r}")
        if max_records < 0 or max_tokens < 0:
            raise ValueError(
                f"max_records and max_tokens must be zero or more, got {max_records}, {max_tokens}"
            )
        for path in importance or {}:
            problem = path_problem(path)
            if problem:
                raise ValueError(f"importance: {path}: {problem}")
        self.schema = schema
        self.max_records = max_records
        self.max_tokens = max_tokens
        self.importance = dict(importance or {})
        self.tokenizer_fn = tokenizer_fn or get_tokenizer()
        self.name = name
        self.priority = priority
        self.expiry = expiry
        self.changed_within = window_seconds(changed_within)
        self._importance_cache: dict[str, float] = {}
        self._costs: dict[str, int] = {}  # line -> tokens; the same fields render on every get
        self.rows: ProfileRows = require_port(
            store, ProfileRows, "ProfileSource",
            "SQLiteProfileRows(SQLiteStore('./memory')) (llama_memory.storage.sqlite.bundle), "
            "or build the source with llama_memory.memory.wiring.default_profile_source(store)",
        )  # fmt: skip
        # The SQLite store, kept as the attribute the memory uses to write a batch in one
        # transaction (``llama_memory.write.pipeline.one_write``).
        self.store = getattr(self.rows, "store", store)

    # -- reading --------------------------------------------------------------------

    def get_profile(self, scope: Scope) -> dict[str, Any]:
        """The user's current profile as a nested dict (``{}`` when there is none)."""
        return unflatten((row.path, row.value) for row in self._current(scope))

    def view(self, scope: Scope) -> ProfileView:
        """The current profile with its whole history: a table in Jupyter, text in a
        terminal (:class:`~llama_memory.sources.views.ProfileView`)."""
        return ProfileView(self.get_profile(scope), self.history(None, scope))

    def history(self, path: Optional[str], scope: Scope) -> list[ProfileChange]:
        """Every value the field at ``path`` (and the fields beneath it) has had, and
        its removals, oldest first; ``path=None`` gives the whole profile's history."""
        scope.require_user(f"the {self.name!r} memory source")
        if path is not None:
            raise_if_bad_path(path)
        return self.rows.history(scope, self.expiry.now(), path)

    def retrieve(self, query: str, scope: Scope, k: int) -> list[MemoryRecord]:
        """The current profile as records, one per field, whatever ``query`` and ``k``
        (``max_records`` and ``max_tokens`` cut it), by importance then recency; a last
        record says how many were left out. ``metadata`` holds ``path``, ``value``,
        ``importance``, ``op`` and ``updated_at``.
        """
        current = self._current(scope)
        if not current or self.max_records == 0 or self.max_tokens == 0:
            return []  # nothing stored, or the profile is switched off in the block
        ranked = sorted(
            current, key=lambda r: (self.importance_of(r.path), r.created_at, r.id), reverse=True
        )
        shown = ranked[: self.max_records]
        before = self._replaced(shown, scope)
        records = [self._to_record(row, scope, before.get(row.id)) for row in shown]
        left_out = len(ranked) - len(shown)
        kept, cut = self._fit(records)
        left_out += cut
        if self.expiry.refresh_on_read and kept:
            returned = {r.id for r in kept}
            refreshed = [row.id for row in shown if f"{self.name}:{row.id}" in returned]
            self.rows.refresh_expiry(refreshed, self.expiry.now())
        if left_out:
            s = "s" if left_out > 1 else ""
            kept.append(
                MemoryRecord(
                    text=f"({left_out} more profile field{s} left out for the token budget)",
                    source=self.name, user_id=scope.user_id,
                    metadata={"note": True, "left_out": left_out},
                )
            )
        return kept

    def importance_of(self, path: str) -> float:
        """The importance of a field: from ``importance=``, else the schema, else 0."""
        cached = self._importance_cache.get(path)
        if cached is not None:
            return cached
        value = schema_importance(self.schema, path) if self.schema is not None else None
        best = -1
        for key, weight in self.importance.items():
            if (path == key or path.startswith(key + ".")) and len(key) > best:
                best, value = len(key), weight
        result = float(value) if value is not None else 0.0
        self._importance_cache[path] = result
        return result

    # -- writing --------------------------------------------------------------------

    def add(self, messages: Sequence[StoredMessage], scope: Scope) -> None:
        """Nothing: the profile changes only through updates, tools or formation."""

    def update_profile(
        self, update: UpdateInput, scope: Scope, *, session_id: Optional[str] = None,
        message_ids: Sequence[str] = (), ttl: Optional[TTL] = None,
    ) -> list[ProfileChange]:
        """Apply an update to the user's profile, all of it or nothing.

        Args:
            update: a list of operations (:class:`ProfileOp` or dicts ``{"op", "path",
                "value"}``) applied in order, or a JSON merge patch (RFC 7386, a dict or
                a pydantic model's set fields), where ``None`` removes a field. A null is
                never stored.
            scope: whose profile; its ``session_id`` is the default provenance.
            session_id: the conversation the update came from (default the scope's).
            message_ids: ids of the messages it came from.
            ttl: how long the values written are kept (seconds or a timedelta); default
                the source's ``expiry.ttl``.

        Returns:
            The rows written, in order (none for a no-op).

        Raises:
            ProfileUpdateError: an operation, path or value is invalid; every problem is
                listed with its field, and nothing is written.
        """
        ops = to_ops(update)
        return self._update(scope, lambda current: ops, session_id, message_ids, ttl)

    def _update(
        self, scope: Scope,
        make_ops: Callable[[dict[str, Any]], Sequence[Union[ProfileOp, tuple[str, str]]]],
        session_id: Optional[str], message_ids: Sequence[str], ttl: Optional[TTL] = None,
    ) -> list[ProfileChange]:
        """Apply ``make_ops(current leaves)`` in one transaction, or raise and write nothing."""
        scope.require_user(f"the {self.name!r} memory source")
        session = session_id if session_id is not None else scope.session_id
        ids = tuple(str(m) for m in message_ids)
        lifetime = self.expiry.for_write(ttl)

        def decide(current: list[ProfileChange]) -> ProfileWrite:
            # Called by the port inside its write transaction with the current rows, so
            # concurrent updates (other threads, other processes) apply one after the
            # other. An expired value is not among them: it counts as absent.
            old = {row.path: row.value for row in current}
            row_ids = {row.path: row.id for row in current}
            draft = Draft(old, self.schema)
            for op in make_ops(old):
                if isinstance(op, tuple):  # an operation that did not even parse
                    draft.problems.append(op)
                else:
                    draft.apply(op)
            plan = draft.plan()
            if not draft.problems and self.schema is not None and plan.touched:
                draft.problems.extend(schema_errors(self.schema, draft.leaves, plan.touched))
            if draft.problems:
                raise ProfileUpdateError(draft.problems)  # the port writes nothing
            return ProfileWrite(
                supersede=tuple(row_ids[path] for path in plan.superseded),
                insert=tuple(plan.inserts), written_at=now(), session_id=session, message_ids=ids,
                ttl=lifetime[0], expires_at=lifetime[1],
            )

        return self.rows.update(scope, self.expiry.now(), decide)

    def set_field(self, path: str, value: Any, scope: Scope, **provenance: Any) -> list[ProfileChange]:
        """Give the field at ``path`` a new value (a dict replaces the whole object;
        ``None`` is refused). ``provenance``: ``session_id=``, ``message_ids=``."""
        return self.update_profile([{"op": "set", "path": path, "value": value}], scope, **provenance)

    def append(self, path: str, value: Any, scope: Scope, **provenance: Any) -> list[ProfileChange]:
        """Add ``value`` to the list at ``path`` (created if missing; an item already
        in the list is not added twice)."""
        return self.update_profile([{"op": "append", "path": path, "value": value}], scope, **provenance)

    def remove_item(self, path: str, value: Any, scope: Scope, **provenance: Any) -> list[ProfileChange]:
        """Remove ``value`` from the list at ``path``."""
        return self.update_profile([{"op": "remove", "path": path, "value": value}], scope, **provenance)

    def remove_field(self, path: str, scope: Scope, *, with_history: bool = False, **provenance: Any) -> list[ProfileChange]:
        """Remove the field at ``path`` and beneath; the old values stay in
        :meth:`history` unless ``with_history=True`` erases them."""
        if not with_history:
            return self.update_profile([{"op": "remove", "path": path}], scope, **provenance)
        scope.require_user(f"the {self.name!r} memory source")
        raise_if_bad_path(path)
        self.rows.erase(scope, path)
        return []

    # -- forgetting -------------------------------------------------------------------

    def forget(self, scope: Scope, with_history: bool = True) -> None:
        """Remove the user's whole profile: every row (``with_history=True``, "forget
        me"), or a removal of every field, keeping :meth:`history`."""
        scope.require_user(f"forgetting in the {self.name!r} memory source")
        if not with_history:
            # The fields to remove are read in the same transaction as the removal, so
            # a field written concurrently cannot survive a "forget".
            def every_field(current: dict[str, Any]) -> list[ProfileOp]:
                return [ProfileOp(op="remove", path=top) for top in dict.fromkeys(p.split(".", 1)[0] for p in current)]

            self._update(scope, every_field, None, ())
            return
        self.rows.erase(scope)
        self._costs.clear()  # rendered lines, the user's among them

    def purge_expired(self) -> int:
        """Delete expired field values (their history rows too); return how many rows."""
        return self.rows.purge_expired(self.expiry.now())

    def reset(self, scope: Scope) -> None:
        """Delete the user's profile and its history (what ``memory.reset()`` calls)."""
        self.forget(scope, with_history=True)

    # -- hooks: agent tools and formation --------------------------------------------------

    def tools(self, scope: Scope) -> list[Any]:
        """``update_profile`` and ``get_profile`` tools bound to ``scope``."""
        scope.require_user(f"the {self.name!r} memory source's tools")
        fields = f" The profile's fields: {describe_schema(self.schema)}." if self.schema else ""

        def update_profile(operations: list[ProfileOp]) -> str:
            changes = self.update_profile(operations, scope)
            if not changes:
                return "Nothing changed: the profile already says that."
            said = [f"{c.path} removed" if c.removed else f"{c.path} = {render_value(c.value)}"
                    for c in changes]
            return "Profile updated: " + "; ".join(said)

        def get_profile() -> str:
            return json.dumps(self.get_profile(scope), ensure_ascii=False)

        return [
            FunctionTool.from_defaults(
                fn=update_profile,
                name="update_profile",
                # Explicit: a schema built from the closure's (postponed) annotations
                # cannot resolve ProfileOp.
                fn_schema=UpdateProfileArgs,
                description=(
                    "Save lasting facts the user tells you about themselves (name, where they "
                    "live, diet, preferences, constraints) in their profile, which you will see "
                    "in every later conversation. `operations` is a list of {op, path, value}: "
                    '"set" gives a field a new value, replacing the old one; "append" adds one '
                    'item to a list field; "remove" deletes a field, or with a value one item '
                    'of a list field. `path` is a dotted field name such as "diet" or '
                    '"travel.seat" (letters, digits, _ and -). Keep existing field names. Do not '
                    "save guesses, one-off requests or facts about other people." + fields
                ),
            ),
            FunctionTool.from_defaults(
                fn=get_profile, name="get_profile",
                description="Return the user's whole current profile as JSON.",
            ),
        ]

    def extract(self, messages: Sequence[ChatMessage], llm: Any, scope: Scope) -> None:
        """Ask ``llm`` for profile operations learned from ``messages`` and apply them in
        one transaction (one LLM call, shown the current profile).

        Raises:
            ExtractionError: the output was malformed or its operations rejected;
                nothing was written.
        """
        # Imported here: formation imports sources.base, which runs this package's
        # __init__ (and so this module) first.
        from ...write.formation import run_parts

        run_parts([self], scope, llm, messages)  # the pass with this source as its one part

    # -- a part of the formation pass (llama_memory.write.formation.PassPart) --------------------

    @property
    def pass_field(self) -> str:
        """The key of the pass's answer this source owns: its name (``"profile"``)."""
        return self.name

    def pass_prompt(self, window: Any) -> str:
        """The pass's request: profile operations, shown the current profile."""
        scope: Scope = window.scope
        scope.require_user(f"the {self.name!r} memory source")
        fields = "Field names are free-form: short snake_case names; reuse existing ones."
        if self.schema:
            described = describe_schema(self.schema)
            fields = f"The profile follows this schema; use only these fields: {described}."
        profile = json.dumps(self.get_profile(scope), ensure_ascii=False)
        return PART_PROMPT.format(profile=profile, fields=fields)

    def parse_pass(self, value: Any, window: Any) -> list[ProfileOp]:
        """Validate the answer (a list of operations); writes nothing. ProfileUpdateError
        for a non-list or an operation that does not parse (each named)."""
        if not isinstance(value, list):
            got = type(value).__name__
            raise ProfileUpdateError([("(answer)", f"expected a list of operations, got {got}")])
        ops = to_ops(value)
        problems = [op for op in ops if isinstance(op, tuple)]
        if problems:
            raise ProfileUpdateError(problems)
        return [op for op in ops if isinstance(op, ProfileOp)]

    def apply_pass(self, parsed: list[ProfileOp], window: Any) -> None:
        """Apply the operations in the pass's transaction (a removal keeps history), with
        the window's message ids as provenance."""
        if not parsed:
            return
        ids = [i for i in window.message_ids if i]
        try:
            self.update_profile(parsed, window.scope, message_ids=ids)
        except ProfileUpdateError as exc:
            raise ExtractionError(f"the LLM's profile operations were rejected: {exc}") from exc

    # -- internals -----------------------------------------------------------------------

    def _current(self, scope: Scope) -> list[ProfileChange]:
        scope.require_user(f"the {self.name!r} memory source")
        return self.rows.current(scope, self.expiry.now())

    def _replaced(self, rows: Sequence[ProfileChange], scope: Scope) -> dict[int, str]:
        """The value each field set within ``changed_within`` replaced: ``{row id: old
        value}`` (only recent changes read their history)."""
        now = self.expiry.now()
        found: dict[int, str] = {}
        for row in rows:
            if row.op != "set" or not is_recent(row.created_at, now, self.changed_within):
                continue
            same = [h for h in self.rows.history(scope, now, row.path) if h.path == row.path]
            at = next((n for n, h in enumerate(same) if h.id == row.id), 0)
            previous = same[at - 1] if at > 0 else None
            if previous is not None and not previous.removed and previous.value != row.value:
                found[row.id] = render_value(previous.value)
        return found

    def _to_record(self, row: ProfileChange, scope: Scope, before: Optional[str] = None) -> MemoryRecord:
        importance = self.importance_of(row.path)
        note = f" ({since_before(row.created_at, before)})" if before is not None else ""
        return MemoryRecord(
            text=f"{row.path}: {render_value(row.value)}{note}",
            score=importance,
            source=self.name,
            user_id=scope.user_id,
            session_id=row.session_id,
            message_ids=list(row.message_ids),
            # No event time: the block's label stays "[profile]", which saves tokens on
            # every line; the time of the change is in ingested_at and metadata.
            event_time=None,
            ingested_at=row.created_at,
            id=f"{self.name}:{row.id}",
            metadata={
                "path": row.path, "value": row.value, "importance": importance, "op": row.op,
                "updated_at": row.created_at, "before": before,
            },
        )

    def _fit(self, records: list[MemoryRecord]) -> tuple[list[MemoryRecord], int]:
        """The records that fit in ``max_tokens``, in order, and how many were left out."""
        costs = [self._line_cost(r.text) for r in records]
        if sum(costs) <= self.max_tokens:
            return records, 0
        # Something is left out: keep room for the line that says so.
        budget = self.max_tokens - self._line_cost(
            f"({len(records)} more profile fields left out for the token budget)"
        )
        kept = []
        for record, cost in zip(records, costs):
            if cost <= budget:  # a long field is skipped, a shorter one after it may fit
                kept.append(record)
                budget -= cost
        return kept, len(records) - len(kept)

    def _line_cost(self, text: str) -> int:
        cost = self._costs.get(text)
        if cost is None:
            if len(self._costs) > 4096:
                self._costs.clear()
            # compose renders '- [name] "text"' plus a newline.
            cost = self._costs[text] = len(self.tokenizer_fn(f'- [{self.name}] "{text}"')) + 1
        return cost
