"""The export file of a store: JSON Lines, a header row (``format``, ``version``,
``tenant``, ``users``) then one row per message, record, profile or instruction row and
triple; how it is written, read and checked (:meth:`MemoryAdmin.export`,
:meth:`MemoryAdmin.import_rows`)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Optional

from ..core.text import replace_unstorable

if TYPE_CHECKING:
    from ..core.progress import Progress


#: The ``format`` field of an export's header line.
EXPORT_FORMAT = "llama-memory-export"
#: The export format's version; an import refuses a newer one.
EXPORT_VERSION = 2  # 2: "instruction" rows (procedural memory); version 1 files still import
#: Rows written to the store per transaction during an import.
IMPORT_BATCH = 500


class ImportCounts(Counter[str]):
    """What an import added: how many rows of each kind were new (a ``Counter``), and
    :attr:`replaced`: per user, how many characters no store can hold (NUL, lone
    surrogates: :data:`llama_memory.core.text.UNSTORABLE`) the import replaced by U+FFFD.
    Such text is refused by ``put()``; an older store or a file may still hold it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: Characters replaced by U+FFFD, by user.
        self.replaced: Counter[str] = Counter()


def header_row(tenant_id: str, users: Sequence[str]) -> dict[str, Any]:
    """The header row of an export of ``users`` of ``tenant_id``."""
    # No export time: the same store must give the same file (export, import, export).
    return {"format": EXPORT_FORMAT, "version": EXPORT_VERSION, "tenant": tenant_id, "users": list(users)}


def check_header(header: Any) -> None:
    """Refuse what is not an export's header, or one of a newer format version."""
    if not isinstance(header, Mapping) or header.get("format") != EXPORT_FORMAT:
        raise ValueError(
            f"not a llama-memory export: its first row must be the header "
            f"{{'format': {EXPORT_FORMAT!r}, 'version': ...}}, got {header!r:.200}"
        )
    version = header.get("version")
    if not isinstance(version, int) or version > EXPORT_VERSION or version < 1:
        raise ValueError(
            f"export format version {version!r} is not supported by this llama-memory "
            f"(it reads versions 1 to {EXPORT_VERSION}): upgrade llama-memory"
        )


def storable_row(row: dict[str, Any], replaced: Counter[str]) -> dict[str, Any]:
    """The row with every character no store can hold replaced by U+FFFD (counted
    under its user in ``replaced``): an import never stops at text an older store kept."""
    clean, count = replace_unstorable(row)
    if count:
        replaced[str(clean.get("user"))] += count
    return clean


#: The fields each kind of export row must have.
ROW_FIELDS: dict[str, tuple[str, ...]] = {
    "message": ("user", "session", "created_at", "message"),
    "record": ("user", "source", "session", "role", "text", "message_ids", "event_time",
               "ingested_at", "metadata", "ttl", "expires_at"),
    "profile": ("user", "path", "value", "removed", "op", "session", "message_ids",
                "created_at", "superseded_at", "ttl", "expires_at"),
    "instruction": ("user", "path", "value", "removed", "op", "session", "message_ids",
                    "created_at", "superseded_at", "ttl", "expires_at"),
    "triple": ("user", "id", "subject", "predicate", "object", "subject_key", "predicate_key",
               "object_key", "valid_from", "valid_to", "superseded_by", "ingested_at", "ttl",
               "expires_at", "mentions"),
}  # fmt: skip


def check_row(row: dict[str, Any], line: int) -> dict[str, Any]:
    """The row, refused when its kind is unknown or a field of its kind is missing
    (``line``: its place in the file, for the message)."""
    kind = row.get("kind")
    if kind not in ROW_FIELDS:
        raise ValueError(f"export row {line}: unknown kind {kind!r} (expected one of {sorted(ROW_FIELDS)})")
    missing = [f for f in ROW_FIELDS[kind] if f not in row]
    if missing:
        raise ValueError(f"export row {line} ({kind}): missing fields {missing}")
    if not isinstance(row["user"], str) or not row["user"]:
        raise ValueError(f"export row {line} ({kind}): user must be a non-empty string")
    return row


def read_rows(stream: IO[str]) -> Iterator[dict[str, Any]]:
    """The rows of an export read from a text stream (blank lines skipped)."""
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            yield json.loads(line)
        except json.JSONDecodeError as exc:
            raise ValueError(f"line {number} of the export is not JSON: {exc}") from None


def count_rows(path: Path) -> int:
    """How many rows (non-blank lines) an export file holds, its header included."""
    with open(path, "rb") as stream:
        return sum(1 for line in stream if line.strip())


def write_rows(stream: IO[str], rows: Iterable[dict[str, Any]], progress: Optional[Progress]) -> int:
    """Write ``rows`` (the header first) as JSON Lines; return how many after the header."""
    written = -1  # the header is not counted
    for row in rows:
        # sort_keys: one store, one file, byte for byte.
        stream.write(json.dumps(row, ensure_ascii=False, sort_keys=True) + "\n")
        written += 1
        if progress is not None and written > 0:
            progress.advance()
    return max(written, 0)


def export_header(path: Path) -> Optional[Mapping[str, Any]]:
    """The header row of the file at ``path`` when it is an export, else None (a
    SimpleChatStore file, or anything else)."""
    with open(path, encoding="utf-8") as stream:
        first = stream.readline()
    try:
        head = json.loads(first) if first.strip() else None
    except json.JSONDecodeError:
        return None  # a pretty-printed JSON document: not JSON Lines
    return head if isinstance(head, dict) and head.get("format") == EXPORT_FORMAT else None
