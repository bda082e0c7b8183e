"""Text helpers shared by storage (dedup keys, error messages), the read and write paths
(the one check of the text a memory takes, the words a search takes) and composition
(the window's texts, an event time as the prompt shows it)."""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from datetime import datetime, timezone
from functools import lru_cache
from typing import Optional, TypeVar

_WHITESPACE = re.compile(r"\s+")
_T = TypeVar("_T")


@lru_cache(maxsize=8192)  # the window's texts are normalised again on every get()
def normalize_text(text: str) -> str:
    """Case- and whitespace-insensitive form of a text, used for exact dedup."""
    return _WHITESPACE.sub(" ", text).strip().casefold()


def content_hash(text: str, role: Optional[str] = None) -> str:
    """Stable hash of a record's normalised text (and role): identical records share it."""
    key = f"{role or ''}\x1f{normalize_text(text)}"
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def short(value: object, limit: int = 60) -> str:
    """``repr(value)``, cut to ``limit`` characters for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


#: The most characters of a value :func:`shown` shows.
SHOWN_CHARS = 60


def shown(value: object) -> str:
    """``value`` as JSON (as an agent sent it), cut to :data:`SHOWN_CHARS` characters,
    for an error message an agent reads."""
    try:
        text = json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError):
        text = repr(value)
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def nearest(word: str, names: Iterable[str]) -> Optional[str]:
    """The one of ``names`` closest to ``word`` (difflib), for a "did you mean" hint; None
    when none is close."""
    close = difflib.get_close_matches(word, list(names), n=1)
    return close[0] if close else None


def listed(names: Sequence[str], most: int = 10) -> str:
    """The first ``most`` of ``names``, comma-separated, and ``...`` when there are more."""
    return ", ".join(names[:most]) + (", ..." if len(names) > most else "")


def counted(n: int, singular: str, plural: Optional[str] = None) -> str:
    """``1 record``, ``2 records`` (``plural`` when adding an s is wrong)."""
    return f"{n} {singular if n == 1 else (plural or singular + 's')}"


#: Characters no store can hold: NUL (PostgreSQL's text refuses it) and lone surrogates
#: (not UTF-8, so SQLite cannot take them either). Every backend refuses the same ones.
UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
#: What an import puts in place of a character no store can hold.
REPLACEMENT = "\ufffd"


def first_unstorable(value: object) -> Optional[str]:
    """The first character no store can hold (:data:`UNSTORABLE`) in a text or in the
    texts (keys included) of nested dicts and lists, or None."""
    if isinstance(value, str):
        found = UNSTORABLE.search(value)
        return found.group() if found else None
    if isinstance(value, dict):  # its keys and values, in order
        value = [text for pair in value.items() for text in pair]
    if isinstance(value, (list, tuple)):
        return next(filter(None, map(first_unstorable, value)), None)
    return None


def describe_unstorable(char: str) -> str:
    """What an error says of a character no store can hold, with how to clean it."""
    if char == "\x00":
        return "a NUL character ('\\x00'), which PostgreSQL cannot store (clean it first, e.g. text.replace('\\x00', ''))"
    return (
        f"text that is not valid Unicode (a lone surrogate: {char!r}; clean it first, e.g. "
        "text.encode('utf-8', 'replace').decode('utf-8'))"
    )


def replace_unstorable(value: _T) -> tuple[_T, int]:
    """``value`` (a text, or nested dicts and lists of them) with every character no
    store can hold replaced by U+FFFD, and how many were replaced."""
    if isinstance(value, str):
        text, count = UNSTORABLE.subn(REPLACEMENT, value)
        return text, count  # type: ignore[return-value]
    if isinstance(value, dict):
        total = 0
        out = {}
        for key, item in value.items():
            key, n = replace_unstorable(key)
            item, m = replace_unstorable(item)
            out[key] = item
            total += n + m
        return out, total  # type: ignore[return-value]
    if isinstance(value, list):
        pairs = [replace_unstorable(item) for item in value]
        return [item for item, _ in pairs], sum(n for _, n in pairs)  # type: ignore[return-value]
    return value, 0


def check_text(value: object, what: str, outcome: str) -> None:
    """Raise ``ValueError`` saying that ``what`` (a text, or nested dicts and lists of
    them) holds a character no store can hold (a lone surrogate, not UTF-8, or NUL, which
    PostgreSQL cannot store), and the ``outcome`` ("nothing was stored"): the one check of
    the text a memory stores and searches for."""
    found = first_unstorable(value)
    if found is not None:
        raise ValueError(f"{what} holds {describe_unstorable(found)}; {outcome}")


def format_time(epoch: Optional[float]) -> str:
    """A compact UTC rendering of an event time for the prompt ('' when unknown)."""
    if epoch is None:
        return ""
    dt = datetime.fromtimestamp(epoch, tz=timezone.utc)
    if dt.hour == 0 and dt.minute == 0 and dt.second == 0:
        return dt.strftime("%Y-%m-%d")
    return dt.strftime("%Y-%m-%d %H:%M")


# The tail of a contraction or a possessive ("what's", "mum's", "we're", "don't", "I'd"),
# with a straight or a typographic apostrophe. Left in, "what's" made a word "s" that
# matched every record holding "that's" or "he's" (and no stop word list held it).
_CONTRACTION_TAIL = re.compile(r"(?<=\w)['\u2019](?:s|re|ve|ll|d|m|t)\b", re.IGNORECASE)
_WORD = re.compile(r"\w+", re.UNICODE)


def word_tokens(text: str) -> list[str]:
    """The lower-cased words of a text, in order, contraction and possessive tails left
    out ("What's my mum's job?" -> ["what", "my", "mum", "job"]): every search by words
    takes a text's words so."""
    return _WORD.findall(_CONTRACTION_TAIL.sub("", text.casefold()))
