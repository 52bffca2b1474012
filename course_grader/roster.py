"""The class list: students' names from the LMS into nbgrader's gradebook.

    make roster CSV=roster.csv          (python -m course_grader.roster roster.csv [--course DIR])

Grading creates a student in the gradebook from the folder of their submission, with an id
and no name, so the formgrader lists everyone as "None, None". This reads a class list and
gives each student their name, adding the students not there yet (before anyone hands in, the
formgrader lists the whole class). Two layouts are read, told apart by their header:

* **Canvas's gradebook export** (*Grades → Export → CSV*): the column `ID`, Canvas's user id,
  is the student id (`course_grader.lms` collects Canvas's submissions under that id), and
  `Student` is Canvas's sortable name, "Lee, Carol": the last name before the first comma,
  the first name after it. The other columns (`SIS User ID`, `Section`, the assignments) are
  not read, nor Canvas's rows that are no student (`Points Possible`: no id). Canvas's user id
  also goes to the gradebook's `lms_user_id`.
* **nbgrader's own** (what `nbgrader db student import` reads): `id`, and any of
  `first_name`, `last_name`, `email`, `lms_user_id`.

A student already in the gradebook keeps their id and submissions; their name is replaced.
A file with neither header is refused with a message naming both. A row that cannot be used
(an id nbgrader cannot grade, a second row for the same id, a name with a control character
or longer than the gradebook holds) is named with its line and reason, and the other rows are
imported all the same; the command then exits with status 1 (2 for a file it cannot read).
"""

from __future__ import annotations

import argparse
import csv
import sys
from dataclasses import dataclass
from pathlib import Path

from nbgrader.api import Gradebook

from course_grader.gradebook import CourseSettings
from course_grader.lms import student_id_problem

__all__ = ["CANVAS_COLUMNS", "NBGRADER_COLUMNS", "RosterError", "Student", "import_roster",
           "read_roster"]

CANVAS_COLUMNS = ("Student", "ID")
NBGRADER_COLUMNS = ("id", "first_name", "last_name", "email", "lms_user_id")
MAX_TEXT = 128   # the gradebook's columns are VARCHAR(128)


class RosterError(Exception):
    """The file cannot be read as a class list at all."""


@dataclass(frozen=True)
class Student:
    """One student of the class list, as the gradebook stores them."""

    id: str
    first_name: str | None = None
    last_name: str | None = None
    email: str | None = None
    lms_user_id: str | None = None


def _text_problem(name: str, value: str | None) -> str | None:
    if value is None:
        return None
    if len(value) > MAX_TEXT:
        return f"its {name} is longer than {MAX_TEXT} characters, the gradebook's limit"
    if not value.isprintable():
        return f"its {name} holds a control character"
    return None


def _canvas_student(row: dict) -> Student | None:
    """A Canvas row as a Student; None for Canvas's rows that are no student."""
    sortable = (row.get("Student") or "").strip()
    student_id = (row.get("ID") or "").strip()
    if not student_id and sortable in ("", "Points Possible"):
        return None
    last, comma, first = sortable.partition(",")
    return Student(student_id, first_name=first.strip() if comma else "",
                   last_name=last.strip(), lms_user_id=student_id)


def _nbgrader_student(row: dict) -> Student:
    def cell(name: str) -> str | None:
        value = (row.get(name) or "").strip()
        return value or None

    return Student((row.get("id") or "").strip(), first_name=cell("first_name"),
                   last_name=cell("last_name"), email=cell("email"),
                   lms_user_id=cell("lms_user_id"))


def read_roster(path: Path) -> tuple[list[Student], list[str]]:
    """The students of the class list at `path`, and one line per row left out (with its
    line number and why). Raises RosterError when the file is not a class list."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:
            reader = csv.DictReader(f)
            header = [name.strip() for name in reader.fieldnames or []]
            reader.fieldnames = header
            rows = list(reader)
    except OSError as error:
        raise RosterError(f"cannot read {path}: {error.strerror or error}") from error
    except (UnicodeDecodeError, csv.Error) as error:
        raise RosterError(f"{path} is not a CSV file in UTF-8 ({error})") from error
    if all(column in header for column in CANVAS_COLUMNS):
        parse = _canvas_student
    elif "id" in header:
        parse = _nbgrader_student
    else:
        raise RosterError(
            f"{path}: expected Canvas's gradebook export (columns "
            f"{', '.join(CANVAS_COLUMNS)}) or nbgrader's columns ({', '.join(NBGRADER_COLUMNS)};"
            f" only id is required); its header is: {', '.join(header) or '(empty)'}")
    students: dict[str, Student] = {}
    skipped: list[str] = []
    for line, row in enumerate(rows, start=2):
        student = parse(row)
        if student is None:
            continue
        problem = (("no student id" if not student.id else student_id_problem(student.id))
                   or next(filter(None, (_text_problem(name, getattr(student, name))
                                         for name in NBGRADER_COLUMNS[1:])), None)
                   or ("a second row for this id" if student.id in students else None))
        if problem:
            shown = student.id if student.id.isprintable() else ascii(student.id)
            skipped.append(f"line {line} (id {shown!r}): {problem}")
            continue
        students[student.id] = student
    return list(students.values()), skipped


def import_roster(students: list[Student], db_url: str, course_id: str) -> tuple[int, int]:
    """Write `students` into the gradebook at `db_url`: (how many were new, how many
    updated)."""
    new = updated = 0
    with Gradebook(db_url, course_id) as gb:
        known = {s.id for s in gb.students}
        for student in students:
            fields = {name: getattr(student, name) for name in NBGRADER_COLUMNS[1:]}
            gb.update_or_create_student(student.id, **fields)
            updated += student.id in known
            new += student.id not in known
    return new, updated


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_grader.roster",
                                     description="Put the class list's names into the "
                                                 "gradebook (Canvas's gradebook CSV or "
                                                 "nbgrader's id,first_name,last_name,email).")
    parser.add_argument("csv", type=Path, help="the class list")
    parser.add_argument("--course", type=Path, default=Path("."),
                        help="the course folder with nbgrader_config.py (default: .)")
    args = parser.parse_args(argv)
    try:
        students, skipped = read_roster(args.csv)
    except RosterError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    settings = CourseSettings(args.course.resolve())
    new, updated = import_roster(students, settings.db_url, settings.course_id)
    print(f"{args.csv}: {len(students)} students named in the gradebook ({new} new, "
          f"{updated} updated)")
    if skipped:
        print(f"{len(skipped)} rows left out:\n  " + "\n  ".join(skipped), file=sys.stderr)
    return 1 if skipped else 0


if __name__ == "__main__":
    sys.exit(main())
