"""The documentation site builds in strict mode, and its API reference covers every public name.

Strict mode (mkdocs.yml) turns every warning into a failure: a link to a missing page or
anchor, a page left out of the nav, a docstring that names a parameter the signature does
not have, a cross-reference (``:class:`X```) to a name the reference does not document.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

import llama_memory

pytest.importorskip("mkdocs")
pytest.importorskip("mkdocstrings_handlers.python")

ROOT = Path(__file__).resolve().parents[2]
API_PAGE = ROOT / "docs" / "api.md"


@pytest.mark.timeout(180)
def test_docs_build_strict(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=170,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}{result.stderr}"
    api = (tmp_path / "site" / "api" / "index.html").read_text()
    for name in llama_memory.__all__:
        assert f'id="llama_memory.{name}"' in api, f"{name} is not rendered in the API reference"


def test_api_reference_lists_every_public_name() -> None:
    documented = set(re.findall(r"^::: llama_memory\.(\w+)\s*$", API_PAGE.read_text(), re.M))
    missing = sorted(set(llama_memory.__all__) - documented)
    assert not missing, f"docs/api.md has no '::: llama_memory.<name>' entry for {missing}"


def test_the_readme_lists_every_option_with_its_default() -> None:
    """The README's ``from_defaults(...)`` row names each field of ``MemorySettings`` (the
    one definition of an option) with the field's default, and nothing else but
    ``chat_history``, which starts the conversation rather than configuring the memory."""
    import ast

    from llama_memory import MemorySettings

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    row = re.search(r"`ComposableMemory\.from_defaults\((.*?)\)` \|", text)
    assert row, "README.md has no from_defaults(...) row"
    stated = dict(arg.strip().split("=", 1) for arg in row.group(1).split(",") if "=" in arg)
    stated.pop("chat_history")
    fields = MemorySettings.model_fields
    assert sorted(stated) == sorted(fields), "README's options differ from MemorySettings' fields"
    wrong = {name: value for name, value in stated.items() if ast.literal_eval(value) != fields[name].default}
    assert wrong == {}, f"README states defaults the settings do not have: {wrong}"
