"""The gradebook as the grading coordinator uses it: where it is, one unit of it for a worker,
and nbgrader's own bookkeeping replayed on what a worker graded.

nbgrader keeps its gradebook in a SQL database named by `CourseDirectory.db_url` (a SQLAlchemy
URL) in `nbgrader_config.py`: by default the SQLite file `gradebook.db` at the course's root;
`COURSE_DB_URL=postgresql+psycopg://user@host/db` puts it on a PostgreSQL server instead, for
a class graded from several machines. Grading writes it from one process only, the
coordinator (`course_grader.autograde`): a worker grades into a private SQLite copy of one
unit (`unit_template`) and sends back the autograded notebooks, on which the coordinator runs
nbgrader's own `SaveAutoGrades` and `AssignLatePenalties` (`record`), so every score in the
gradebook is computed by nbgrader from the notebook it graded, whichever machine ran it.
"""

from __future__ import annotations

import datetime
import sqlite3
import tempfile
from pathlib import Path

from nbformat import NotebookNode

__all__ = ["CourseSettings", "integrity", "is_sqlite", "record", "unit_template"]


class CourseSettings:
    """The settings of a course's `nbgrader_config.py` that grading reads (the file is loaded
    as nbgrader loads it: environment variables it reads apply)."""

    def __init__(self, course: Path):
        from traitlets.config.loader import PyFileConfigLoader

        self.course = course
        path = course / "nbgrader_config.py"
        self.config = (PyFileConfigLoader(path.name, path=str(course)).load_config()
                       if path.exists() else None)
        coursedir = self.config.CourseDirectory if self.config else {}
        self.db_url: str = coursedir.get("db_url", f"sqlite:///{course / 'gradebook.db'}")
        self.course_id: str = coursedir.get("course_id", "default_course")
        self.source_directory: str = coursedir.get("source_directory", "source")
        safe = self.config.SafeExecute if self.config else {}
        self.reachable_modules = safe.get("reachable_modules")
        self.reachable_by_unit: dict = safe.get("reachable_by_unit", {})


def is_sqlite(db_url: str) -> bool:
    return db_url.startswith("sqlite:")


def unit_template(db_url: str, course_id: str, unit: str) -> bytes:
    """A SQLite gradebook (as bytes) that holds `unit` alone: its notebooks and their grade,
    solution, task and source cells, as `nbgrader generate_assignment` wrote them, and no
    student. A worker grades one submission into a copy of it."""
    from nbgrader.api import Gradebook

    with tempfile.TemporaryDirectory(prefix="unit-gradebook-") as tmp:
        path = Path(tmp) / "gradebook.db"
        with Gradebook(db_url, course_id) as src, \
                Gradebook(f"sqlite:///{path}", course_id) as dst:
            assignment = src.find_assignment(unit)
            dst.update_or_create_assignment(unit, duedate=assignment.duedate)
            for nb in assignment.notebooks:
                dst.update_or_create_notebook(nb.name, unit, kernelspec=nb.kernelspec)
                for cell in nb.grade_cells:
                    dst.update_or_create_grade_cell(cell.name, nb.name, unit,
                                                    max_score=cell.max_score,
                                                    cell_type=cell.cell_type)
                for cell in nb.solution_cells:
                    dst.update_or_create_solution_cell(cell.name, nb.name, unit)
                for cell in nb.task_cells:
                    dst.update_or_create_task_cell(cell.name, nb.name, unit,
                                                   max_score=cell.max_score,
                                                   cell_type=cell.cell_type)
                for cell in nb.source_cells:
                    dst.update_or_create_source_cell(cell.name, nb.name, unit,
                                                     cell_type=cell.cell_type,
                                                     locked=cell.locked, source=cell.source,
                                                     checksum=cell.checksum)
        return path.read_bytes()


def record(course: CourseSettings, unit: str, student: str,
           autograded: dict[str, NotebookNode], timestamp: datetime.datetime | None) -> int:
    """Write one graded submission into the gradebook, as `nbgrader autograde` would have:
    the student and the submission (with its time stamp), then nbgrader's `SaveAutoGrades`
    and `AssignLatePenalties` on each autograded notebook (name -> notebook). A notebook of
    the unit that is not in `autograded` (not submitted, or not gradable) scores 0: returns
    how many items that zeroed."""
    from nbgrader.api import Gradebook
    from nbgrader.preprocessors import AssignLatePenalties, SaveAutoGrades

    url = course.db_url
    zeroed = 0
    with Gradebook(url, course.course_id) as gb:
        gb.update_or_create_student(student)
        # nbgrader builds a new submission (one per notebook, a grade per cell) linked to the
        # session's assignment and student before it adds it to the session, reading the
        # assignment's notebooks and cells meanwhile. Each read flushed the session, and
        # SQLAlchemy 2 (which no longer adds an object along a backref) warned three times
        # per run that the half-built submission was not in it; it is added in full after.
        with gb.db.no_autoflush:
            if timestamp is not None:
                gb.update_or_create_submission(unit, student, timestamp=timestamp)
            else:
                gb.update_or_create_submission(unit, student)
        for nb in gb.find_assignment(unit).notebooks:
            if nb.name not in autograded:
                for grade in gb.find_submission_notebook(nb.name, unit, student).grades:
                    grade.auto_score = 0
                    grade.needs_manual_grade = False
                    zeroed += 1
        gb.db.commit()
    for name, nb in sorted(autograded.items()):
        resources = {"nbgrader": {"notebook": name, "assignment": unit, "student": student,
                                  "db_url": url}}
        for step in (SaveAutoGrades, AssignLatePenalties):
            nb, resources = step(config=course.config).preprocess(nb, resources)
    return zeroed


def integrity(db_url: str) -> str:
    """'ok' when the gradebook is sound: SQLite's `PRAGMA integrity_check` on a file; a server
    database (PostgreSQL) keeps its own integrity, so there a query that it answers is the
    check."""
    if is_sqlite(db_url):
        path = db_url.removeprefix("sqlite:///").split("?")[0]
        with sqlite3.connect(path, timeout=120) as con:
            return "; ".join(row[0] for row in con.execute("PRAGMA integrity_check"))
    from sqlalchemy import create_engine, text

    engine = create_engine(db_url)
    try:
        with engine.connect() as con:
            con.execute(text("SELECT count(*) FROM submitted_assignment")).scalar_one()
        return "ok"
    finally:
        engine.dispose()
