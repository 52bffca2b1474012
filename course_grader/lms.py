"""LMS in and out: Canvas's submissions zip into `submitted/`, grades out as a CSV.

**In.** `nbgrader zip_collect <unit>` (`make collect-zip ZIP=... UNIT=...`) reads a Canvas
*Download Submissions* zip with `CanvasCollector`. Canvas names every file it puts in that zip

    <name>_[late_]<canvas user id>_<file id>_<file name as uploaded>
    smithalice_1234_56789_00_attention_as_lookup.ipynb
    leecarol_late_1236_56791_00_attention_as_lookup-1.ipynb

where `<name>` is the student's sortable name, lowercased, with everything but letters, digits
and `_` removed ("Smith, Alice" -> `smithalice`; Canvas keeps `_<digits>_` out of it), `late_`
marks a submission Canvas counts as late, and `<file id>` is the id of the uploaded file
(Canvas's `ContentZipper`). The student id in nbgrader is the **Canvas user id** (`1234`):
unique and stable, unlike the name, and the `ID` column of Canvas's gradebook CSV. To use
the name instead, set `c.CanvasCollector.named_regexp` with the groups `student_id` and
`name` swapped. The zip holds no submission time, only the `late_` mark, so no `timestamp.txt` is
written: nbgrader then records no submission time (not the collection time either) and
charges no late penalty; the time stays in Canvas, with its late policy. Late files are named
in the log.

A unit whose release has one notebook gets it as `<unit>.ipynb` whatever the student called
it (Canvas appends `-1` to a file uploaded again, students rename files), provided it is the
student's only notebook or none of the others has the right name. Everything not collected is
named in a warning with the reason: a name outside the pattern (a file added by hand, a zip
downloaded with anonymous grading), a file that is not a notebook, a student's second notebook.

**Out.** `nbgrader export` (`make export-grades`) writes, with `LmsGradesExporter`,
`reports/grades.csv` (`--to FILE` for another file): one row per submission in the gradebook,

    student_id,unit,score,max_score
    1234,00_attention_as_lookup,10,10

`score` is nbgrader's total after its late penalty (none unless configured), never below 0;
numbers are rounded to 2 decimals. A student without a submission for a unit has no row
(nbgrader's own CSV writes 0 for them). Every cell goes through `report.safe_cell`: text that
starts with `=`, `+`, `-`, `@`, a tab or a line break gets a leading `'`, so a spreadsheet
shows it as text and never runs it; a cell that is a number (`-2`, `1.5`) is left as it is.
Both plugins are set in `nbgrader_config.py`.
"""

from __future__ import annotations

import csv
import os
import re
from pathlib import Path

from nbgrader.api import Gradebook
from nbgrader.plugins import ExportPlugin, FileNameCollectorPlugin
from nbgrader.utils import find_all_notebooks
from traitlets import default

__all__ = ["CANVAS_PATTERN", "CanvasCollector", "LmsGradesExporter", "parse_canvas_name"]

# The name holds at least one letter, so a file without one (anonymous grading) is reported
# rather than misread; `\w` is Unicode, like Ruby's [[:word:]] that Canvas keeps.
CANVAS_PATTERN = (r"(?P<name>\w*?[^\W\d_]\w*?)_(?:(?P<late>late)_)?"
                  r"(?P<student_id>\d+)_(?P<file_number>\d+)_(?P<file_id>.+)")


def parse_canvas_name(filename: str, pattern: str = CANVAS_PATTERN) -> dict | None:
    """The named groups of `pattern` matched against the whole base name of `filename`,
    or None if it does not match."""
    match = re.fullmatch(pattern, os.path.basename(filename), flags=re.DOTALL)
    return match.groupdict() if match else None


