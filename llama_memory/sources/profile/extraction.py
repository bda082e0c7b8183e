"""The profile as a part of a formation pass: what the pass asks for under
the ``"profile"`` key, how the answer is validated, and how it is applied."""

from __future__ import annotations

import json
from typing import Any

from ...core.errors import ExtractionError
from ...core.types import Scope
from .ops import EditableProfile, ProfileOp, to_ops
from .paths import ProfileUpdateError
from .schema import describe_schema

#: The profile part's paragraph; ``{profile}`` and ``{fields}`` are filled in.
PART_PROMPT = """\
a list of operations that bring the user's profile (who they are and what they \
prefer, a JSON document the assistant sees in every conversation) up to date with what \
the user said about themselves, each {{"op": "set" | "append" | "remove", "path": "...", \
"value": ...}}:
- "set" a field (a dotted path such as "diet" or "travel.seat") to its new value; a newer \
statement replaces an older one;
- "append" one item to a list field (such as "allergies");
- "remove" a field that no longer holds or that the user asked you to forget (no value), or \
one item of a list field (with that value).
Only lasting facts and preferences the user stated about themselves: no one-off requests, \
nothing the assistant said, nothing about other people. Do not repeat what the profile \
already says. An empty list when there is nothing new.
{fields}
Current profile: {profile}"""


def profile_prompt(source: EditableProfile, scope: Scope) -> str:
    """The profile part's paragraph, with the current profile and its fields."""
    return PART_PROMPT.format(
        profile=json.dumps(source.get_profile(scope), ensure_ascii=False),
        fields=(
            f"The profile follows this schema; use only these fields: {describe_schema(source.schema)}."
            if source.schema
            else "Field names are free-form: short snake_case names; reuse existing ones."
        ),
    )


def parse_profile(value: Any) -> list[ProfileOp]:
    """Validate the answer under the profile key: a list of operations (writes
    nothing; whether they fit the current profile is checked when applied).

    Raises:
        ProfileUpdateError: not a list, or an operation that does not parse (each named).
    """
    if not isinstance(value, list):
        raise ProfileUpdateError([("(answer)", f"expected a list of operations, got {type(value).__name__}")])
    ops = to_ops(value)
    problems = [op for op in ops if isinstance(op, tuple)]
    if problems:
        raise ProfileUpdateError(problems)
    return [op for op in ops if isinstance(op, ProfileOp)]


def apply_profile(source: EditableProfile, ops: list[ProfileOp], window: Any) -> None:
    """Apply a pass's profile operations (joining an open transaction), with the
    window's message ids as provenance."""
    if not ops:
        return
    ids = [i for i in window.message_ids if i]
    try:
        source.update_profile(ops, window.scope, message_ids=ids)
    except ProfileUpdateError as exc:
        raise ExtractionError(f"the LLM's profile operations were rejected: {exc}") from exc
