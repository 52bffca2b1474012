"""One submission graded in a private course folder: what a grading worker runs.

A worker is a thread of `course_grader.autograde --jobs N` or a Dask worker on any machine
that has the course's Python environment and bubblewrap (`--scheduler ADDRESS`). It receives
everything the grading needs as data (`Submission`): the staged submission's files, the
course's `nbgrader_config.py`, the unit's non-notebook source files and a SQLite gradebook
holding that unit alone (`gradebook.unit_template`). It builds a throw-away course folder
from them, runs `nbgrader autograde` there (the kernel in the sandbox, as configured) and
returns the autograded folder's files (`Graded`). It writes nothing outside its temporary
folder, so a worker that dies mid-submission leaves nothing behind: the task is simply run
again elsewhere, and only the coordinator writes the real gradebook.

Before it trusts a worker with a unit, the coordinator has it grade the unit's reference
solution (`self_check`, remembered per process), and it reads the grading machine's own
failures in what comes back (`machine_faults`).
"""

from __future__ import annotations

import functools
import hashlib
import multiprocessing
import multiprocessing.util
import os
import pickle
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import types
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from course_grader import sandbox
from course_grader.nbgrader_hooks import MACHINE_FAULT, PROBED_ENV

__all__ = ["SELF_CHECK_STUDENT", "Graded", "Submission", "grade_submission", "machine_faults",
           "prepare", "read_tree", "remove_orphaned_folders", "run_nbgrader", "self_check",
           "write_tree"]

UNSAFE_FLAG = "--SafeExecute.sandbox=False"
# Each submission's nbgrader is a child of a fork server (multiprocessing's "forkserver")
# that has imported nbgrader and the grading hooks once per worker: a fresh Python importing
# them cost 0.7 CPU-s per submission, a fifth of all grading takes. The child is a new process
# all the same (its own configuration, folder and environment, killed on a timeout).
_PRELOAD = ["nbgrader.apps.nbgraderapp", "nbgrader.converters", "nbgrader.preprocessors",
            "nbgrader.api", "nbconvert.exporters", "jupyter_client.manager",
            "course_grader.nbgrader_hooks", "course_grader.worker"]
_FORKS = multiprocessing.get_context("forkserver") if sys.platform == "linux" else None
if _FORKS is not None:
    _FORKS.set_forkserver_preload(_PRELOAD)


@dataclass(frozen=True)
class Submission:
    """What one grading task needs; plain data, so that it can travel to another machine."""

    unit: str
    student: str
    files: dict[str, bytes]          # the staged submission folder: relative path -> content
    config: bytes                    # the course's nbgrader_config.py
    source_directory: str            # its CourseDirectory.source_directory
    source_files: dict[str, bytes] = field(default_factory=dict)  # the unit's other files
    unsafe: bool = False
    extra_args: tuple[str, ...] = ()
    timeout: float = 3600.0          # seconds for the whole nbgrader run


@dataclass
class Graded:
    """What a worker sends back: the autograded folder and how the run went."""

    student: str
    autograded: dict[str, bytes]     # autograded/<student>/<unit>/: relative path -> content
    failed: bool                     # nbgrader failed or timed out
    notes: list[str]
    seconds: float
    worker: str                      # host:pid of the process that graded it


