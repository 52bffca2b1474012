"""What nbgrader's Validate shows a student: where they stand, one line per task.

Validate runs the whole notebook and lists every graded cell that failed, each with its test
source and its error; a half-finished exercise then buries the one fact that matters (which
tasks pass) under the tests and tracebacks of the tasks not started yet. So, while Validate
runs (nbgrader sets NBGRADER_VALIDATING=1 in the kernel's environment), the test cells of an
exercise record their outcome instead of failing, and the exercise's last cell,

    grading.summary("softmax", "weighted_average", "soft_lookup")

fails once, with the whole account:

    1 of 3 tasks pass
      softmax: passes
      weighted_average: fails: weighted_average([0.5, 0.5, 0], ...): values differ ...
      soft_lookup: not started (it still raises NotImplementedError)

When every task passes it does nothing, and Validate says the notebook passes. Anywhere else
(a student running cells, autograding, where test cells run in the grader's checker) nothing
here changes anything: test cells fail as they always do, and `summary` does nothing.

A test cell is one that a notebook in the kernel's folder (the exercise Validate runs) holds
as a graded test cell, or any cell that calls one of `grading`'s checks (`grading.check_tensor`,
`grading.substitute`, ...); its outcome is recorded under every task whose name it reads.
"""

from __future__ import annotations

import ast
import json
import os
import traceback
from dataclasses import dataclass
from pathlib import Path

from course_utils.grading.failure import GradingFailure

RECORD = "__course_validation_record__"  # the recorder's name in the kernel's namespace
CHECKS = ("check", "call", "gradients", "substitute", "forbidden", "reference_disabled",
          "seeded")


@dataclass(frozen=True)
class Outcome:
    """One test cell's run: the names it reads, and what it raised (None: it passed)."""

    names: frozenset[str]
    error: BaseException | None


OUTCOMES: list[Outcome] = []


def validating() -> bool:
    return os.environ.get("NBGRADER_VALIDATING") == "1"


def record(names: tuple[str, ...], error: BaseException | None) -> None:
    OUTCOMES.append(Outcome(frozenset(names), error))


def graded_test_cells(folder: Path) -> set[str]:
    """The graded test cells of the notebooks in `folder`, each as the dump of its syntax tree
    (what IPython's AST transformers see of a cell)."""
    found = set()
    for path in sorted(folder.glob("*.ipynb")):
        try:
            cells = json.loads(path.read_text(encoding="utf-8")).get("cells", [])
        except (OSError, ValueError, AttributeError):
            continue
        for cell in cells:
            meta = cell.get("metadata", {}).get("nbgrader", {}) if isinstance(cell, dict) else {}
            if cell.get("cell_type") != "code" or not meta.get("grade") or meta.get("solution"):
                continue
            source = cell.get("source", "")
            try:
                found.add(ast.dump(ast.parse("".join(source) if isinstance(source, list)
                                             else source)))
            except (SyntaxError, ValueError, TypeError):
                continue
    return found


def calls_a_check(tree: ast.Module) -> bool:
    """Whether a cell calls one of grading's checks (`grading.check_tensor(...)`)."""
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "grading"
                and node.func.attr.startswith(CHECKS)):
            return True
    return False


class RecordTestCells(ast.NodeTransformer):
    """IPython AST transformer: a test cell's body runs inside try/except, and its outcome
    goes to `record` instead of failing the cell. Other cells are left as they are.
    `test_cells`: the graded test cells' syntax trees, dumped (`graded_test_cells`)."""

    def __init__(self, test_cells: set[str]):
        super().__init__()
        self.test_cells = test_cells

    def visit_Module(self, node: ast.Module) -> ast.Module:
        if ast.dump(node) not in self.test_cells and not calls_a_check(node):
            return node
        names = sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name)})
        call = f"{RECORD}({tuple(names)!r}, {{}})"
        wrapper = ast.parse(f"try:\n    pass\nexcept Exception as __course_error__:\n"
                            f"    {call.format('__course_error__')}\nelse:\n"
                            f"    {call.format('None')}\n")
        wrapper.body[0].body = node.body or [ast.Pass()]
        return ast.fix_missing_locations(wrapper)


def _not_started_in(error: BaseException) -> str | None:
    """The function whose body raised NotImplementedError (the exercise's stub), if any."""
    if not isinstance(error, NotImplementedError):
        return None
    frames = traceback.extract_tb(error.__traceback__)
    return frames[-1].name if frames else None


def _reason(error: BaseException) -> str:
    lines = str(error).strip().splitlines()
    first = lines[0] if lines else ""
    text = first if isinstance(error, GradingFailure) else f"{type(error).__name__}: {first}"
    return text if len(text) <= 160 else text[:157] + "..."


def verdicts(tasks: tuple[str, ...], outcomes: list[Outcome]) -> dict[str, str]:
    """Each task's line: "passes", "not started ...", "fails: <reason>" or "not tested"."""
    not_started = {_not_started_in(o.error) for o in outcomes if o.error is not None}
    result = {}
    for task in tasks:
        mine = [o for o in outcomes if task in o.names]
        failed = [o for o in mine if o.error is not None]
        if task in not_started:
            result[task] = "not started (it still raises NotImplementedError)"
        elif not mine:
            result[task] = "not tested: run its test cells"
        elif not failed:
            result[task] = "passes"
        elif (stub := _not_started_in(failed[0].error)) is not None:
            result[task] = f"fails: it calls {stub}, which is not written yet"
        else:
            result[task] = f"fails: {_reason(failed[0].error)}"
    return result


class ValidationSummary(Exception):
    """Where the student stands, shown by IPython (and Validate) as its lines alone."""

    def _render_traceback_(self) -> list[str]:
        return str(self).splitlines()


def summary(*tasks: str) -> None:
    """While Validate runs: fail with one line per task unless every task passes."""
    if not tasks or not all(isinstance(t, str) for t in tasks):
        raise TypeError(f"summary takes the tasks' function names as strings, got {tasks!r}")
    if not validating():
        return
    lines = verdicts(tasks, OUTCOMES)
    passing = sum(line == "passes" for line in lines.values())
    if passing < len(tasks):
        raise ValidationSummary("\n".join(
            [f"{passing} of {len(tasks)} tasks pass"]
            + [f"  {task}: {line}" for task, line in lines.items()]))


def install() -> None:
    """While Validate runs, make IPython record test cells (called once, on import)."""
    if not validating():
        return
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None or any(isinstance(t, RecordTestCells) for t in shell.ast_transformers):
        return
    shell.user_ns[RECORD] = record
    shell.ast_transformers.append(RecordTestCells(graded_test_cells(Path.cwd())))
