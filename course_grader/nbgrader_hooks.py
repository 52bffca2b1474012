"""nbgrader plug-ins used by `nbgrader_config.py` (instructor side, never imported by notebooks).

`HideHiddenTests` runs when feedback is generated: a student's feedback shows which test
cells passed and what the visible tests said, but neither the source of the hidden tests
nor a traceback that would quote their lines.
"""

from __future__ import annotations

import ast
import contextlib
import copy
import functools
import json
import os
import re
import select
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from jupyter_client.manager import AsyncKernelManager
from jupyter_core.utils import ensure_async, run_sync
from nbclient.exceptions import CellTimeoutError, DeadKernelError
from nbconvert.preprocessors import Preprocessor
from nbformat import NotebookNode
from nbformat import v4 as nbformat_v4
from nbgrader.preprocessors import Execute, OverwriteCells
from traitlets import Bool, Dict, Enum, Float, Integer, List, Unicode

from course_grader import sandbox
from course_grader.cpu_watch import CpuWatch

__all__ = [
    "MACHINE_FAULT",
    "HideHiddenTests",
    "RestoreCells",
    "SafeExecute",
    "SandboxUnavailable",
    "SandboxedKernelManager",
    "clip_output",
    "hidden_line_numbers",
    "student_names",
]

# Exceptions whose message is written for students (by the checker or the autograder).
SAFE_VERDICTS = ("GradingFailure", "KernelStopped", "GraderError", "MachineFault")
# The ename of a verdict that blames the grading machine, not the student (a checker that could
# not start, a cell stopped by the wall-clock backstop while under its CPU limit): a
# submission holding one is graded again, and if it still holds one it is marked "needs
# regrading", never scored (course_grader.autograde).
MACHINE_FAULT = "MachineFault"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_CELL_FRAME = re.compile(r"(?:Cell In\s*\[\d+\]|<ipython-input-[^>]*>), line (\d+)")


def hidden_line_numbers(source: str, begin: str, end: str) -> set[int]:
    """1-based numbers of the lines of `source` from a `begin` marker to its `end` marker."""
    hidden, inside = set(), False
    for number, line in enumerate(source.splitlines(), start=1):
        if begin in line:
            inside = True
        if inside:
            hidden.add(number)
        if end in line:
            inside = False
    return hidden


class HideHiddenTests(Preprocessor):
    """Remove hidden-test source and hidden-test tracebacks from graded test cells."""

    enabled = Bool(True, help="nbconvert preprocessors are off unless enabled").tag(config=True)
    begin_delimeter = Unicode("BEGIN HIDDEN TESTS").tag(config=True)
    end_delimeter = Unicode("END HIDDEN TESTS").tag(config=True)
    placeholder = Unicode("# (hidden tests: their code is not shown in feedback)").tag(config=True)

    def preprocess_cell(self, cell, resources, index):
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or not meta.get("grade") or meta.get("solution"):
            return cell, resources
        hidden = hidden_line_numbers(cell.source, self.begin_delimeter, self.end_delimeter)
        if not hidden:
            return cell, resources
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                self._sanitize_error(output, hidden)
        kept, replaced = [], False
        for number, line in enumerate(cell.source.splitlines(), start=1):
            if number not in hidden:
                kept.append(line)
            elif not replaced:
                indent = line[: len(line) - len(line.lstrip())]
                kept.append(indent + self.placeholder)
                replaced = True
        cell.source = "\n".join(kept)
        return cell, resources

    def _sanitize_error(self, output, hidden: set[int]) -> None:
        plain = _ANSI.sub("", "\n".join(output.get("traceback", [])))
        lines = [int(n) for n in _CELL_FRAME.findall(plain)]
        in_hidden = bool(lines) and lines[0] in hidden
        ename, evalue = output.get("ename", "Error"), output.get("evalue", "")
        safe = ename in SAFE_VERDICTS
        if in_hidden and not safe:
            # A bare assertion or crash inside a hidden test: its text may quote the test.
            message = f"A hidden test failed ({ename}). Check your function on more cases."
        elif in_hidden:
            message = f"A hidden test failed: {evalue}"
        else:
            message = f"{ename}: {evalue}"
        output["traceback"] = message.splitlines()
        if in_hidden and not safe:
            output["evalue"] = ""


# ------------------------------------------------------------------ safe autograding

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1a\x1c-\x1f\x7f\ud800-\udfff]")
UNSAFE_HINT = ("To grade without the sandbox anyway (student code then runs as you, with "
               "access to your files and the network), set c.SafeExecute.sandbox = False or "
               "run `make autograde UNSAFE=1`.")


class SandboxUnavailable(RuntimeError):
    """Grading was asked to use the sandbox and this machine cannot provide it."""


# Set by course_grader.worker for the nbgrader it starts, once it has seen the sandbox work in
# its own process: a batch then probes the sandbox once per worker, not once per submission.
PROBED_ENV = "COURSE_GRADER_SANDBOX_PROBED"


@functools.lru_cache(maxsize=1)
def _sandbox_problem() -> str | None:
    if os.environ.get(PROBED_ENV) == "1":
        return None
    return sandbox.unavailable_reason()


