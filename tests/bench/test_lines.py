"""The line counts of ``bench.lines``: each line of a module has one kind, the kinds add
up to the file's lines, and the floor keeps code, one line per public docstring and the
blank lines PEP 8 asks for."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import lines

MODULE = '''"""A module's docstring
over two lines."""

import os

# A comment.
LIMIT = 3


class Box:
    """A box."""

    def open(self) -> None:
        """Open it,
        carefully."""

        os.getcwd()

    def _shut(self) -> None:
        """Private: goes in the floor."""
        text = """not a docstring:
        a string continued over lines"""
        print(text)


def helper() -> int:
    return LIMIT
'''


def test_each_line_has_one_kind() -> None:
    counts = lines.count_source(MODULE)

    assert {k: counts[k] for k in lines.KINDS} == {"code": 11, "docstring": 6, "comment": 1, "blank": 9}
    assert sum(counts[k] for k in lines.KINDS) == len(MODULE.splitlines())
    # code 11; public docstrings: the module, Box, open; PEP 8: two before Box, two
    # before helper, one before each method.
    assert counts["floor"] == 11 + 3 + 6


def test_the_package_tree_adds_up_to_its_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "__init__.py").write_text(MODULE)
    (tmp_path / "sub" / "a.py").write_text("x = 1\n\n# why\n")

    parts = lines.main(["--root", str(tmp_path)])

    assert parts["(top)"]["modules"] == 1 and parts["sub/"]["modules"] == 1
    assert {k: parts["sub/"][k] for k in lines.KINDS} == {"code": 1, "docstring": 0, "comment": 1, "blank": 1}
    assert parts["total"]["code"] == 12 and parts["total"]["modules"] == 2
    assert capsys.readouterr().out.splitlines()[-1] == "| total | 2 | 30 | 12 | 6 | 2 | 10 | 21 |"


def test_the_package_counts_every_line_of_its_modules() -> None:
    root = Path(lines.__file__).resolve().parent.parent / "llama_memory"
    total = lines.count_tree(root)["total"]

    files = list(root.rglob("*.py"))
    assert total["modules"] == len(files)
    assert sum(total[k] for k in lines.KINDS) == sum(len(f.read_text().splitlines()) for f in files)
    assert total["floor"] < sum(total[k] for k in lines.KINDS)
