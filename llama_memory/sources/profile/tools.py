"""The ``update_profile`` and ``get_profile`` agent tools of a profile source."""

from __future__ import annotations

import json
from typing import Any

from llama_index.core.tools import FunctionTool
from pydantic import BaseModel, Field

from ...core.types import Scope
from ...storage.ports.profile import ProfileChange
from .ops import EditableProfile, ProfileOp
from .paths import render_value
from .schema import describe_schema


class UpdateProfileArgs(BaseModel):
    """The arguments of the ``update_profile`` agent tool."""

    operations: list[ProfileOp] = Field(description="The changes, applied in order.")


def describe_change(change: ProfileChange) -> str:
    """One change as the tool reports it: ``diet = vegan``, ``travel removed``."""
    if change.removed:
        return f"{change.path} removed"
    return f"{change.path} = {render_value(change.value)}"


def profile_tools(source: EditableProfile, scope: Scope) -> list[Any]:
    """``update_profile`` and ``get_profile`` tools of ``source`` bound to ``scope``
    (see :meth:`ProfileSource.tools`)."""
    scope.require_user(f"the {source.name!r} memory source's tools")
    fields = (
        f" The profile's fields: {describe_schema(source.schema)}." if source.schema else ""
    )

    def update_profile(operations: list[ProfileOp]) -> str:
        changes = source.update_profile(operations, scope)
        if not changes:
            return "Nothing changed: the profile already says that."
        return "Profile updated: " + "; ".join(describe_change(c) for c in changes)

    def get_profile() -> str:
        return json.dumps(source.get_profile(scope), ensure_ascii=False)

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
            fn=get_profile,
            name="get_profile",
            description="Return the user's whole current profile as JSON.",
        ),
    ]
