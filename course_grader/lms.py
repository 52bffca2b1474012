"""LMS in and out: Canvas's submissions zip into `submitted/`, grades out as a CSV.

**In.** `nbgrader zip_collect <unit>` (`make collect-zip ZIP=... UNIT=...`) reads a Canvas
*Download Submissions* zip with two plugins: `CanvasExtractor` unpacks it, `CanvasCollector`
says whose each notebook is and under which name. Canvas names every file it puts in that zip

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

Only what Canvas named for a student becomes that student's: the zip's top-level notebooks,
by their names. A zip a student uploaded is unpacked into that student's submission alone:
its notebooks are renamed with the upload's own Canvas prefix (`smithalice_1234_56790_` +
the member's base name), so nothing inside it ever names the student. Unpacking is bounded
per student (`CanvasExtractor.max_depth` archives deep, `max_members` members, `max_file_bytes`
a file, `max_student_bytes` in all, and inside an upload `max_ratio` times a member's
compressed size). What is left out is named in a warning, with the student and the reason: a
file that is not a notebook (a `.gz` or `.tar` upload is not unpacked), a link or another
non-file, a `..` or absolute path, a folder in Canvas's own listing, a name with a control
character, a second file of the same name, an archive that is broken, too deep, too big or
has too many members; the other files and the other students are collected.

A unit whose release has one notebook gets it as `<unit>.ipynb` whatever the student called
it (Canvas appends `-1` to a file uploaded again, students rename files), provided it is the
student's only notebook or none of the others has the right name; of several notebooks that
would get the same name, the one uploaded last (the highest file id) is collected. Everything
not collected is named in a warning with the reason: a name outside the pattern (a file added
by hand, a zip downloaded with anonymous grading), a student's second notebook, a student id
nbgrader cannot grade (`student_id_problem`; Canvas's ids, digits, always can).

**Out.** `nbgrader export` (`make export-grades`) writes, with `LmsGradesExporter`,
`reports/grades.csv` (`--to FILE` for another file): one row per submission in the gradebook,

    student_id,unit,score,max_score
    1234,00_attention_as_lookup,10,10

`score` is nbgrader's total after its late penalty (none unless configured), never below 0;
numbers are rounded to 2 decimals. A student without a submission for a unit has no row
(nbgrader's own CSV writes 0 for them). Every cell goes through `report.safe_cell`: text that
starts with `=`, `+`, `-`, `@` (after any white space), a tab or a line break gets a leading
`'`, so a spreadsheet shows it as text and never runs it, whether or not it reads as a number
(`-1e3` as a student id is text); the scores, numbers the exporter computed, stay numbers.
The three plugins are set in `nbgrader_config.py`.
"""

from __future__ import annotations

import csv
import io
import lzma
import os
import re
import shutil
import stat
import sys
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

from nbgrader.api import Gradebook
from nbgrader.plugins import ExportPlugin, ExtractorPlugin, FileNameCollectorPlugin
from nbgrader.utils import find_all_notebooks
from traitlets import Integer, List, default

__all__ = ["CANVAS_PATTERN", "CanvasCollector", "CanvasExtractor", "LmsGradesExporter",
           "parse_canvas_name", "student_id_problem"]

# The name holds at least one letter, so a file without one (anonymous grading) is reported
# rather than misread; `\w` is Unicode, like Ruby's [[:word:]] that Canvas keeps. The ids are
# ASCII digits ([0-9], not `\d`, which takes any script's digits).
CANVAS_PATTERN = (r"(?P<name>\w*?[^\W\d_]\w*?)_(?:(?P<late>late)_)?"
                  r"(?P<student_id>[0-9]+)_(?P<file_number>[0-9]+)_(?P<file_id>.+)")
NOT_CANVAS = "its name is not Canvas's <name>_[late_]<user id>_<file id>_<file>"
NOTEBOOK_EXT = ".ipynb"
MiB = 1024 * 1024


