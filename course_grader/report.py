"""The instructor's report: who scored what, and which tests students fail most.

Reads nbgrader's gradebook (`<course>/gradebook.db`, opened read-only) and, when the autograde
driver left one, `<course>/autograde_status/<unit>.json` (and `make similarity`'s notes,
`<course>/similarity/<unit>.json`, added to the flags); writes per unit that someone handed
in, into `<out>`:

    <unit>_students.csv    one row per student: total, percent, each item's score, status, reason,
                           flags (what the code uses that the instructor may want to look at)
    <unit>_items.csv       one row per graded cell, most-failed first
    <unit>_histogram.png   the class's percent scores, and each item's failure rate

and prints a short summary. An item is a grade cell (or task cell) of the unit; a student
fails it when its score is below its maximum. A grade with neither an automatic nor a manual
score is *ungraded*: it shows as `ungraded` and is left out of the item statistics (nbgrader's
own total counts it as 0). A submission whose status is `needs-regrading` (the grading machine
failed on it, so nothing of it was recorded) is named in the summary: its scores, if any, are
an earlier run's. A unit nobody handed in (no submission in the gradebook, no student in its
status file) gets no files: one line names the units skipped.

    python -m course_grader.report [UNIT ...] [--course DIR] [--out DIR]

Exit code 0 on success, 2 when the gradebook, a unit or a status file is missing or unreadable.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator
from nbgrader.api import Gradebook
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import SQLAlchemyError

from course_grader.gradebook import CourseSettings, is_sqlite

__all__ = [
    "ItemRow",
    "NumberText",
    "ReportError",
    "StudentRow",
    "UnitReport",
    "collect",
    "format_number",
    "main",
    "safe_cell",
    "summary",
    "write_report",
]

GRADEBOOK = "gradebook.db"
STATUS_DIR = "autograde_status"
SIMILARITY_DIR = "similarity"  # course_grader.similarity's notes, <unit>.json
UNGRADED = "ungraded"
# course_grader.autograde's status of a submission the grading machine failed to grade: it
# was not recorded, so the gradebook holds its earlier grade or none
NEEDS_REGRADING = "needs-regrading"


class ReportError(Exception):
    """A report cannot be made: no gradebook, an unknown unit, or an unreadable status file."""


@dataclass
class StudentRow:
    """One student's submission: total score, each item's score (None = ungraded; an item
    missing from `scores` is not in the submission) and the autograde driver's verdict.
    `score` is None for a student the status file names but the gradebook does not."""

    student: str
    score: float | None
    max_score: float | None
    percent: float | None
    scores: dict[str, float | None] = field(default_factory=dict)
    status: str = ""
    reason: str = ""
    flags: list[str] = field(default_factory=list)   # notes on the code (course_grader.flags)


@dataclass
class ItemRow:
    """One graded cell across the class. `column` is its header in the students table (the
    cell's name, prefixed with its notebook if two notebooks use the name). `students` counts
    graded scores only; `failure_rate` and `mean_score` are None when nobody was graded."""

    item: str
    notebook: str
    column: str
    max_points: float
    students: int
    failed: int
    failure_rate: float | None
    mean_score: float | None


@dataclass
class UnitReport:
    """Everything reported for one unit: students sorted by id, items most-failed first."""

    unit: str
    max_score: float
    students: list[StudentRow]
    items: list[ItemRow]


def _open_gradebook(course_dir: Path) -> Gradebook:
    """The course's gradebook, read-only: opening it never creates or changes the file
    (nbgrader's Gradebook would otherwise create an empty one and add a course row). A course
    whose nbgrader_config.py puts the gradebook on a server (COURSE_DB_URL: PostgreSQL) is
    read there; the report only reads."""
    url = CourseSettings(Path(course_dir)).db_url
    if not is_sqlite(url):
        shown = make_url(url).render_as_string(hide_password=True)
        try:
            return Gradebook(url, course_id="")
        except SQLAlchemyError as error:
            reason = getattr(error, "orig", None) or error
            raise ReportError(f"cannot read the gradebook at {shown}: {reason}") from error
    path = (Path(course_dir) / GRADEBOOK).resolve()
    if not path.is_file():
        raise ReportError(
            f"no gradebook at {path}: expected nbgrader's {GRADEBOOK} in the course folder "
            "(run from the course root or pass --course DIR; `make autograde` creates it)"
        )
    url = URL.create("sqlite", database=f"file:{quote(str(path))}",
                     query={"mode": "ro", "uri": "true"})
    try:
        return Gradebook(url, course_id="")
    except SQLAlchemyError as error:
        reason = getattr(error, "orig", None) or error
        raise ReportError(f"cannot read {path} as an nbgrader gradebook: {reason}") from error


def _read_status(course_dir: Path, unit: str) -> dict[str, dict]:
    """The autograde driver's verdicts for `unit` ({} when it wrote none)."""
    path = Path(course_dir) / STATUS_DIR / f"{unit}.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ReportError(f"cannot read the status file {path}: {error}") from error
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ReportError(
            f"status file {path} should hold a JSON object "
            '{"<student>": {"status": ..., "reason": ..., "seconds": ...}}'
        )
    return data


def similarity_flags(course_dir: Path, unit: str) -> dict[str, list[str]]:
    """The notes `make similarity` left for `unit` (course_grader.similarity), by student; {}
    when it left none or they cannot be read."""
    path = Path(course_dir) / SIMILARITY_DIR / f"{unit}.json"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(student): [n for n in notes if isinstance(n, str)]
            for student, notes in data.items() if isinstance(notes, list)}


def _percent(score: float | None, max_score: float | None) -> float | None:
    if score is None or not max_score:
        return None
    return 100.0 * score / max_score


def _grade_score(grade) -> float | None:
    """The grade's score as nbgrader counts it, or None when nobody has scored it yet
    (nbgrader's `Grade.score` reads 0.0 then)."""
    if grade.auto_score is None and grade.manual_score is None:
        return None
    return float(grade.score)


def collect(course_dir, unit: str) -> UnitReport:
    """Read one unit's scores from the gradebook in `course_dir` (and its status file, if any).
    Raises ReportError when the gradebook or the unit does not exist, or the status file is
    unreadable."""
    course_dir = Path(course_dir)
    with _open_gradebook(course_dir) as gb:
        known = [a.name for a in gb.assignments]
        if unit not in known:
            raise ReportError(
                f"unknown unit {unit!r}; the gradebook knows: {', '.join(known) or '(none)'}"
            )
        assignment = gb.find_assignment(unit)
        max_score = float(assignment.max_score)
        cells = {}  # (notebook, name) -> max points, from the unit's definition
        for notebook in assignment.notebooks:
            for cell in [*notebook.grade_cells, *notebook.task_cells]:
                cells[notebook.name, cell.name] = float(cell.max_score)
        per_student = {}  # student -> {(notebook, name): score or None}
        totals = {}
        for submission in gb.assignment_submissions(unit):
            scores = {}
            for notebook in submission.notebooks:
                for grade in notebook.grades:
                    key = notebook.name, grade.name
                    scores[key] = _grade_score(grade)
                    if key not in cells:  # a cell removed from the unit after grading
                        cells[key] = float(grade.max_score)
            per_student[submission.student.id] = scores
            totals[submission.student.id] = float(submission.score)

    names = [name for _, name in cells]
    columns = {key: key[1] if names.count(key[1]) == 1 else f"{key[0]}:{key[1]}" for key in cells}

    items = []
    for key, max_points in cells.items():
        graded = [s[key] for s in per_student.values() if s.get(key) is not None]
        failed = sum(score < max_points for score in graded)
        items.append(ItemRow(
            item=key[1], notebook=key[0], column=columns[key], max_points=max_points,
            students=len(graded), failed=failed,
            failure_rate=failed / len(graded) if graded else None,
            mean_score=statistics.fmean(graded) if graded else None,
        ))
    items.sort(key=lambda i: (i.failure_rate is None, -(i.failure_rate or 0.0), i.item, i.notebook))

    status = _read_status(course_dir, unit)
    similar = similarity_flags(course_dir, unit)
    students = []
    for student in sorted(set(per_student) | set(status)):
        verdict = status.get(student, {})
        score = totals.get(student)
        students.append(StudentRow(
            student=student, score=score,
            max_score=max_score if student in per_student else None,
            percent=_percent(score, max_score),
            scores={columns[key]: value for key, value in per_student.get(student, {}).items()},
            status=str(verdict.get("status", "")), reason=str(verdict.get("reason", "")),
            flags=[str(f) for f in verdict.get("flags", []) if isinstance(f, str)]
            + similar.get(student, []),
        ))
    return UnitReport(unit=unit, max_score=max_score, students=students, items=items)


class NumberText(str):
    """The text of a finite number that this program computed (what `format_number` returns):
    `safe_cell` writes it as it is, a number and not text that came from a submission."""


def format_number(value, digits: int = 2) -> str:
    """A number for the CSV: rounded, no trailing `.0`; '' for None. A finite number comes
    back as a `NumberText`; an infinite one or NaN as plain text, which `safe_cell` guards."""
    if value is None:
        return ""
    value = round(float(value), digits)
    if not math.isfinite(value):
        return str(value)
    return NumberText(int(value) if value.is_integer() else value)


def _plot(report: UnitReport, path: Path) -> None:
    """The histogram of percent scores and the bar chart of failure rates, saved as PNG."""
    percents = [s.percent for s in report.students if s.percent is not None]
    rated = [i for i in report.items if i.failure_rate is not None]
    # A bare Figure on an Agg canvas: headless, and no change to pyplot's global backend.
    fig = Figure(figsize=(11, max(4.0, 0.35 * len(rated) + 1.5)), layout="constrained")
    FigureCanvasAgg(fig)
    hist, bars = fig.subplots(1, 2)
    hist.hist(percents, bins=[10 * k for k in range(11)], color="tab:blue", edgecolor="white")
    hist.set_xlim(0, 100)
    hist.yaxis.set_major_locator(MaxNLocator(integer=True))
    if not percents:
        hist.set_ylim(0, 1)
        hist.text(50, 0.5, "no graded submissions", ha="center", va="center")
    hist.set_xlabel("total score (% of maximum)")
    hist.set_ylabel("number of students")
    hist.set_title(f"{report.unit}: scores of {len(percents)} students")
    shown = rated[::-1]  # most failed at the top
    if shown:
        drawn = bars.barh([i.column for i in shown], [i.failure_rate for i in shown],
                          color="tab:red")
        bars.bar_label(drawn, labels=[f"{i.failed}/{i.students}" for i in shown], padding=3)
    else:
        bars.set_yticks([])
        bars.text(0.5, 0.5, "no graded items", ha="center", va="center")
    bars.set_xlim(0, 1)
    bars.set_xlabel("failure rate (share of graded students below full marks)")
    bars.set_title("items students fail most")
    fig.savefig(path, dpi=100)


def write_report(report: UnitReport, out_dir) -> list[Path]:
    """Write the students CSV, the items CSV and the histogram PNG of `report` into `out_dir`
    (created if needed); returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    students_csv = out_dir / f"{report.unit}_students.csv"
    items_csv = out_dir / f"{report.unit}_items.csv"
    png = out_dir / f"{report.unit}_histogram.png"
    columns = sorted((i.notebook, i.item, i.column) for i in report.items)
    columns = [column for _, _, column in columns]

    with students_csv.open("w", newline="", encoding="utf-8") as f:
        writer = _SafeWriter(f)
        writer.writerow(["student", "score", "max_score", "percent", *columns, "status", "reason",
                         "flags"])
        for s in report.students:
            cells = [UNGRADED if c in s.scores and s.scores[c] is None
                     else format_number(s.scores.get(c)) for c in columns]
            writer.writerow([s.student, format_number(s.score), format_number(s.max_score),
                             format_number(s.percent, 1), *cells, s.status, s.reason,
                             "; ".join(s.flags)])

    with items_csv.open("w", newline="", encoding="utf-8") as f:
        writer = _SafeWriter(f)
        writer.writerow(["item", "notebook", "max_points", "students", "failed", "failure_rate",
                         "mean_score"])
        for i in report.items:
            writer.writerow([i.item, i.notebook, format_number(i.max_points), i.students, i.failed,
                             format_number(i.failure_rate, 4), format_number(i.mean_score, 3)])

    _plot(report, png)
    return [students_csv, items_csv, png]


_FORMULA_START = ("=", "+", "-", "@")
_CONTROL_START = ("\t", "\r", "\n")


def safe_cell(value) -> str:
    """A CSV cell that no spreadsheet reads as a formula or a signed number: text that starts
    with = + - @ (after any leading white space) or with a tab or a line break gets a leading
    apostrophe, which spreadsheets show as plain text. The decision is made on the text
    alone: `-1e3`, `+1_000` and `-inf` are text from a submission or a gradebook and are
    guarded too. Numbers the program computed, a finite int or float or a `NumberText`
    (`format_number`), are written as they are."""
    if value is None:
        return ""
    if isinstance(value, NumberText):
        return str(value)
    if isinstance(value, (int, float)) and math.isfinite(value):
        return str(value)
    text = str(value)
    if text.startswith(_CONTROL_START) or text.lstrip().startswith(_FORMULA_START):
        return "'" + text
    return text


class _SafeWriter:
    """csv.writer whose every cell goes through safe_cell (student ids and reasons come from
    submissions)."""

    def __init__(self, f) -> None:
        self._writer = csv.writer(f)

    def writerow(self, row) -> None:
        self._writer.writerow([safe_cell(v) for v in row])


def summary(report: UnitReport) -> str:
    """A few lines for the terminal: class size, mean and median percent, most-failed items."""
    percents = [s.percent for s in report.students if s.percent is not None]
    lines = [f"{report.unit}: {len(percents)} students graded"]
    if percents:
        lines[0] += (f", mean {statistics.fmean(percents):.1f}%, "
                     f"median {statistics.median(percents):.1f}%")
    missing = len(report.students) - len(percents)
    if missing:
        lines.append(f"  {missing} more in the status file without a score in the gradebook")
    ungraded = sum(v is None for s in report.students for v in s.scores.values())
    if ungraded:
        lines.append(f"  {ungraded} grade{'s' * (ungraded != 1)} not scored yet "
                     f"(shown as '{UNGRADED}')")
    regrade = [s.student for s in report.students if s.status == NEEDS_REGRADING]
    if regrade:
        lines.append(f"  {len(regrade)} need{'s' * (len(regrade) == 1)} regrading (the grading "
                     "machine failed; their scores, if any, are from an earlier run): "
                     + ", ".join(regrade[:10]) + (", ..." if len(regrade) > 10 else ""))
    flagged = [s.student for s in report.students if s.flags]
    if flagged:
        lines.append(f"  {len(flagged)} flagged for a look at their code (column `flags`): "
                     + ", ".join(flagged[:10]) + (", ..." if len(flagged) > 10 else ""))
    worst = [i for i in report.items if i.failure_rate is not None][:3]
    if worst:
        lines.append("  most failed: " + ", ".join(
            f"{i.column} {i.failure_rate:.0%} ({i.failed}/{i.students})" for i in worst))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """The command line: report every unit named (default: every unit in the gradebook)."""
    parser = argparse.ArgumentParser(
        prog="python -m course_grader.report",
        description="Write per-unit score tables and plots from the nbgrader gradebook.",
    )
    parser.add_argument("units", nargs="*", metavar="UNIT",
                        help="assignment names (default: every one in the gradebook)")
    parser.add_argument("--course", type=Path, default=Path("."),
                        help="the course folder holding gradebook.db (default: .)")
    parser.add_argument("--out", type=Path, default=None,
                        help="where to write the reports (default: <course>/reports)")
    args = parser.parse_args(argv)
    out = args.out if args.out is not None else args.course / "reports"
    try:
        units = args.units
        if not units:
            with _open_gradebook(args.course) as gb:
                units = [a.name for a in gb.assignments]
            if not units:
                raise ReportError(f"the gradebook in {args.course.resolve()} has no units yet "
                                  "(`nbgrader generate_assignment` adds them)")
        reports = [collect(args.course, unit) for unit in units]
    except ReportError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    skipped = [report.unit for report in reports if not report.students]
    for report in reports:
        if report.students:
            paths = write_report(report, out)
            print(summary(report))
            print("  wrote " + ", ".join(str(p) for p in paths))
    if skipped:
        print(f"skipped, no submissions (no files written): {', '.join(skipped)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
