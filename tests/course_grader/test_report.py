"""The instructor's report, on a gradebook built with nbgrader's API (no autograding run).

Unit `01_demo`, one notebook, items a (1 point), b (2) and c (3); 6 points in all:

    student  a  b  c         total  status
    alice    1  2  3         6      graded
    bob      0  2  0         2      zero (reason given)
    carol    0  0  1.5       1.5    -
    dave     0  2  ungraded  2      -
    eve      (no submission)        error (only in the status file)

a: 3 of 4 fail (0.75); c: 2 of the 3 graded fail; b: 1 of 4. `02_other` has no submissions
(nobody handed it in); `03_failed` none in the gradebook, but its status file names frank.
"""

from __future__ import annotations

import csv
import hashlib
import json
import runpy
import shutil
import struct
import sys
import warnings

import nbgrader.api
import pytest
from nbgrader.api import Gradebook

from course_grader import report

UNIT = "01_demo"
NOTEBOOK = "demo"
POINTS = {"a": 1.0, "b": 2.0, "c": 3.0}
SCORES = {
    "alice": {"a": 1, "b": 2, "c": 3},
    "bob": {"a": 0, "b": 2, "c": 0},
    "carol": {"a": 0, "b": 0, "c": 1.5},
    "dave": {"a": 0, "b": 2, "c": None},
}
STATUS = {
    "alice": {"status": "graded", "reason": "", "seconds": 12.5},
    "bob": {"status": "zero", "reason": "timeout in cell c", "seconds": 120.0,
            "flags": ["n: cell a, line 1: uses os (the operating system)",
                      "n: cell b, line 2: uses get_ipython (the kernel itself)"]},
    "eve": {"status": "error", "reason": "notebook is not valid JSON", "seconds": 0.1},
}


@pytest.fixture(scope="module")
def course(tmp_path_factory):
    course = tmp_path_factory.mktemp("report_course")
    # A new gradebook records its schema version by running `alembic heads` in a subprocess,
    # which imports nbgrader again (about 5 s); the report never reads that version. Without
    # autoflush, nbgrader's add_submission does not flush its half-built submission (SQLAlchemy
    # warned "not in session": course_grader.gradebook.record).
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(nbgrader.api, "get_alembic_version", lambda: "unused-by-the-report")
        with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb, gb.db.no_autoflush:
            gb.add_assignment(UNIT)
            gb.add_assignment("02_other")
            gb.add_assignment("03_failed")
            gb.add_notebook(NOTEBOOK, UNIT)
            for name, points in POINTS.items():
                gb.add_grade_cell(name, NOTEBOOK, UNIT, max_score=points, cell_type="code")
            for student, scores in SCORES.items():
                gb.add_student(student)
                gb.add_submission(UNIT, student)
                for name, score in scores.items():
                    grade = gb.find_grade(name, NOTEBOOK, UNIT, student)
                    grade.auto_score = score
                    grade.needs_manual_grade = score is None
            gb.db.commit()
    (course / "autograde_status").mkdir()
    (course / "autograde_status" / f"{UNIT}.json").write_text(json.dumps(STATUS))
    (course / "autograde_status" / "03_failed.json").write_text(json.dumps(
        {"frank": {"status": "needs-regrading", "reason": "the machine failed", "seconds": 3}}))
    return course


@pytest.fixture(scope="module")
def written(course, tmp_path_factory):
    out = tmp_path_factory.mktemp("reports")
    return report.write_report(report.collect(course, UNIT), out)


def _rows(path):
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def test_collect_reads_totals_rates_and_ungraded_grades(course):
    result = report.collect(course, UNIT)
    assert result.max_score == 6
    totals = {s.student: (s.score, s.max_score) for s in result.students}
    assert totals == {"alice": (6, 6), "bob": (2, 6), "carol": (1.5, 6), "dave": (2, 6),
                      "eve": (None, None)}
    dave = next(s for s in result.students if s.student == "dave")
    assert dave.scores == {"a": 0, "b": 2, "c": None}
    rates = {i.item: (i.students, i.failed, i.failure_rate) for i in result.items}
    assert rates == {"a": (4, 3, 0.75), "c": (3, 2, 2 / 3), "b": (4, 1, 0.25)}


