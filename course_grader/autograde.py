"""Batch autograding that one bad submission cannot stop (`make autograde`).

    python -m course_grader.autograde [UNIT ...] [--jobs N] [--scheduler ADDRESS]
                                      [--student ID ...] [--unsafe]

Before any submission of a unit it grades the unit's reference solution (its source notebooks
in `solutions/<unit>/`) the same way, here or on each machine of the cluster: unless that gets
full marks, the grading machine cannot be trusted (a checker that cannot import the course, a
sandbox that cannot read it...) and the run stops at once with what went wrong, grading
nobody (`check_reference`). Then, for every submission `submitted/<student>/<unit>/` it

1. stages a clean copy (under `.autograde/`, never touching `submitted/`): a notebook with
   the wrong file name is graded under the right one if it is the only candidate; one that
   is not a readable notebook (invalid JSON, not nbformat 4) is left out, so it scores 0; an
   empty notebook gets its test cells back from the gradebook and fails them;
2. has a worker grade it (`course_grader.worker`): `nbgrader autograde` in a private course
   folder with a private copy of the unit's gradebook, the kernel in the sandbox (see
   `nbgrader_hooks.SafeExecute`); the workers are `--jobs` threads here, or the workers of a
   Dask cluster (`--scheduler ADDRESS`, `course_grader.cluster`), each on any machine with the
   course's environment and bubblewrap;
3. writes what came back into the course, one submission at a time: the autograded notebooks
   into `autograded/`, their scores into the gradebook by nbgrader's own `SaveAutoGrades`
   (`course_grader.gradebook.record`); this process is the gradebook's only writer, SQLite
   or PostgreSQL (`CourseDirectory.db_url`);
4. if grading still failed, sets every item of that submission to 0, so nothing is left
   ungraded; but a failure of the grading machine (a MachineFault verdict in its notebooks,
   or a worker that raised) is no student's 0: the submission is graded again, and if the
   machine fails every time it is marked "needs-regrading", and nothing of it is recorded
   (the gradebook keeps any earlier grade);
5. records a score and a reason per student in `autograde_status/<unit>.json`, rewritten
   after every submission, so a run that is killed keeps what it finished, and a worker that
   dies mid-submission costs only a second run of that submission.

Exit status: 0 when every submission was graded; 1 when the gradebook fails its integrity
check; 2 when grading was refused (no sandbox, no cluster, a failed self-check); 3 when
some submissions need regrading (the summary names how many).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import json
import os
import shutil
import sys
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import nbformat

from course_grader import flags, gradebook, lms, sandbox
from course_grader.gradebook import CourseSettings
from course_grader.nbgrader_hooks import SafeExecute
from course_grader.worker import (
    SELF_CHECK_STUDENT,
    Graded,
    Submission,
    grade_submission,
    machine_faults,
    prepare,
    read_tree,
    self_check,
    write_tree,
)

__all__ = ["NEEDS_REGRADING", "Outcome", "SelfCheckFailed", "UnitJob", "check_reference",
           "grade_one", "grade_unit", "gradebook_integrity", "main", "stage_submission"]

STAGING = ".autograde"
STATUS_DIR = "autograde_status"
NEEDS_REGRADING = "needs-regrading"   # the status of a submission the machine failed to grade
REFUSED = "refused"   # a student id nbgrader cannot grade (lms.student_id_problem): not graded


@dataclass
class Outcome:
    """What happened to one submission."""

    student: str
    status: str = "graded"            # graded | zero | error | needs-regrading | refused
    score: float | None = None
    max_score: float | None = None
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)
    flags: list[str] = field(default_factory=list)   # for the instructor: see course_grader.flags
    worker: str = ""                  # host:pid that graded it

    @property
    def reason(self) -> str:
        return "; ".join(self.notes) if self.notes else "all tests passed"


def expected_notebooks(course: Path, unit: str) -> list[str]:
    """Notebook names (without .ipynb) that the gradebook expects for `unit`."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(CourseSettings(course).db_url) as gb:
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