def last_error(text: str) -> str:
    """The line of nbgrader's log that says what went wrong."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    for line in reversed(lines):
        if "Error" in line and "AutogradeApp | ERROR] There was an error" not in line \
                and "Please see" not in line:
            return line[-300:]
    return lines[-1][-300:] if lines else "no output"


def write_tree(root: Path, files: dict[str, bytes]) -> None:
    """Write `files` (relative path -> content) under `root`; a path that would leave `root`
    is refused."""
    for rel, content in files.items():
        path = (root / rel).resolve()
        if not path.is_relative_to(root.resolve()):
            raise ValueError(f"a file path that leaves its folder: {rel!r}")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)


def read_tree(root: Path) -> dict[str, bytes]:
    """Every regular file under `root` (links left out): relative path -> content."""
    if not root.is_dir():
        return {}
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file() and not p.is_symlink()}


def _nbgrader() -> str:
    found = Path(sys.executable).parent / "nbgrader"
    return str(found) if found.exists() else "nbgrader"


_PREPARING = threading.Lock()


def prepare() -> tuple[str | None, str]:
    """What a worker process computes once, whichever of its threads asks first: (why the
    sandbox does not work here, or None; what the sandbox hides from a kernel, as JSON).
    Under a lock: `functools.cache` alone let two threads compute it side by side, and the
    second computation parses requirement markers with `ast`, which CPython 3.11 does not
    allow in two threads at once (gh-106905: "AST constructor recursion depth mismatch",
    seen once, in a worker thread, scoring a correct submission 0)."""
    with _PREPARING:
        problem = _sandbox_problem()
        return problem, "" if problem else _hidden_imports()


@functools.cache
def _sandbox_problem() -> str | None:
    """The sandbox probed once per worker process (a full sandbox start: a third of a
    second), instead of once per submission by each nbgrader."""
    return sandbox.unavailable_reason()


@functools.cache
def _hidden_imports() -> str:
    """What the sandbox hides from a kernel, computed once per worker process."""
    with tempfile.TemporaryDirectory() as tmp:
        sandbox.write_hidden_file(Path(tmp) / "hidden.json")
        return (Path(tmp) / "hidden.json").read_text()


_FOLDER_PREFIX = "grade-"


def _folder_prefix(unit: str) -> str:
    """A grading folder's name carries the worker's pid, so that another worker can tell
    whether the folder's owner is still alive."""
    return f"{_FOLDER_PREFIX}{unit}-pid{os.getpid()}-"


def remove_orphaned_folders(root: Path | None = None) -> list[Path]:
    """Remove the grading folders under `root` (the temporary folder) whose worker process
    is gone: a worker killed mid-submission cannot remove its own. Returns those removed."""
    removed = []
    for folder in Path(root or tempfile.gettempdir()).glob(f"{_FOLDER_PREFIX}*-pid*-*"):
        found = re.search(r"-pid(\d+)-", folder.name)
        if found is None or not folder.is_dir() or sandbox.pid_alive(int(found.group(1))):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    return removed


def _env(unsafe: bool, course: Path) -> dict[str, str]:
    env = dict(os.environ)
    # what nbgrader and the sandbox make in the temporary folder (the kernel's connection
    # folder, the sandbox's scratch) goes inside this submission's folder, which is
    # removed with it, or by another worker if this one is killed
    (course / "tmp").mkdir()
    env["TMPDIR"] = str(course / "tmp")
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.setdefault("MPLBACKEND", "Agg")
    if not unsafe:
        problem, hidden = prepare()
        if problem:
            raise RuntimeError(f"the sandbox does not work on {socket.gethostname()}: {problem}")
        env[PROBED_ENV] = "1"
        (course / "sandbox-hidden.json").write_text(hidden)
        env[sandbox.HIDDEN_FILE_ENV] = str(course / "sandbox-hidden.json")
    return env


def run_nbgrader(args: list[str], cwd: Path, env: dict[str, str],
                 timeout: float) -> tuple[int | None, str]:
    """Run `nbgrader ARGS` in `cwd` with exactly the environment `env`; (exit status, or None
    if it ran longer than `timeout` seconds and was killed; what it wrote to stdout and
    stderr). nbgrader dies with this process: a killed worker leaves no grading behind."""
    log = cwd / "nbgrader.log"
    if _FORKS is None:   # not Linux: a plain process, which a killed worker leaves running
        with open(log, "wb") as out:
            proc = subprocess.Popen([_nbgrader(), *args], cwd=cwd, env=env, stdout=out,
                                    stderr=subprocess.STDOUT)
            try:
                returncode = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                returncode = None
    else:
        child = _FORKS.Process(target=_nbgrader_child,
                               args=(args, str(cwd), env, str(log), os.getpid()))
        _start(child)
        child.join(timeout)
        if child.is_alive():
            child.kill()
            child.join()
            returncode = None
        else:
            returncode = child.exitcode
        child.close()
    return returncode, log.read_text(errors="replace") if log.exists() else ""