def test_students_csv_has_one_row_per_student_with_scores_and_status(written):
    students_csv = written[0]
    assert students_csv.name == f"{UNIT}_students.csv"
    with students_csv.open(newline="") as f:
        header = next(csv.reader(f))
    assert header == ["student", "score", "max_score", "percent", "a", "b", "c", "status",
                      "reason", "flags"]
    rows = _rows(students_csv)
    assert [r["student"] for r in rows] == ["alice", "bob", "carol", "dave", "eve"]
    by = {r["student"]: r for r in rows}
    assert (by["alice"]["score"], by["alice"]["max_score"], by["alice"]["percent"]) == \
        ("6", "6", "100")
    assert (by["bob"]["score"], by["bob"]["percent"]) == ("2", "33.3")
    assert (by["carol"]["score"], by["carol"]["percent"], by["carol"]["c"]) == ("1.5", "25", "1.5")
    assert (by["bob"]["status"], by["bob"]["reason"]) == ("zero", "timeout in cell c")
    assert (by["carol"]["status"], by["carol"]["reason"]) == ("", "")
    assert by["bob"]["flags"] == ("n: cell a, line 1: uses os (the operating system); "
                                  "n: cell b, line 2: uses get_ipython (the kernel itself)")
    assert by["alice"]["flags"] == by["carol"]["flags"] == ""
    assert by["eve"]["status"] == "error" and by["eve"]["score"] == by["eve"]["a"] == ""


def test_ungraded_item_shows_as_ungraded_not_zero(written):
    dave = next(r for r in _rows(written[0]) if r["student"] == "dave")
    assert (dave["a"], dave["b"], dave["c"]) == ("0", "2", "ungraded")
    assert dave["score"] == "2"


def test_items_csv_lists_the_most_failed_first(written):
    items_csv = written[1]
    assert items_csv.name == f"{UNIT}_items.csv"
    rows = _rows(items_csv)
    assert list(rows[0]) == ["item", "notebook", "max_points", "students", "failed",
                             "failure_rate", "mean_score"]
    assert [(r["item"], r["notebook"], r["max_points"], r["students"], r["failed"],
             r["failure_rate"], r["mean_score"]) for r in rows] == [
        ("a", NOTEBOOK, "1", "4", "3", "0.75", "0.25"),
        ("c", NOTEBOOK, "3", "3", "2", "0.6667", "1.5"),
        ("b", NOTEBOOK, "2", "4", "1", "0.25", "1.5"),
    ]


def test_histogram_is_a_real_png(written):
    png = written[2]
    assert png.name == f"{UNIT}_histogram.png"
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width >= 800 and height >= 300
    assert len(data) > 10_000


def test_cli_reports_every_unit_and_prints_a_summary(course, capsys):
    before = hashlib.sha256((course / "gradebook.db").read_bytes()).hexdigest()
    assert report.main(["--course", str(course)]) == 0
    out = capsys.readouterr().out
    assert f"{UNIT}: 4 students graded, mean 47.9%, median 33.3%" in out
    assert "1 more in the status file without a score in the gradebook" in out
    assert "1 grade not scored yet (shown as 'ungraded')" in out
    assert "1 flagged for a look at their code (column `flags`): bob" in out
    assert "most failed: a 75% (3/4), c 67% (2/3), b 25% (1/4)" in out
    assert "03_failed: 0 students graded" in out
    assert "1 needs regrading" in out
    # a unit nobody handed in gets no files, and one line says so
    assert "02_other" not in out.replace(
        "skipped, no submissions (no files written): 02_other\n", "")
    assert out.endswith("skipped, no submissions (no files written): 02_other\n")
    written = {p.name for p in (course / "reports").iterdir()}
    assert written == {f"{unit}{suffix}" for unit in (UNIT, "03_failed")
                       for suffix in ("_students.csv", "_items.csv", "_histogram.png")}
    # The gradebook is opened read-only: the report never changes it.
    assert hashlib.sha256((course / "gradebook.db").read_bytes()).hexdigest() == before


