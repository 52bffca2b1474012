"""Validate, as a student clicks it: nbgrader's own Validator (what the button runs), with the
course's configuration, on released exercises that are half done. It must say where the
student stands, one line per task, and never show a task that is not started as its test
source or a traceback (course_utils/grading/validation.py)."""

from __future__ import annotations

import ast

import nbformat
import pytest
from conftest import ROOT, UNITS, is_graded_test, jupyter, nbgrader_meta, read, solved
from nbgrader.validator import Validator
from traitlets.config.loader import PyFileConfigLoader

TOKEN = "validate-test-token"
CONFIGS = {"instructor": ROOT / "nbgrader_config.py",
           "student edition": ROOT / "course_publish" / "student_edition"
                                / "nbgrader_config.py.template"}


def config(path):
    return PyFileConfigLoader(path.name, path=str(path.parent)).load_config()


def validate(nb: nbformat.NotebookNode, folder) -> dict:
    path = folder / "submission.ipynb"
    nbformat.write(nb, path)
    return Validator(config=config(CONFIGS["instructor"])).validate(str(path))


def released(unit: str):
    return ROOT / "exercises" / unit / f"{unit}.ipynb"


@pytest.mark.parametrize("which", CONFIGS)
def test_both_configurations_let_validate_read_the_summary_cell(which):
    assert config(CONFIGS[which]).Validator.validate_all is True


def test_a_half_done_exercise_gets_one_line_per_task_and_no_test_source(tmp_path):
    unit = "00_attention_as_lookup"
    nb = solved(released(unit), unit, solve={"softmax_solution", "weighted_average_solution"})
    for cell in nb.cells:  # a weighted average that forgets the weights
        if nbgrader_meta(cell).get("grade_id") == "weighted_average_solution":
            cell.source = "def weighted_average(weights, values):\n    return values.mean(dim=-2)"
    result = validate(nb, tmp_path)
    assert list(result) == ["failed"], result
    [failed] = result["failed"]
    assert "grading.summary(" in failed["source"] and "check_tensor" not in failed["source"]
    lines = failed["raw_error"].splitlines()
    assert lines[0] == "1 of 3 tasks pass", lines
    assert lines[1] == "  softmax: passes"
    assert lines[2].startswith("  weighted_average: fails: weighted_average(")
    assert lines[3] == "  soft_lookup: not started (it still raises NotImplementedError)"
    assert len(lines) == 4 and "Traceback" not in failed["raw_error"]


def test_a_finished_exercise_passes_validate(tmp_path):
    unit = "00_attention_as_lookup"
    assert validate(solved(released(unit), unit), tmp_path) == {}


def test_exercise_09_with_its_first_part_done_says_so(tmp_path):
    unit = "09_attention_at_scale"
    result = validate(solved(released(unit), unit, solve={"online_softmax_solution"}), tmp_path)
    [failed] = result["failed"]
    lines = failed["raw_error"].splitlines()
    assert lines[:3] == ["2 of 5 tasks pass", "  softmax_stats: passes",
                         "  online_softmax: passes"], lines
    assert lines[3:] == [f"  {task}: not started (it still raises NotImplementedError)"
                         for task in ("tiled_attention", "repeat_kv", "gqa_step")], lines
    assert "NotImplementedError()" not in failed["raw_error"]


def test_the_validate_dialog_in_jupyterlab_shows_where_the_student_stands(tmp_path, browser):
    """The same half-done exercise in the student edition's set-up, Validate clicked in
    JupyterLab (headless Chromium): the dialog shows the account of the tasks, short."""
    folder = tmp_path / "course"
    folder.mkdir()
    unit = "00_attention_as_lookup"
    nbformat.write(solved(released(unit), unit, solve={"softmax_solution"}),
                   folder / "exercise.ipynb")
    (folder / "nbgrader_config.py").write_text(CONFIGS["student edition"].read_text())
    with jupyter("lab", folder, TOKEN, tmp_path / "runtime") as base:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(120_000)  # JupyterLab's first load, then a run of the exercise
        try:
            page.goto(f"{base}/lab/tree/exercise.ipynb?token={TOKEN}",
                      wait_until="domcontentloaded")
            page.locator(".jp-Notebook .jp-CodeCell").first.wait_for()
            page.locator(".validate-button").first.click()
            message = page.locator("#validation-message")
            message.wait_for()
            text = message.inner_text()
            height = message.evaluate("m => m.scrollHeight")
        finally:
            context.close()
    print(f"Validate dialog ({height} px):\n{text}")
    assert "1 of 3 tasks pass" in text and "softmax: passes" in text, text
    assert "weighted_average: not started" in text and "soft_lookup: not started" in text
    assert "check_tensor" not in text and "Traceback" not in text, text
    assert height < 400, f"the dialog's message is {height} px tall"


@pytest.mark.parametrize("unit", UNITS)
def test_the_summary_cell_lists_every_task_the_exercise_asks_for(unit):
    """The last test of an exercise is followed by grading.summary(...) naming, in order, the
    functions its solution cells define: the tasks Validate gives a line each."""
    cells = read(ROOT / "solutions" / unit / f"{unit}.ipynb").cells
    tasks = [node.name for cell in cells if nbgrader_meta(cell).get("solution")
             and cell.cell_type == "code"
             for node in ast.parse(cell.source).body if isinstance(node, ast.FunctionDef)]
    summaries = [i for i, c in enumerate(cells) if "grading.summary(" in c.source]
    assert len(summaries) == 1, f"{unit}: {len(summaries)} cells call grading.summary"
    cell = cells[summaries[0]]
    call = next(n for n in ast.walk(ast.parse(cell.source)) if isinstance(n, ast.Call))
    assert [a.value for a in call.args] == tasks
    meta = nbgrader_meta(cell)
    assert meta.get("locked") and not meta.get("grade") and not meta.get("solution")
    last_test = max(i for i, c in enumerate(cells) if is_graded_test(c))
    assert summaries[0] == last_test + 1, f"{unit}: the summary must follow the last test"
