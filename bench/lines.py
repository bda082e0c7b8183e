"""What the package's lines are: code, docstrings, comments and blank lines, by folder,
and the fewest lines the same code could take (docs/architecture.md, "The package's size").

    python -m bench.lines                    # llama_memory/, a row per top-level folder
    python -m bench.lines --root some/pkg    # any package

A line is a *docstring* line when it lies in the docstring of a module, class or function,
*blank* when it holds only whitespace, a *comment* when it starts with ``#``, and *code*
otherwise (a string continued over lines is code). The **floor** keeps the code as it is,
one line for each docstring of a public name (a private one, ``_name``, goes), no comment,
and only the blank lines PEP 8 asks for: two around a top-level ``def`` or ``class``, one
before each method that does not open its class.
"""

from __future__ import annotations

import argparse
import ast
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Optional, Union

KINDS = ("code", "docstring", "comment", "blank")
_DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _docstring_of(node: ast.AST) -> Optional[ast.Expr]:
    body = getattr(node, "body", None)
    if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        return body[0] if isinstance(body[0].value.value, str) else None
    return None


def _is_private(node: ast.AST) -> bool:
    name = getattr(node, "name", "")
    return name.startswith("_") and not name.startswith("__")


def _pep8_blanks(tree: ast.Module) -> int:
    """The blank lines PEP 8 asks for (E301, E302, E305): two before and after each
    top-level definition, one before each method that does not open its class."""
    count = 0
    for before, node in zip(tree.body, tree.body[1:]):
        if isinstance(node, _DEFINITIONS) or isinstance(before, _DEFINITIONS):
            count += 2
    for cls in ast.walk(tree):
        if isinstance(cls, ast.ClassDef):
            count += sum(isinstance(member, _DEFINITIONS) for member in cls.body[1:])
    return count


def count_source(source: str) -> Counter[str]:
    """The lines of one module by kind (:data:`KINDS`), and its ``floor``."""
    tree = ast.parse(source)
    docstring_lines: set[int] = set()
    public_docstrings = 0
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, *_DEFINITIONS)):
            continue
        docstring = _docstring_of(node)
        if docstring is not None:
            docstring_lines.update(range(docstring.lineno, (docstring.end_lineno or docstring.lineno) + 1))
            public_docstrings += not _is_private(node)
    counts: Counter[str] = Counter({kind: 0 for kind in KINDS})
    for number, line in enumerate(source.splitlines(), 1):
        stripped = line.strip()
        if number in docstring_lines:
            counts["docstring"] += 1
        elif not stripped:
            counts["blank"] += 1
        elif stripped.startswith("#"):
            counts["comment"] += 1
        else:
            counts["code"] += 1
    counts["floor"] = counts["code"] + public_docstrings + _pep8_blanks(tree)
    return counts


def count_tree(root: Union[str, Path]) -> dict[str, Counter[str]]:
    """Each top-level part of the package at ``root`` (a folder, or ``(top)`` for its own
    modules) with the kinds of its lines, and ``total``."""
    root = Path(root)
    parts: dict[str, Counter[str]] = {}
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        part = relative.parts[0] + "/" if len(relative.parts) > 1 else "(top)"
        parts.setdefault(part, Counter()).update(count_source(path.read_text(encoding="utf-8")))
        parts[part]["modules"] += 1
    parts["total"] = sum(parts.values(), Counter())
    return parts


def table(parts: dict[str, Counter[str]]) -> Iterable[str]:
    """The counts as a Markdown table, largest part first, the total last."""
    columns = ("modules", "lines", *KINDS, "floor")
    yield "| part | " + " | ".join(columns) + " |"
    yield "|---" * (len(columns) + 1) + "|"
    ordered = sorted((p for p in parts if p != "total"), key=lambda p: -sum(parts[p][k] for k in KINDS))
    for part in [*ordered, "total"]:
        counts = parts[part]
        values = {"lines": sum(counts[k] for k in KINDS), **counts}
        yield f"| {part} | " + " | ".join(f"{values.get(c, 0):,}" for c in columns) + " |"


def main(argv: Optional[list[str]] = None) -> dict[str, Counter[str]]:
    """Print the table for the package (``--root``, ``llama_memory`` by default)."""
    parser = argparse.ArgumentParser(prog="python -m bench.lines", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--root", default=str(Path(__file__).resolve().parent.parent / "llama_memory"))
    parts = count_tree(parser.parse_args(argv).root)
    for row in table(parts):
        print(row)
    return parts


if __name__ == "__main__":
    main()
