"""A tool call's arguments checked for an agent: strictly, and said in its own terms.

The MCP SDK's pydantic check takes ``"3"`` and ``true`` for the numbers 3 and 1, ignores
an argument the tool does not have, and reports a mistake as a pydantic dump. An agent
reads the error to correct its next call, so :func:`argument_problem` checks the
arguments first, against the same JSON schema, nothing coerced, and names the argument
and the value as sent: ``k must be a whole number from 1 to 50, got "3"``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Optional

__all__ = ["argument_problem", "shown"]

#: The most characters of a value an error message shows.
SHOWN_CHARS = 60


def shown(value: Any) -> str:
    """``value`` as JSON (as the agent sent it), cut to :data:`SHOWN_CHARS` characters."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def _listed(names: list[str]) -> str:
    if len(names) <= 1:
        return "".join(names)
    return ", ".join(names[:-1]) + " and " + names[-1]


def _expected(spec: Mapping[str, Any]) -> str:
    """What an argument of JSON schema ``spec`` must be, as a sentence says it."""
    kind = spec.get("type")
    if kind == "integer":
        low, high = spec.get("minimum"), spec.get("maximum")
        if low is not None and high is not None:
            return f"a whole number from {low} to {high}"
        if low is not None:
            return f"a whole number of at least {low}"
        return "a whole number"
    if kind == "boolean":
        return "true or false"
    if kind == "array":
        least = spec.get("minItems")
        what = "a list of texts" if spec.get("items", {}).get("type") == "string" else "a list"
        return f"{what} (at least {least})" if least else what
    if kind == "string":
        return "a text"
    return f"of JSON type {kind}" if kind else "a value"


def _fits(spec: Mapping[str, Any], value: Any) -> bool:
    kind = spec.get("type")
    if kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            return False
        low, high = spec.get("minimum"), spec.get("maximum")
        return (low is None or value >= low) and (high is None or value <= high)
    if kind == "boolean":
        return isinstance(value, bool)
    if kind == "string":
        return isinstance(value, str)
    if kind == "array":
        if not isinstance(value, list) or len(value) < spec.get("minItems", 0):
            return False
        items = spec.get("items", {})
        return all(_fits(items, item) for item in value) if items else True
    return True  # a type this checker does not know: the SDK's validation has the word


def argument_problem(
    tool: str, schema: Mapping[str, Any], arguments: Mapping[str, Any], refused: Optional[Mapping[str, str]] = None
) -> Optional[str]:
    """The first thing wrong with ``arguments`` for ``tool``, in a sentence or two naming
    the argument; None when they fit.

    Args:
        tool: the tool's name.
        schema: its input schema (``properties``, ``required``).
        arguments: the call's arguments.
        refused: arguments the tool does not take, each with the sentence that says
            why (``user_id`` on a server of one user).
    """
    properties: Mapping[str, Mapping[str, Any]] = schema.get("properties", {})
    for name in arguments:
        if name in properties:
            continue
        if refused and name in refused:
            return refused[name]
        takes = f"its arguments are {_listed(list(properties))}" if properties else "it takes none"
        return f"{tool} has no argument {shown(name)}; {takes}."
    for name in schema.get("required", []):
        if name not in arguments:
            about = properties.get(name, {}).get("description")
            return f"{tool} needs {name}" + (f": {about}." if about else ".")
    for name, value in arguments.items():
        spec = properties[name]
        if not _fits(spec, value):
            return f"{name} must be {_expected(spec)}, got {shown(value)}."
    return None
