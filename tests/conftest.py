"""Shared fixtures: paths, the nbgrader command, and a throw-away course directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
UNITS = sorted(p.parent.name for p in ROOT.glob("solutions/*/*.ipynb"))


def tool_env() -> dict[str, str]:
    """The environment for nbgrader and jupyter: this venv's bin first on PATH (nbgrader runs
    `alembic` by name) and a non-interactive matplotlib backend."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["MPLBACKEND"] = "Agg"
    return env


def run_nbgrader(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(BIN / "nbgrader"), *args], cwd=cwd, env=tool_env(),
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


def notebooks(folder: str) -> list[Path]:
    found = (ROOT / folder).glob("**/*.ipynb")
    return sorted(p for p in found if ".ipynb_checkpoints" not in p.parts)


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def is_graded_test(cell) -> bool:
    meta = nbgrader_meta(cell)
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


@pytest.fixture(scope="session")
def fresh_course(tmp_path_factory) -> Path:
    """A copy of the course's nbgrader set-up in a temporary folder, with every unit released
    there by `nbgrader generate_assignment` (and so a gradebook that knows every unit)."""
    course = tmp_path_factory.mktemp("course")
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions", course / "solutions")
    for unit in UNITS:
        run_nbgrader("generate_assignment", unit, "--force", cwd=course)
    return course


@pytest.fixture(scope="module")
def one_thread():
    """For modules of tiny tensors: one thread is faster (two threads spin against each
    other on a busy machine, 100x slower in greedy decoding) and makes training bitwise
    reproducible. Use with `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
