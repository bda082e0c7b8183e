"""The notebooks in notebooks/ run, cell by cell, in a real Jupyter kernel: they cannot rot.

Each notebook is executed with nbclient in a kernel started from this interpreter (the
project's virtualenv, with this checkout first on the path) in a temporary working
directory, offline: OPENAI_API_KEY and CHROMA_HOST are removed from the kernel's
environment so the notebooks take their offline branches, except that the production
notebook's server cells get the address of the real loopback Chroma server the tests start. Any cell error fails the test.

Committed notebooks carry no outputs: they are sources, and stale outputs would show
results the code no longer produces.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
#: Seconds per cell, and for a whole notebook (the model loads once per notebook).
CELL_TIMEOUT = 120
NOTEBOOK_TIMEOUT = 240
KERNEL_NAME = "llama-memory-test"
#: What would make a notebook leave the machine.
ONLINE_VARIABLES = ("OPENAI_API_KEY", "CHROMA_HOST", "CHROMA_PORT")
#: Notebooks whose Chroma-server cells run against the tests' loopback server.
SERVER_NOTEBOOKS = {"04_going_to_production"}


def test_there_are_notebooks() -> None:
    assert len(NOTEBOOKS) >= 4, NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_committed_notebook_has_no_outputs(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    nbformat.validate(notebook)
    stale = [
        index
        for index, cell in enumerate(notebook.cells)
        if cell.cell_type == "code" and (cell.outputs or cell.execution_count is not None)
    ]
    assert not stale, (
        f"{path.name}: cells {stale} carry outputs or execution counts; clear them before "
        "committing (Jupyter: Edit > Clear Outputs of All Cells, or "
        "`jupyter nbconvert --clear-output --inplace`)"
    )


def test_notebooks_pass_ruff() -> None:
    """Cells that skip without OPENAI_API_KEY or CHROMA_HOST do not run here: ruff at
    least checks them for undefined names and unused or unsorted imports."""
    pytest.importorskip("ruff")
    result = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", *map(str, NOTEBOOKS)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _kernel_manager(kernel_dir: Path):
    """A kernel manager whose only kernel is this interpreter running ipykernel."""
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    spec_dir = kernel_dir / KERNEL_NAME
    spec_dir.mkdir(parents=True)
    (spec_dir / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "llama-memory tests",
                "language": "python",
            }
        )
    )
    specs = KernelSpecManager(kernel_dirs=[str(kernel_dir)], ensure_native_kernel=False)
    return KernelManager(kernel_name=KERNEL_NAME, kernel_spec_manager=specs)


def _kernel_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ONLINE_VARIABLES}
    # This checkout's llama_memory, not whatever an editable install points at.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["MPLBACKEND"] = "Agg"
    return env


@pytest.mark.timeout(NOTEBOOK_TIMEOUT)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs(path: Path, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    notebook = nbformat.read(path, as_version=4)
    env = _kernel_env()
    if path.stem in SERVER_NOTEBOOKS:  # their server cells run against a real server
        server = request.getfixturevalue("chroma_server")
        env.update(CHROMA_HOST="127.0.0.1", CHROMA_PORT=str(server.port))
    # First cell: prove the kernel is this interpreter importing this checkout.
    notebook.cells.insert(
        0,
        nbformat.v4.new_code_cell(
            "import sys, llama_memory\n"
            f"assert sys.executable == {sys.executable!r}, sys.executable\n"
            f"assert llama_memory.__file__.startswith({str(ROOT)!r}), llama_memory.__file__"
        ),
    )
    workdir = tmp_path / "work"
    workdir.mkdir()
    client = nbclient.NotebookClient(
        notebook,
        km=_kernel_manager(tmp_path / "kernels"),
        timeout=CELL_TIMEOUT,
        resources={"metadata": {"path": str(workdir)}},
    )
    try:
        client.execute(env=env, cwd=str(workdir))
    except nbclient.exceptions.CellExecutionError as error:
        plain = re.sub(r"\x1b\[[0-9;]*m", "", str(error))  # the traceback's colours
        pytest.fail(f"{path.name}: a cell failed:\n{plain}", pytrace=False)
    outputs = [o for c in notebook.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    if path.stem in SERVER_NOTEBOOKS:
        printed = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
        assert "Skipped: set CHROMA_HOST" not in printed and "ReconcileReport" in printed
