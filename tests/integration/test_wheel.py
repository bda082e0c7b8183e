"""The wheel users install: built from the sdist, it carries the offline model's
tokenizer files and ``py.typed``, and nothing from ``tests/`` (or anything else outside the
package). ``make wheel-check`` (tests/wheel_check.py, in CI) also installs it into a fresh
venv and runs the command and the demo from it, offline."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from wheel_check import build, model_files, sdist_problems, wheel_problems


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The sdist and the wheel, built without isolation (the venv's setuptools)."""
    return build(tmp_path_factory.mktemp("dist"), isolated=False)


def test_the_wheel_carries_the_model_files_and_py_typed_and_nothing_from_tests(built) -> None:
    sdist, wheel = built
    assert model_files() == ["llama_memory/embeddings/_model/NOTICE", "llama_memory/embeddings/_model/tokenizer.json"]
    assert sdist_problems(sdist) == []
    assert wheel_problems(wheel) == []
    assert wheel.name.startswith("llama_index_memory_composable-")


def test_the_check_names_what_a_wheel_lacks_or_should_not_carry(built, tmp_path: Path) -> None:
    _, wheel = built
    bad = tmp_path / wheel.name
    with zipfile.ZipFile(wheel) as good, zipfile.ZipFile(bad, "w") as out:
        for item in good.infolist():
            if item.filename not in ("llama_memory/embeddings/_model/tokenizer.json", "llama_memory/py.typed"):
                out.writestr(item, good.read(item))
        out.writestr("tests/conftest.py", "")
    assert wheel_problems(bad) == [
        "missing llama_memory/embeddings/_model/tokenizer.json",
        "missing llama_memory/py.typed",
        "not the package's: tests/conftest.py",
    ]
