"""The class list into the gradebook (course_grader/roster.py, `make roster CSV=...`): Canvas's
gradebook export or nbgrader's own columns; a file that is neither is refused naming both; a
bad row is named and the others are imported; and the formgrader then lists names, not
"None, None" (seen in Chromium on a real Jupyter server)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from conftest import ROOT, jupyter, tool_env
from nbgrader.api import Gradebook

from course_grader.roster import RosterError, read_roster

TOKEN = "roster-test-token"
# As Canvas writes it (Grades -> Export): a byte-order mark, the "Points Possible" row, the
# sortable name "Last, First", Canvas's user id in ID; here with rows that cannot be used
CANVAS = (
    "\ufeffStudent,ID,SIS User ID,SIS Login ID,Section,Exercise 00 (4411)\n"
    "    Points Possible,,,,,9.00\n"
    '"Lee, Carol",1236,c.lee,clee,Section 1,\n'
    '"Smith, Alice",1234,a.smith,asmith,Section 1,9.00\n'
    '"Müller-Lüdenscheidt, Jörg",1240,,,Section 1,\n'
    "Cher,1250,,,Section 1,\n"
    '"Slash, Bad",12/34,,,Section 1,\n'
    '"Twice, Alice",1234,,,Section 1,\n'
    '"No, Id",,,,Section 1,\n'
    '"Bell\x07, Eve",1260,,,Section 1,\n'
)


def write(tmp_path, text: str, name: str = "class.csv"):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_canvas_export_gives_ids_and_names_and_names_every_row_left_out(tmp_path):
    students, skipped = read_roster(write(tmp_path, CANVAS))
    assert [(s.id, s.last_name, s.first_name, s.lms_user_id) for s in students] == [
        ("1236", "Lee", "Carol", "1236"), ("1234", "Smith", "Alice", "1234"),
        ("1240", "Müller-Lüdenscheidt", "Jörg", "1240"), ("1250", "Cher", "", "1250")]
    assert skipped == [
        "line 7 (id '12/34'): it holds '/': a path separator, a glob character or a control "
        "character to nbgrader",
        "line 8 (id '1234'): a second row for this id",
        "line 9 (id ''): no student id",
        "line 10 (id '1260'): its last_name holds a control character",
    ]


def test_nbgrader_columns_are_read_too(tmp_path):
    path = write(tmp_path, "id,first_name,last_name,email\n"
                           "ada,Ada,Lovelace,ada@example.org\nbob,,,\n")
    students, skipped = read_roster(path)
    assert [(s.id, s.first_name, s.last_name, s.email) for s in students] == [
        ("ada", "Ada", "Lovelace", "ada@example.org"), ("bob", None, None, None)]
    assert skipped == []


@pytest.mark.parametrize("text", ["name,number\nCarol,1236\n", "", "Student,SIS User ID\nx,1\n"])
def test_a_file_that_is_no_class_list_is_refused_naming_the_columns_expected(tmp_path, text):
    with pytest.raises(RosterError) as error:
        read_roster(write(tmp_path, text))
    message = str(error.value)
    for column in ("Student", "ID", "id", "first_name", "last_name", "email"):
        assert column in message
    assert "its header is" in message


def test_a_file_not_in_utf8_is_refused(tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes("Student,ID\n\"Müller, Jörg\",1240\n".encode("latin-1"))
    with pytest.raises(RosterError, match="not a CSV file in UTF-8"):
        read_roster(path)


def test_make_roster_without_a_file_says_how_to_call_it():
    proc = subprocess.run(["make", "-o", ".venv/.setup-done", "roster"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "usage: make roster CSV=" in proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def course(fresh_course, tmp_path_factory):
    """A course whose gradebook knows students 1234 and 1236 by id only, as grading leaves
    them (autograde adds a student from the submission's folder name)."""
    course = tmp_path_factory.mktemp("roster-course")
    shutil.copytree(fresh_course, course, dirs_exist_ok=True)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        for student in ("1234", "1236"):
            gb.add_student(student)
    return course


def student_list(browser, base: str) -> str:
    page = browser.new_page()
    page.goto(f"{base}/formgrader/manage_students?token={TOKEN}", wait_until="load",
              timeout=60_000)
    page.locator("td", has_text="1236").first.wait_for(timeout=30_000)
    text = page.inner_text("table")
    page.close()
    return text


def test_the_formgrader_lists_the_names_of_the_class_list(course, browser, tmp_path):
    with jupyter("server", course, TOKEN, tmp_path / "runtime") as base:
        before = student_list(browser, base)
        proc = subprocess.run([sys.executable, "-m", "course_grader.roster",
                               str(write(tmp_path, CANVAS))], cwd=course, env=tool_env(),
                              capture_output=True, text=True, timeout=120)
        after = student_list(browser, base)
    assert before.count("None, None") == 2, before
    assert proc.returncode == 1, "rows were left out: the command must say so by its status"
    assert "4 students named in the gradebook (2 new, 2 updated)" in proc.stdout
    assert "4 rows left out" in proc.stderr and "line 7 (id '12/34')" in proc.stderr
    assert "None, None" not in after, after
    for name, student in (("Lee, Carol", "1236"), ("Smith, Alice", "1234"),
                          ("Müller-Lüdenscheidt, Jörg", "1240"), ("Cher,", "1250")):
        assert any(name in line and student in line for line in after.splitlines()), (name, after)
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        assert gb.find_student("1236").lms_user_id == "1236"