class SandboxedKernelManager(AsyncKernelManager):
    """Starts the kernel inside `course_grader.sandbox`, talking over Unix sockets (the
    sandbox has no network, so TCP to the grader is impossible). The kernel makes its sockets
    on its sandbox's own /tmp; the grader connects to relays in a folder of its own, which
    reach those sockets beneath a descriptor of the sandbox's root without following any
    link (`relay.SandboxSockets`). The kernel's working copy holds the submission's files but
    no notebook (the graded one carries the hidden tests), and its course_utils only the
    `reachable` modules."""

    limits = Dict(help="course_grader.sandbox.Limits fields to override").tag(config=True)
    reachable = List(Unicode(), default_value=["course_utils.grading"],
                     help="course_utils modules the kernel may import")

    async def _async_pre_start_kernel(self, **kw):
        self._private_dir = tempfile.mkdtemp(prefix="course-kernel-")
        self.transport = "ipc"
        self.connection_file = os.path.join(self._private_dir, "kernel.json")
        # the kernel makes its sockets on the sandbox's own /tmp (it can write nothing on the
        # host); once it runs, the grader reaches them through the relays (`_relay_sockets`)
        self.ip = os.path.join(sandbox.SOCKET_DIR, "ipc")
        return await super()._async_pre_start_kernel(**kw)

    async def _async_launch_kernel(self, kernel_cmd, **kw):
        workdir = kw.get("cwd") or os.getcwd()
        # outside the runtime folder, which the sandbox can write
        staging = Path(tempfile.mkdtemp(prefix="course-kernel-files-"))
        self._staging_dir = str(staging)
        contents = _copy_without_notebooks(Path(workdir), staging / "submission")
        package = sandbox.student_package(staging / "course_utils", list(self.reachable))
        wrapped = sandbox.wrap(kernel_cmd, workdir=workdir, runtime_dir=self._private_dir,
                               limits=sandbox.Limits(**self.limits), contents=contents,
                               package=package)
        launched = await super()._async_launch_kernel(wrapped, **kw)
        self._launcher_pid = getattr(self.provisioner, "pid", None)
        self._relay_sockets()
        return launched

    def _relay_sockets(self) -> None:
        from course_grader.relay import Relay, SandboxSockets

        root = sandbox.open_sandbox_root(self._private_dir)
        if root is None:
            raise RuntimeError("the sandbox did not start (no process id was recorded)")
        self._sandbox_sockets = SandboxSockets(root, sandbox.SOCKET_DIR)
        relay_dir = Path(self._staging_dir) / "relay"   # the grader's alone (0700)
        relay_dir.mkdir(mode=0o700)
        names = [f"ipc-{getattr(self, port)}" for port in
                 ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")]
        self._relay = Relay(self._sandbox_sockets.connect, relay_dir, names)
        self.ip = str(relay_dir / "ipc")

    def refused_links(self) -> list[str]:
        """What the kernel put in place of its sockets and the grader refused to follow."""
        sockets = getattr(self, "_sandbox_sockets", None)
        return list(sockets.refused) if sockets else []

    def exit_reason(self) -> str | None:
        record = sandbox.exit_record(getattr(self, "_private_dir", ""))
        return record["reason"] if record else None

    async def _async_cleanup_resources(self, restart: bool = False) -> None:
        await super()._async_cleanup_resources(restart=restart)
        for name in ("_relay", "_sandbox_sockets"):
            if getattr(self, name, None) is not None:
                getattr(self, name).close()
        # a launcher killed with its kernel cannot remove its pids cgroup (as root): do it here
        if getattr(self, "_launcher_pid", None):
            sandbox.remove_cgroup(self._launcher_pid)
        if not restart:
            for folder in (getattr(self, "_private_dir", None),
                           getattr(self, "_staging_dir", None)):
                if folder:
                    shutil.rmtree(folder, ignore_errors=True)


def _copy_without_notebooks(source: Path, dest: Path) -> Path:
    """The submission's files for the kernel: its regular files and folders, but notebooks
    (no link, socket, pipe or device: a pipe would block the copy)."""
    def ignore(folder, names):
        def kept(name: str) -> bool:
            mode = os.lstat(os.path.join(folder, name)).st_mode
            return stat.S_ISREG(mode) or stat.S_ISDIR(mode)

        return [n for n in names if n.endswith(".ipynb") or n == ".ipynb_checkpoints"
                or not kept(n)]

    shutil.copytree(source, dest, symlinks=False, ignore=ignore, dirs_exist_ok=True)
    return dest


def student_names(solution_sources: list[str]) -> set[str]:
    """The names an exercise declares as the student's: what its solution cells (as released)
    define at their top level (functions, classes, assigned names). A test cell's other names
    must come from the instructor's own cells; they are never looked up in the kernel."""
    names: set[str] = set()
    for source in solution_sources:
        try:
            tree = ast.parse(source)
        except SyntaxError:
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names.update(n.id for t in targets for n in ast.walk(t)
                             if isinstance(n, ast.Name))
    return names


def _grade_id(cell) -> str | None:
    return cell.metadata.get("nbgrader", {}).get("grade_id")


def _gradebook_sources(resources) -> dict:
    """{grade_id: {source, locked, grade, solution}} of the notebook's cells as released,
    from the gradebook (the instructor's copy, not the submission's)."""
    from nbgrader.api import Gradebook, MissingEntry

    meta = resources.get("nbgrader", {})
    if not meta.get("db_url"):
        return {}
    with Gradebook(meta["db_url"]) as gb:
        try:
            notebook = gb.find_notebook(meta["notebook"], meta["assignment"])
        except MissingEntry:
            return {}
        graded = {c.name for c in notebook.grade_cells}
        solutions = {c.name for c in notebook.solution_cells}
        return {c.name: {"source": c.source, "locked": bool(c.locked),
                         "grade": c.name in graded, "solution": c.name in solutions,
                         "code": c.cell_type == "code"}
                for c in notebook.source_cells}


# What the checker may use, per notebook: it runs the instructor's code on what the kernel
# sends, so a submission can make it work hard (huge values, many call-backs); these bound it.
CHECKER_LIMITS = {"cpu_seconds": 1800, "wall_seconds": 3600, "memory_bytes": 3072 * sandbox.MiB,
                  "processes": 256, "open_files": 256, "file_bytes": 16 * sandbox.MiB,
                  "workdir_bytes": 16 * sandbox.MiB, "tmp_bytes": 64 * sandbox.MiB}
KERNEL_SOCKETS = "/tmp/kernel"   # where the checker's sandbox sees the relayed sockets


class _Checker:
    """The checker process (`python -m course_grader.checker`), one per notebook.

    With `confined` it runs in a sandbox of its own (`course_grader.sandbox`: read-only
    files, no network, no privileges, its memory, CPU time and processes limited by
    CHECKER_LIMITS) and reaches the kernel's sockets through a `relay.Relay`; otherwise it
    runs as the grading user with the same memory and CPU limits.

    A checker that stops answers every later request with one verdict, whose kind says whose
    fault it was. Until a test was sent to it, nothing of the student's had reached it: a
    checker that never answered `connect`, or died before its first test (an import that
    fails, a sandbox that does not start, a course folder it cannot read), is the grading
    machine's fault, kind "machine", and the message quotes the checker's own last words
    (its stderr, and its sandbox launcher's). Once a test was sent, it may have been killed
    by its limits judging the student's values: kind "grader", with a message for the
    student; its last words then go to the grader's log alone."""

    def __init__(self, connection_info: dict, *, cwd: str, timeout: float,
                 student_names: list[str], confined: bool) -> None:
        """Start the checker and send it the kernel's address; its answer is read at the
        first `ask`, so that its start (a Python with PyTorch, in a sandbox: about a second)
        overlaps the kernel's running the submission's cells."""
        self._log = tempfile.TemporaryFile()   # its stderr (confined: the launcher's)
        self._folder = tempfile.mkdtemp(prefix="course-checker-")
        self._relay = None
        self.failed: str | None = None
        self._failed_kind = "grader"
        self._judging = False   # a test was sent: the student's values may have reached it
        self._started = time.monotonic()
        env = dict(os.environ, MPLBACKEND="Agg")
        limits = sandbox.Limits(**CHECKER_LIMITS)
        # -P: `-m` puts the working folder first on sys.path, and unconfined that folder is
        # the submission's: its json.py or torch.py would be imported by the judge itself
        cmd = [sys.executable, "-P", "-m", "course_grader.checker"]
        if confined:
            from course_grader.relay import Relay

            folder = Path(self._folder)
            for name in ("work", "runtime", "relay"):
                (folder / name).mkdir()
            kernel_dir, base = os.path.split(str(connection_info["ip"]))
            names = [f"{base}-{connection_info[k]}" for k in
                     ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")]
            self._relay = Relay(kernel_dir, folder / "relay", names)
            connection_info = dict(connection_info, ip=f"{KERNEL_SOCKETS}/{base}")
            package_dir = str(Path(__file__).resolve().parent)
            cmd = sandbox.wrap(cmd, workdir=folder / "work", runtime_dir=folder / "runtime",
                               limits=limits, importable=None, stdio=True,
                               binds=[(folder / "relay", KERNEL_SOCKETS),
                                      (package_dir, package_dir)])
            cwd = str(folder / "work")
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self._log, cwd=cwd, env=env, text=True,
                                     preexec_fn=None if confined else _limit(limits))
        self._connecting = True
        self._exchange({"op": "connect", "connection_info": connection_info,
                        "student_names": student_names}, answer=False)

    def ask(self, request: dict, wait: float = 300) -> dict:
        if self._connecting:
            answer = self._exchange(None, wait=wait)
            self._connecting = False
            if not self.failed and not answer.get("ok"):
                self._stopped(str(answer.get("message", "it could not connect to the kernel")),
                              "could not connect to the kernel")
        return self._exchange(request, wait=wait)

    def _exchange(self, request: dict | None, *, wait: float = 300,
                  answer: bool = True) -> dict:
        """Send `request` (None: nothing) and, with `answer`, read the checker's next line."""
        if self.failed:
            return {"ok": False, "passed": False, "kind": self._failed_kind,
                    "message": self.failed}
        try:
            if request is not None:
                if self.proc.poll() is not None:
                    raise RuntimeError("it had exited")
                self.proc.stdin.write(json.dumps(request) + "\n")
                self.proc.stdin.flush()
                self._judging = self._judging or request.get("op") == "test"
            if not answer:
                return {}
            ready, _, _ = select.select([self.proc.stdout], [], [], wait)
            line = self.proc.stdout.readline() if ready else ""
            if not line and ready:   # its output closed: it is ending by itself
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(timeout=10)
            if not line:
                raise RuntimeError("no answer" if ready else f"no answer within {wait:.0f} s")
            return json.loads(line)
        except Exception as err:  # noqa: BLE001 - the checker is gone or stuck
            self._stopped(str(err), "could not start" if self._connecting else
                          "stopped before it judged anything")
            return {"ok": False, "passed": False, "kind": self._failed_kind,
                    "message": self.failed}

    def _stopped(self, error: str, stage: str) -> None:
        """Stop the checker and set `failed` (and its kind) from why it stopped: `error`, or
        what its sandbox's launcher recorded, and what it wrote last. `stage`: what it
        failed to do, when no test had been sent to it yet."""
        exited = self.proc.poll()   # how it ended by itself, if it did
        self._end_process()
        # the launcher's record, if any, once the sandbox ended by itself
        record = sandbox.exit_record(Path(self._folder) / "runtime") if exited is not None \
            else None
        why = record["reason"] if record else error if exited is None else _ended(exited)
        said = self._last_words()
        self.close()
        # its wall-time limit counts from the submission's first cell: a notebook of slow
        # cells can use it up before any test, and that is the submission's doing
        timed_out = time.monotonic() - self._started >= CHECKER_LIMITS["wall_seconds"]
        if not self._judging and not timed_out:
            self._failed_kind = "machine"
            self.failed = (f"the grading machine failed, not this submission: the grader's "
                           f"checker {stage} ({why}); it said: {said or '(nothing)'}")
            return
        import logging

        logging.getLogger(__name__).warning("the grader's checker stopped (%s); it said: %s",
                                            why, said or "(nothing)")
        self.failed = (f"the grader's checker stopped ({why}); a value your code returned "
                       f"or a function it called back may have been too large")

    def _last_words(self) -> str:
        """The last CHECKER_LOG_LINES lines the checker wrote to stderr (confined: the
        sandbox's log of it, then its launcher's own), on one line."""
        texts = []
        with contextlib.suppress(OSError):
            with open(Path(self._folder) / "runtime" / sandbox.KERNEL_LOG, "rb") as log:
                texts.append(_tail(log.fileno()))
        texts.append(_tail(self._log.fileno()))   # pread: the checker shares its offset
        lines = [line.strip() for text in texts for line in text.splitlines()
                 if line.strip(" ^~")]   # not the marks under a traceback's line
        return " | ".join(lines[-CHECKER_LOG_LINES:])[-CHECKER_LOG_CHARS:]

    def _end_process(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"op": "stop"}) + "\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except Exception:  # noqa: BLE001
                self.proc.kill()
                with contextlib.suppress(Exception):
                    self.proc.wait(timeout=10)

    def close(self) -> None:
        self._end_process()
        if self._relay is not None:
            self._relay.close()
            self._relay = None
        if not self._log.closed:
            self._log.close()
        shutil.rmtree(self._folder, ignore_errors=True)