def parse_canvas_name(filename: str, pattern: str = CANVAS_PATTERN) -> dict | None:
    """The named groups of `pattern` matched against the whole base name of `filename`,
    or None if it does not match."""
    match = re.fullmatch(pattern, os.path.basename(filename), flags=re.DOTALL)
    return match.groupdict() if match else None


def student_id_problem(student_id: str) -> str | None:
    """None if nbgrader can store and grade `student_id`, otherwise why not. nbgrader uses
    the id as a folder name (`submitted/<id>/`), as a glob (`--student`) and strips white
    space from it (an id that starts with `-` is fine: course_grader.worker passes it as
    `--student=<id>`)."""
    if not student_id:
        return "empty"
    if len(student_id) > 128:
        return "longer than 128 characters, the gradebook's limit"
    if student_id != student_id.strip():
        return "white space at its start or end, which nbgrader strips (another id)"
    if student_id in (".", ".."):
        return "'.' and '..' name no folder of its own"
    for char in student_id:
        if char in "/*?[" or not char.isprintable():
            return (f"it holds {char!r}: a path separator, a glob character or a control "
                    "character to nbgrader")
    return None


def _shown(name: str) -> str:
    """`name` for a log line: as it is if printable, else escaped (no forged lines)."""
    return name if name.isprintable() else ascii(name)


def _member_problem(info: zipfile.ZipInfo) -> str | None:
    """Why archive member `info` cannot be unpacked whatever its place, or None."""
    name = info.filename
    parts = name.replace("\\", "/").split("/")
    mode = info.external_attr >> 16
    if not name.isprintable():
        return "a control character in its name"
    if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:[/\\]", name):
        return "an absolute path"
    if ".." in parts:
        return "a path that leaves its folder (..)"
    if stat.S_ISLNK(mode):
        return "a link"
    if stat.S_IFMT(mode) and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        return "not a regular file"
    if info.flag_bits & 0x1:
        return "encrypted"
    return None


def _copy_file(path: str, sink) -> None:
    with open(path, "rb") as src:
        shutil.copyfileobj(src, sink)


class _Refused(Exception):
    """A member left out; the message says why."""


# what a broken or hostile member raises while it is read or written: one member's problem
_UNREADABLE = (zipfile.BadZipFile, zlib.error, lzma.LZMAError, EOFError, RuntimeError,
               NotImplementedError, ValueError, OSError)


@dataclass
class _Budget:
    """What one student's files may still take: bytes unpacked, archive members read."""

    bytes_left: int
    members_left: int


