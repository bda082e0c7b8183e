"""The name llama-memory is published under on the package index, for install hints.

The import package is ``llama_memory`` and the command ``llama-memory``, but the
distribution is ``llama-index-memory-composable``: ``llama-memory`` on the package index
belongs to an unrelated project, and LlamaIndex's memory integrations are published as
``llama-index-memory-<name>``. Every message that tells a user what to install takes the
name from here.
"""

from __future__ import annotations

from typing import Optional

#: The distribution name (``pip install llama-index-memory-composable``).
DISTRIBUTION = "llama-index-memory-composable"


def install_hint(extra: Optional[str] = None) -> str:
    """The pip command that installs llama-memory, with ``extra`` (``"mcp"``,
    ``"encrypted"``, ...) when given: ``pip install 'llama-index-memory-composable[mcp]'``."""
    if extra is None:
        return f"pip install {DISTRIBUTION}"
    return f"pip install '{DISTRIBUTION}[{extra}]'"


__all__ = ["DISTRIBUTION", "install_hint"]
