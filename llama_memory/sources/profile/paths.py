"""Dotted field paths and JSON values of a profile, and their checks against the
developer's pydantic schema: checks and helpers, no storage."""

from __future__ import annotations

import json
import re
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Optional, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError

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


def resolve(annotation: Any) -> tuple[str, Any]:
    """What a field's type allows beneath it: ("model", cls), ("mapping", value type),
    ("any", None) or ("leaf", annotation)."""
    if get_origin(annotation) is Annotated:
        return resolve(get_args(annotation)[0])
    if annotation is Any:
        return "any", None
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "model", annotation
    origin = get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        options = [resolve(a) for a in get_args(annotation) if a is not type(None)]
        for kind in ("model", "mapping", "any"):
            for option in options:
                if option[0] == kind:
                    return option
        return "leaf", annotation
    if annotation is dict or origin is dict or (
        isinstance(origin, type) and issubclass(origin, Mapping)
    ):
        args = get_args(annotation)
        return ("mapping", args[1]) if len(args) == 2 else ("any", None)
    return "leaf", annotation


def schema_path_problem(schema: type[BaseModel], path: str) -> Optional[str]:
    """Why ``path`` is not a field of ``schema``, or None when it is."""
    kind: str = "model"
    target: Any = schema
    seen: list[str] = []
    for segment in path.split("."):
        if kind == "any":
            return None
        if kind == "model":
            fields = target.model_fields
            if segment in fields:
                target = fields[segment].annotation
            elif target.model_config.get("extra") == "allow":
                return None
            else:
                where = f"{'.'.join(seen)!r}" if seen else "the profile"
                return f"unknown field {segment!r}: {where} has the fields {', '.join(fields)}"
        elif kind == "mapping":
            pass  # any key; ``target`` is already the value type
        else:
            where = ".".join(seen)
            return f"{where!r} is a field of type {type_name(target)}; it has no sub-fields"
        seen.append(segment)
        kind, resolved = resolve(target)
        target = resolved if kind in ("model", "mapping") else target
    return None


def schema_importance(schema: type[BaseModel], path: str) -> Optional[float]:
    """The ``json_schema_extra={"importance": ...}`` nearest to ``path`` in the schema."""
    found = None
    kind, target = "model", schema
    for segment in path.split("."):
        if kind == "mapping":
            kind, target = resolve(target)
            continue
        if kind != "model" or segment not in target.model_fields:
            break
        info = target.model_fields[segment]
        extra = info.json_schema_extra
        weight = extra.get("importance") if isinstance(extra, dict) else None
        if isinstance(weight, (int, float)) and not isinstance(weight, bool):
            found = float(weight)
        kind, resolved = resolve(info.annotation)
        target = resolved
    return found


def schema_errors(
    schema: type[BaseModel], leaves: Mapping[str, Any], touched: set[str]
) -> list[tuple[str, str]]:
    """Validation problems of the updated profile in the touched fields, checked as JSON
    in strict mode ("42" is not an int). Missing required fields and problems in fields
    the update did not touch do not count.
    """
    try:
        schema.model_validate_json(json.dumps(unflatten(leaves.items())), strict=True)
        return []
    except ValidationError as exc:
        errors = exc.errors()
    problems = []
    for error in errors:
        if error["type"] == "missing":
            continue
        loc = ".".join(str(p) for p in error["loc"])
        # A model-level error (empty loc) cannot be pinned on a field: always report it.
        if loc and not any(related(loc, t) for t in touched):
            continue
        got = json.dumps(error.get("input"), ensure_ascii=False, default=str)
        if len(got) > 60:
            got = got[:57] + "..."
        problems.append((loc or "(profile)", f"{error['msg']} (got {got})"))
    return problems


def describe_schema(schema: type[BaseModel]) -> str:
    """The schema's fields as dotted paths with their types and descriptions, for
    prompts and tool descriptions: ``name (str); travel.seat (Seat): ...``."""
    parts: list[str] = []

    def walk(model: type[BaseModel], prefix: str, depth: int) -> None:
        for name, info in model.model_fields.items():
            path = f"{prefix}{name}"
            kind, target = resolve(info.annotation)
            if kind == "model" and depth < MAX_PATH_DEPTH and target is not model:
                walk(target, path + ".", depth + 1)
                continue
            text = f"{path} ({type_name(info.annotation)})"
            if info.description:
                text += f": {info.description}"
            parts.append(text)

    walk(schema, "", 1)
    return "; ".join(parts)


def type_name(annotation: Any) -> str:
    """A type annotation as shown in messages and tool descriptions."""
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")
