"""A griffe extension for the docs build: Sphinx roles in docstrings become cross-references.

The package's docstrings write ``:class:`ChatBuffer``` and ``:meth:`from_defaults```
(readable in ``help()`` and editors); mkdocstrings reads Markdown. Once the package is
loaded, each role is looked up in the code, from the docstring's own scope outwards:

- a name that exists becomes a link to its entry in the API reference, or plain code when
  the reference does not document it (an internal helper is not an error);
- a name that exists nowhere becomes a required cross-reference, which fails the strict
  build: the docstring points at something that was renamed or never was.

A leading ``~`` (Sphinx's "last part only") or ``.`` is dropped.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any, Optional

import griffe

ROLE = re.compile(r":(?:class|meth|func|attr|mod|exc|data|obj):`([~.]?)([\w.]+)(?:\(\))?`")


def _objects(obj: griffe.Object) -> Iterator[griffe.Object]:
    """The object and everything defined in it (imported names are skipped)."""
    yield obj
    for member in obj.members.values():
        if not member.is_alias:
            yield from _objects(member)  # type: ignore[arg-type]


def _exists(collection: Any, path: str) -> bool:
    """Whether the loaded code has an object at this dotted path."""
    try:
        collection[path]
    except (KeyError, ValueError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return False
    return True


def _resolve(obj: griffe.Object, target: str, collection: Any) -> Optional[str]:
    """The full path ``target`` names from ``obj``'s scope, or None if nothing has it."""
    if _exists(collection, target):
        return target
    head, _, rest = target.partition(".")
    try:
        base = obj.resolve(head)  # this object's members, then its parents'
    except griffe.NameResolutionError:
        return None
    path = f"{base}.{rest}" if rest else base
    return path if _exists(collection, path) else None


class SphinxRoles(griffe.Extension):
    """Rewrites Sphinx roles into autorefs cross-references once the package is loaded."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        collection = loader.modules_collection
        for obj in _objects(pkg):
            if obj.docstring is None:
                continue

            def crossref(match: re.Match[str], obj: griffe.Object = obj) -> str:
                marker, target = match.groups()
                title = target.rsplit(".", 1)[-1] if marker == "~" else target
                path = _resolve(obj, target, collection)
                if path is None:
                    return f"[`{title}`][{target}]"  # required: fails the strict build
                return f'<autoref identifier="{path}" optional><code>{title}</code></autoref>'

            obj.docstring.value = ROLE.sub(crossref, obj.docstring.value)
