"""What is remembered, shown: each view is the ordinary value with ``_repr_html_`` (a
Jupyter table) and a short ``__repr__`` for a terminal: :class:`RecordList`
(``memory.search``), the memory block (:func:`block_html`, :func:`block_summary`),
:class:`ProfileView` and :class:`TripleTable`. Every value shown is HTML-escaped.
"""

from __future__ import annotations

import base64
import html
import json
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..core.distribution import install_hint
from ..core.text import counted, format_time
from ..core.types import MemoryRecord

if TYPE_CHECKING:  # the model types, never the sources or the block's composer: they import views
    from ..storage.ports.profile import ProfileChange
    from .triples.model import KnowledgeTriple

__all__ = ["ProfileView", "RecordList", "TripleTable", "block_html", "block_summary"]

#: Longest text a table cell shows before it is cut (the whole text is in the tooltip).
CELL_CHARS = 400

_STYLE = (
    "<style>.llm-view table{border-collapse:collapse;font-size:12px;margin:4px 0}"
    ".llm-view th,.llm-view td{border:1px solid #ddd;padding:3px 6px;text-align:left;"
    "vertical-align:top}.llm-view th{background:#f3f3f3}.llm-view .old{color:#999}"
    ".llm-view caption{text-align:left;font-weight:bold;padding:2px 0}</style>"
)


def _cell(value: Any) -> str:
    """One escaped table cell's content, cut to :data:`CELL_CHARS` characters."""
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    shown = text if len(text) <= CELL_CHARS else text[: CELL_CHARS - 1] + "…"
    escaped = html.escape(shown).replace("\n", "<br>")
    if shown != text:
        return f'<span title="{html.escape(text, quote=True)}">{escaped}</span>'
    return escaped


def html_table(headers: Sequence[str], rows: Iterable[Sequence[Any]], *, caption: str = "", faded: Sequence[bool] = ()) -> str:
    """An HTML table; ``faded[i]`` greys row ``i`` out (history, left-out records)."""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = []
    for i, row in enumerate(rows):
        css = ' class="old"' if i < len(faded) and faded[i] else ""
        body.append(f"<tr{css}>" + "".join(f"<td>{_cell(v)}</td>" for v in row) + "</tr>")
    title = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    return f"<table>{title}<thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def _wrap(*parts: str) -> str:
    return _STYLE + '<div class="llm-view">' + "".join(parts) + "</div>"


def _count_by_source(records: Iterable[MemoryRecord]) -> str:
    counts = Counter(r.source or "other" for r in records)
    return ", ".join(f"{source} {n}" for source, n in counts.items())


def _record_row(rank: int, record: MemoryRecord) -> list[Any]:
    return [rank, f"{record.score:.3f}", record.source, format_time(record.event_time), record.session_id or "",
            record.transcript]  # fmt: skip


_RECORD_HEADERS = ("#", "score", "source", "when", "session", "text")


class RecordList(list[MemoryRecord]):
    """A list of :class:`MemoryRecord` (ranked, best first) that shows as a table in
    Jupyter and as one line per record in a terminal."""

    def _repr_html_(self) -> str:
        if not self:
            return _wrap("<p>no records</p>")
        rows = [_record_row(i + 1, r) for i, r in enumerate(self)]
        return _wrap(html_table(_RECORD_HEADERS, rows, caption=f"{len(self)} records"))

    def __repr__(self) -> str:
        if not self:
            return "RecordList([])"
        lines = [
            f"  {r.score:.3f} [{', '.join(p for p in (r.source, format_time(r.event_time)) if p)}] "
            f"{_one_line(r.transcript)}"
            for r in self
        ]
        return "RecordList(\n" + "\n".join(lines) + "\n)"


def _one_line(text: str, width: int = 100) -> str:
    flat = " / ".join(line.strip() for line in text.splitlines() if line.strip())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


class ShownLeftOut(Protocol):
    """What a block view shows of a record left out
    (:class:`~llama_memory.read.compose.LeftOut` is one)."""

    @property
    def record(self) -> MemoryRecord: ...  # noqa: D102

    @property
    def reason(self) -> str: ...  # noqa: D102


class ShownBlock(Protocol):
    """What a block view shows of a memory block (:class:`~llama_memory.read.compose.MemoryBlock`
    is one; described here because the block renders through this module)."""

    @property
    def text(self) -> str: ...  # noqa: D102

    @property
    def records(self) -> Sequence[MemoryRecord]: ...  # noqa: D102

    @property
    def token_count(self) -> int: ...  # noqa: D102

    @property
    def dropped_duplicates(self) -> int: ...  # noqa: D102

    @property
    def dropped_for_budget(self) -> int: ...  # noqa: D102

    @property
    def dropped_irrelevant(self) -> int: ...  # noqa: D102

    @property
    def left_out(self) -> Sequence[ShownLeftOut]: ...  # noqa: D102

    @property
    def instructions(self) -> Sequence[str]: ...  # noqa: D102


def block_summary(block: ShownBlock) -> str:
    """``MemoryBlock(3 records: vector 2, profile 1; 412 tokens; left out: 2 duplicates,
    1 for the budget)``: a block in one line."""
    if not block.text:
        shown = "empty"
    else:
        instructions = block.instructions
        shown = (
            (f"{counted(len(instructions), 'instruction')}, " if instructions else "")
            + f"{counted(len(block.records), 'record')}: {_count_by_source(block.records)}; "
            f"{block.token_count} tokens"
        )
    return (
        f"MemoryBlock({shown}; left out: {counted(block.dropped_duplicates, 'duplicate')}, "
        f"{block.dropped_for_budget} for the budget)"
    )


