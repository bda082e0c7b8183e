"""How the commands print: JSON for scripts, aligned tables and records for people."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional


def _jsonable(value: Any) -> Any:
    """Plain JSON data of the API's results (dataclasses, paths, counters...)."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: _jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _print_json(value: Any) -> None:
    print(json.dumps(_jsonable(value), ensure_ascii=False, indent=2))


def _report(json_wanted: bool, value: Any, *lines: str) -> None:
    """Print a command's result: ``value`` as JSON (``--json``), else ``lines``."""
    if json_wanted:
        _print_json(value)
    for line in () if json_wanted else lines:
        print(line)


def _when(epoch: Optional[float]) -> str:
    return "-" if epoch is None else datetime.fromtimestamp(epoch, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S")


def _short(text: str, width: int = 100) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


#: The widest a table cell (an id, a name) is shown; --json gives every value whole.
CELL_WIDTH = 40


def _shown(value: Any, width: int = CELL_WIDTH) -> str:
    """A value as one line of at most ``width`` characters: control characters escaped,
    the middle of a long value elided."""
    text = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in str(value))
    if len(text) <= width:
        return text
    head = (width - 1) // 2
    return text[:head] + "…" + text[len(text) - (width - 1 - head) :]


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def _table(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> None:
    for line in _lines(rows, header):
        print(line)


def _lines(rows: Sequence[Sequence[Any]], header: Sequence[str]) -> list[str]:
    """A table's lines: the header, then the rows, in aligned columns."""
    cells = [[str(c) for c in header]] + [[_shown(c) for c in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    return ["  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip() for row in cells]


def _print_record(rank: Optional[int], record: Any, indent: str = "", relevance: bool = False) -> None:
    head = f"{rank}. " if rank is not None else ""
    score = f"score {record.score:.3f}  " if rank is not None else ""
    if relevance:  # the calibrated relevance (0..1); the score is only a rank within a source (not shown)
        from ...read.compose import relevance_text

        score = f"relevance {relevance_text(record)}  "
    print(
        f"{indent}{head}[{record.source}] {score}id {_shown(record.id or '-')}  "
        f"session {_shown(record.session_id or '-')}  at {_when(record.event_time)}"
    )
    for part in record.parts or [record]:
        ids = f"  (messages {', '.join(part.message_ids)})" if part.message_ids else ""
        print(f"{indent}     {_short(part.transcript)}{ids}")


def _print_replaced(replaced: dict[str, dict[str, int]]) -> None:
    """Say, per user, what an import or a copy did to text no store can hold."""
    for tenant, users in replaced.items():
        for user, count in sorted(users.items()):
            print(
                f"tenant {tenant!r}, user {user!r}: {count} NUL or invalid characters "
                "replaced by U+FFFD (no store can hold them)"
            )
