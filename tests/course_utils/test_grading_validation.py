"""Validate's account of the tasks (course_utils/grading/validation.py), piece by piece; the
whole of it runs through nbgrader's Validator in tests/notebooks/test_validate.py."""

from __future__ import annotations

import ast
import json

import pytest

from course_utils import grading
from course_utils.grading import validation
from course_utils.grading.validation import Outcome, RecordTestCells, verdicts


def stub():
    raise NotImplementedError()


def raised(function) -> BaseException:
    try:
        function()
    except Exception as error:  # noqa: BLE001 (any error a test cell may raise)
        return error
    raise AssertionError("expected an error")


def test_each_task_gets_the_verdict_of_the_cells_that_read_it():
    wrong = grading.GradingFailure("weighted_average(w, v) returned wrong values\nhint: ...")
    outcomes = [Outcome(frozenset({"softmax", "x"}), None),
                Outcome(frozenset({"weighted_average"}), wrong),
                Outcome(frozenset({"weighted_average"}), None),
                Outcome(frozenset({"stub"}), raised(stub)),
                Outcome(frozenset({"soft_lookup"}), raised(stub)),
                Outcome(frozenset({"gqa_step"}), raised(lambda: 1 / 0))]
    lines = verdicts(("softmax", "weighted_average", "stub", "soft_lookup", "gqa_step",
                      "repeat_kv"), outcomes)
    assert lines == {
        "softmax": "passes",
        "weighted_average": "fails: weighted_average(w, v) returned wrong values",
        "stub": "not started (it still raises NotImplementedError)",
        "soft_lookup": "fails: it calls stub, which is not written yet",
        "gqa_step": "fails: ZeroDivisionError: division by zero",
        "repeat_kv": "not tested: run its test cells",
    }


def run(source: str, test_cells: set[str]) -> tuple[dict, list[Outcome]]:
    """Execute `source` as IPython would after the transformer, with a recorder of its own."""
    found: list[Outcome] = []
    namespace = {validation.RECORD: lambda names, error: found.append(
        Outcome(frozenset(names), error)), "grading": grading, "stub": stub}
    tree = RecordTestCells(test_cells).visit(ast.parse(source))
    exec(compile(tree, "<cell>", "exec"), namespace)  # noqa: S102
    return namespace, found


def test_a_graded_test_cell_records_its_failure_instead_of_raising(tmp_path):
    test_cell = "value = stub()\n"
    notebook = {"cells": [{"cell_type": "code", "source": [test_cell], "metadata": {
        "nbgrader": {"grade": True, "solution": False, "grade_id": "t", "points": 1}}}]}
    (tmp_path / "exercise.ipynb").write_text(json.dumps(notebook))
    cells = validation.graded_test_cells(tmp_path)
    _, found = run(test_cell, cells)
    assert [(set(o.names), type(o.error)) for o in found] == [({"stub", "value"},
                                                              NotImplementedError)]
    with pytest.raises(NotImplementedError):  # any other cell fails as it always does
        run("other = stub()\n", cells)


def test_a_cell_that_calls_a_check_is_a_test_cell_and_records_a_pass():
    namespace, found = run("x = 2\ngrading.check(x == 2, 'x is 2')\n", set())
    assert namespace["x"] == 2 and found == [Outcome(frozenset({"grading", "x"}), None)]


def test_summary_does_nothing_outside_validate_and_names_what_it_expects(monkeypatch):
    monkeypatch.delenv("NBGRADER_VALIDATING", raising=False)
    assert grading.summary("softmax") is None
    with pytest.raises(TypeError, match="function names as strings"):
        grading.summary(print)


def test_summary_fails_with_one_line_per_task_while_validating(monkeypatch):
    monkeypatch.setenv("NBGRADER_VALIDATING", "1")
    monkeypatch.setattr(validation, "OUTCOMES", [Outcome(frozenset({"softmax"}), None)])
    assert grading.summary("softmax") is None
    with pytest.raises(validation.ValidationSummary) as info:
        grading.summary("softmax", "weighted_average")
    assert info.value._render_traceback_() == [
        "1 of 2 tasks pass", "  softmax: passes", "  weighted_average: not tested: run its "
        "test cells"]
