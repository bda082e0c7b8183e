"""Checking the arguments a memory is given: a clear error saying what was wrong and
what to pass instead, before anything is written."""

from __future__ import annotations

import inspect
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import ValidationError
from pydantic.fields import FieldInfo

from ..core.text import nearest, short

# ChatMemoryBuffer.from_defaults arguments that have no meaning here, with what to do
# instead (said in the TypeError rather than ignored: the conversation would silently
# not be where the user thinks it is).
NOT_SUPPORTED = {
    "chat_store": "the conversation is kept in SQLite under path=; pass path=...",
    "chat_store_key": "pass session_id= (and user_id=) to name the conversation",
}


#: What an option's value must be, by the type of pydantic's error.
_TAKES = {
    "int_type": "a whole number", "int_parsing": "a whole number",
    "int_from_float": "a whole number", "float_type": "a number", "float_parsing": "a number",
    "bool_type": "True or False", "bool_parsing": "True or False", "string_type": "a string",
    "callable_type": "a function", "list_type": "a list",
}


def option_error(error: ValidationError, fields: Mapping[str, FieldInfo], allowed: Mapping[Any, str]) -> Exception:
    """A settings ``error`` as the ValueError (a value not among the allowed ones) or
    TypeError (a value of another type) it stands for, naming the option, the value and
    what the option takes; ``error`` itself when it carries only our own checks'
    messages. ``allowed``: what each field check (an ``AfterValidator``'s function)
    allows, said after the type (``"from 0 to 1"``)."""
    for found in error.errors(include_url=False):
        if found["type"] == "value_error" or not found["loc"]:
            continue
        name, value = str(found["loc"][0]), found.get("input")
        field = fields.get(name)
        default = f" (default {field.default!r})" if field is not None else ""
        if found["type"] == "literal_error":
            return ValueError(f"{name} takes {found['ctx']['expected']}, not {short(value)}{default}")
        takes = _TAKES.get(found["type"], str(found["msg"]).removeprefix("Input should be "))
        checks = [allowed[m.func] for m in (field.metadata if field else []) if getattr(m, "func", None) in allowed]
        takes += "".join(f" {said}" for said in checks) + (" or None" if field and field.default is None else "")
        return TypeError(f"{name} takes {takes}, not {type(value).__name__} {short(value)}{default}")
    return error


def parameters(function: Callable[..., Any]) -> list[str]:
    """The names a function takes as keyword arguments (not ``*args``/``**kwargs``)."""
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p.name for p in inspect.signature(function).parameters.values() if p.kind in kinds]


def reject_unknown(where: str, given: Sequence[str] | dict[str, Any], valid: Sequence[str]) -> None:
    """TypeError for the first name of ``given`` not in ``valid``, naming the closest
    valid one (a typo must not be ignored: ``memory_token_limt=10`` would do nothing)."""
    for name in given:
        if name in valid:
            continue
        hint = NOT_SUPPORTED.get(name) or closest(name, valid)
        raise TypeError(f"{where} got an unexpected keyword argument {name!r}; {hint}")


def closest(name: str, valid: Sequence[str], listed: str = "valid ones:") -> str:
    """"did you mean 'x'?" for the valid name closest to ``name``, else ``listed`` and
    the valid ones."""
    close = nearest(name, valid)
    return f"did you mean {close!r}?" if close else f"{listed} {', '.join(sorted(valid))}"


def count_arg(value: Any, where: str) -> int:
    """``value`` when it is a whole number of at least 1 (``bool`` is not one); TypeError
    or ValueError saying what was given, before anything is read."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{where} takes a whole number, not {type(value).__name__} {short(value)}: pass e.g. k=5")
    if value < 1:
        raise ValueError(f"{where} is how many records to return, at least 1, got {value}")
    return int(value)


def query_arg(query: Any, where: str) -> Any:
    """``query``; ValueError for an empty or blank text, which names nothing to look for
    (the CLI's ``search`` and the MCP server's ``search_memory`` refuse it too)."""
    if isinstance(query, str) and not query.strip():
        raise ValueError(
            f"{where} query must be a non-empty string, got {query!r}: pass what to look for, "
            "e.g. a question about the user (nothing was retrieved)"
        )
    return query