def block_html(block: ShownBlock) -> str:
    """The block as Jupyter shows it: the records injected, per source, with scores;
    what was left out and why; and the exact text the LLM receives (folded)."""
    if not block.text:
        summary = "<p>Nothing injected: no record was retrieved, or all were duplicates.</p>"
        return _wrap(summary + _left_out(block))
    rows = [_record_row(i + 1, r) for i, r in enumerate(block.records)]
    caption = f"Injected: {len(block.records)} records ({_count_by_source(block.records)}), {block.token_count} tokens"
    text = f"<details><summary>the text the LLM receives</summary><pre>{html.escape(block.text)}</pre></details>"
    return _wrap(html_table(_RECORD_HEADERS, rows, caption=caption), _left_out(block), text)


def _left_out(block: ShownBlock) -> str:
    summary = (
        f"<p>Left out: {block.dropped_duplicates} already shown (in the conversation or an "
        f"earlier record), {block.dropped_irrelevant} not relevant (below the relevance floor), "
        f"{block.dropped_for_budget} over the token budget.</p>"
    )
    if not block.left_out:
        return summary
    rows = [[item.reason, *_record_row(i + 1, item.record)[1:]] for i, item in enumerate(block.left_out)]
    table = html_table(("why",) + _RECORD_HEADERS[1:], rows, caption="Left out", faded=[True] * len(rows))
    return summary + table


@dataclass
class ProfileView:
    """A user's profile now, with every change that led to it.

    Attributes:
        profile: the current profile (a nested dict, as ``get_profile`` returns it).
        history: every change, oldest first (as ``ProfileSource.history(None, scope)``).
    """

    profile: dict[str, Any]
    history: list["ProfileChange"] = field(default_factory=list)

    def _repr_html_(self) -> str:
        since = {c.path: c.created_at for c in self.history if c.current}
        rows = [[path, value, format_time(since.get(path))]
                for path, value in _flatten(self.profile)]
        current = html_table(("field", "value", "since"), rows, caption="Profile")
        changes = html_table(
            ("when", "field", "operation", "value", "session"),
            [
                [format_time(c.created_at), c.path, c.op, "(removed)" if c.removed else c.value, c.session_id or ""]
                for c in self.history
            ],
            caption=f"History ({len(self.history)} changes; grey: no longer current)",
            faded=[not c.current for c in self.history],
        )
        return _wrap(current, changes)

    def __repr__(self) -> str:
        lines = [f"  {path} = {json.dumps(value, ensure_ascii=False, default=str)}"
                 for path, value in _flatten(self.profile)]
        body = "\n".join(lines) if lines else "  (empty)"
        return f"ProfileView({len(self.history)} changes in history)\n{body}"


def _flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """``(dotted path, leaf value)`` pairs of a nested dict (lists are leaves)."""
    if isinstance(value, dict) and value:
        pairs: list[tuple[str, Any]] = []
        for key, inner in value.items():
            pairs.extend(_flatten(inner, f"{prefix}.{key}" if prefix else str(key)))
        return pairs
    return [(prefix, value)] if prefix else []


@dataclass
class TripleTable:
    """Knowledge triples as a table, and the graph they make drawn inline in Jupyter.

    Attributes:
        triples: the triples, oldest first (current and, when asked for, superseded).
        name: whose knowledge (the graph's title).
        draw: whether Jupyter shows the graph too (needs matplotlib).
    """

    triples: list["KnowledgeTriple"]
    name: str = ""
    draw: bool = True

    def _repr_html_(self) -> str:
        rows = [
            [t.subject, t.predicate, t.object, format_time(t.valid_from), format_time(t.valid_to), t.mentions]
            for t in self.triples
        ]
        current = sum(t.current for t in self.triples)
        table = html_table(
            ("subject", "predicate", "object", "since", "until", "mentions"), rows,
            caption=f"Knowledge triples: {current} current, {len(self.triples) - current} superseded (grey)",
            faded=[not t.current for t in self.triples],
        )
        return _wrap(table, self._graph_html())

    def _graph_html(self) -> str:
        if not self.draw or not any(t.current for t in self.triples):
            return ""
        from .triples.graph import plot, to_networkx

        try:
            graph = to_networkx([t for t in self.triples if t.current], name=self.name)
            with tempfile.TemporaryDirectory() as folder:
                png = plot(graph, Path(folder) / "graph.png", figsize=(6.0, 4.5),
                           dpi=80).read_bytes()
        except ImportError:  # matplotlib is an extra: the table alone then
            return f"<p>({install_hint('graph')} to see the graph)</p>"
        data = base64.b64encode(png).decode("ascii")
        return f'<img alt="knowledge graph" src="data:image/png;base64,{data}"/>'

    def __repr__(self) -> str:
        lines = [f"  {t.render()}" + ("" if t.current else "  [superseded]") for t in self.triples]
        return f"TripleTable({len(self.triples)} triples)\n" + ("\n".join(lines) or "  (none)")