_STARTING = threading.Lock()


def _start(child) -> None:
    """Start `child` even in a daemonic process: Dask runs its workers as daemonic
    multiprocessing processes, where multiprocessing refuses to start children lest they be
    orphaned. Ours cannot be: each dies with the fork server (`_nbgrader_child`), and the
    fork server exits with the worker."""
    with _STARTING:
        config = multiprocessing.current_process()._config  # no public way to do this
        _name_the_servers_folder(config)
        daemon = config.pop("daemon", None)
        # multiprocessing imports this process's __main__ again in every child (here the
        # grading command or the dask CLI, with Dask: half a CPU-second each time); the child
        # runs nbgrader alone and needs none of it: it is shown a main module without one
        main = sys.modules["__main__"]
        sys.modules["__main__"] = types.ModuleType("__main__")
        try:
            child.start()
        finally:
            sys.modules["__main__"] = main
            if daemon is not None:
                config["daemon"] = daemon


def _name_the_servers_folder(config: dict) -> None:
    """The fork server's socket lives in multiprocessing's temporary folder of this process,
    which only a normal exit removes: a killed worker (or a Dask worker stopped with its
    cluster) left one `pymp-*` folder each. Named like a grading folder, with this pid, it
    is removed by `remove_orphaned_folders` once this process is gone."""
    prefix = _folder_prefix("forkserver")
    if Path(config.get("tempdir") or "/").name.startswith(prefix):
        return
    folder = tempfile.mkdtemp(prefix=prefix)
    config["tempdir"] = folder
    multiprocessing.util.Finalize(None, shutil.rmtree, args=(folder, True), exitpriority=-100)


def _nbgrader_child(args: list[str], cwd: str, env: dict[str, str], log: str,
                    worker: int) -> None:
    """In the fork server's fresh child: become `nbgrader ARGS` run in `cwd`."""
    # die with the fork server, which exits when the worker does; a worker already gone
    # (its fork server about to exit) starts nothing
    sandbox.signal_on_parent_death(signal.SIGKILL)
    if not sandbox.pid_alive(worker):
        os._exit(125)
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    tempfile.tempdir = None   # read TMPDIR again
    sys.argv = [_nbgrader(), *args]
    from nbgrader.apps.nbgraderapp import main

    main()


def grade_submission(task: Submission, gradebook: bytes) -> Graded:
    """Autograde `task` in a private course whose gradebook starts as `gradebook` (the unit's
    template, passed apart so that a cluster ships it once per worker, not once per task).
    Never raises for a bad submission: a failed run comes back with `failed` and a note."""
    start = time.monotonic()
    notes: list[str] = []
    failed = False
    remove_orphaned_folders()
    with tempfile.TemporaryDirectory(prefix=_folder_prefix(task.unit)) as tmp:
        course = Path(tmp)
        (course / "nbgrader_config.py").write_bytes(task.config)
        (course / "gradebook.db").write_bytes(gradebook)
        (course / task.source_directory / task.unit).mkdir(parents=True)
        write_tree(course / task.source_directory / task.unit, task.source_files)
        write_tree(course / "submitted" / task.student / task.unit, task.files)
        # one argument: an id that starts with '-' is not read as an option
        args = ["autograde", task.unit, f"--student={task.student}", "--force",
                f"--CourseDirectory.root={course}",
                f"--CourseDirectory.db_url=sqlite:///{course / 'gradebook.db'}?timeout=120",
                *task.extra_args]
        if task.unsafe:
            args.append(UNSAFE_FLAG)
        returncode, log = run_nbgrader(args, course, _env(task.unsafe, course), task.timeout)
        if returncode is None:
            failed = True
            notes.append(f"autograding failed (nbgrader did not finish within "
                         f"{task.timeout:.0f} s)")
        else:
            failed = returncode != 0 or "There was an error processing" in log
            if failed:
                notes.append(f"autograding failed ({last_error(log)})")
        autograded = read_tree(course / "autograded" / task.student / task.unit)
    return Graded(task.student, autograded, failed, notes,
                  round(time.monotonic() - start, 2), f"{socket.gethostname()}:{os.getpid()}")


