"""A tool call's arguments checked strictly for an agent (the SDK's pydantic check
coerces ``"3"`` and ignores unknown arguments), each problem named in the agent's terms:
``k must be a whole number from 1 to 50, got "3"``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional

from ..core.text import nearest, shown

__all__ = ["argument_problem", "unknown_tool"]


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


def unknown_tool(name: str, tools: Sequence[str]) -> str:
    """What to call instead of a tool the server does not have (an agent's guess at a
    name, such as ``search_memories``): the closest one, and every one offered."""
    guess = _guess(name, tools, "; did you mean {}?") or "."
    return f"there is no tool {shown(name)}{guess} The tools are {_listed(list(tools))}."


def _guess(name: str, names: Sequence[str], form: str) -> str:
    close = nearest(name, names)
    return form.format(shown(close)) if close else ""


def argument_problem(
    tool: str, schema: Mapping[str, Any], arguments: Mapping[str, Any], refused: Optional[Mapping[str, str]] = None
) -> Optional[str]:
    """The first thing wrong with ``arguments`` for ``tool`` against its input
    ``schema``, in a sentence naming the argument; None when they fit. ``refused``:
    arguments the tool does not take, each with the sentence saying why."""
    properties: Mapping[str, Mapping[str, Any]] = schema.get("properties", {})
    for name in arguments:
        if name in properties:
            continue
        if refused and name in refused:
            return refused[name]
        takes = f"its arguments are {_listed(list(properties))}" if properties else "it takes none"
        return f"{tool} has no argument {shown(name)}{_guess(name, list(properties), ' (did you mean {}?)')}; {takes}."
    for name in schema.get("required", []):
        if name not in arguments:
            about = properties.get(name, {}).get("description")
            return f"{tool} needs {name}" + (f": {about}." if about else ".")
    for name, value in arguments.items():
        spec = properties[name]
        if not _fits(spec, value):
            return f"{name} must be {_expected(spec)}, got {shown(value)}."
    return None