# What a stopped checker's message quotes of its log: its last lines, at most this long.
CHECKER_LOG_LINES = 6
CHECKER_LOG_CHARS = 1500


def _tail(fd: int, size: int = 16384) -> str:
    """The last `size` bytes of the open file `fd`, read without moving its offset."""
    end = os.fstat(fd).st_size
    return os.pread(fd, min(size, end), max(0, end - size)).decode(errors="replace")


def _ended(returncode: int) -> str:
    """How a process that exited with `returncode` (Popen's) ended."""
    import signal

    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"it was killed by {signal.Signals(-returncode).name}"
    return f"it exited with status {returncode}"


def _limit(limits: sandbox.Limits):
    """preexec_fn: the checker's memory and CPU limits when it runs unconfined."""
    import resource

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_bytes, limits.memory_bytes))
        resource.setrlimit(resource.RLIMIT_CPU, (limits.cpu_seconds, limits.cpu_seconds + 5))

    return apply


def _error(ename: str, evalue: str, shown: str | None = None) -> NotebookNode:
    """An error output whose whole traceback is the message, or `shown`: the checker's
    verdict wrapped to 80 columns (importing the check convention here to wrap it would load
    PyTorch into every autograde process)."""
    return NotebookNode(output_type="error", ename=ename, evalue=evalue,
                        traceback=f"{ename}: {shown or evalue}".splitlines())