def machine_faults(autograded: dict[str, bytes]) -> list[str]:
    """The messages of the MACHINE_FAULT verdicts in autograded notebooks (the files of
    `Graded.autograded`), each once, in the order found: what the grading machine, not the
    submission, did wrong. Empty when there is none."""
    found: list[str] = []
    for rel, data in sorted(autograded.items()):
        if not rel.endswith(".ipynb"):
            continue
        try:
            nb = nbformat.reads(data.decode(errors="replace"), as_version=4)
        except Exception:  # noqa: BLE001 - not a notebook: it holds no verdict
            continue
        for cell in nb.cells:
            for output in cell.get("outputs", []):
                message = str(output.get("evalue", ""))
                if output.get("output_type") == "error" and \
                        output.get("ename") == MACHINE_FAULT and message not in found:
                    found.append(message)
    return found


# The student id under which a unit's reference solution is graded (`self_check`).
SELF_CHECK_STUDENT = "reference-solution"
_SELF_CHECKS_PASSED: set[str] = set()   # `_self_check_key`s of this process's passes


def self_check(task: Submission, gradebook: bytes) -> str | None:
    """Grade `task`, a unit's reference solution, as any submission (`grade_submission`):
    None if every test gave it full marks, otherwise what went wrong (nbgrader's error, or
    each failed test's verdict, a MachineFault's included). A pass is remembered in this
    process for this task and this code of the course, so a worker checks a unit once."""
    key = _self_check_key(task)
    if key in _SELF_CHECKS_PASSED:
        return None
    graded = grade_submission(task, gradebook)
    problem = _shortfall(task, graded)
    if problem is None:
        _SELF_CHECKS_PASSED.add(key)
    return problem


def _self_check_key(task: Submission) -> str:
    """What a self-check's result depends on: the task (the reference notebooks, which the
    unit's gradebook entry is made from, the configuration, the unit's files, the options)
    and the course's code as this process finds it (path, size and time of change of each
    module of course_grader and course_utils)."""
    import course_grader
    import course_utils

    digest = hashlib.sha256(pickle.dumps(task))
    for package in (course_grader, course_utils):
        for path in sorted(Path(package.__file__).resolve().parent.rglob("*.py")):
            info = path.stat()
            digest.update(f"{path}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def _shortfall(task: Submission, graded: Graded) -> str | None:
    """None if `graded` gives every test of `task`'s notebooks its full points (nbgrader's
    own rule, `determine_grade`), otherwise what fell short: nbgrader's error, or each
    verdict with the tests that got it."""
    from nbgrader.utils import determine_grade

    if graded.failed:
        return "; ".join(graded.notes)
    verdicts: dict[str, list[str]] = {}   # verdict -> the tests that got it
    for rel in sorted(r for r in task.files if r.endswith(".ipynb")):
        if rel not in graded.autograded:
            verdicts[f"{rel} was not autograded"] = []
            continue
        nb = nbformat.reads(graded.autograded[rel].decode(errors="replace"), as_version=4)
        for cell in nb.cells:
            meta = cell.metadata.get("nbgrader", {})
            if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
                continue
            score, points = determine_grade(cell)
            if score is not None and score < points:
                errors = [o for o in cell.outputs if o.get("output_type") == "error"]
                verdict = (f"{errors[0].get('ename')}: {errors[0].get('evalue', '')}"
                           if errors else "no error shown")
                verdicts.setdefault(" ".join(verdict.split())[:1500], []).append(
                    str(meta.get("grade_id")))
    if not verdicts:
        return None
    return "; ".join(f"{', '.join(tests)}: {verdict}" if tests else verdict
                     for verdict, tests in verdicts.items())
