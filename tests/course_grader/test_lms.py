"""LMS in and out, end to end: a Canvas "Download Submissions" zip -> `make collect-zip`
(nbgrader zip_collect with course_grader.lms.CanvasCollector) -> `nbgrader autograde` ->
`nbgrader export` (course_grader.lms.LmsGradesExporter) -> reports/grades.csv.

The zip, named as Canvas names its files (<name>_[late_]<user id>_<file id>_<file>):

    smithalice_1001_5001_00_attention_as_lookup.ipynb   everything solved          -> 1001
    smithalice_1001_5002_scratch.ipynb                  a second notebook          not collected
    smithalice_1001_5003_screenshot.png                 not a notebook             not collected
    jonesbob_1002_5004_00_attention_as_lookup-1.ipynb   softmax only, renamed      -> 1002
    leecarol_late_1003_5005_my attention.ipynb          late, softmax and average  -> 1003
    nguyendan_1004_5006_part1.ipynb                     two notebooks, neither     not collected
    nguyendan_1004_5007_part2.ipynb                       named as the unit's      not collected
    notes_for_the_grader.ipynb                          not Canvas's pattern       not collected

Canvas's ids are digits, so a student id that is a formula (`=cmd`) cannot come from its zip;
it is added to the gradebook directly (nbgrader does not check ids) to test the CSV.
"""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
import warnings
import zipfile

import nbformat
import pytest
from conftest import BIN, ROOT, nbgrader_meta, read, run_nbgrader, solved, tool_env
from nbgrader.api import Gradebook
from sqlalchemy.exc import SAWarning

from course_grader.lms import CANVAS_PATTERN, parse_canvas_name

UNIT = "00_attention_as_lookup"
NOTEBOOK = f"{UNIT}.ipynb"
VENV = BIN.parent
FORMULA_ID = "=cmd|' /C calc'!A0"
SOLVED = {  # zip entry -> solution cells filled in (None: all, set(): none)
    f"smithalice_1001_5001_{NOTEBOOK}": None,
    "smithalice_1001_5002_scratch.ipynb": set(),
    f"jonesbob_1002_5004_{UNIT}-1.ipynb": {"softmax_solution"},
    "leecarol_late_1003_5005_my attention.ipynb": {"softmax_solution",
                                                   "weighted_average_solution"},
    "nguyendan_1004_5006_part1.ipynb": None,
    "nguyendan_1004_5007_part2.ipynb": None,
    "notes_for_the_grader.ipynb": None,
}
COLLECTED = {"1001": f"smithalice_1001_5001_{NOTEBOOK}",
             "1002": f"jonesbob_1002_5004_{UNIT}-1.ipynb",
             "1003": "leecarol_late_1003_5005_my attention.ipynb"}
FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\n")


def _notebook(course, solve: set[str] | None) -> str:
    return nbformat.writes(solved(course / "exercises" / UNIT / NOTEBOOK, UNIT, solve))


def _points(*solved: str) -> float:
    """Points of the test cells whose grade id starts with one of `solved` (all if none)."""
    nb = read(ROOT / "solutions" / UNIT / NOTEBOOK)
    return sum(nbgrader_meta(c).get("points") or 0 for c in nb.cells
               if nbgrader_meta(c).get("grade") and not nbgrader_meta(c).get("solution")
               and (not solved or nbgrader_meta(c)["grade_id"].startswith(solved)))


