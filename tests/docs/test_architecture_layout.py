"""docs/architecture.md's layout (every module of the package with its size) matches the
tree: a module added, removed or renamed, or one whose size moved by more than a quarter,
fails here until the page says so. Rewrite the block with::

    .venv/bin/python -m tests.docs.test_architecture_layout --write
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "llama_memory"
PAGE = ROOT / "docs" / "architecture.md"
#: The page's block: the fenced code after this heading.
HEADING = "## The layout"
#: How far a module's size may drift from the page before it must be rewritten.
DRIFT = 0.25
WIDTH = 92


def tree() -> dict[str, int]:
    """Every module of the package (its path under ``llama_memory/``) and its lines."""
    return {
        str(path.relative_to(PACKAGE)): len(path.read_text(encoding="utf-8").splitlines())
        for path in sorted(PACKAGE.rglob("*.py"))
    }


def render(modules: dict[str, int]) -> str:
    """The layout block: each folder, then its modules and their lines, wrapped."""
    folders: dict[str, list[str]] = {}
    for name, lines in modules.items():
        folder, _, module = name.rpartition("/")
        folders.setdefault(folder, []).append(f"{module} {lines}")
    total = sum(modules.values())
    out = [f"llama_memory/  ({len(modules)} modules, {total:,} lines)"]
    shown: set[str] = {""}
    for folder in sorted(folders):
        depth = folder.count("/") + 1 if folder else 0
        parts = folder.split("/")
        for level in range(1, depth + 1):  # a folder holding only folders gets its line too
            name = "/".join(parts[:level])
            if name not in shown:
                shown.add(name)
                out.append("  " * level + parts[level - 1] + "/")
        indent = "  " * (depth + 1)
        line = indent
        for entry in folders[folder]:
            piece = entry if line == indent else ", " + entry
            if len(line) + len(piece) > WIDTH and line != indent:
                out.append(line + ",")
                line, piece = indent, entry
            line += piece
        out.append(line)
    return "\n".join(out) + "\n"


def parse(block: str) -> dict[str, int]:
    """The modules and sizes a layout block states (the inverse of :func:`render`)."""
    found: dict[str, int] = {}
    folders: list[str] = []
    for raw in block.splitlines()[1:]:
        depth = (len(raw) - len(raw.lstrip(" "))) // 2
        text = raw.strip()
        if text.endswith("/"):
            folders = folders[: depth - 1] + [text[:-1]]
            continue
        prefix = "/".join(folders[: depth - 1])
        for module, lines in re.findall(r"([\w.]+\.py) (\d+)", text):
            found[f"{prefix}/{module}" if prefix else module] = int(lines)
    return found


def page_block() -> tuple[str, int, int]:
    """The layout block of the page, and where it starts and ends in the text."""
    text = PAGE.read_text(encoding="utf-8")
    start = text.index("```\n", text.index(HEADING)) + len("```\n")
    end = text.index("```", start)
    return text[start:end], start, end


def test_the_layout_on_the_architecture_page_matches_the_tree() -> None:
    stated = parse(page_block()[0])
    actual = tree()
    assert sorted(set(actual) - set(stated)) == [], "modules missing from docs/architecture.md's layout"
    assert sorted(set(stated) - set(actual)) == [], "modules the layout names that are gone"
    drifted = {
        name: (stated[name], lines)
        for name, lines in actual.items()
        if abs(lines - stated[name]) > max(20, DRIFT * stated[name])
    }
    assert drifted == {}, f"sizes moved (page, tree); rewrite with {__doc__.splitlines()[-1].strip()}"


def test_the_block_reads_back_what_it_was_written_from() -> None:
    modules = {
        "memory.py": 700,
        "storage/sqlite/store.py": 111,
        "storage/ports/base.py": 9,
        "sources/vector.py": 3,
        "a/b/c.py": 4,  # a folder holding only a folder
    }
    assert parse(render(modules)) == modules


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    block, start, end = page_block()
    text = PAGE.read_text(encoding="utf-8")
    PAGE.write_text(text[:start] + render(tree()) + text[end:], encoding="utf-8")
    print(f"rewrote the layout of {PAGE.relative_to(ROOT)}")
