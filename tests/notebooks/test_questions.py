"""Every question that asks the student to run something runs, and changes what it says it does.

A lecture ends with "## Questions"; some are marked *Experiment.* and others quote code to call.
For each such question, `QUESTIONS` in its lecture's module of `lecture_specs` holds what a
student would do, read from the question's text: code to type (a string), or a lecture cell to
run again, found by a line of its source and edited as the question says (`Rerun`). The test
executes the lecture, then each question in turn in the same kernel, and fails when

* a step raises (a question whose code does not run as written),
* `changed` evaluates to the same value after the steps as before them (a question whose change
  changes nothing: a variable nothing reads any more, an `assert` that stops the rerun, ...), or
* `check`, evaluated after the steps, is false (what the question asks the student to compare
  is not there).

The text and the steps cannot drift apart: every code span of a question that calls or assigns
(`train(...)`, `EPOCHS = 1`) must appear in its steps, character for character up to spaces,
and every question with such a span or the *Experiment.* mark must have an entry there. Spans with
`...` are templates a student completes, and are not matched.

Questions run in the order of the lecture, in one kernel: a question that changes a setting that
a later one reads says how to restore it (and its steps do).
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import nbformat
import pytest
from conftest import notebooks, read
from lecture_specs import Question, Rerun, spec
from nbclient import NotebookClient

LECTURES = {path.stem: path for path in notebooks("lectures")}
PROBE = "@@question-probe "


QUESTIONS = {name: spec(name).QUESTIONS for name in LECTURES}


# ----------------------------------------------------------------------------- reading the text

def questions_of(path: Path) -> dict[int, str]:
    """The numbered items of the lecture's "## Questions" cell, by number."""
    cells = [c.source for c in read(path).cells
             if c.cell_type == "markdown" and c.source.lstrip().startswith("## Questions")]
    assert len(cells) == 1, f"{path.name}: expected one '## Questions' cell, found {len(cells)}"
    items = re.split(r"(?m)^(\d+)\. ", cells[0])
    return {int(number): text for number, text in zip(items[1::2], items[2::2], strict=True)}


def actionable_spans(text: str) -> list[str]:
    """The code spans of a question that call or assign: what a student is told to run."""
    found = []
    for span in re.findall(r"`([^`]+)`", " ".join(text.split())):
        if "..." in span:
            continue
        try:
            tree = ast.parse(span)
        except SyntaxError:
            continue
        if any(isinstance(node, (ast.Call, ast.Assign, ast.AugAssign)) for node in ast.walk(tree)):
            found.append(span)
    return found


def squeeze(text: str) -> str:
    return re.sub(r"\s+", "", text)


def step_text(step: str | Rerun) -> str:
    return step if isinstance(step, str) else " ".join(new for _, new in step.edits)


# ----------------------------------------------------------------------------- running

def rerun_source(cells: list[str], step: Rerun, where: str) -> str:
    matches = [c for c in cells if step.line in c.splitlines()
               or any(line.strip() == step.line.strip() for line in c.splitlines())]
    assert len(matches) == 1, f"{where}: {len(matches)} lecture cells have the line {step.line!r}"
    source = matches[0]
    for old, new in step.edits:
        assert source.count(old) == 1, f"{where}: {old!r} is not once in the cell to rerun"
        source = source.replace(old, new)
    return source


def probe(expression: str) -> str:
    return (f"import json as _question_json\n"
            f"try:\n    _question_value = repr(eval({expression!r}))\n"
            f"except Exception as _question_error:\n"
            f"    _question_value = 'raised ' + type(_question_error).__name__\n"
            f"print({PROBE!r} + _question_json.dumps(_question_value))")


def build(path: Path, questions: dict[int, Question]) -> tuple[nbformat.NotebookNode, list]:
    """The lecture's code cells, then per question: probe, steps, probe, check, restore.
    Returns the notebook and, per added cell, (question number, role)."""
    lecture = [c.source for c in read(path).cells if c.cell_type == "code" and c.source.strip()]
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in lecture]
    roles = [(None, "lecture")] * len(lecture)
    for number, question in sorted(questions.items()):
        where = f"{path.stem} question {number}"

        def add(source: str, role: str, number: int = number) -> None:
            nb.cells.append(nbformat.v4.new_code_cell(source))
            roles.append((number, role))
        add(probe(question.changed), "before")
        for step in question.steps:
            add(step if isinstance(step, str) else rerun_source(lecture, step, where), "step")
        add(probe(question.changed), "after")
        add(probe(question.check), "check")
        for step in question.restore:
            add(step if isinstance(step, str) else rerun_source(lecture, step, where), "restore")
    return nb, roles


def probed(cell) -> str | None:
    for output in cell.outputs:
        if output.get("name") == "stdout" and PROBE in output.get("text", ""):
            line = output["text"].split(PROBE, 1)[1].splitlines()[0]
            return json.loads(line)
    return None


def error_of(cell) -> str | None:
    for output in cell.outputs:
        if output.output_type == "error":
            return f"{output.ename}: {output.evalue}"
    return None


# ----------------------------------------------------------------------------- tests

@pytest.mark.parametrize("lecture", sorted(LECTURES))
def test_every_question_with_code_is_listed_and_quotes_its_steps(lecture):
    listed = QUESTIONS.get(lecture, {})
    problems = []
    for number, text in questions_of(LECTURES[lecture]).items():
        spans = actionable_spans(text)
        if not spans and "*Experiment.*" not in text:
            continue
        if number not in listed:
            problems.append(f"question {number} asks the student to run code but has no entry")
            continue
        steps = squeeze(" ".join(step_text(s) for s in listed[number].steps))
        problems += [f"question {number}: `{span}` is not among its steps"
                     for span in spans if squeeze(span) not in steps]
    problems += [f"question {n} is listed but the lecture has no such question"
                 for n in listed if n not in questions_of(LECTURES[lecture])]
    assert not problems, f"{lecture}:\n  " + "\n  ".join(problems)


@pytest.mark.parametrize("lecture", sorted(n for n in QUESTIONS if QUESTIONS[n]))
def test_every_question_runs_and_changes_what_it_says(lecture):
    path = LECTURES[lecture]
    nb, roles = build(path, QUESTIONS[lecture])
    NotebookClient(nb, timeout=1200, kernel_name="python3", allow_errors=True,
                   resources={"metadata": {"path": str(path.parent)}}).execute()
    lecture_errors = [error_of(c) for c, (n, _) in zip(nb.cells, roles, strict=True) if n is None]
    assert not any(lecture_errors), f"{lecture} itself failed: {list(filter(None, lecture_errors))}"
    problems, seen = [], {}
    for cell, (number, role) in zip(nb.cells, roles, strict=True):
        if number is None:
            continue
        if error := error_of(cell):
            problems.append(f"question {number}, a {role} cell raised {error}:\n{cell.source}")
        elif role in ("before", "after", "check"):
            seen[number, role] = probed(cell)
    for number, question in sorted(QUESTIONS[lecture].items()):
        before, after = seen.get((number, "before")), seen.get((number, "after"))
        if before == after:
            problems.append(f"question {number}: its steps left `{question.changed}` as it was "
                            f"({str(before)[:200]})")
        if seen.get((number, "check")) != "True":
            problems.append(f"question {number}: `{question.check}` is "
                            f"{seen.get((number, 'check'))} after its steps")
    assert not problems, f"{lecture}:\n  " + "\n  ".join(problems)