def _scores(db_url: str, unit: str, student: str) -> tuple[float | None, float | None, bool]:
    """(score, max score, whether any item is still ungraded) from the gradebook."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url) as gb:
        try:
            sub = gb.find_submission(unit, student)
        except MissingEntry:
            return None, None, True
        ungraded = any(g.auto_score is None and g.manual_score is None
                       for nb in sub.notebooks for g in nb.grades)
        return sub.score, sub.max_score, ungraded


def _zero_ungraded(db_url: str, unit: str, student: str) -> int:
    """Score 0 every item of the submission that has no score yet; returns how many."""
    from nbgrader.api import Gradebook, MissingEntry

    with Gradebook(db_url) as gb:
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
    config = CourseSettings(course)
    source = course / config.source_directory / unit
    forbidden: dict[str, str] = {}
    for path in sorted(source.glob("*.ipynb")):
        forbidden.update(flags.forbidden_names(nbformat.read(path, as_version=4)))
    default = SafeExecute.class_traits()["reachable_modules"].default()
    reachable = {*(config.reachable_modules or default),
                 *config.reachable_by_unit.get(unit, [])}
    import course_utils

    package = Path(course_utils.__file__).resolve().parent
    modules = {f"course_utils.{p.stem}" for p in package.iterdir()
               if (p.suffix == ".py" or (p / "__init__.py").exists()) and p.stem != "__init__"}
    return forbidden, tuple(sorted(modules - reachable))


@functools.lru_cache(maxsize=16)
def _instructor_cells(course: Path, unit: str) -> dict[str, frozenset[str]]:
    """{notebook name: the grade_ids of its instructor cells}, from the unit's source: a cell
    of a submission whose metadata claims to be one of them is read all the same."""
    source = course / CourseSettings(course).source_directory / unit
    return {p.stem: flags.instructor_cells(nbformat.read(p, as_version=4))
            for p in sorted(source.glob("*.ipynb"))}


# flags parse the students' code with `ast`, which CPython 3.11 does not allow in two threads
# at once (gh-106905): one grading thread at a time
_PARSING = threading.Lock()


def _flags(course: Path, unit: str, submitted: Path) -> list[str]:
    """Notes on what the submitted notebooks' own code uses (course_grader.flags)."""
    notes = []
    with _PARSING:
        forbidden, hidden = _unit_rules(course, unit)
        instructor = _instructor_cells(course, unit)
        for path in sorted(submitted.glob("*.ipynb")):
            try:
                nb = nbformat.read(path, as_version=4)
            except Exception:  # noqa: BLE001 - an unreadable notebook is reported elsewhere
                continue
            found = flags.flag_notebook(nb, forbidden, hidden,
                                        instructor.get(path.stem, frozenset()))
            notes += [f"{path.stem}: {n}" for n in found]
    return notes


def _timestamp(folder: Path) -> datetime.datetime | None:
    """The submission's time stamp (timestamp.txt, as nbgrader reads it), if it has one."""
    from nbgrader.utils import parse_utc

    path = folder / "timestamp.txt"
    try:
        return parse_utc(path.read_text().strip()) if path.is_file() else None
    except (ValueError, OverflowError, UnicodeDecodeError):
        return None


@dataclass(frozen=True)
class UnitJob:
    """What every submission of one unit shares: the course's settings, its configuration
    file and the unit's files, as the workers receive them."""

    course: Path
    unit: str
    names: tuple[str, ...]           # the notebooks the gradebook expects
    settings: CourseSettings
    template: bytes                  # gradebook.unit_template: the unit alone
    config: bytes                    # nbgrader_config.py
    source_files: dict[str, bytes]   # the unit's source files other than notebooks
    unsafe: bool
    extra_args: tuple[str, ...]
    timeout: float

    @classmethod
    def build(cls, course: Path, unit: str, *, unsafe: bool = False,
              extra_args: list[str] | None = None, timeout: float = 3600) -> UnitJob:
        settings = CourseSettings(course)
        names = expected_notebooks(course, unit)
        if not names:
            raise SystemExit(f"the gradebook does not know unit {unit!r}: run `make release` "
                             "first")
        source = course / settings.source_directory / unit
        others = {rel: data for rel, data in read_tree(source).items()
                  if not rel.endswith(".ipynb")}
        return cls(course, unit, tuple(names), settings,
                   gradebook.unit_template(settings.db_url, settings.course_id, unit),
                   (course / "nbgrader_config.py").read_bytes(), others, unsafe,
                   tuple(extra_args or ()), timeout)

    def task(self, student: str, folder: Path) -> Submission:
        return self._submission(student, read_tree(folder))

    def reference(self) -> Submission:
        """The unit's reference solution as a submission: its source notebooks as they are
        (the gradebook's source, solutions filled in)."""
        source = self.course / self.settings.source_directory / self.unit
        missing = [n for n in self.names if not (source / f"{n}.ipynb").is_file()]
        if missing:
            raise SelfCheckFailed(f"the gradebook expects the notebook(s) {', '.join(missing)} "
                                  f"of {self.unit}, which {source} lacks: run `make release`")
        return self._submission(SELF_CHECK_STUDENT, {f"{n}.ipynb": (source / f"{n}.ipynb")
                                                     .read_bytes() for n in self.names})

    def _submission(self, student: str, files: dict[str, bytes]) -> Submission:
        return Submission(self.unit, student, files, self.config,
                          self.settings.source_directory, self.source_files, self.unsafe,
                          self.extra_args, self.timeout)


