"""Batch autograding that one bad submission cannot stop (`make autograde`).

    python -m course_grader.autograde [UNIT ...] [--jobs N] [--student ID ...] [--unsafe]

For every submission `submitted/<student>/<unit>/` it

1. stages a clean copy (under `.autograde/`, never touching `submitted/`): a notebook with
   the wrong file name is graded under the right one if it is the only candidate; one that
   is not a readable notebook (invalid JSON, not nbformat 4) is left out, so nbgrader scores
   it 0; an empty notebook gets its test cells back from the gradebook and fails them;
2. runs `nbgrader autograde <unit> --student <id>` on it in its own process (the kernel in
   the sandbox, see `nbgrader_hooks.SafeExecute`), at most `--jobs` at a time;
3. if nbgrader still fails, sets every item of that submission to 0 in the gradebook, so
   nothing is left ungraded;
4. records a score and a reason per student in `autograde_status/<unit>.json`, rewritten
   after every submission, so a run that is killed keeps what it finished.

The gradebook (SQLite) is written by one nbgrader process at a time thanks to its busy
timeout (see `nbgrader_config.py`); its integrity check runs at the end of every batch.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

from course_grader import flags, sandbox
from course_grader.nbgrader_hooks import SafeExecute

__all__ = ["Outcome", "grade_unit", "gradebook_integrity", "main", "stage_submission"]

STAGING = ".autograde"
STATUS_DIR = "autograde_status"
UNSAFE_FLAG = "--SafeExecute.sandbox=False"


@dataclass
class Outcome:
    """What happened to one submission."""

    student: str
    status: str = "graded"            # graded | zero | error
    score: float | None = None
    max_score: float | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)   # for the instructor: see course_grader.flags

    @property
    def reason(self) -> str:
        return "; ".join(self.notes) if self.notes else "all tests passed"


def _nbgrader() -> str:
    found = Path(sys.executable).parent / "nbgrader"
    return str(found) if found.exists() else "nbgrader"


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("MPLBACKEND", "Agg")
    return env


def _db(course: Path) -> str:
    return f"sqlite:///{course / 'gradebook.db'}?timeout=120"


def expected_notebooks(course: Path, unit: str) -> list[str]:
    """Notebook names (without .ipynb) that the gradebook expects for `unit`."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(_db(course)) as gb:
        try:
            return sorted(nb.name for nb in gb.find_assignment(unit).notebooks)
        except MissingEntry:
            return []


def _readable(path: Path) -> str | None:
    """None if `path` is a notebook nbgrader can grade, otherwise what is wrong with it."""
    try:
        nb = nbformat.read(path, as_version=nbformat.NO_CONVERT)
    except Exception as err:  # noqa: BLE001 - JSON, encoding, or schema errors alike
        return f"{path.name} is not a readable notebook ({type(err).__name__})"
    if nb.get("nbformat") != 4:
        return f"{path.name} is not an nbformat-4 notebook"
    try:
        nbformat.validate(nb)
    except nbformat.ValidationError as err:
        return f"{path.name} is not a valid notebook ({str(err).splitlines()[0][:120]})"
    if not nb.cells:
        return None  # graded: its test cells are put back and fail
    return None


# What a submission folder may carry into grading: the notebook and a few small files.
MAX_FILES = 100                      # entries in the folder, the notebook included
MAX_FILE_BYTES = 20 * 1024 * 1024    # one file, the notebook included
MAX_TOTAL_BYTES = 50 * 1024 * 1024   # everything copied


def _entries(source: Path, limit: int) -> tuple[list[os.DirEntry], bool]:
    """The folder's first `limit` entries, and whether there were more (without listing
    them all: a folder of 20,000 files costs no more than one of 100)."""
    found: list[os.DirEntry] = []
    with os.scandir(source) as it:
        for entry in it:
            if len(found) == limit:
                return found, True
            found.append(entry)
    return found, False


