"""End to end: release -> submissions -> `nbgrader autograde` -> gradebook -> feedback."""

from __future__ import annotations

import re
import shutil

import nbformat
import pytest
from conftest import ROOT, UNITS, is_graded_test, nbgrader_meta, read, run_nbgrader, solved
from nbgrader.api import Gradebook

UNIT = "00_attention_as_lookup"
# A comment of unit 00's hidden tests that no visible test shares: feedback must not show it.
HIDDEN_ONLY = "catches a transpose or the wrong sum axis"
NOTEBOOK = f"{UNIT}.ipynb"


def _submission(course, student: str, solve: set[str] | None):
    """Write the released notebook for `student`, with the solution cells named in `solve`
    (grade ids; None = all) filled in from the instructor's source."""
    released = solved(course / "exercises" / UNIT / NOTEBOOK, UNIT, solve)
    folder = course / "submitted" / student / UNIT
    folder.mkdir(parents=True)
    nbformat.write(released, folder / NOTEBOOK)


@pytest.fixture(scope="module")
def graded_course(fresh_course, tmp_path_factory):
    course = tmp_path_factory.mktemp("graded")
    shutil.copytree(fresh_course, course, dirs_exist_ok=True)
    _submission(course, "alice", solve=None)                        # everything solved
    _submission(course, "bob", solve=set())                         # untouched release
    _submission(course, "carol", solve={"softmax_solution"})        # only part 1
    graded = run_nbgrader("autograde", UNIT, "--force", cwd=course)
    (course / "autograde.log").write_text(graded.stdout + graded.stderr)
    run_nbgrader("generate_feedback", UNIT, "--force", cwd=course)
    return course


def _points(cells_ids: set[str]) -> float:
    nb = read(ROOT / "solutions" / UNIT / NOTEBOOK)
    return sum(nbgrader_meta(c)["points"] for c in nb.cells
               if is_graded_test(c) and nbgrader_meta(c)["grade_id"] in cells_ids)


def _score(course, student: str) -> tuple[float, float]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        submission = gb.find_submission(UNIT, student)
        return submission.score, submission.max_score


def test_units_are_known_to_the_gradebook(fresh_course):
    with Gradebook(f"sqlite:///{fresh_course / 'gradebook.db'}") as gb:
        assert sorted(a.name for a in gb.assignments) == UNITS


def test_correct_submission_gets_full_marks(graded_course):
    score, max_score = _score(graded_course, "alice")
    assert max_score == _points({nbgrader_meta(c)["grade_id"] for c in
                                 read(ROOT / "solutions" / UNIT / NOTEBOOK).cells})
    assert score == max_score > 0


def test_untouched_release_gets_zero(graded_course):
    score, max_score = _score(graded_course, "bob")
    assert score == 0 and max_score > 0


def test_partly_correct_submission_gets_exactly_the_points_it_earned(graded_course):
    score, max_score = _score(graded_course, "carol")
    assert 0 < score < max_score
    assert score == _points({"softmax_basic", "softmax_stable"})


def test_feedback_shows_scores_but_no_hidden_tests(graded_course):
    html = (graded_course / "feedback" / "carol" / UNIT / f"{UNIT}.html").read_text()
    assert "BEGIN HIDDEN TESTS" not in html and "END HIDDEN TESTS" not in html
    assert HIDDEN_ONLY not in html, "feedback quotes a line that only the hidden tests contain"
    assert "hidden tests: their code is not shown" in html
    assert not re.search(r"<script[^>]*src=\"https?://", html), "feedback loads a script online"
    # carol failed the weighted-average cells; their visible messages are still shown
    assert "weighted_average" in html and "NotImplementedError" in html
    score, max_score = _score(graded_course, "carol")
    assert re.search(rf"Score:\s*{score:g}\.?0*\s*/\s*{max_score:g}", re.sub(r"<[^>]+>", " ", html))


def test_feedback_for_a_hidden_test_failure_hides_its_traceback(graded_course, tmp_path):
    # a weighted average whose values are right and whose weights are detached passes every
    # visible test and fails the hidden gradient check of weighted_average_single
    course = graded_course
    released = solved(course / "exercises" / UNIT / NOTEBOOK, UNIT)
    for cell in released.cells:
        if nbgrader_meta(cell).get("grade_id") == "weighted_average_solution":
            cell.source = ("def weighted_average(weights, values):\n"
                           "    return (weights.detach().unsqueeze(-1) * values).sum(dim=-2)\n")
    folder = course / "submitted" / "dave" / UNIT
    folder.mkdir(parents=True)
    nbformat.write(released, folder / NOTEBOOK)
    run_nbgrader("autograde", UNIT, "--student", "dave", "--force", cwd=course)
    run_nbgrader("generate_feedback", UNIT, "--student", "dave", "--force", cwd=course)
    score, max_score = _score(course, "dave")
    assert score == max_score - _points({"weighted_average_single"}), "only that cell is lost"
    html = (course / "feedback" / "dave" / UNIT / f"{UNIT}.html").read_text()
    assert "A hidden test failed" in html
    assert "the gradient of weighted_average(weights (4,), values (4, 3))" in html  # the verdict
    assert "manual_seed(1001)" not in html                      # but not the hidden code


