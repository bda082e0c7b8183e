"""Dotted field paths and JSON values of a profile: checks and helpers, no storage."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Optional

from pydantic import ValidationError

from ...core.errors import LlamaMemoryError

#: The operations an update may contain.
OPS = ("set", "append", "remove")
#: One segment of a dotted path: letters (any script), digits, ``_`` and ``-``.
_SEGMENT = re.compile(r"^[\w-]+$")
#: Limits of a dotted path: levels and characters.
MAX_PATH_DEPTH = 8
MAX_PATH_LENGTH = 200


class ProfileUpdateError(LlamaMemoryError, ValueError):
    """A profile update was rejected; nothing of it was written.

    Attributes:
        problems: ``(field path, what is wrong)`` for every problem found.
    """

    def __init__(self, problems: Sequence[tuple[str, str]]) -> None:
        self.problems = list(problems)
        listed = "; ".join(f"{path}: {problem}" for path, problem in self.problems)
        super().__init__(f"profile update rejected, nothing was written: {listed}")


def path_problem(path: Any) -> Optional[str]:
    """What is wrong with a dotted path, or None."""
    if not isinstance(path, str) or not path:
        return "a field path must be a non-empty string such as 'diet' or 'travel.seat'"
    if len(path) > MAX_PATH_LENGTH:
        return f"a field path may have at most {MAX_PATH_LENGTH} characters"
    segments = path.split(".")
    if len(segments) > MAX_PATH_DEPTH:
        return f"a field path may have at most {MAX_PATH_DEPTH} levels"
    for segment in segments:
        if not _SEGMENT.match(segment):
            return (
                f"invalid path segment {segment!r}: use letters, digits, '_' and '-', "
                "with '.' between levels"
            )
    return None


def raise_if_bad_path(path: Any) -> None:
    """Raise :class:`ProfileUpdateError` when ``path`` is not a valid dotted path."""
    problem = path_problem(path)
    if problem:
        raise ProfileUpdateError([(str(path) or "(empty path)", problem)])


def ancestors(path: str) -> list[str]:
    """The paths above ``path``: ``a.b.c`` -> ``a``, ``a.b``."""
    parts = path.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def subtree(leaves: Mapping[str, Any], path: str) -> list[str]:
    """The keys at ``path`` or beneath it."""
    prefix = path + "."
    return [k for k in leaves if k == path or k.startswith(prefix)]


def related(a: str, b: str) -> bool:
    """Whether one path is the other or beneath it."""
    return a == b or a.startswith(b + ".") or b.startswith(a + ".")


def unflatten(items: Iterable[tuple[str, Any]]) -> dict[str, Any]:
    """A nested document from ``(dotted path, value)`` leaves."""
    doc: dict[str, Any] = {}
    for path, value in items:
        node = doc
        *parents, last = path.split(".")
        for part in parents:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}
            node = child
        node[last] = value
    return doc


def canon(value: Any) -> str:
    """A canonical JSON text of ``value``, to compare values."""
    return json.dumps(value, sort_keys=True, ensure_ascii=False)


def json_type(value: Any) -> str:
    """The JSON type name of ``value``, for error messages."""
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, dict):
        return "object"
    return "null" if value is None else type(value).__name__


def render_value(value: Any) -> str:
    """A field's value as shown in the prompt: strings bare, lists of plain items
    comma-separated, anything else compact JSON."""
    if isinstance(value, str):
        return value
    if (
        isinstance(value, list)
        and value
        and all(isinstance(x, (str, int, float)) and not isinstance(x, bool) for x in value)
        and not any(isinstance(x, str) and "," in x for x in value)
    ):
        return ", ".join(str(x) for x in value)
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def pydantic_problem(exc: ValidationError) -> str:
    """A pydantic validation error as one line: ``loc: message; ...``."""
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors()
    )