@pytest.fixture(scope="module")
def lms_course(fresh_course, tmp_path_factory):
    course = tmp_path_factory.mktemp("lms")
    shutil.copytree(fresh_course, course, dirs_exist_ok=True)
    download = course / "attention-00_attention_as_lookup_submissions.zip"
    with zipfile.ZipFile(download, "w") as z:
        for name, solve in SOLVED.items():
            z.writestr(name, _notebook(course, solve))
        z.writestr("smithalice_1001_5003_screenshot.png", b"\x89PNG")
    # the Makefile's own target, run in the course copy with this venv (no set-up step)
    proc = subprocess.run(
        ["make", "-f", str(ROOT / "Makefile"), "-o", str(VENV / ".setup-done"),
         f"VENV={VENV}", "collect-zip", f"ZIP={download}", f"UNIT={UNIT}"],
        cwd=course, env=tool_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (course / "collect.log").write_text(proc.stdout + proc.stderr)
    run_nbgrader("autograde", UNIT, "--force", cwd=course)
    with warnings.catch_warnings(), Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        warnings.filterwarnings("ignore", "Object of type", SAWarning)
        gb.add_student(FORMULA_ID, last_name="+1")
        gb.add_submission(UNIT, FORMULA_ID)  # nothing graded: scores 0
    exported = run_nbgrader("export", cwd=course)
    (course / "export.log").write_text(exported.stdout + exported.stderr)
    return course


def test_canvas_file_names_are_read_as_canvas_writes_them():
    assert parse_canvas_name(f"smithalice_1001_5001_{NOTEBOOK}") == {
        "name": "smithalice", "late": None, "student_id": "1001", "file_number": "5001",
        "file_id": NOTEBOOK}
    late = parse_canvas_name("/any/folder/leecarol_late_1003_5005_my attention.ipynb")
    assert (late["late"], late["student_id"], late["file_id"]) == (
        "late", "1003", "my attention.ipynb")
    # a name keeps `_` (never `_<digits>_`) and letters of any script; the file keeps its own
    assert parse_canvas_name("o_brienpat_7_8_a_b.ipynb")["student_id"] == "7"
    assert parse_canvas_name("müllerjörg2_7_8_x.ipynb")["name"] == "müllerjörg2"
    # no name (anonymous grading), no ids, or a file added by hand: not Canvas's pattern
    for name in ["1001_5001_00_attention_as_lookup.ipynb", "smithalice_00_x.ipynb",
                 NOTEBOOK, "notes_for_the_grader.ipynb"]:
        assert parse_canvas_name(name) is None, name
    assert re.compile(CANVAS_PATTERN).groupindex.keys() >= {"student_id", "file_id"}


def test_each_student_lands_under_the_canvas_id_with_the_units_notebook_name(lms_course):
    submitted = lms_course / "submitted"
    assert sorted(p.name for p in submitted.iterdir()) == sorted(COLLECTED)
    with zipfile.ZipFile(lms_course / "attention-00_attention_as_lookup_submissions.zip") as z:
        for student, entry in COLLECTED.items():
            folder = submitted / student / UNIT
            assert sorted(p.name for p in folder.iterdir()) == [NOTEBOOK], student
            assert (folder / NOTEBOOK).read_bytes() == z.read(entry), student


def test_every_file_not_collected_is_named_with_its_reason(lms_course):
    log = (lms_course / "collect.log").read_text()
    for expected in [
        "Not collected: smithalice_1001_5002_scratch.ipynb (student 1001 also sent "
        f"smithalice_1001_5001_{NOTEBOOK})",
        "Not collected: smithalice_1001_5003_screenshot.png (not a notebook)",
        "Not collected: nguyendan_1004_5006_part1.ipynb (student 1004 sent 2 notebooks, "
        f"none named {NOTEBOOK}",
        "Not collected: nguyendan_1004_5007_part2.ipynb",
        "Not collected: notes_for_the_grader.ipynb (its name is not Canvas's",
        f"Student 1002: {UNIT}-1.ipynb collected as {NOTEBOOK}",
        f"Student 1003: my attention.ipynb collected as {NOTEBOOK}",
        "Student 1003: late by Canvas's mark",
        "3 files collected, 5 files skipped",
        f"{UNIT}: 3 submissions in submitted/",
    ]:
        assert expected in log, (expected, log)


def test_a_late_file_gets_no_invented_time(lms_course):
    """Canvas's zip says `late` but not when: no timestamp.txt, no time in the gradebook."""
    assert not (lms_course / "submitted" / "1003" / UNIT / "timestamp.txt").exists()
    with Gradebook(f"sqlite:///{lms_course / 'gradebook.db'}") as gb:
        submission = gb.find_submission(UNIT, "1003")
        assert submission.timestamp is None and submission.late_submission_penalty in (0, None)


def test_grades_csv_has_one_row_per_student_and_unit_with_the_gradebooks_scores(lms_course):
    with (lms_course / "reports" / "grades.csv").open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    full = _points()
    assert full == 9
    assert rows == [
        ["student_id", "unit", "score", "max_score"],
        ["1001", UNIT, f"{full:g}", f"{full:g}"],
        ["1002", UNIT, f"{_points('softmax'):g}", f"{full:g}"],
        ["1003", UNIT, f"{_points('softmax', 'weighted_average'):g}", f"{full:g}"],
        ["'" + FORMULA_ID, UNIT, "0", f"{full:g}"],
    ]
    with Gradebook(f"sqlite:///{lms_course / 'gradebook.db'}") as gb:
        for student, _, score, max_score in rows[1:4]:
            submission = gb.find_submission(UNIT, student)
            assert (float(score), float(max_score)) == (submission.score, submission.max_score)
    assert "Wrote 4 rows" in (lms_course / "export.log").read_text()


def test_no_cell_of_the_grades_csv_starts_a_formula(lms_course):
    with (lms_course / "reports" / "grades.csv").open(newline="", encoding="utf-8") as f:
        cells = [cell for row in csv.reader(f) for cell in row]
    assert cells and not [c for c in cells if c.startswith(FORMULA_START)]