class SelfCheckFailed(RuntimeError):
    """A unit's reference solution did not get full marks: its grading cannot be trusted."""


def check_reference(job: UnitJob, cluster=None) -> str:
    """Grade the unit's reference solution (`worker.self_check`) here, or on a worker of each
    machine of `cluster` (another worker runs it for one that is lost meanwhile); raise
    SelfCheckFailed, saying what went wrong where, unless it gets full marks everywhere.
    Returns where it ran."""
    task = job.reference()
    if cluster is None:
        where, problems = "here", {"here": self_check(task, job.template)}
    else:
        from distributed.comm import get_address_host

        one_per_host = {get_address_host(w): w for w in sorted(cluster.client.nthreads(),
                                                               reverse=True)}
        futures = {w: cluster.client.submit(self_check, task, job.template, workers=[w],
                                            allow_other_workers=True, pure=False,
                                            key=f"self-check-{job.unit}-{uuid.uuid4().hex}")
                   for w in sorted(one_per_host.values())}
        where, problems = f"on {len(futures)} machine(s) of the cluster", {}
        for worker, future in futures.items():
            try:
                problems[worker] = future.result()
            except Exception as err:  # noqa: BLE001 - the worker's fault: reported below
                problems[worker] = f"{type(err).__name__}: {str(err)[:500]}"
    failed = {w: p for w, p in problems.items() if p}
    if failed:
        source = job.course / job.settings.source_directory / job.unit
        raise SelfCheckFailed(
            f"its reference solution ({source}) did not get full marks when graded {where}, "
            f"so its grading cannot be trusted; nobody of {job.unit} was graded. What went "
            f"wrong:\n" + "\n".join(f"  {w}: {p}" for w, p in failed.items()))
    return where


# Run a task where it is graded: here (`grade_submission` itself) or on a cluster.
Runner = Callable[[Submission], Graded]
_RECORDING = threading.Lock()   # one submission written into the gradebook at a time


# `grade_submission` never raises for a bad submission: what it raises is a fault of the
# grading machine (a worker that died too often, a CPython 3.11 race between threads that
# build ASTs, seen once in 2,100 tests), and so is a MachineFault verdict in what it returns
# (a checker that could not start): the submission is graded again, never scored 0.
ATTEMPTS = 3


def run_with_retries(run: Runner, task: Submission, notes: list[str]) -> Graded | None:
    """`run(task)`, tried up to ATTEMPTS times while it raises or what it returns holds a
    MachineFault verdict (`worker.machine_faults`). The first result without one; else the
    last result (holding one); else None, and a note naming the last error, if every
    attempt raised."""
    faulty = None
    for _ in range(ATTEMPTS):
        try:
            graded = run(task)
        except Exception as err:  # noqa: BLE001 - see ATTEMPTS
            error = f"{type(err).__name__}: {str(err)[:200]}"
            continue
        if not machine_faults(graded.autograded):
            return graded
        faulty = graded
    if faulty is None:
        notes.append(f"autograding failed (the worker could not finish in {ATTEMPTS} "
                     f"attempts: {error})")
    return faulty