def _kind(cell, sources: dict) -> str:
    """"test" for a graded test cell, "setup" for a read-only cell of the instructor's code,
    "student" for anything else, judged by the gradebook (a submission's metadata could
    claim anything)."""
    if cell.cell_type != "code":
        return "markdown"
    grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
    source = sources.get(grade_id)
    if source is None or source["solution"] or not source.get("code", True):
        return "student"
    if source["grade"]:
        return "test"
    return "setup" if source["locked"] else "student"


class SafeExecute(Execute):
    """nbgrader's Execute, made safe for untrusted notebooks.

    * the student's cells run in a kernel in `course_grader.sandbox` (unless `sandbox = False`,
      the unsafe flag), which holds a copy of the submission's folder without any notebook
      and a course_utils package without the reference code (`reachable_modules`);
    * the test cells never run there: `course_grader.checker` runs them in a separate process,
      with their source from the gradebook, calling the student's functions in the kernel and
      judging the plain values they return; the cell's outputs are the checker's verdict
      (and what the student's code printed, as plain text), so nothing the kernel does can
      forge a pass, and no hidden test reaches the kernel;
    * the instructor's read-only set-up cells run in both places: in the kernel in the
      submission's order, in the checker (with the test cells) in the source notebook's
      order, after all the submission's own cells have run;
    * each cell's output is capped at `max_output_chars` (a single huge line included) and
      cleaned of control characters and invalid text;
    * a cell that outlives the timeout and ignores the interrupt, or that kills the kernel,
      gets an error saying so; the kernel is stopped and every later cell of the submission
      is marked as not run; a new kernel runs again the cells that had finished
      (`max_replays`), so that the tests judge what came before and every item gets a score.
    """

    sandbox = Bool(True, help="run student code in course_grader.sandbox").tag(config=True)
    max_output_chars = Integer(20_000, help="output kept per cell, in characters").tag(
        config=True)
    reachable_modules = List(
        Unicode(), default_value=["course_utils._checks", "course_utils.data",
                                  "course_utils.grading", "course_utils.progress",
                                  "course_utils.training"],
        help="the course_utils modules a student's kernel may import when graded (never one "
             "that implements what an exercise asks)").tag(config=True)
    max_replays = Integer(2, help="times a stopped kernel is started again (running the "
                                  "cells that had finished) so the tests can go on").tag(
        config=True)
    reachable_by_unit = Dict(
        help="{unit: [more course_utils modules]} that a unit's kernel may import too").tag(
        config=True)
    # Once the tests have run, the student's kernel holds nothing to wait for (its atexit
    # hooks are the student's): it is stopped at once, a quarter of a second per submission.
    shutdown_kernel = Enum(["graceful", "immediate"], default_value="immediate",
                           help="how the kernel is stopped after the last cell").tag(config=True)
    # `timeout` is each cell's limit in CPU seconds of the kernel (course_grader.cpu_watch);
    # wall time only backstops it, this many times longer
    backstop_factor = Float(3.0, help="a cell's wall-clock backstop, in multiples of its "
                                      "CPU-time limit (timeout)").tag(config=True)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.sandbox:
            problem = _sandbox_problem()
            if problem:
                raise SandboxUnavailable(f"Refusing to autograde: {problem}. {UNSAFE_HINT}")
            self.kernel_manager_class = SandboxedKernelManager

    def create_kernel_manager(self):
        km = super().create_kernel_manager()
        if isinstance(km, SandboxedKernelManager):
            km.reachable = [*self.reachable_modules,
                            *self.reachable_by_unit.get(self._unit, [])]
        return km

    # -- the notebook
    def preprocess(self, nb, resources, km=None):
        self._stopped: str | None = None
        self._output_used: dict[int, int] = {}
        self._unit = resources.get("nbgrader", {}).get("assignment", "")
        self._path = resources.get("metadata", {}).get("path") or os.getcwd()
        self._sources = _gradebook_sources(resources)
        self._student_names = sorted(student_names(
            [s["source"] for s in self._sources.values() if s["solution"] and s["code"]]))
        self._checker: _Checker | None = None
        self._watch = CpuWatch(None, None)   # the current cell's (`_cpu_watch`)
        self._stopped_ename = "KernelStopped"
        self._setup_problem = ""
        self._ran: list[int] = []   # cells that ran in the kernel to the end, for a replay
        self._setups: list[str] = []   # set-up sources run in the checker, in order
        self._replays = 0
        self._cells_begun = False
        try:
            return super().preprocess(nb, resources, km=km)
        except Exception as err:  # noqa: BLE001 - see below
            if self._cells_begun:
                raise
            # the kernel did not start, before any of the submission's code ran: the machine's
            # fault (a sandbox that cannot start, a course it cannot read), never a 0
            self.log.error("the kernel could not start: %s", err)
            why = (f"the grading machine failed, not this submission: the kernel could not "
                   f"start ({type(err).__name__}: {str(err)[:300]}); it is graded again")
            for cell in nb.cells:
                if _kind(cell, self._sources) == "test":
                    cell.outputs = [_error(MACHINE_FAULT, why)]
            return nb, resources
        finally:
            if self._checker is not None:
                self._checker.close()

    def preprocess_cell(self, cell, resources, index):
        self._cells_begun = True
        cell, resources = self._run_in_kernel(cell, resources, index)
        if index == len(self.nb.cells) - 1:
            self._grade_in_source_order()
        return cell, resources

    def _run_in_kernel(self, cell, resources, index):
        """The submission's own cells, in its order, in the kernel. Test cells wait: they run
        at the end (`_grade_in_source_order`), whatever their place in the submission."""
        kind = _kind(cell, self._sources)
        if kind == "markdown":
            return cell, resources
        if kind == "test":
            cell.outputs, cell.execution_count = [], None
            return cell, resources
        if self._stopped:
            cell.outputs = [_error("KernelStopped", f"Not run: {self._stopped}.")]
            return cell, resources
        self._checker_for()   # started now, it gets ready while the kernel works
        self._output_used[index] = 0
        self._watch = self._cpu_watch()
        try:
            with self._watch.running():
                cell, resources = super().preprocess_cell(cell, resources, index)
        except (CellTimeoutError, DeadKernelError) as err:
            self._stop(self._why(err))
            cell.outputs.append(_error(self._stopped_ename, self._stopped_verdict))
            return cell, resources
        if self._stop_if_links_refused():
            cell.outputs.append(_error("KernelStopped", self._stopped_verdict))
        elif self._watch.fired:   # interrupted in time: the kernel goes on without this cell
            cell.outputs.append(_error("KernelStopped", f"This cell {self._watch.fired}."))
        elif any(o.get("ename") == "CellTimeoutError" for o in cell.outputs) \
                and self._watch.busy_machine():   # the backstop, reached under the CPU limit
            cell.outputs.append(_error(MACHINE_FAULT, self._busy_machine("this cell")))
        else:
            self._ran.append(index)
        return cell, resources

    def _stop_if_links_refused(self) -> bool:
        """Stop the kernel for good (no replay) if it put links in place of its sockets."""
        refused = self.km.refused_links() if isinstance(self.km, SandboxedKernelManager) else []
        if not refused or self._stopped:
            return False
        self._replays = self.max_replays
        self._stop(f"your code put something else in place of the kernel's sockets, which the "
                   f"grader refused to follow ({'; '.join(refused)})")
        return True

    def _cpu_watch(self) -> CpuWatch:
        """A watch over the current kernel's processes, for one cell (`cpu_watch`)."""
        provisioner = getattr(self.km, "provisioner", None)
        return CpuWatch(getattr(provisioner, "pid", None), self.timeout)

    def _get_timeout(self, cell):
        """nbclient's wall-clock timeout is the backstop; the limit is in CPU time."""
        timeout = super()._get_timeout(cell)
        return None if timeout is None else int(timeout * self.backstop_factor)

    def _backstop(self) -> float:
        return (self.timeout or 120) * self.backstop_factor

    def _busy_machine(self, what: str) -> str:
        wall, cpu, wait = self._watch.used()
        return (f"the grading machine was too busy: {what} reached the wall-clock backstop of "
                f"{self._backstop():g} s having used {cpu:.0f} s of CPU time (the limit is "
                f"{self.timeout} s) and waited {wait:.0f} s for a CPU; it is graded again")

    # -- test cells, in the checker
    def _grade_in_source_order(self) -> None:
        """Run the instructor's set-up and test cells in the checker, in the order of the
        source notebook (never the submission's: a test cell moved, duplicated or deleted
        changes nothing), once each, and give every copy of a test cell its verdict."""
        verdicts: dict[str, list] = {}
        for grade_id, source in self._sources.items():
            if not source["code"] or source["solution"]:
                continue
            if self._stopped and not self._restart_and_replay():
                if source["grade"]:
                    verdicts[grade_id] = [_error("KernelStopped", f"Not run: {self._stopped}.")]
                continue
            if source["grade"]:
                verdicts[grade_id] = self._run_test(grade_id, source["source"])
            elif source["locked"]:
                self._run_setup(self._checker_for(), source["source"])
                self._setups.append(source["source"])
        for cell in self.nb.cells:
            if _kind(cell, self._sources) == "test":
                cell.outputs = copy.deepcopy(verdicts.get(_grade_id(cell), []))
                cell.execution_count = None

    def _restart_and_replay(self) -> bool:
        """After the kernel was stopped: a new kernel that has run the submission's cells that
        had run to the end before the stop (the cells from the one that hung or died on are
        not run), so that the tests judge what the notebook had defined by then. At most
        `max_replays` times per notebook."""
        if self._replays >= self.max_replays:
            return False
        self._replays += 1
        self.log.warning("Restarting the kernel to grade what ran before: %s", self._stopped)
        if self._checker is not None:
            self._checker.close()
            self._checker = None
        try:
            if self.kc is not None:
                self.kc.stop_channels()
            with contextlib.suppress(Exception):   # a stopped manager cannot start again
                if run_sync(self.km.is_alive)():
                    run_sync(self.km.shutdown_kernel)(now=True)
            self.km = self.create_kernel_manager()
            self.start_new_kernel()
            self.start_new_kernel_client()
        except Exception as err:  # noqa: BLE001 - grading goes on without the kernel
            self.log.warning("the kernel could not be restarted: %s", err)
            return False
        stopped, self._stopped = self._stopped, None
        for index in self._ran:
            original = self.nb.cells[index]
            self._watch = self._cpu_watch()
            try:
                with self._watch.running():
                    super().preprocess_cell(copy.deepcopy(original), self.resources, index)
            except (CellTimeoutError, DeadKernelError) as err:
                self._stop(f"{stopped}; run again to grade what came before, it stopped again "
                           f"({self._why(err)})")
                return False
            finally:
                self.nb.cells[index] = original   # the first run's outputs are the record
        return True

    def _checker_for(self) -> _Checker:
        """The checker of the current kernel; a new one (after a restart) first runs the
        set-up cells that the old one had run."""
        if self._checker is None:
            info = self.km.get_connection_info()
            info = {k: v.decode() if isinstance(v, bytes) else v for k, v in info.items()}
            self._checker = _Checker(info, cwd=str(self._path), timeout=self.timeout or 120,
                                     student_names=self._student_names,
                                     confined=isinstance(self.km, SandboxedKernelManager))
            for source in self._setups:
                self._run_setup(self._checker, source)
        return self._checker

    def _run_setup(self, checker: _Checker, source: str) -> None:
        answer = checker.ask({"op": "setup", "source": source})
        if not answer.get("ok"):
            self._setup_problem = str(answer.get("message", ""))[:500]
            self.log.warning("a set-up cell failed in the checker: %s", self._setup_problem)

    def _run_test(self, grade_id: str, source: str) -> list:
        """The outputs of one test cell: what the student's code printed and the verdict."""
        if self._stop_if_links_refused():
            return [_error("KernelStopped", f"Not run: {self._stopped}.")]
        hidden = sorted(hidden_line_numbers(source, "BEGIN HIDDEN TESTS", "END HIDDEN TESTS"))
        checker = self._checker_for()
        self._watch = self._cpu_watch()
        backstop = self._backstop()
        with self._watch.running():
            verdict = checker.ask({"op": "test", "source": source, "hidden_lines": hidden,
                                   "timeout": backstop}, wait=backstop + 60)
        verdict = self._judge_time(verdict)
        outputs = []
        printed = _clean(str(verdict.get("stdout", "")))
        if printed:
            outputs.append(NotebookNode(output_type="stream", name="stdout",
                                        text=printed[: self.max_output_chars]))
        kind = verdict.get("kind")
        if not verdict.get("passed"):
            message = _clean(str(verdict.get("message") or "the test failed"))
            shown = _clean(str(verdict.get("shown") or message))
            if self._setup_problem and kind in ("crash", "grader"):
                note = f" (the grader's set-up failed too: {self._setup_problem})"
                message, shown = message + note, shown + note
            ename = {"timeout": "KernelStopped", "kernel": "KernelStopped",
                     "stopped": "KernelStopped", "grader": "GraderError",
                     "machine": MACHINE_FAULT}.get(kind, "GradingFailure")
            outputs.append(_error(ename, message, shown))
        if kind == "timeout":
            self._recover_after_timeout()
        elif kind == "kernel":
            self._recover_after_loss()
        return outputs

    def _judge_time(self, verdict: dict) -> dict:
        """A test's verdict, corrected for what the CPU watch saw and what the kernel did to
        its sockets: over the CPU limit is the student's; the wall-clock backstop reached
        under it on a busy machine is the machine's; a kernel that put links in place of its
        sockets (which the grader refused) is the student's, whatever the checker says."""
        if verdict.get("passed"):
            return verdict
        if self._stop_if_links_refused():
            return {**verdict, "kind": "stopped", "shown": None, "message": self._stopped}
        if self._watch.fired:
            alive = run_sync(self.km.is_alive)()
            return {**verdict, "kind": "timeout" if alive else "kernel", "shown": None,
                    "message": f"while a test ran, your code {self._watch.fired}"}
        if verdict.get("kind") == "timeout" and self._watch.busy_machine():
            self._recover_after_timeout()
            return {**verdict, "kind": "machine", "shown": None,
                    "message": self._busy_machine("a test")}
        return verdict

    def _recover_after_timeout(self) -> None:
        """Interrupt the student's code; if the kernel does not come back, stop it."""
        try:
            run_sync(self.km.interrupt_kernel)()
        except Exception as err:  # noqa: BLE001
            self.log.debug("interrupt failed: %s", err)
        if self._kernel_answers(wait=15):
            self._checker_for().ask({"op": "recover"})
            return
        self._stop(f"while a test ran, your code {self._watch.fired}" if self._watch.fired else
                   f"a test ran longer than the backstop of {self._backstop():g} s and the kernel "
                   f"did not stop when interrupted, so it was stopped")

    def _recover_after_loss(self) -> None:
        if not run_sync(self.km.is_alive)():
            self._stop(self._why(DeadKernelError("dead")))
        elif self._kernel_answers(wait=15):
            self._checker_for().ask({"op": "recover"})
        else:
            self._stop("the kernel stopped answering the grader")

    def _kernel_answers(self, wait: float) -> bool:
        try:
            msg_id = self.kc.execute("", silent=True, store_history=False)
            return run_sync(self._shell_reply)(msg_id, wait) is not None
        except Exception:  # noqa: BLE001
            return False

    async def _shell_reply(self, msg_id: str, wait: float):
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            try:
                msg = await ensure_async(self.kc.shell_channel.get_msg(
                    timeout=max(0.1, deadline - time.monotonic())))
            except Exception:  # noqa: BLE001 - queue.Empty
                return None
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg
        return None

    # -- stopping a kernel that hangs or dies
    def _why(self, err: Exception) -> str:
        self._stopped_ename = "KernelStopped"
        if self._watch.fired:
            return f"this cell {self._watch.fired}"
        if isinstance(err, CellTimeoutError) and self._watch.busy_machine():
            self._stopped_ename = MACHINE_FAULT
            return self._busy_machine("this cell")
        if isinstance(err, DeadKernelError):
            reason = None
            if isinstance(self.km, SandboxedKernelManager):
                reason = self.km.exit_reason()
            return ("the kernel died while this cell ran"
                    + (f" ({reason})" if reason else " (it exited, crashed or hit a limit)"))
        return (f"this cell ran longer than the backstop of {self._backstop():g} s without "
                f"using its {self.timeout} s of CPU time (it slept or waited) and did not stop "
                f"when interrupted, so the kernel was stopped")

    def _stop(self, reason: str) -> None:
        self._stopped = reason
        self._stopped_verdict = (f"{reason}. The cells after it were not run; the tests judge "
                                 f"what your notebook defined before it.")
        self.log.warning("Stopping the kernel: %s", reason)
        try:
            run_sync(self.km.shutdown_kernel)(now=True)
        except Exception as err:  # noqa: BLE001 - it may be dead already
            self.log.debug("shutdown after stop: %s", err)

    # -- output limits
    def output(self, outs, msg, display_id, cell_index):
        content = msg.get("content", {})
        used = self._output_used.get(cell_index, 0)
        budget = self.max_output_chars - used
        if budget <= 0:
            return None
        size = clip_output(msg.get("msg_type", ""), content, budget, self.max_output_chars)
        self._output_used[cell_index] = used + size
        return super().output(outs, msg, display_id, cell_index)


