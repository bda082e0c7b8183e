"""Profile operations (set, append, remove), JSON merge patches, the in-memory draft
they are applied to before anything is written, and what the agent tool and the
formation pass are given (the tool's arguments, the pass's paragraph)."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Optional, Union

from pydantic import BaseModel, Field, ValidationError

from ...storage.ports.profile import ProfileValue
from .paths import (
    ProfileUpdateError,
    ancestors,
    canon,
    json_type,
    path_problem,
    pydantic_problem,
    schema_path_problem,
    subtree,
)


class ProfileOp(BaseModel):
    """One change to the user's profile."""

    op: Literal["set", "append", "remove"] = Field(
        description=(
            '"set": give the field a new value (replaces the old one); "append": add one '
            'item to a list field; "remove": delete the field, or with a value one item '
            "of a list field."
        )
    )
    path: str = Field(
        description='Dotted field name, e.g. "diet" or "travel.seat" (letters, digits, _ and -).'
    )
    value: Any = Field(
        default=None, description='The new value ("set"), the item ("append", "remove").'
    )


class ProfileUpdate(BaseModel):
    """Changes to the user's profile learned from the conversation.

    Return an empty list of operations when the conversation says nothing new
    about the user.
    """

    operations: list[ProfileOp] = Field(
        default_factory=list, description="The changes, applied in order."
    )


UpdateInput = Union[Mapping[str, Any], BaseModel, Sequence[Union[ProfileOp, Mapping[str, Any]]]]


@dataclass
class Plan:
    """The rows an update writes, from the draft's old and new leaves."""

    inserts: list[ProfileValue] = field(default_factory=list)
    superseded: list[str] = field(default_factory=list)  # paths of current rows replaced
    touched: set[str] = field(default_factory=set)


class Draft:
    """The profile's leaves (path -> value) with operations applied in memory, checked
    before anything is written."""

    def __init__(self, leaves: dict[str, Any], schema: Optional[type[BaseModel]]) -> None:
        self.old = leaves
        self.leaves = dict(leaves)
        self.schema = schema
        self.written: dict[str, str] = {}  # path -> the last op that wrote it
        self.removals: list[str] = []  # paths of "remove" ops that removed a field
        self.problems: list[tuple[str, str]] = []

    def apply(self, op: ProfileOp) -> None:
        path, value = op.path, op.value
        problem = path_problem(path) or self._schema_problem(path)
        if problem:
            self.problems.append((path or "(empty path)", problem))
            return
        if op.op == "remove" and (value is None or value == ""):  # LLMs send "" as often as null for "no value"
            keys = subtree(self.leaves, path)
            for key in keys:
                del self.leaves[key]
            if keys:
                self.removals.append(path)
            return
        if value is None:  # a null is never stored: absence is the profile's "unknown"
            needs = "a value (to delete a field, use remove)" if op.op == "set" else "a value (the item to add)"
            self.problems.append((path, f"{op.op} needs {needs}"))
            return
        value = self._json(path, value)
        if value is not INVALID:
            {"set": self._set, "append": self._append, "remove": self._remove_item}[op.op](path, value)

    def _set(self, path: str, value: Any) -> None:
        new: dict[str, Any] = {}
        if not self._flatten(value, path, new) or not self._clear_ancestors(path):
            return
        for key in subtree(self.leaves, path):
            del self.leaves[key]
        self.leaves.update(new)
        self.written.update(dict.fromkeys(new, "set"))

    def _append(self, path: str, item: Any) -> None:
        current = self.leaves.get(path, [])
        if path not in self.leaves and subtree(self.leaves, path):
            self.problems.append((path, "is an object; append adds an item to a list field"))
            return
        if not isinstance(current, list):
            self.problems.append((path, f"is a {json_type(current)}, not a list; use set to replace it"))
            return
        if any(canon(x) == canon(item) for x in current):
            return  # already there: a list field reads as a set of items
        if not self._clear_ancestors(path):
            return
        self.leaves[path] = [*current, item]
        self.written[path] = "append"

    def _remove_item(self, path: str, item: Any) -> None:
        current = self.leaves.get(path)
        if isinstance(current, list):
            kept = [x for x in current if canon(x) != canon(item)]
            if len(kept) != len(current):
                self.leaves[path] = kept
                self.written[path] = "remove"
        elif path in self.leaves and canon(current) == canon(item):
            del self.leaves[path]
            self.removals.append(path)

    def _clear_ancestors(self, path: str) -> bool:
        """Make room for ``path``: a scalar ancestor is replaced by an object; a list
        ancestor is an error (``allergies.0`` is not how list items are changed)."""
        for ancestor in ancestors(path):
            if ancestor in self.leaves:
                if isinstance(self.leaves[ancestor], list):
                    self.problems.append(
                        (
                            path,
                            f"{ancestor!r} is a list; its items have no paths: use append, "
                            "remove with a value, or set the whole list",
                        )
                    )
                    return False
                del self.leaves[ancestor]
        return True

    def _flatten(self, value: Any, path: str, out: dict[str, Any]) -> bool:
        """Split a value into leaves under ``path``; a non-empty object is a branch."""
        if isinstance(value, dict) and value:
            ok = True
            for key, item in value.items():
                child = f"{path}.{key}"
                problem = path_problem(child) or self._schema_problem(child)
                if problem:
                    self.problems.append((child, problem))
                    ok = False
                elif item is None:
                    continue  # as in a merge patch: null means "no such field"
                else:
                    ok = self._flatten(item, child, out) and ok
            return ok
        out[path] = value
        return True

    def _json(self, path: str, value: Any) -> Any:
        """``value`` as plain JSON data (tuples become lists, models dicts)."""
        if isinstance(value, BaseModel):
            value = value.model_dump(mode="json", exclude_unset=True)
        try:
            return json.loads(json.dumps(value, allow_nan=False))
        except (TypeError, ValueError) as exc:
            self.problems.append((path, f"value is not JSON data: {exc}"))
            return INVALID

    def _schema_problem(self, path: str) -> Optional[str]:
        return schema_path_problem(self.schema, path) if self.schema is not None else None

    def plan(self) -> Plan:
        """The rows to supersede and to insert to go from the old leaves to the new."""
        plan = Plan()
        for path, op in self.written.items():
            if path in self.leaves and (
                path not in self.old or canon(self.old[path]) != canon(self.leaves[path])
            ):
                plan.inserts.append(ProfileValue(path, op, self.leaves[path]))
        inserted = {new.path for new in plan.inserts}
        plan.superseded = [p for p in self.old if p not in self.leaves or p in inserted]
        for path in dict.fromkeys(self.removals):
            gone = [k for k in subtree(self.old, path) if k not in self.leaves]
            if gone and not subtree(self.leaves, path):
                plan.inserts.append(ProfileValue(path, "remove", removed=True))
        removed = {new.path for new in plan.inserts if new.removed}
        plan.touched = inserted | set(plan.superseded) | removed
        return plan


