"""The versions a benchmark's report records, so that its figures can be traced to what ran."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from importlib.metadata import PackageNotFoundError, version

from llama_memory.core.distribution import DISTRIBUTION

#: The distributions every report names; a benchmark adds the ones it compares against.
CORE = (DISTRIBUTION, "llama-index-core", "chromadb", "onnxruntime", "tiktoken")


def package_versions(extra: Sequence[str] = ()) -> dict[str, str]:
    """Installed versions of :data:`CORE` and ``extra`` ("?" when one is missing), and SQLite's."""
    found = {}
    for name in (*CORE, *extra):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            found[name] = "?"
    found["sqlite"] = sqlite3.sqlite_version
    return found