def stage_submission(course: Path, unit: str, student: str, names: list[str],
                     staging: Path) -> list[str]:
    """Copy `submitted/<student>/<unit>` to `staging/<student>/<unit>`, repairing what can
    be repaired and bounding what is copied (MAX_FILES entries, MAX_FILE_BYTES per file,
    MAX_TOTAL_BYTES in all; links and folders are left out). Returns notes on what was done
    (empty: nothing unusual)."""
    source = course / "submitted" / student / unit
    dest = staging / student / unit
    shutil.rmtree(dest, ignore_errors=True)
    dest.mkdir(parents=True)
    notes: list[str] = []
    entries, more = _entries(source, MAX_FILES)
    if more:
        notes.append(f"the submission holds more than {MAX_FILES} files: only its notebook "
                     f"was graded")
    total = 0
    present: dict[str, Path] = {}
    for entry in sorted(entries, key=lambda e: e.name):
        path = Path(entry.path)
        if entry.is_symlink():
            notes.append(f"ignored the symbolic link {entry.name}")
            continue
        if not entry.is_file(follow_symlinks=False):
            continue
        size = entry.stat(follow_symlinks=False).st_size
        if size > MAX_FILE_BYTES:
            notes.append(f"ignored {entry.name}: {size / 2**20:.0f} MB, more than the "
                         f"{MAX_FILE_BYTES // 2**20} MB a file may have")
            continue
        if entry.name.endswith(".ipynb"):
            present[entry.name] = path
        elif not more and total + size <= MAX_TOTAL_BYTES:
            shutil.copy2(path, dest / entry.name)
            total += size
        elif not more:
            notes.append(f"ignored {entry.name}: the files of a submission may hold at most "
                         f"{MAX_TOTAL_BYTES // 2**20} MB")
    for name in names:   # beyond the entries looked at, a notebook is found by its name
        direct = source / f"{name}.ipynb"
        if (f"{name}.ipynb" not in present and direct.is_file() and not direct.is_symlink()
                and direct.stat().st_size <= MAX_FILE_BYTES):
            present[direct.name] = direct
    spare = [p for n, p in sorted(present.items()) if n[: -len(".ipynb")] not in names]
    for name in names:
        wanted = f"{name}.ipynb"
        path = present.get(wanted)
        if path is None and len(names) == 1 and len(spare) == 1:
            path = spare.pop()
            notes.append(f"graded {path.name} as {wanted} (wrong file name)")
        if path is None:
            notes.append(f"no notebook {wanted} submitted: scored 0")
            continue
        problem = _readable(path)
        if problem:
            notes.append(f"{problem}: scored 0")
            continue
        nb = nbformat.read(path, as_version=4)
        if not nb.cells:
            notes.append(f"{wanted} is empty: its test cells were put back and failed")
        shutil.copy2(path, dest / wanted)
    return notes


def _scores(course: Path, unit: str, student: str) -> tuple[float | None, float | None, bool]:
    """(score, max score, whether any item is still ungraded) from the gradebook."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(_db(course)) as gb:
        try:
            sub = gb.find_submission(unit, student)
        except MissingEntry:
            return None, None, True
        ungraded = any(g.auto_score is None and g.manual_score is None
                       for nb in sub.notebooks for g in nb.grades)
        return sub.score, sub.max_score, ungraded


def _zero_ungraded(course: Path, unit: str, student: str) -> int:
    """Score 0 every item of the submission that has no score yet; returns how many."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(_db(course)) as gb:
        try:
            sub = gb.find_submission(unit, student)
        except MissingEntry:
            gb.update_or_create_student(student)
            sub = gb.add_submission(unit, student)
        count = 0
        for nb in sub.notebooks:
            for grade in nb.grades:
                if grade.auto_score is None and grade.manual_score is None:
                    grade.auto_score = 0
                    grade.needs_manual_grade = False
                    count += 1
        gb.db.commit()
        return count


