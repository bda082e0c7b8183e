"""A memory tool's arguments checked against its schema before it runs, and what was
wrong said to the LLM in plain words with the arguments the tool takes, instead of
Python's ``save_knowledge() got an unexpected keyword argument 'subject'``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Optional

from pydantic import BaseModel, PydanticUserError, ValidationError

from ..core.errors import ToolArgumentError
from ..core.text import shown

__all__ = ["check_arguments", "described_arguments", "described_type"]

#: What a JSON schema type is called in a sentence.
_TYPE_WORDS = {
    "string": "text", "integer": "whole number", "number": "number", "boolean": "true or false",
    "null": "null",
}


#: What a value must be, by the type of pydantic's error (others keep pydantic's words).
_EXPECTED = {
    "string_type": "a text", "int_type": "a whole number", "int_parsing": "a whole number",
    "int_from_float": "a whole number", "float_type": "a number", "float_parsing": "a number",
    "bool_type": "true or false", "bool_parsing": "true or false", "list_type": "a list",
    "dict_type": "an object", "model_type": "an object", "model_attributes_type": "an object",
}


def _resolved(spec: Mapping[str, Any], defs: Mapping[str, Any]) -> Mapping[str, Any]:
    """``spec`` with a ``$ref`` to the schema's ``$defs`` followed."""
    ref = spec.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        return defs.get(ref.removeprefix("#/$defs/"), {})
    return spec


def described_type(spec: Mapping[str, Any], defs: Mapping[str, Any]) -> str:
    """What a value of JSON schema ``spec`` is, in words: ``text``, ``a list of objects
    with subject (text), predicate (text), object (text)``, ``one of "set", "append"``."""
    spec = _resolved(spec, defs)
    if "enum" in spec:
        return "one of " + ", ".join(shown(v) for v in spec["enum"])
    options = [o for o in spec.get("anyOf", []) if _resolved(o, defs).get("type") != "null"]
    if "anyOf" in spec:
        kinds = " or ".join(described_type(o, defs) for o in options) or "null"
        return kinds + (" or null" if len(options) < len(spec["anyOf"]) else "")
    kind = spec.get("type")
    if kind == "array":
        items = spec.get("items")
        return f"a list of {_plural(described_type(items, defs))}" if items else "a list"
    if kind == "object" or "properties" in spec:
        fields = _fields(spec, defs)
        return f"an object with {fields}" if fields else "an object"
    if isinstance(kind, str):
        return _TYPE_WORDS.get(kind, kind)
    return "any value"


def _plural(described: str) -> str:
    """``an object with a (text)`` as list items are said: ``objects, each with a (text)``."""
    if described.startswith("an object with "):
        return "objects, each with " + described.removeprefix("an object with ")
    for single, many in (("an object", "objects"), ("text", "texts"), ("whole number", "whole numbers")):
        if described.startswith(single):
            return many + described[len(single):]
    return described


def _fields(spec: Mapping[str, Any], defs: Mapping[str, Any]) -> str:
    """Each property of an object schema: ``name (type, required)``."""
    required = set(spec.get("required", []))
    return ", ".join(
        f"{name} ({described_type(sub, defs)}{', required' if name in required else ''})"
        for name, sub in spec.get("properties", {}).items()
    )


def described_arguments(parameters: Mapping[str, Any]) -> str:
    """The arguments a tool of JSON schema ``parameters`` takes, in words, one clause
    each (``query (required): text``), or ``no arguments``."""
    defs = parameters.get("$defs", {})
    required = set(parameters.get("required", []))
    described = [
        f"{name}{' (required)' if name in required else ''}: {described_type(spec, defs)}"
        for name, spec in parameters.get("properties", {}).items()
    ]
    return "; ".join(described) or "no arguments"


def _where(location: Sequence[Any]) -> str:
    """A pydantic error's location as a path: ``triples[0].subject``."""
    path = ""
    for part in location:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path


def _problems(schema: type[BaseModel], arguments: Mapping[str, Any]) -> list[str]:
    """Each thing wrong with ``arguments`` for ``schema``, as a sentence's clause."""
    fields = schema.model_fields
    accepted = set(fields) | {f.alias for f in fields.values() if f.alias}
    problems: list[str] = []
    unknown = [shown(name) for name in arguments if name not in accepted]
    if unknown:
        listed = unknown[0] if len(unknown) == 1 else ", ".join(unknown[:-1]) + " or " + unknown[-1]
        problems.append(f"it has no argument {listed}")
    try:
        schema.model_validate(dict(arguments))
    except PydanticUserError:  # a schema pydantic cannot use (a custom tool's): the tool says
        return problems
    except ValidationError as error:
        for found in error.errors(include_url=False):
            where = _where(found["loc"]) or "the arguments"
            if found["type"] == "missing":
                problems.append(f"{where} is missing")
                continue
            expected = _EXPECTED.get(found["type"])
            said = f"must be {expected}" if expected else str(found["msg"]).replace("Input should be", "must be")
            problems.append(f"{where} {said[:1].lower()}{said[1:]}, got {shown(found.get('input'))}")
    return problems


def check_arguments(name: str, schema: Optional[type[BaseModel]], parameters: Mapping[str, Any],
                    arguments: Mapping[str, Any]) -> None:  # fmt: skip
    """Raise :class:`~llama_memory.core.errors.ToolArgumentError` when ``arguments``
    do not fit the tool ``name``'s ``schema`` (its ``fn_schema``; ``parameters``: the
    JSON schema the LLM was shown): a message saying what was wrong and which arguments
    the tool takes, names and types. Nothing is checked without a schema."""
    if schema is None:
        return
    problems = _problems(schema, arguments)
    if problems:
        raise ToolArgumentError(
            f"{name} was not run: {'; '.join(problems)}. "
            + (f"Its arguments: {described_arguments(parameters)}. Call it again with those arguments."
               if parameters.get("properties") else "It takes no arguments: call it again without any.")
        )
