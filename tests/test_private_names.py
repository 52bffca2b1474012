"""No private name crosses a module boundary in the course's own packages: a module may use
its own `_helpers`, but what another module needs is public (named without the underscore,
and documented), so that it can be found, tested and kept stable."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import ROOT

OURS = ("course_utils", "course_grader")
MODULES = sorted(p for package in OURS for p in (ROOT / package).rglob("*.py"))


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def crossings(path: Path) -> list[str]:
    """`from ours import _x` and `ours_module._x` in one module of ours."""
    tree = ast.parse(path.read_text())
    modules, found = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(OURS):
            found += [f"line {node.lineno}: from {node.module} import {a.name}"
                      for a in node.names if private(a.name)]
            modules |= {a.asname or a.name for a in node.names if not private(a.name)}
        elif isinstance(node, ast.Import):
            modules |= {(a.asname or a.name).split(".")[0] for a in node.names
                        if a.name.startswith(OURS)}
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and private(node.attr)
                and isinstance(node.value, ast.Name) and node.value.id in modules):
            found.append(f"line {node.lineno}: {node.value.id}.{node.attr}")
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_name_of_another_module_is_used(path):
    assert crossings(path) == []


def test_the_rule_finds_both_kinds_of_crossing(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("from course_utils.attention import _scaled_scores, softmax\n"
                      "from course_utils import transformer\n"
                      "mask = transformer._private(1)\nok = transformer.key_mask\n")
    assert crossings(sample) == ["line 1: from course_utils.attention import _scaled_scores",
                                 "line 3: transformer._private"]
