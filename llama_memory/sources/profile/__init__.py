"""User-profile memory: one current document per user (free-form JSON or a pydantic
model), shown in the memory block on every ``get``, updated field by field with its
history (docs/profile.md). Modules: ``paths`` (dotted paths, values, the update error,
schema checks), ``ops`` (operations, merge patch, the draft, the tool's arguments and the
pass's paragraph) and ``source`` (the source, its tools and its part of a formation pass).
"""

from __future__ import annotations

from ...storage.ports.profile import ProfileChange
from .ops import PART_PROMPT, ProfileOp, ProfileUpdate, UpdateInput
from .paths import (
    MAX_PATH_DEPTH,
    MAX_PATH_LENGTH,
    OPS,
    ProfileUpdateError,
    describe_schema,
    render_value,
)
from .source import DEFAULT_MAX_RECORDS, DEFAULT_MAX_TOKENS, ProfileSource

__all__ = [
    "DEFAULT_MAX_RECORDS", "DEFAULT_MAX_TOKENS", "PART_PROMPT", "MAX_PATH_DEPTH", "MAX_PATH_LENGTH",
    "OPS", "ProfileChange", "ProfileOp", "ProfileSource", "ProfileUpdate", "ProfileUpdateError",
    "UpdateInput", "describe_schema", "render_value",
]