def _item_verdicts(course: Path, unit: str, student: str) -> list[str]:
    """One note per failed test cell: a stopped kernel, or the first error (never cut)."""
    notes: list[str] = []
    for path in sorted((course / "autograded" / student / unit).glob("*.ipynb")):
        try:
            nb = nbformat.read(path, as_version=4)
        except Exception:  # noqa: BLE001
            continue
        for cell in nb.cells:
            meta = cell.get("metadata", {}).get("nbgrader", {})
            graded = meta.get("grade") and not meta.get("solution")
            errors = [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
            where = f"{meta['grade_id']}: " if meta.get("grade_id") else ""
            stopped = [o for o in errors if o.get("ename") == "KernelStopped"
                       and not o.get("evalue", "").startswith("Not run")]
            if stopped:  # the cell that hung or died, graded or not
                notes.append(where + stopped[0]["evalue"].split(". ")[0])
            elif not graded or not errors:
                continue
            elif errors[0].get("ename") == "KernelStopped":
                notes.append(f"{where}not run (kernel stopped)")
            else:
                first = errors[0]
                detail = f": {first.get('evalue', '')}" if first.get("ename") in (
                    "GradingFailure", "GraderError") else ""
                notes.append(f"{where}{first.get('ename', 'error')}{detail}")
    return notes


@functools.lru_cache(maxsize=16)
def _unit_rules(course: Path, unit: str) -> tuple[dict[str, str], tuple[str, ...]]:
    """What the unit's tests forbid (from its source notebooks) and the course_utils modules
    its graded kernel cannot import (all but the reachable ones of nbgrader_config.py)."""
    config = _course_config(course)
    source = course / config.get("source_directory", "solutions") / unit
    forbidden: dict[str, str] = {}
    for path in sorted(source.glob("*.ipynb")):
        forbidden.update(flags.forbidden_names(nbformat.read(path, as_version=4)))
    default = SafeExecute.class_traits()["reachable_modules"].default()
    reachable = {*config.get("reachable_modules", default),
                 *config.get("reachable_by_unit", {}).get(unit, [])}
    import course_utils

    package = Path(course_utils.__file__).resolve().parent
    modules = {f"course_utils.{p.stem}" for p in package.iterdir()
               if (p.suffix == ".py" or (p / "__init__.py").exists()) and p.stem != "__init__"}
    return forbidden, tuple(sorted(modules - reachable))


def _course_config(course: Path) -> dict:
    """The few settings of the course's nbgrader_config.py that flagging needs."""
    from traitlets.config.loader import PyFileConfigLoader

    path = course / "nbgrader_config.py"
    if not path.exists():
        return {}
    config = PyFileConfigLoader(path.name, path=str(course)).load_config()
    out = {}
    if "source_directory" in config.CourseDirectory:
        out["source_directory"] = config.CourseDirectory.source_directory
    for key in ("reachable_modules", "reachable_by_unit"):
        if key in config.SafeExecute:
            out[key] = config.SafeExecute[key]
    return out


def _flags(course: Path, unit: str, submitted: Path) -> list[str]:
    """Notes on what the submitted notebooks' own code uses (course_grader.flags)."""
    forbidden, hidden = _unit_rules(course, unit)
    notes = []
    for path in sorted(submitted.glob("*.ipynb")):
        try:
            nb = nbformat.read(path, as_version=4)
        except Exception:  # noqa: BLE001 - an unreadable notebook is reported elsewhere
            continue
        notes += [f"{path.stem}: {n}" for n in flags.flag_notebook(nb, forbidden, hidden)]
    return notes


def _last_error(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for line in reversed(lines):
        if "Error" in line and "AutogradeApp | ERROR] There was an error" not in line \
                and "Please see" not in line:
            return line[-300:]
    return lines[-1][-300:] if lines else "no output"


def grade_one(course: Path, unit: str, student: str, names: list[str], *, unsafe: bool,
              extra_args: list[str], timeout: float) -> Outcome:
    """Stage, autograde and score one submission; never raises for a bad submission."""
    start = time.monotonic()
    outcome = Outcome(student)
    staging = course / STAGING / f"{unit}-{student}"
    try:
        outcome.notes += stage_submission(course, unit, student, names, staging)
        gradable = any((staging / student / unit).glob("*.ipynb"))
        failed = not gradable
        if gradable:
            cmd = [_nbgrader(), "autograde", unit, "--student", student, "--force",
                   f"--CourseDirectory.submitted_directory={staging}", *extra_args]
            if unsafe:
                cmd.append(UNSAFE_FLAG)
            try:
                proc = subprocess.run(cmd, cwd=course, env=_env(), capture_output=True,
                                      text=True, timeout=timeout, errors="replace")
                failed = proc.returncode != 0 or "There was an error processing" in proc.stderr
                if failed:
                    outcome.notes.append(f"autograding failed ({_last_error(proc.stderr)})")
            except subprocess.TimeoutExpired:
                failed = True
                outcome.notes.append(f"autograding failed (nbgrader did not finish within "
                                     f"{timeout:.0f} s)")
        outcome.flags = _flags(course, unit, staging / student / unit)
        outcome.notes += _item_verdicts(course, unit, student)
        zeroed = _zero_ungraded(course, unit, student)
        if zeroed and gradable:
            outcome.notes.append(f"{zeroed} ungraded item(s) scored 0")
        outcome.score, outcome.max_score, _ = _scores(course, unit, student)
        outcome.status = "zero" if failed or zeroed else "graded"
    except Exception as err:  # noqa: BLE001 - the batch goes on
        outcome.status = "error"
        outcome.notes.append(f"grading could not finish: {type(err).__name__}: {err}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    outcome.seconds = round(time.monotonic() - start, 2)
    return outcome


def gradebook_integrity(course: Path) -> str:
    """SQLite's `PRAGMA integrity_check` on the gradebook: 'ok' when it is sound."""
    with sqlite3.connect(course / "gradebook.db", timeout=120) as con:
        return "; ".join(row[0] for row in con.execute("PRAGMA integrity_check"))


def _write_status(path: Path, outcomes: dict[str, Outcome]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    old = json.loads(path.read_text()) if path.exists() else {}
    old.update({s: {**asdict(o), "reason": o.reason} for s, o in outcomes.items()})
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(dict(sorted(old.items())), indent=1))
    tmp.replace(path)  # atomic: a killed run leaves the old file or the new one


def grade_unit(course: Path, unit: str, *, students: list[str] | None = None, jobs: int = 1,
               unsafe: bool = False, extra_args: list[str] | None = None,
               timeout: float = 3600, progress=print) -> dict[str, Outcome]:
    """Autograde every submission of `unit` (or those of `students`), `jobs` at a time."""
    names = expected_notebooks(course, unit)
    if not names:
        raise SystemExit(f"the gradebook does not know unit {unit!r}: run `make release` first")
    found = sorted(p.parent.name for p in (course / "submitted").glob(f"*/{unit}") if p.is_dir())
    todo = [s for s in found if students is None or s in students]
    status_file = course / STATUS_DIR / f"{unit}.json"
    done: dict[str, Outcome] = {}
    lock = threading.Lock()

    def work(student: str) -> Outcome:
        outcome = grade_one(course, unit, student, names, unsafe=unsafe,
                            extra_args=extra_args or [], timeout=timeout)
        with lock:
            done[student] = outcome
            _write_status(status_file, {student: outcome})
            score = "-" if outcome.score is None else f"{outcome.score:g}/{outcome.max_score:g}"
            flagged = f"  [{len(outcome.flags)} flag(s)]" if outcome.flags else ""
            progress(f"  {unit} {student:<20} {score:>8}  {outcome.seconds:6.1f} s  "
                     f"{outcome.reason}{flagged}")
        return outcome

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(work, todo))
    shutil.rmtree(course / STAGING, ignore_errors=True)
    return done


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_grader.autograde",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("units", nargs="*", help="units to grade (default: all with submissions)")
    parser.add_argument("--course", type=Path, default=Path.cwd())
    parser.add_argument("--jobs", type=int, default=1, help="submissions graded in parallel")
    parser.add_argument("--student", action="append", help="grade only this student (repeatable)")
    parser.add_argument("--unsafe", action="store_true",
                        help="grade without the sandbox: student code runs as you")
    parser.add_argument("--cell-timeout", type=int, help="seconds per cell (default: config)")
    opts = parser.parse_args(argv)
    course = opts.course.resolve()
    if not (course / "submitted").is_dir():
        print(f"nothing to grade: put submissions in {course}/submitted/<student>/<unit>/",
              file=sys.stderr)
        return 2
    if opts.jobs < 1:
        parser.error(f"--jobs must be a positive integer, got {opts.jobs}")
    if opts.unsafe:
        print("WARNING: grading without the sandbox (--unsafe): submissions run as you, with "
              "your files and the network.", file=sys.stderr)
    else:
        problem = sandbox.unavailable_reason()
        if problem:
            print(f"Refusing to autograde: {problem}.\nTo grade without the sandbox anyway "
                  "(unsafe), run `make autograde UNSAFE=1` or pass --unsafe.", file=sys.stderr)
            return 2
    units = opts.units or sorted({p.name for p in (course / "submitted").glob("*/*")
                                  if p.is_dir()})
    extra = [f"--Execute.timeout={opts.cell_timeout}"] if opts.cell_timeout else []
    worst = 0
    for unit in units:
        print(f"autograding {unit} ({opts.jobs} at a time"
              f"{', UNSAFE: no sandbox' if opts.unsafe else ', sandboxed'})")
        start = time.monotonic()
        outcomes = grade_unit(course, unit, students=opts.student, jobs=opts.jobs,
                              unsafe=opts.unsafe, extra_args=extra)
        check = gradebook_integrity(course)
        print(f"  {len(outcomes)} submissions in {time.monotonic() - start:.1f} s; "
              f"gradebook integrity: {check}")
        if check != "ok":
            worst = 1
    return worst


if __name__ == "__main__":
    sys.exit(main())