class CanvasCollector(FileNameCollectorPlugin):
    """`zip_collect`'s collector for Canvas's submissions zip (see the module docstring)."""

    @default("named_regexp")
    def _default_named_regexp(self) -> str:
        return CANVAS_PATTERN

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._folders: dict[str, dict[str, list[str]]] = {}

    def _unit_notebook(self) -> str | None:
        """`<name>.ipynb` if the unit's release has exactly one notebook, else None."""
        coursedir = self.parent.coursedir
        released = coursedir.format_path(coursedir.release_directory, ".",
                                         coursedir.assignment_id)
        notebooks = find_all_notebooks(released)
        return notebooks[0] if len(notebooks) == 1 else None

    def _notebooks_by_student(self, folder: str) -> dict[str, list[str]]:
        """Student id -> base names of the notebooks in `folder` that match the pattern
        (read once per folder: Canvas's zip is flat, so a student's files are together)."""
        cache = self._folders
        if folder not in cache:
            found: dict[str, list[str]] = {}
            for name in sorted(os.listdir(folder)):
                info = parse_canvas_name(name, self.named_regexp)
                if info and os.path.splitext(name)[1] in self.valid_ext:
                    found.setdefault(info["student_id"], []).append(name)
            cache[folder] = found
        return cache[folder]

    def collect(self, submitted_file: str) -> dict | None:
        name = os.path.basename(submitted_file)
        info = parse_canvas_name(name, self.named_regexp)
        if info is None:
            self.log.warning("Not collected: %s (its name is not Canvas's "
                             "<name>_[late_]<user id>_<file id>_<file>)", name)
            return None
        if os.path.splitext(name)[1] not in self.valid_ext:
            self.log.warning("Not collected: %s (not a notebook)", name)
            return None
        student, original = info["student_id"], info["file_id"]
        target = self._unit_notebook()
        if target is not None and original != target:
            mine = self._notebooks_by_student(os.path.dirname(submitted_file))[student]
            right = [n for n in mine if parse_canvas_name(n, self.named_regexp)["file_id"]
                     == target]
            if right or len(mine) > 1:
                why = (f"student {student} also sent {right[0]}" if right else
                       f"student {student} sent {len(mine)} notebooks, none named {target}: "
                       "copy the right one to submitted/ by hand")
                self.log.warning("Not collected: %s (%s)", name, why)
                return None
            self.log.warning("Student %s: %s collected as %s", student, original, target)
            original = target
        if info.get("late"):
            self.log.warning("Student %s: late by Canvas's mark (the zip gives no time, so "
                             "nbgrader records none): %s", student, name)
        return {"student_id": student, "file_id": original}


class LmsGradesExporter(ExportPlugin):
    """`nbgrader export`'s writer of the LMS grades CSV (see the module docstring). Honours
    `--to`, `--assignment` and `--student`."""

    HEADER = ("student_id", "unit", "score", "max_score")

    def export(self, gradebook: Gradebook) -> None:
        # here, not at the top: nbgrader_config.py imports this module for every nbgrader
        # command, and the report module brings matplotlib
        from course_grader.report import format_number, safe_cell

        root = Path(self.parent.coursedir.root or ".") if self.parent else Path(".")
        dest = Path(self.to) if self.to else root / "reports" / "grades.csv"
        units = {str(u) for u in self.assignment}
        students = {str(s) for s in self.student}
        rows, unfinished = [], []
        for assignment in sorted(gradebook.assignments, key=lambda a: a.name):
            if units and assignment.name not in units:
                continue
            submissions = gradebook.assignment_submissions(assignment.name)
            for submission in sorted(submissions, key=lambda s: s.student.id):
                student = submission.student.id
                if students and student not in students:
                    continue
                penalty = submission.late_submission_penalty or 0.0
                score = max(0.0, submission.score - penalty)
                rows.append((student, assignment.name, format_number(score),
                             format_number(assignment.max_score)))
                if submission.needs_manual_grade:
                    unfinished.append(f"{student}/{assignment.name}")
        dest.parent.mkdir(parents=True, exist_ok=True)
        with dest.open("w", newline="", encoding="utf-8") as f:
            writer = csv.writer(f)
            for row in [self.HEADER, *rows]:
                writer.writerow([safe_cell(value) for value in row])
        self.log.info("Wrote %d rows (student, unit) to %s", len(rows), dest)
        if unfinished:
            self.log.warning("Not graded completely yet (their ungraded items count 0): %s",
                             ", ".join(unfinished))