def grade_one(job: UnitJob, student: str, run: Runner) -> Outcome:
    """Stage one submission, have `run` grade it, and record what came back (the autograded
    notebooks, the gradebook's scores, the notes); never raises for a bad submission."""
    start = time.monotonic()
    course, unit = job.course, job.unit
    outcome = Outcome(student)
    staging = course / STAGING / f"{unit}-{student}"
    folder = staging / student / unit
    try:
        outcome.notes += stage_submission(course, unit, student, list(job.names), staging)
        gradable = any(folder.glob("*.ipynb"))
        graded = None
        if gradable:
            graded = run_with_retries(run, job.task(student, folder), outcome.notes)
        failed = graded is None or graded.failed
        if graded is not None:
            outcome.notes += graded.notes
            outcome.worker = graded.worker
        outcome.flags = _flags(course, unit, folder)
        if gradable and (graded is None or machine_faults(graded.autograded)):
            _needs_regrading(outcome, graded)
            return outcome
        with _RECORDING:
            target = course / "autograded" / student / unit
            shutil.rmtree(target, ignore_errors=True)
            write_tree(target, graded.autograded if graded else {})
            notebooks = {p.stem: nbformat.read(p, as_version=4)
                         for p in sorted(target.glob("*.ipynb")) if p.stem in job.names}
            missing = gradebook.record(job.settings, unit, student, notebooks,
                                       _timestamp(folder))
            zeroed = missing + _zero_ungraded(job.settings.db_url, unit, student)
            outcome.score, outcome.max_score, _ = _scores(job.settings.db_url, unit, student)
        outcome.notes += _item_verdicts(course, unit, student)
        if zeroed and gradable:
            outcome.notes.append(f"{zeroed} ungraded item(s) scored 0")
        outcome.status = "zero" if failed or zeroed else "graded"
    except Exception as err:  # noqa: BLE001 - the batch goes on
        outcome.status = "error"
        outcome.notes.append(f"grading could not finish: {type(err).__name__}: {err}")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
        outcome.seconds = round(time.monotonic() - start, 2)
    return outcome


def _needs_regrading(outcome: Outcome, graded: Graded | None) -> None:
    """Mark `outcome` as the grading machine's failure: nothing recorded, no score."""
    outcome.status = NEEDS_REGRADING
    if graded is None:   # every attempt raised: run_with_retries' note says why
        why = outcome.notes[-1]
    else:
        why = f"{machine_faults(graded.autograded)[0]} (in each of {ATTEMPTS} attempts)"
    outcome.notes = [f"needs regrading: {why}; nothing was recorded, the gradebook keeps "
                     f"any earlier grade"]


def gradebook_integrity(course: Path) -> str:
    """'ok' when the course's gradebook is sound (gradebook.integrity)."""
    return gradebook.integrity(CourseSettings(course).db_url)


def _write_status(path: Path, outcomes: dict[str, Outcome]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    old = json.loads(path.read_text()) if path.exists() else {}
    old.update({s: {**asdict(o), "reason": o.reason} for s, o in outcomes.items()})
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(dict(sorted(old.items())), indent=1))
    tmp.replace(path)  # atomic: a killed run leaves the old file or the new one


def grade_unit(course: Path, unit: str, *, students: list[str] | None = None, jobs: int = 1,
               unsafe: bool = False, extra_args: list[str] | None = None,
               timeout: float = 3600, progress=print, cluster=None) -> dict[str, Outcome]:
    """Autograde every submission of `unit` (or those of `students`), `jobs` at a time: here,
    or on the workers of `cluster` (a `course_grader.cluster.Cluster`). First
    `check_reference`, which raises SelfCheckFailed, grading nobody, if the unit's reference
    solution does not get full marks."""
    job = UnitJob.build(course, unit, unsafe=unsafe, extra_args=extra_args, timeout=timeout)
    found = sorted(p.parent.name for p in (course / "submitted").glob(f"*/{unit}") if p.is_dir())
    todo = [s for s in found if students is None or s in students]
    status_file = course / STATUS_DIR / f"{unit}.json"
    done: dict[str, Outcome] = {}
    lock = threading.Lock()
    if cluster is None and not unsafe:
        prepare()   # before the threads: it parses with `ast`, as `_flags` does in them
    if todo:
        start = time.monotonic()
        where = check_reference(job, cluster)
        progress(f"  {unit} self-check: the reference solution got full marks {where} "
                 f"({time.monotonic() - start:.1f} s)")
    if cluster is None:
        def run(task: Submission) -> Graded:
            return grade_submission(task, job.template)
    else:   # after the self-check: Dask's memory manager drops replicas no task waits for
        run = cluster.runner(job.template)

    def work(student: str) -> Outcome:
        problem = lms.student_id_problem(student)
        outcome = grade_one(job, student, run) if problem is None else Outcome(
            student, REFUSED, notes=[f"not graded: nbgrader cannot grade the student id "
                                     f"{student!r} ({problem}); rename submitted/{student}/"])
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


