"""Functions a maintainer can read in one screen: in `course_utils` and `course_grader`, a
function body (its docstring aside) is at most 60 lines, or says in a comment why it is not
("# Long on purpose: ..."), so that length is a decision, not drift."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from conftest import ROOT

LIMIT = 60
REASON = "# Long on purpose:"
MODULES = sorted(p for package in ("course_utils", "course_grader")
                 for p in (ROOT / package).rglob("*.py"))


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
def test_no_function_is_long_without_a_reason(path):
    assert long_functions(path) == []


def test_the_rule_counts_the_body_and_reads_the_reason(tmp_path):
    body = "".join(f"    x{i} = {i}\n" for i in range(LIMIT + 1))
    sample = tmp_path / "sample.py"
    sample.write_text(f'def long():\n    """doc"""\n{body}\n\ndef ok():\n    """doc"""\n'
                      + "".join(f"    y{i} = {i}\n" for i in range(LIMIT)))
    assert long_functions(sample) == [f"long (line 1): {LIMIT + 1} lines"]
    sample.write_text(f'def long():\n    """doc"""\n    {REASON} a table.\n{body}')
    assert long_functions(sample) == []
