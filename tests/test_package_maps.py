"""Each package of ours opens with a map of its modules (its docstring): every module and
folder of the package is on it, and everything on it exists, so that a reader who starts at
the map finds the whole package."""

from __future__ import annotations

import importlib
import keyword
import re

import pytest
from conftest import ROOT

PACKAGES = ("course_utils", "course_utils.grading", "course_grader", "course_publish")


def contents(package: str) -> set[str]:
    """The modules and the folders (subpackages, templates) directly in `package`."""
    folder = ROOT.joinpath(*package.split("."))
    modules = {p.stem for p in folder.glob("*.py") if p.name != "__init__.py"}
    folders = {p.name for p in folder.iterdir()
               if p.is_dir() and p.name != "__pycache__" and not p.name.startswith(".")}
    return modules | folders


@pytest.mark.parametrize("package", PACKAGES)
def test_the_map_lists_every_module_and_folder_and_nothing_else(package):
    doc = importlib.import_module(package).__doc__ or ""
    # a map line is "    name  what it is"; an indented example (`out = grading.call(...)`,
    # `with ...`) is not
    listed = {name for name in re.findall(r"^    (\w+) +(?![=(.])\S", doc, flags=re.MULTILINE)
              if not keyword.iskeyword(name)}
    present = contents(package)
    assert not present - listed, f"{package}'s map lacks {sorted(present - listed)}"
    assert not listed - present, f"{package}'s map names what is not there: {listed - present}"