def test_cli_without_gradebook_exits_2_and_creates_none(tmp_path, capsys):
    assert report.main(["--course", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"no gradebook at {tmp_path.resolve() / 'gradebook.db'}" in err
    assert "--course DIR" in err
    assert not (tmp_path / "gradebook.db").exists()


def test_cli_unknown_unit_exits_2_and_names_the_known_units(course, tmp_path, capsys):
    assert report.main(["nope", "--course", str(course), "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "unknown unit 'nope'; the gradebook knows: 01_demo, 02_other, 03_failed" in err
    assert list(tmp_path.iterdir()) == []


def test_module_runs_as_a_command(course, tmp_path, monkeypatch, capsys):
    # `python -m course_grader.report ...`, run in this interpreter (a new one would spend
    # seconds importing nbgrader again).
    argv = ["report", UNIT, "--course", str(course), "--out", str(tmp_path / "out")]
    monkeypatch.setattr(sys, "argv", argv)
    with warnings.catch_warnings(), pytest.raises(SystemExit) as exit_:
        warnings.filterwarnings("ignore", "'course_grader.report' found in sys.modules")
        runpy.run_module("course_grader.report", run_name="__main__")
    assert exit_.value.code == 0
    assert f"{UNIT}: 4 students graded" in capsys.readouterr().out
    assert (tmp_path / "out" / f"{UNIT}_items.csv").is_file()


def test_unreadable_status_file_exits_2_and_names_it(course, tmp_path, capsys):
    shutil.copy(course / "gradebook.db", tmp_path / "gradebook.db")
    (tmp_path / "autograde_status").mkdir()
    (tmp_path / "autograde_status" / f"{UNIT}.json").write_text("{not json")
    assert report.main([UNIT, "--course", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert f"cannot read the status file {tmp_path / 'autograde_status' / UNIT}.json" in err


@pytest.mark.parametrize("text, cell", [
    ("=HYPERLINK(\"http://x\", \"click\")", "'=HYPERLINK(\"http://x\", \"click\")"),
    ("+1+cmd|' /C calc'!A0", "'+1+cmd|' /C calc'!A0"),
    ("-2+3", "'-2+3"), ("@SUM(1)", "'@SUM(1)"), ("=1+1", "'=1+1"), ("\t=1", "'\t=1"),
    ("\rx", "'\rx"), ("\nx", "'\nx"), ("\tx", "'\tx"),
    # text that Python's float() reads as a number is still text with a sign
    ("+1_000", "'+1_000"), ("-inf", "'-inf"), ("-1e3", "'-1e3"), ("-1.5", "'-1.5"),
    # leading spaces do not hide a sign or a formula from a spreadsheet
    (" =1+1", "' =1+1"), ("  -1e3", "'  -1e3"), ("\u00a0@SUM(1)", "'\u00a0@SUM(1)"),
    (" 1234", " 1234"), ("12", "12"), ("1e3", "1e3"), ("all tests passed", "all tests passed"),
    ("a=b", "a=b"), ("", ""), (None, ""),
])
def test_csv_text_never_starts_a_formula_or_a_signed_number(text, cell):
    assert report.safe_cell(text) == cell


@pytest.mark.parametrize("number, cell", [
    (-2, "-2"), (-1.5, "-1.5"), (0.0, "0.0"), (10, "10"),
    (report.format_number(-1.5), "-1.5"), (report.format_number(-2.0), "-2"),
    (report.format_number(9.999), "10"), (report.format_number(None), ""),
    # not a number a spreadsheet can hold: guarded like text
    (float("-inf"), "'-inf"), (report.format_number(float("-inf")), "'-inf"),
])
def test_numbers_the_program_computed_stay_numbers(number, cell):
    assert report.safe_cell(number) == cell


def test_a_reason_or_student_id_that_starts_with_a_formula_is_quoted_in_the_csv(tmp_path):
    out = tmp_path / "x.csv"
    with out.open("w", newline="") as f:
        report._SafeWriter(f).writerow(["=cmd()", 3.0, "=1+1 reason"])
    assert next(csv.reader(out.open())) == ["'=cmd()", "3.0", "'=1+1 reason"]