#: What ``Draft._json`` returns for a value that is not JSON data (a problem is recorded).
INVALID = object()


def to_ops(update: UpdateInput) -> list[Union[ProfileOp, tuple[str, str]]]:
    """Operations from any accepted form; an operation that does not parse becomes a
    ``(path, problem)`` so that every problem of an update is reported at once."""
    if isinstance(update, BaseModel) and not isinstance(update, ProfileOp):
        update = update.model_dump(mode="json", exclude_unset=True)
    if isinstance(update, Mapping):
        return list(merge_patch_ops(update, ""))
    if isinstance(update, (str, bytes)) or not isinstance(update, Iterable):
        raise ProfileUpdateError(
            [("(update)", "expected a list of operations or a dict (a merge patch), "
              f"got {type(update).__name__}")]
        )
    ops: list[Union[ProfileOp, tuple[str, str]]] = []
    for number, item in enumerate(update, start=1):
        if isinstance(item, ProfileOp):
            ops.append(item)
            continue
        where = (
            item.get("path") if isinstance(item, Mapping) and isinstance(item.get("path"), str)
            else f"operation {number}"
        )
        try:
            ops.append(ProfileOp.model_validate(item))
        except ValidationError as exc:
            ops.append((where or f"operation {number}", pydantic_problem(exc)))
    return ops


def merge_patch_ops(patch: Mapping[Any, Any], prefix: str) -> Iterable[Any]:
    """RFC 7386: an object merges field by field, ``null`` removes, other values replace."""
    for key, value in patch.items():
        if not isinstance(key, str):
            yield (f"{prefix}.{key!r}" if prefix else repr(key), "field names must be strings")
            continue
        path = f"{prefix}.{key}" if prefix else key
        if value is None:
            yield ProfileOp(op="remove", path=path)
        elif isinstance(value, Mapping):
            yield from merge_patch_ops(value, path)  # an empty object changes nothing
        else:
            yield ProfileOp(op="set", path=path, value=value)


class UpdateProfileArgs(BaseModel):
    """The arguments of the ``update_profile`` agent tool."""

    operations: list[ProfileOp] = Field(description="The changes, applied in order.")


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