def _connect(address: str, *, unsafe: bool, certs: Path | None, course: Path):
    """(the cluster at the tls:// `address`, None), or (None, why it cannot grade). `certs`:
    the folder of the cluster's certificates (default: the course's, `make grading-certs`)."""
    from course_grader import cluster_certs
    from course_grader.cluster import Cluster

    try:
        cluster = Cluster(address, certs=certs or course / cluster_certs.DEFAULT_FOLDER,
                          timeout=10)
    except cluster_certs.CertificateError as err:   # not tls://, or no usable certificates
        return None, str(err)
    except OSError as err:
        return None, f"cannot reach the Dask scheduler at {address}: {err}"
    problems = cluster.problems(unsafe=unsafe)
    if problems:
        cluster.close()
        return None, "Refusing to autograde on this cluster:\n  " + "\n  ".join(problems)
    return cluster, None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_grader.autograde",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("units", nargs="*", help="units to grade (default: all with submissions)")
    parser.add_argument("--course", type=Path, default=Path.cwd())
    parser.add_argument("--jobs", type=int, help="submissions graded at once (default: 1, or "
                        "with --scheduler the workers' threads)")
    parser.add_argument("--scheduler", metavar="ADDRESS",
                        help="grade on the workers of this Dask scheduler (tls://host:8786)")
    parser.add_argument("--certs", type=Path, metavar="FOLDER", help="the cluster's "
                        "certificates (default: COURSE/.grading-certs, make grading-certs)")
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
    if opts.jobs is not None and opts.jobs < 1:
        parser.error(f"--jobs must be a positive integer, got {opts.jobs}")
    if opts.unsafe:
        print("WARNING: grading without the sandbox (--unsafe): submissions run as you, with "
              "your files and the network.", file=sys.stderr)
    elif not opts.scheduler:
        problem = sandbox.unavailable_reason()
        if problem:
            print(f"Refusing to autograde: {problem}.\nTo grade without the sandbox anyway "
                  "(unsafe), run `make autograde UNSAFE=1` or pass --unsafe.", file=sys.stderr)
            return 2
    cluster = None
    if opts.scheduler:
        cluster, problem = _connect(opts.scheduler, unsafe=opts.unsafe, certs=opts.certs,
                                    course=course)
        if problem:
            print(problem, file=sys.stderr)
            return 2
    jobs = opts.jobs or (cluster.threads() if cluster else 1)
    where = f"on the cluster at {opts.scheduler}" if cluster else "here"
    units = opts.units or sorted({p.name for p in (course / "submitted").glob("*/*")
                                  if p.is_dir()})
    extra = [f"--Execute.timeout={opts.cell_timeout}"] if opts.cell_timeout else []
    try:
        return _grade_units(course, units, opts, jobs=jobs, where=where, extra=extra,
                            cluster=cluster)
    finally:
        if cluster:
            cluster.close()


def _grade_units(course: Path, units: list[str], opts, *, jobs: int, where: str,
                 extra: list[str], cluster) -> int:
    """Grade `units` one after the other, each with its summary line; the exit status."""
    worst = 0
    for unit in units:
        print(f"autograding {unit} ({jobs} at a time {where}"
              f"{', UNSAFE: no sandbox' if opts.unsafe else ', sandboxed'})", flush=True)
        start = time.monotonic()
        try:
            outcomes = grade_unit(course, unit, students=opts.student, jobs=jobs,
                                  unsafe=opts.unsafe, extra_args=extra, cluster=cluster)
        except SelfCheckFailed as err:
            print(f"Refusing to autograde {unit}: {err}", file=sys.stderr)
            return 2
        check = gradebook_integrity(course)
        regrade = sorted(s for s, o in outcomes.items() if o.status == NEEDS_REGRADING)
        print(f"  {len(outcomes)} submissions in {time.monotonic() - start:.1f} s; "
              f"gradebook integrity: {check}" + (
                  f"; {len(regrade)} need(s) regrading, the grading machine failed (see "
                  f"{STATUS_DIR}/{unit}.json): {', '.join(regrade[:10])}"
                  f"{', ...' if len(regrade) > 10 else ''}" if regrade else ""))
        if check != "ok":
            worst = 1
        elif regrade and not worst:
            worst = 3
    return worst


if __name__ == "__main__":
    sys.exit(main())
