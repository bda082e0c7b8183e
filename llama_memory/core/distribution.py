"""The name llama-memory is published under (``llama-index-memory-composable``: the name
``llama-memory`` is another project's), for every install hint.
"""

from __future__ import annotations

from typing import Optional

#: The distribution name (``pip install llama-index-memory-composable``).
DISTRIBUTION = "llama-index-memory-composable"


def install_hint(extra: Optional[str] = None) -> str:
    """The pip command installing llama-memory, with ``extra`` when given."""
    if extra is None:
        return f"pip install {DISTRIBUTION}"
    return f"pip install '{DISTRIBUTION}[{extra}]'"


__all__ = ["DISTRIBUTION", "install_hint"]