class CanvasExtractor(ExtractorPlugin):
    """`zip_collect`'s extractor for Canvas's submissions zip: writes into the `extracted`
    folder, flat, only notebooks that Canvas named for a student, those at the top of its zip
    and those unpacked from a zip the student uploaded (renamed with the upload's Canvas
    prefix), within the limits below; every member left out is named in a warning with the
    student and the reason. Names are read with the collector's `named_regexp` (Canvas's by
    default), and a renamed notebook must read as its uploader's. A file other than a zip in
    the `archive` folder is copied as it is (the collector reads its name)."""

    zip_ext = List([".zip"], help="Archives that are unpacked (zip only)").tag(config=True)
    max_depth = Integer(2, help="Archives inside a student's upload are unpacked this many "
                        "levels deep, the upload itself counting 1").tag(config=True)
    max_members = Integer(1000, help="Members of the archives a student uploaded, all "
                          "together; an archive with more is left out").tag(config=True)
    max_file_bytes = Integer(20 * MiB, help="Bytes of one unpacked file (autograding takes "
                             "no larger notebook)").tag(config=True)
    max_student_bytes = Integer(50 * MiB, help="Bytes unpacked for one student, all files "
                                "and the archives read in memory").tag(config=True)
    max_ratio = Integer(100, help="A member of a student's archive may unpack to this many "
                        "times its compressed size (past the first MiB)").tag(config=True)

    RATIO_FLOOR = MiB
    CHUNK = 64 * 1024

    def extract(self, archive_path: str, extracted_path: str) -> None:
        self._written: dict[str, str] = {}
        # the collector's pattern, so that what is written here is read there as the same
        # student's (`named_regexp` may be set for another LMS or for names as ids)
        collector = getattr(self.parent, "collector_plugin_inst", None)
        self._pattern = getattr(collector, "named_regexp", "") or CANVAS_PATTERN
        entries = sorted(os.scandir(archive_path), key=lambda e: e.name)
        if not entries:
            self.log.warning("No files found in directory: %s", archive_path)
        for entry in entries:
            try:
                if entry.is_symlink() or not entry.is_file():
                    raise _Refused("not a file")
                if self._is_archive(entry.name):
                    self._extract_canvas_zip(entry.path, extracted_path)
                else:
                    self._save(extracted_path, entry.name, entry.path,
                               lambda sink, path=entry.path: _copy_file(path, sink))
            except _Refused as why:
                self._skip(entry.path, None, str(why))

    def _is_archive(self, name: str) -> bool:
        return os.path.splitext(name)[1].lower() in self.zip_ext

    def _extract_canvas_zip(self, path: str, out: str) -> None:
        try:
            canvas = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as err:
            self.log.error("Cannot read %s as a zip (%s): download it from Canvas again",
                           path, err)
            sys.exit(1)
        budgets: dict[str, _Budget] = {}
        with canvas:
            for info in canvas.infolist():
                self._take_canvas_member(canvas, info, out, budgets)

    def _take_canvas_member(self, canvas: zipfile.ZipFile, info: zipfile.ZipInfo, out: str,
                            budgets: dict[str, _Budget]) -> None:
        """One member of Canvas's zip: a notebook written as it is named, a zip unpacked as
        its student's, anything else left out with the reason."""
        name = info.filename
        found = parse_canvas_name(name.replace("\\", "/"), self._pattern)
        student = found["student_id"] if found else None
        try:
            problem = _member_problem(info)
            if problem is None and "/" in name.replace("\\", "/"):
                problem = "in a folder, while Canvas's zip is flat"
            if problem or found is None:
                raise _Refused(problem or NOT_CANVAS)
            budget = budgets.setdefault(
                student, _Budget(self.max_student_bytes, self.max_members))
            if self._is_archive(name):
                if not name.endswith(found["file_id"]):
                    raise _Refused("an archive, which the file-name pattern cannot rename as "
                                   "its student's (file_id is not the name's end)")
                prefix = name[:len(name) - len(found["file_id"])]
                self._unpack(canvas, info, name, prefix, student, out, budget, depth=1)
            elif name.endswith(NOTEBOOK_EXT):
                self._save(out, name, name,
                           lambda sink: self._copy(canvas, info, sink, budget, inside=False))
            else:
                raise _Refused("not a notebook")
        except _Refused as why:
            self._skip(name, student, str(why))
        except _UNREADABLE as err:
            self._skip(name, student, f"unreadable ({type(err).__name__}: {err})")

    def _unpack(self, archive: zipfile.ZipFile, info: zipfile.ZipInfo, where: str, prefix: str,
                student: str, out: str, budget: _Budget, depth: int) -> None:
        """Unpack the zip a student uploaded, member `info` of `archive` (its members lie
        `depth` archives deep in Canvas's zip), into `out` as that student's: each notebook
        named `prefix` + its base name. Each member left out is logged; the zip as a whole
        raises _Refused."""
        data = io.BytesIO()
        self._copy(archive, info, data, budget, inside=depth > 1)
        raw = data.getvalue()
        # every entry of a zip's central directory starts with this signature: counting it
        # bounds what zipfile would read, before it reads any
        entries = raw.count(b"PK\x01\x02")
        if entries > budget.members_left:
            raise _Refused(f"an archive of up to {entries} members, more than the "
                           f"{budget.members_left} left of the student's "
                           f"CanvasExtractor.max_members ({self.max_members})")
        try:
            upload = zipfile.ZipFile(io.BytesIO(raw))
        except _UNREADABLE as err:
            raise _Refused(f"not a readable zip ({type(err).__name__}: {err})") from None
        members = upload.infolist()
        budget.members_left -= len(members)
        for member in members:
            inner = f"{where}: {member.filename}"
            try:
                self._take_upload_member(upload, member, inner, prefix, student, out, budget,
                                         depth)
            except _Refused as why:
                self._skip(inner, student, str(why))
            except _UNREADABLE as err:
                self._skip(inner, student, f"unreadable ({type(err).__name__}: {err})")

    def _take_upload_member(self, upload: zipfile.ZipFile, member: zipfile.ZipInfo,
                            where: str, prefix: str, student: str, out: str, budget: _Budget,
                            depth: int) -> None:
        problem = _member_problem(member)
        if problem:
            raise _Refused(problem)
        if member.is_dir():
            return
        base = member.filename.replace("\\", "/").rsplit("/", 1)[-1]
        if self._is_archive(base):
            if depth >= self.max_depth:
                raise _Refused(f"an archive more than {self.max_depth} deep "
                               "(CanvasExtractor.max_depth)")
            self._unpack(upload, member, where, prefix, student, out, budget, depth + 1)
        elif base.endswith(NOTEBOOK_EXT):
            name = prefix + base
            renamed = parse_canvas_name(name, self._pattern)
            if renamed is None or renamed["student_id"] != student:
                raise _Refused(f"renamed {name}, it would not be the student's")
            self._save(out, name, where,
                       lambda sink: self._copy(upload, member, sink, budget, inside=True))
            self.log.warning("Student %s: %s unpacked as %s", student, _shown(where), name)
        else:
            raise _Refused("not a notebook")

    def _save(self, out: str, name: str, where: str, copy) -> None:
        """A new file `name` in `out` (no link followed, nothing replaced), filled by
        `copy(sink)`; a copy that fails leaves no file."""
        if name in self._written:
            first = self._written[name]
            raise _Refused("a second file of this name (the first is kept)" if first == where
                           else f"a second {name} (the first, {_shown(first)}, is kept)")
        path = os.path.join(out, name)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        try:
            with os.fdopen(fd, "wb") as sink:
                copy(sink)
        except BaseException:
            os.unlink(path)
            raise
        self._written[name] = where

    def _copy(self, archive: zipfile.ZipFile, info: zipfile.ZipInfo, sink, budget: _Budget,
              *, inside: bool) -> None:
        """Unpack member `info` of `archive` into `sink`, charged to `budget`; refused past
        max_file_bytes, past the student's bytes left, or, for a member `inside` an archive
        the student made, past max_ratio times its compressed size."""
        limits = [(self.max_file_bytes, f"more than {self.max_file_bytes / MiB:g} MiB "
                   "unpacked (CanvasExtractor.max_file_bytes)"),
                  (budget.bytes_left, "the student's files pass "
                   f"{self.max_student_bytes / MiB:g} MiB unpacked "
                   "(CanvasExtractor.max_student_bytes)")]
        for limit, why in limits:
            if info.file_size > limit:
                raise _Refused(why)
        most = self.max_ratio * max(info.compress_size, 1)
        count = 0
        try:
            with archive.open(info) as src:
                while chunk := src.read(self.CHUNK):
                    count += len(chunk)
                    for limit, why in limits:
                        if count > limit:
                            raise _Refused(why)
                    if inside and count > max(most, self.RATIO_FLOOR):
                        raise _Refused(f"unpacks to over {self.max_ratio} times its compressed "
                                       "size (CanvasExtractor.max_ratio): a zip bomb?")
                    sink.write(chunk)
        finally:
            budget.bytes_left -= count

    def _skip(self, where: str, student: str | None, why: str) -> None:
        if student is None:
            self.log.warning("Not collected: %s (%s)", _shown(where), why)
        else:
            self.log.warning("Not collected: %s (student %s: %s)", _shown(where), student, why)


