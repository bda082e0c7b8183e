"""What `make wheel-check` runs: the package as a user gets it from the package index.

    python tests/wheel_check.py [--outdir dist] [--venv build/wheel-venv]

1. builds the sdist and, from it, the wheel (``python -m build``, in an isolated build
   environment, as a release would);
2. checks what they carry (:func:`wheel_problems`, :func:`sdist_problems`): the tokenizer
   files of the offline model (``llama_memory/embeddings/_model``) and ``py.typed``, and in the wheel
   nothing but the package (nothing from ``tests/``, ``bench/``, ``docs/``...);
3. installs the wheel into a fresh venv (its dependencies from the package index, or pip's
   cache) and, from a directory outside the checkout and with no network, runs
   ``llama-memory --help`` and ``llama-memory demo``.

It prints how long each step took and exits non-zero on the first problem.
tests/integration/test_wheel.py checks the same contents on a wheel built without
isolation, in ``make test``.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

ROOT = Path(__file__).resolve().parents[1]
#: The package's model files (the tokenizer of the offline embedding and its NOTICE).
MODEL_DIR = "llama_memory/embeddings/_model"
#: What the demo prints only when conversation 2 recalls conversation 1.
DEMO_RECALLS = '"city: New York'


def distribution_name(source: Path = ROOT) -> str:
    """The ``[project] name`` of ``source``'s pyproject.toml (its first ``name =`` line:
    tomllib is 3.11 and later)."""
    found = re.search(r'^name = "([^"]+)"$', (source / "pyproject.toml").read_text(), re.MULTILINE)
    if found is None:
        raise ValueError(f"no name = \"...\" line in {source / 'pyproject.toml'}")
    return found.group(1)


def model_files(source: Path = ROOT) -> list[str]:
    """The files of ``llama_memory/embeddings/_model`` in ``source``, as paths inside the package."""
    return sorted(f"{MODEL_DIR}/{p.name}" for p in (source / MODEL_DIR).iterdir() if p.is_file())


def build(outdir: Path, source: Path = ROOT, isolated: bool = True) -> tuple[Path, Path]:
    """Build ``source``'s sdist, then the wheel from that sdist, into ``outdir``; their paths."""
    outdir.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "build", "--outdir", str(outdir)]
    if not isolated:  # the running venv's setuptools (the dev extra's)
        command.append("--no-isolation")
    subprocess.run([*command, str(source)], check=True, stdout=subprocess.DEVNULL)
    [sdist] = sorted(outdir.glob("*.tar.gz"))
    [wheel] = sorted(outdir.glob("*.whl"))
    return sdist, wheel


def wheel_problems(wheel: Path, source: Path = ROOT) -> list[str]:
    """What is wrong with ``wheel``: a model file or ``py.typed`` missing, a file outside
    the package and its metadata (from ``tests/`` or anywhere else), the wrong
    distribution name, no ``llama-memory`` command. [] when nothing is."""
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        dist_info = next((n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info")), "")
        metadata = archive.read(f"{dist_info}/METADATA").decode() if dist_info else ""
        entry_points = (
            archive.read(f"{dist_info}/entry_points.txt").decode()
            if f"{dist_info}/entry_points.txt" in names
            else ""
        )
    problems = [f"missing {name}" for name in [*model_files(source), "llama_memory/py.typed"] if name not in names]
    problems += [f"not the package's: {n}" for n in names if n.split("/")[0] not in ("llama_memory", dist_info)]
    name = distribution_name(source)
    if f"Name: {name}\n" not in metadata:
        problems.append(f"METADATA does not name the distribution {name}")
    if "llama-memory = llama_memory.admin.cli:main" not in entry_points:
        problems.append("no llama-memory command in entry_points.txt")
    return problems


def sdist_problems(sdist: Path, source: Path = ROOT) -> list[str]:
    """The model files and ``py.typed`` missing from ``sdist`` (a wheel built from it, as
    pip does from a source release, would lack them)."""
    with tarfile.open(sdist) as archive:
        names = {name.split("/", 1)[1] for name in archive.getnames() if "/" in name}
    return [f"sdist lacks {n}" for n in [*model_files(source), "llama_memory/py.typed"] if n not in names]


def offline(command: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """``command`` and an environment that give it no network: a network namespace of its
    own (``unshare --net``: only a loopback that is down) where the machine allows one,
    else proxies that lead nowhere. No ``PYTHONPATH``: the venv's own packages are used."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "--net", "true"], capture_output=True).returncode == 0:
        return [unshare, "--net", *command], env
    nowhere = "http://127.0.0.1:9"  # the discard port: nothing answers
    env.update(HTTP_PROXY=nowhere, HTTPS_PROXY=nowhere, http_proxy=nowhere, https_proxy=nowhere, NO_PROXY="")
    return list(command), env


def run_offline(command: Sequence[str], cwd: Path) -> str:
    """Run ``command`` with no network in ``cwd``; its output (an error with it if it fails)."""
    full, env = offline(command)
    done = subprocess.run(full, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}")
    return done.stdout


def install(wheel: Path, venv: Path) -> Path:
    """A fresh venv at ``venv`` with ``wheel`` installed; the venv's bin directory."""
    shutil.rmtree(venv, ignore_errors=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    bin_dir = venv / "bin"
    subprocess.run(
        [str(bin_dir / "python"), "-m", "pip", "install", "--quiet", str(wheel)], check=True
    )
    return bin_dir


def check_installed(bin_dir: Path) -> None:
    """From a directory outside the checkout, with no network: the package is the venv's,
    ``llama-memory --help`` works and the demo's second conversation recalls the first."""
    with tempfile.TemporaryDirectory() as work:
        where = run_offline([str(bin_dir / "python"), "-c", "import llama_memory; print(llama_memory.__file__)"], Path(work))
        if not Path(where.strip()).is_relative_to(bin_dir.parent):
            raise RuntimeError(f"llama_memory was imported from {where.strip()}, not from the venv")
        if "demo" not in run_offline([str(bin_dir / "llama-memory"), "--help"], Path(work)):
            raise RuntimeError("llama-memory --help does not list the demo")
        demo = run_offline([str(bin_dir / "llama-memory"), "demo", "--path", str(Path(work) / "memory")], Path(work))
        if DEMO_RECALLS not in demo:
            raise RuntimeError(f"the demo's second conversation did not recall the first:\n{demo}")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Build, check, install and run; 0 when all holds."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outdir", type=Path, default=ROOT / "dist")
    parser.add_argument("--venv", type=Path, default=ROOT / "build" / "wheel-venv")
    args = parser.parse_args(argv)
    shutil.rmtree(args.outdir, ignore_errors=True)
    started = time.perf_counter()

    def step(what: str) -> None:
        print(f"wheel-check: {what} ({time.perf_counter() - started:.0f} s)", flush=True)

    sdist, wheel = build(args.outdir)
    step(f"built {sdist.name} and {wheel.name}")
    problems = sdist_problems(sdist) + wheel_problems(wheel)
    if problems:
        print("wheel-check: " + "; ".join(problems), file=sys.stderr)
        return 1
    step("the wheel carries the model files and py.typed, and nothing but the package")
    bin_dir = install(wheel, args.venv.resolve())
    step(f"installed into a fresh venv, {args.venv}")
    check_installed(bin_dir)
    step("llama-memory --help and the demo ran from the wheel, offline")
    return 0


if __name__ == "__main__":
    sys.exit(main())
