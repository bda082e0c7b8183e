"""Text helpers shared by storage (dedup keys) and composition (the window's texts)."""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache
from typing import Optional

_WHITESPACE = re.compile(r"\s+")


@lru_cache(maxsize=8192)  # the window's texts are normalised again on every get()
def normalize_text(text: str) -> str:
    """Case- and whitespace-insensitive form of a text, used for exact dedup."""
    return _WHITESPACE.sub(" ", text).strip().casefold()


def content_hash(text: str, role: Optional[str] = None) -> str:
    """Stable hash of a record's normalised text (and role): identical records share it."""
    key = f"{role or ''}\x1f{normalize_text(text)}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def counted(n: int, singular: str, plural: Optional[str] = None) -> str:
    """``1 record``, ``2 records`` (``plural`` when adding an s is wrong)."""
    return f"{n} {singular if n == 1 else (plural or singular + 's')}"
