"""What users install: the distribution's own name everywhere a user reads an install
line, and the LlamaIndex range pyproject.toml declares matching what CI tests."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from llama_memory.core.distribution import DISTRIBUTION, install_hint

tomllib = pytest.importorskip("tomllib")

ROOT = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
#: Where a user reads what to install.
READ_BY_USERS = ["README.md", "docs/**/*.md", "notebooks/*.ipynb", "llama_memory/**/*.py"]
#: The old name in an install line: on the package index it is an unrelated project.
OLD_INSTALL = re.compile(r"llama-memory\[|pip install ['\"]?llama-memory\b|reinstall llama-memory\b")


def test_the_distribution_has_a_name_of_its_own_and_keeps_the_import_and_the_command() -> None:
    assert PROJECT["name"] == DISTRIBUTION == "llama-index-memory-composable"
    assert PROJECT["scripts"] == {"llama-memory": "llama_memory.admin.cli:main"}
    assert (ROOT / "llama_memory" / "__init__.py").exists()


def test_install_hints_name_the_distribution() -> None:
    assert install_hint() == "pip install llama-index-memory-composable"
    assert install_hint("mcp") == "pip install 'llama-index-memory-composable[mcp]'"
    extras = set(PROJECT["optional-dependencies"])
    assert {"mcp", "encrypted", "postgres", "graph", "openai"} <= extras


def test_no_install_line_names_the_package_index_s_other_llama_memory() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for pattern in READ_BY_USERS
        for path in sorted(ROOT.glob(pattern))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if OLD_INSTALL.search(line)
    ]
    assert found == []


def lower_bound(name: str) -> str:
    """The ``>=`` bound pyproject.toml's dependencies give ``name``."""
    [requirement] = [Requirement(r) for r in PROJECT["dependencies"] if Requirement(r).name == name]
    [bound] = [s.version for s in requirement.specifier if s.operator == ">="]
    return bound


def test_the_lowest_versions_ci_tests_are_pyproject_s_lower_bounds() -> None:
    # make test-lowest runs tests/agents on these pins: if pyproject's bound moves, they move.
    lines = (ROOT / "tests" / "agents" / "lowest-requirements.txt").read_text().splitlines()
    pins = {
        r.name: str(r.specifier).removeprefix("==")
        for r in (Requirement(line) for line in lines if line.strip() and not line.startswith("#"))
        if str(r.specifier).startswith("==")
    }
    for name in ("llama-index-core", "llama-index-workflows"):
        assert pins[name].split(".")[:2] == lower_bound(name).split(".")[:2], name
        assert [int(x) for x in pins[name].split(".")] >= [int(x) for x in lower_bound(name).split(".")], name
    assert lower_bound("llama-index-core") == "0.14.5"
