"""Two rules of the course's own code (`course_utils`, `course_grader`, `course_publish`) that
keep it easy to carry on:

* **no private name crosses a module**: a module may use its own `_helpers`, but what another
  module needs is public (named without the underscore, and documented), so that it can be
  found, tested and kept stable;
* **a function reads in one screen**: its body (the docstring aside) is at most 60 lines, or
  it says in a comment why not ("# Long on purpose: ..."), so that length is a decision.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import ROOT

OURS = ("course_utils", "course_grader", "course_publish")
MODULES = sorted(p for package in OURS for p in (ROOT / package).rglob("*.py"))
LIMIT = 60
REASON = "# Long on purpose:"


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


def body_lines(node: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[int, int]:
    """(first, last) line of the body, the docstring left out."""
    first = node.body[0]
    has_docstring = (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                     and isinstance(first.value.value, str))
    start = node.body[1].lineno if has_docstring and len(node.body) > 1 else first.lineno
    return start, node.end_lineno


def long_functions(path: Path) -> list[str]:
    source = path.read_text()
    lines = source.splitlines()
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            start, end = body_lines(node)
            # the reason stands just above the first statement of the body
            if end - start + 1 > LIMIT and not any(
                    REASON in line for line in lines[node.lineno - 1:start]):
                found.append(f"{node.name} (line {node.lineno}): {end - start + 1} lines")
    return found


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_private_name_crosses_and_no_function_is_long_without_a_reason(path):
    assert crossings(path) + long_functions(path) == []


def test_the_rule_finds_both_kinds_of_crossing(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("from course_utils.attention import _scaled_scores, softmax\n"
                      "from course_utils import transformer\n"
                      "mask = transformer._private(1)\nok = transformer.key_mask\n")
    assert crossings(sample) == ["line 1: from course_utils.attention import _scaled_scores",
                                 "line 3: transformer._private"]


def test_the_rule_counts_the_body_and_reads_the_reason(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(LIMIT + 1))
    sample = tmp_path / "sample.py"
    sample.write_text(f'def long():\n    """doc"""\n{body}\n\ndef ok():\n    """doc"""\n'
                      + "".join(f"    y{i} = {i}\n" for i in range(LIMIT)))
    assert long_functions(sample) == [f"long (line 1): {LIMIT + 1} lines"]
    sample.write_text(f'def long():\n    """doc"""\n    {REASON} a table.\n{body}')
    assert long_functions(sample) == []
