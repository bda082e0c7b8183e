"""A griffe extension for the docs build: Sphinx roles in docstrings become cross-references.

The package's docstrings write ``:class:`ChatBuffer``` and ``:meth:`from_defaults```
(readable in ``help()`` and editors); mkdocstrings reads Markdown, where they become
``[`ChatBuffer`][ChatBuffer]``, resolved in the object's scope (``scoped_crossrefs``), so a
reference to a name that does not exist fails the strict build. A leading ``~`` or ``.``
(Sphinx's "short title" and "relative" markers) is dropped from the shown text.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

ROLE = re.compile(r":(?:class|meth|func|attr|mod|exc|data|obj):`([~.]?)([\w.]+)(?:\(\))?`")


def _crossref(match: re.Match[str]) -> str:
    marker, target = match.groups()
    title = target.rsplit(".", 1)[-1] if marker == "~" else target
    return f"[`{title}`][{target}]"


class SphinxRoles(griffe.Extension):
    """Rewrites Sphinx roles into autorefs cross-references as objects are loaded."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(_crossref, obj.docstring.value)