def _write_submission(course, unit: str, student: str, solve_all: bool) -> None:
    name = f"{unit}.ipynb"
    released = solved(course / "exercises" / unit / name, unit, None if solve_all else set())
    folder = course / "submitted" / student / unit
    folder.mkdir(parents=True)
    nbformat.write(released, folder / name)


@pytest.mark.parametrize("unit", [u for u in UNITS if u != UNIT])
def test_every_other_unit_grades_solved_to_full_marks_and_untouched_to_zero(
        unit, fresh_course, tmp_path):
    """Unit 00 is graded in detail above; every later unit goes through the same sandboxed
    grader: the solution, submitted as a student would, gets every point (hidden tests
    included), and the untouched release gets none."""
    course = tmp_path / "course"
    shutil.copytree(fresh_course, course)
    _write_submission(course, unit, "solver", solve_all=True)
    _write_submission(course, unit, "idler", solve_all=False)
    run_nbgrader("autograde", unit, "--force", cwd=course)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        solved = gb.find_submission(unit, "solver")
        idle = gb.find_submission(unit, "idler")
        points = sum(nbgrader_meta(c)["points"] for c in
                     read(ROOT / "solutions" / unit / f"{unit}.ipynb").cells
                     if is_graded_test(c))
        assert solved.max_score == points > 0
        assert solved.score == points, f"the solution of {unit} lost points when graded"
        assert idle.score == 0


def test_honest_submissions_log_no_checksum_warning(graded_course):
    """A test cell as released lacks its hidden tests, so its checksum never matched the
    gradebook's: nbgrader warned "checksum ... has changed!" for every cell of every honest
    submission, which reads like tampering. Only an edited cell may be reported."""
    log = (graded_course / "autograde.log").read_text()
    assert "Autograding" in log or "autograde" in log.lower()
    assert "has changed!" not in log, [ln for ln in log.splitlines() if "has changed" in ln][:3]


def test_a_mistake_in_one_function_is_charged_in_its_own_tests_alone(fresh_course, tmp_path):
    """Unit 02's last test runs the four functions together. An encode that ignores the
    padding fails encode's two tests; the joint test runs the reference's encode in its
    place (and says so), so the mistake costs those points and no more."""
    unit = "02_seq2seq_rnn"
    course = tmp_path / "course"
    shutil.copytree(fresh_course, course)
    _write_submission(course, unit, "padding", solve_all=True)
    path = course / "submitted" / "padding" / unit / f"{unit}.ipynb"
    nb = read(path)
    for cell in nb.cells:
        if nbgrader_meta(cell).get("grade_id") == "encode_solution":
            cell.source = ("def encode(embedding, rnn, src, lengths):\n"
                           "    states, last = rnn(embedding(src))   # the padding is read too\n"
                           "    return states, last[0]\n")
    nbformat.write(nb, path)
    run_nbgrader("autograde", unit, "--force", cwd=course)
    solution = read(ROOT / "solutions" / unit / f"{unit}.ipynb")
    points = {nbgrader_meta(c)["grade_id"]: nbgrader_meta(c)["points"]
              for c in solution.cells if is_graded_test(c)}
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        score = gb.find_submission(unit, "padding").score
    assert score == sum(points.values()) - points["encode_final"] - points["encode_states"]
    graded = read(course / "autograded" / "padding" / unit / f"{unit}.ipynb")
    joint = next(c for c in graded.cells if nbgrader_meta(c).get("grade_id") == "train_tiny_model")
    shown = "".join(o.get("text", "") for o in joint.outputs)
    assert "uses the reference's encode in its place" in shown


def test_a_fault_of_the_grading_machine_is_retried_not_scored_zero():
    """What a runner raises is the machine's fault (grade_submission never raises for a bad
    submission): the submission is graded again, up to ATTEMPTS times, before it gets a
    note and no result."""
    from course_grader import autograde
    from course_grader.worker import Graded

    calls = []
    graded = Graded("s", {}, failed=False, notes=[], seconds=1.0, worker="here")

    def flaky(task):
        calls.append(task)
        if len(calls) < autograde.ATTEMPTS:
            raise SystemError("AST constructor recursion depth mismatch")
        return graded

    notes: list[str] = []
    assert autograde.run_with_retries(flaky, "task", notes) is graded
    assert calls == ["task"] * autograde.ATTEMPTS and notes == []

    def broken(task):
        raise RuntimeError("the worker died too often")

    assert autograde.run_with_retries(broken, "task", notes) is None
    assert notes == [f"autograding failed (the worker could not finish in {autograde.ATTEMPTS} "
                     "attempts: RuntimeError: the worker died too often)"]