def _clean(text: str) -> str:
    return _CONTROL.sub("\ufffd", text) if isinstance(text, str) else str(text)


def clip_output(msg_type: str, content: dict, budget: int, limit: int) -> int:
    """Clean `content`, the content of one output message of type `msg_type`, in place and cut
    it to `budget` characters; return the size kept (everything that is left of the budget
    once something had to be cut). Cleaning replaces each control character and lone
    surrogate with U+FFFD; a cut ends with a note that names `limit`, the limit per cell.
    Only what is kept is cleaned: a 50 MB line costs a slice, not a pass over 50 MB."""
    note = (f"\n[... output cut here: a cell may show at most {limit} characters; "
            f"the rest was discarded ...]\n")
    if msg_type == "stream":
        text = content.get("text", "")
        text = text if isinstance(text, str) else str(text)
        if len(text) > budget:  # cut, then clean what is kept (one character for one)
            content["text"] = _clean(text[:budget]) + note
            return budget
        content["text"] = _clean(text)
        return len(text)
    if msg_type in ("display_data", "execute_result", "update_display_data"):
        data = content.get("data", {})
        size = sum(len(v) if isinstance(v, str) else len(json.dumps(v)) for v in data.values())
        if size > budget:
            content["data"] = {"text/plain": note.strip()}
            content["metadata"] = {}
            return budget
        if "text/plain" in data:
            data["text/plain"] = _clean(data["text/plain"])
        return size
    if msg_type == "error":
        content["ename"] = _clean(content.get("ename", ""))[:200]
        content["evalue"] = _clean(content.get("evalue", ""))[: max(200, budget // 2)]
        lines, kept = [], 0
        for line in content.get("traceback", []):
            line = _clean(line)
            if kept + len(line) > budget:
                lines.append(note.strip())
                break
            lines.append(line)
            kept += len(line)
        content["traceback"] = lines
        return kept + len(content["evalue"])
    return 0


def _as_released(source: str) -> str:
    """A cell's source as `nbgrader generate_assignment` releases it (hidden tests removed)."""
    from nbgrader.preprocessors import ClearHiddenTests

    cell = nbformat_v4.new_code_cell(source)
    ClearHiddenTests()._remove_hidden_test_region(cell)
    return cell.source


class RestoreCells(OverwriteCells):
    """nbgrader's OverwriteCells, which puts back the test cells a submission deleted or
    stripped of metadata, made robust: a cell goes after the nearest earlier cell of the
    source that is still present (nbgrader's own version fails with a KeyError when the
    cell just before is missing too), and read-only set-up cells (imports) come back too."""

    add_missing_cells = Bool(True).tag(config=True)

    def preprocess(self, nb, resources):
        # DeduplicateIds empties the nbgrader metadata of a duplicated cell; nbgrader's own
        # code then fails on a cell with metadata but no grade_id
        for cell in nb.cells:
            if not cell.get("metadata", {}).get("nbgrader", True):
                del cell.metadata["nbgrader"]
        return super().preprocess(nb, resources)

    def add_missing_grade_cells(self, nb, resources):
        source_nb = self.gradebook.find_notebook(self.notebook_id, self.assignment_id)
        order = [cell.name for cell in source_nb.source_cells]
        by_name = {cell.name: cell for cell in source_nb.source_cells}
        grade_cells = {cell.name: cell for cell in source_nb.grade_cells}
        solution_ids = {cell.name for cell in source_nb.solution_cells}
        for position, name in enumerate(order):
            source = by_name[name]
            restorable = name in grade_cells or (source.locked and name not in solution_ids)
            present = self._present(nb)
            if not restorable or name in present:
                continue
            where = next((present[prev] + 1 for prev in reversed(order[:position])
                          if prev in present), 0)
            if name in grade_cells:
                cell = self.missing_cell_transform(source, grade_cells[name].max_score,
                                                   is_solution=name in solution_ids)
            else:
                cell = self._locked_cell(source)
            self.log.warning("Cell %s was missing from the submission; put back", name)
            nb.cells.insert(where, cell)
        return nb, resources

    def preprocess_cell(self, cell, resources, cell_index):
        # A test cell as released lacks its hidden tests, so its checksum never matches the
        # gradebook's and nbgrader warns "checksum ... has changed!" for every honest
        # submission. Put the source back quietly when the cell is the release's; an edited
        # cell still gets the warning (and its source back) from nbgrader.
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id and cell.metadata.nbgrader.get("locked"):
            from nbgrader.api import MissingEntry

            try:
                source = self.gradebook.find_source_cell(grade_id, self.notebook_id,
                                                         self.assignment_id)
            except MissingEntry:
                source = None
            if source is not None and source.locked and \
                    cell.source == _as_released(source.source):
                cell.source = source.source
        return super().preprocess_cell(cell, resources, cell_index)

    @staticmethod
    def _present(nb) -> dict[str, int]:
        return {cell.metadata["nbgrader"]["grade_id"]: index
                for index, cell in enumerate(nb.cells)
                if cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")}

    def _locked_cell(self, source) -> NotebookNode:
        note = self.missing_cell_notification.format(cell_id=source.name)
        meta = {"deletable": False, "editable": False,
                "nbgrader": {"grade": False, "grade_id": source.name, "locked": True,
                             "solution": False, "checksum": source.checksum,
                             "schema_version": 3}}
        if source.cell_type == "code":
            return nbformat_v4.new_code_cell("# " + note.strip() + "\n" + source.source,
                                             metadata=meta)
        return nbformat_v4.new_markdown_cell(note + source.source, metadata=meta)
