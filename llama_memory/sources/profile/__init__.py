"""User-profile memory: one current document per user, updated field by field, with history.

The profile is what an assistant should always know about the user (name, diet,
preferences, constraints): a JSON document, free-form or following a pydantic
model the developer supplies. It is shown in the memory block on every ``get``,
whatever the query.

How it is stored. The document is kept as its leaves, one row per dotted path
(``diet``, ``travel.seat``; a list is one leaf), through the profile rows port
(:class:`~llama_memory.storage.sql.profile.ProfileRows`; in SQLite the ``profile_fields``
table of the memory's file). A change never overwrites a row: the old row gets a
``superseded_at`` time and a new row holds the new value, with its provenance
(operation, session, message ids, time). The current profile is the rows not
superseded; :meth:`ProfileSource.history` returns the others too. A removal is
recorded as a row without a value.

How it changes. Only through explicit updates: patch operations (``set``,
``append``, ``remove`` on a dotted path), a JSON merge patch (RFC 7386: objects
merge, ``null`` removes), the agent tools, or memory formation (an LLM's formation
pass). Every update is checked whole before anything is written, and written in one
transaction: either every operation applies or none does.

The package, one concern a module: ``paths`` (dotted paths, values, the update
error, checks against a pydantic schema), ``ops`` (operations, merge patch, the
in-memory draft an update is applied to, and the writers that send operations: agent
tools and LLM extraction) and ``source`` (the source).
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
    "DEFAULT_MAX_RECORDS",
    "DEFAULT_MAX_TOKENS",
    "PART_PROMPT",
    "MAX_PATH_DEPTH",
    "MAX_PATH_LENGTH",
    "OPS",
    "ProfileChange",
    "ProfileOp",
    "ProfileSource",
    "ProfileUpdate",
    "ProfileUpdateError",
    "UpdateInput",
    "describe_schema",
    "render_value",
]