class CanvasCollector(FileNameCollectorPlugin):
    """`zip_collect`'s collector for Canvas's submissions zip (see the module docstring)."""

    @default("named_regexp")
    def _default_named_regexp(self) -> str:
        return CANVAS_PATTERN

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._plans: dict[str, dict[str, tuple[str | None, str | None]]] = {}

    def _unit_notebook(self) -> str | None:
        """`<name>.ipynb` if the unit's release has exactly one notebook, else None."""
        coursedir = self.parent.coursedir
        released = coursedir.format_path(coursedir.release_directory, ".",
                                         coursedir.assignment_id)
        notebooks = find_all_notebooks(released)
        return notebooks[0] if len(notebooks) == 1 else None

    def _plan(self, folder: str) -> dict[str, tuple[str | None, str | None]]:
        """Base name of each notebook in `folder` that matches the pattern -> (its name in
        submitted/, None) or (None, why it is not collected); made once per folder (the
        extractor writes every file into one)."""
        if folder not in self._plans:
            by_student: dict[str, list[str]] = {}
            for name in sorted(os.listdir(folder)):
                info = parse_canvas_name(name, self.named_regexp)
                if info and os.path.splitext(name)[1] in self.valid_ext:
                    by_student.setdefault(info["student_id"], []).append(name)
            target = self._unit_notebook()
            plan: dict[str, tuple[str | None, str | None]] = {}
            for student, names in by_student.items():
                plan.update(self._student_plan(student, names, target))
            self._plans[folder] = plan
        return self._plans[folder]

    def _student_plan(self, student: str, names: list[str], target: str | None
                      ) -> dict[str, tuple[str | None, str | None]]:
        """`_plan` for one student's notebooks `names`, `target` the unit's notebook name."""
        original = {n: parse_canvas_name(n, self.named_regexp)["file_id"] for n in names}
        if target is None:
            chosen = original
        elif len(names) == 1:
            chosen = {names[0]: target}
        else:
            chosen = {n: target for n in names if original[n] == target}
            if not chosen:
                why = (f"student {student} sent {len(names)} notebooks, none named {target}: "
                       "copy the right one to submitted/ by hand")
                return {n: (None, why) for n in names}
        plan: dict[str, tuple[str | None, str | None]] = {}
        for dest in sorted(set(chosen.values())):
            same = sorted((n for n in chosen if chosen[n] == dest), key=self._upload_order)
            kept = same[-1]
            plan[kept] = (dest, None)
            for name in same[:-1]:
                plan[name] = (None, f"student {student} also sent {kept}, uploaded later")
        kept_target = next((n for n, (dest, _) in plan.items() if dest == target), None)
        for name in names:
            plan.setdefault(name, (None, f"student {student} also sent {kept_target}"))
        return plan

    def _upload_order(self, name: str) -> tuple[int, str]:
        """Canvas's file ids grow with each upload: the later upload sorts last."""
        number = parse_canvas_name(name, self.named_regexp).get("file_number") or "0"
        return int(number) if number.isdigit() else 0, name

    def collect(self, submitted_file: str) -> dict | None:
        name = os.path.basename(submitted_file)
        info = parse_canvas_name(name, self.named_regexp)
        if info is None:
            self.log.warning("Not collected: %s (%s)", _shown(name), NOT_CANVAS)
            return None
        if os.path.splitext(name)[1] not in self.valid_ext:
            self.log.warning("Not collected: %s (not a notebook)", _shown(name))
            return None
        student = info["student_id"]
        problem = student_id_problem(student)
        if problem:
            self.log.warning("Not collected: %s (student id %s cannot be graded: %s)",
                             _shown(name), ascii(student), problem)
            return None
        collected, why = self._plan(os.path.dirname(submitted_file))[name]
        if collected is None:
            self.log.warning("Not collected: %s (%s)", _shown(name), why)
            return None
        if collected != info["file_id"]:
            self.log.warning("Student %s: %s collected as %s", student, info["file_id"],
                             collected)
        if info.get("late"):
            self.log.warning("Student %s: late by Canvas's mark (the zip gives no time, so "
                             "nbgrader records none): %s", student, name)
        return {"student_id": student, "file_id": collected}


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
