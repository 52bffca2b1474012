"""A fault of the grading machine is never a student's 0 (`course_grader.autograde`).

Before grading a unit, its reference solution is graded through the real sandbox and checker;
unless it gets full marks the run stops, grading nobody, and says why in the checker's own
words. The grading machines here are broken for real:

* one venv shared by two clones of the course, its editable install pointing at the other:
  the sandboxed checker cannot import the course;
* a course cloned with umask 077 (every folder 0700, every file 0600) and graded as root,
  where the sandbox runs as `nobody`, which cannot read it;
* a checker that can no longer start once the self-check has passed (its module made
  unreadable mid-run): each submission is graded again, then marked "needs-regrading", not
  scored, and the gradebook keeps its earlier grade.

The last two grade a clone whose own venv is a hard-linked copy of this one (cheap: no file is
copied) with the editable install pointed at the clone, as `make setup` would make it there.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT, tool_env
from nbgrader.api import Gradebook, MissingEntry

from course_grader import report, sandbox
from course_grader.autograde import ATTEMPTS, NEEDS_REGRADING, run_with_retries
from course_grader.corpus import UNIT, released, solve, write
from course_grader.nbgrader_hooks import MACHINE_FAULT, _Checker
from course_grader.worker import Graded, machine_faults, read_tree

pytestmark = pytest.mark.skipif(bool(sandbox.unavailable_reason()),
                                reason=f"needs the sandbox: {sandbox.unavailable_reason()}")
CODE = ("course_grader", "course_utils")


def clone(fresh_course: Path, dest: Path) -> Path:
    """A released course at `dest` with its own copy of the course's code, as a clone holds
    it, and one correct submission (alice's)."""
    shutil.copytree(fresh_course, dest)
    for package in CODE:
        shutil.copytree(ROOT / package, dest / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    write(solve(dest, released(dest)), dest / "submitted" / "alice" / UNIT)
    return dest


def autograde(course: Path, python: str = sys.executable, *args: str):
    return subprocess.run([python, "-m", "course_grader.autograde", UNIT, *args], cwd=course,
                          env=tool_env(), capture_output=True, text=True, timeout=900)


def assert_nobody_graded(course: Path) -> None:
    assert not (course / "autograded").exists()
    assert not (course / "autograde_status").exists()
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        with pytest.raises(MissingEntry):
            gb.find_submission(UNIT, "alice")


def test_a_venv_whose_editable_install_points_at_another_clone_stops_the_run(
        fresh_course, tmp_path):
    """The clone's own code grades (`python -m` from the clone), but the sandboxed checker
    imports the course through the venv's editable install, which names the other clone
    (this checkout), not mounted in its sandbox: every correct answer scored 0 with "a value
    your code returned ... may have been too large". Now nobody is graded, and the one error
    quotes the checker's own."""
    course = clone(fresh_course, tmp_path / "other-clone")
    proc = autograde(course)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("Refusing to autograde") == 1, proc.stderr
    assert f"Refusing to autograde {UNIT}: its reference solution" in proc.stderr
    assert f"{MACHINE_FAULT}: the grading machine failed" in proc.stderr
    assert "the grader's checker could not start (it exited with status 1)" in proc.stderr
    assert "No module named 'course_grader'" in proc.stderr   # the checker's own words
    assert "too large" not in proc.stderr and "alice" not in proc.stdout
    assert_nobody_graded(course)


@pytest.fixture(scope="module")
def own_venv(tmp_path_factory):
    """A venv whose editable install of the course points at `<base>/course`: a hard-linked
    copy of this one (which must be on the same file system) with its finder rewritten.
    Yields (python, course folder)."""
    finders = list(Path(sys.prefix).glob("lib/python*/site-packages/__editable__*course*finder.py"))
    if sys.prefix == sys.base_prefix or len(finders) != 1:
        pytest.skip("needs the course installed in a venv in editable mode (make setup)")
    base = tmp_path_factory.mktemp("own-venv")
    venv = base / "venv"
    if subprocess.run(["cp", "-al", sys.prefix, str(venv)]).returncode != 0:
        shutil.rmtree(venv, ignore_errors=True)
        pytest.skip("the venv cannot be hard-linked into the temporary folder")
    try:
        finder = venv / finders[0].relative_to(sys.prefix)
        text = finder.read_text().replace(f"'{ROOT}/", f"'{base / 'course'}/")
        finder.unlink()   # a new file: the hard link is this venv's own finder
        finder.write_text(text)
        assert str(ROOT) not in text
        yield str(venv / "bin" / "python"), base / "course"
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="grades as root (the sandbox runs as nobody)")
def test_a_course_that_only_its_owner_can_read_graded_as_root_stops_the_run(
        fresh_course, own_venv):
    python, course = own_venv
    shutil.rmtree(course, ignore_errors=True)
    clone(fresh_course, course)
    try:
        subprocess.run(["chmod", "-R", "go-rwx", str(course)], check=True)
        proc = autograde(course, python)
    finally:
        subprocess.run(["chmod", "-R", "go+rX", str(course)], check=True)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.count("Refusing to autograde") == 1, proc.stderr
    assert "the grader's checker could not start" in proc.stderr
    assert f"PermissionError: [Errno 13] Permission denied: '{course}/course_grader" \
        in proc.stderr
    assert_nobody_graded(course)


# Grades, then makes the checker unreadable (as a `git pull` that replaced it with a file of
# the wrong mode might) and grades again in the same process, whose self-check has passed.
BREAK_THE_CHECKER_MID_RUN = """
import os, sys
from course_grader.autograde import main
print("first run:", main([sys.argv[1]]), flush=True)
os.chmod("course_grader/checker.py", 0)
print("second run:", main([sys.argv[1]]), flush=True)
"""


def test_a_checker_that_dies_at_start_after_the_self_check_needs_regrading(
        fresh_course, own_venv):
    python, course = own_venv
    shutil.rmtree(course, ignore_errors=True)
    clone(fresh_course, course)
    proc = subprocess.run([python, "-c", BREAK_THE_CHECKER_MID_RUN, UNIT], cwd=course,
                          env=tool_env(), capture_output=True, text=True, timeout=900)
    (course / "course_grader" / "checker.py").chmod(0o644)
    out = proc.stdout + proc.stderr
    assert "first run: 0" in out and "second run: 3" in out, out
    assert proc.stdout.count(f"{UNIT} self-check: the reference solution got full marks") == 2
    assert "1 need(s) regrading, the grading machine failed" in proc.stdout, out
    entry = json.loads((course / "autograde_status" / f"{UNIT}.json").read_text())["alice"]
    assert (entry["status"], entry["score"]) == (NEEDS_REGRADING, None), entry
    assert entry["reason"].startswith("needs regrading: the grading machine failed, not this "
                                      "submission: the grader's checker could not start")
    assert "Permission denied" in entry["reason"]   # the checker's own words
    assert f"(in each of {ATTEMPTS} attempts)" in entry["reason"]
    # the first run's grade and autograded notebook are left as they were
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        sub = gb.find_submission(UNIT, "alice")
        assert sub.score == sub.max_score == 9.0
    assert machine_faults(read_tree(course / "autograded" / "alice" / UNIT)) == []
    # the instructor's report says so
    row = next(s for s in report.collect(course, UNIT).students if s.student == "alice")
    assert (row.status, row.score) == (NEEDS_REGRADING, 9.0)
    assert "1 needs regrading (the grading machine failed" in report.summary(
        report.collect(course, UNIT))


def _with_verdict(ename: str) -> Graded:
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_code_cell("check()")
    cell.outputs = [nbformat.v4.new_output("error", ename=ename, evalue=f"{ename} here",
                                           traceback=[])]
    nb.cells.append(cell)
    return Graded("s", {f"{UNIT}.ipynb": nbformat.writes(nb).encode()}, failed=False,
                  notes=[], seconds=1.0, worker="here")


def test_a_result_holding_a_machine_fault_is_graded_again():
    students_failure = _with_verdict("GradingFailure")
    results = [_with_verdict(MACHINE_FAULT), students_failure]
    notes: list[str] = []
    assert run_with_retries(lambda task: results.pop(0), "task", notes) is students_failure
    faulty = _with_verdict(MACHINE_FAULT)
    calls = []
    assert run_with_retries(lambda task: calls.append(task) or faulty, "task", notes) is faulty
    assert len(calls) == ATTEMPTS and notes == []
    assert machine_faults(faulty.autograded) == [f"{MACHINE_FAULT} here"]


CONNECTION = {"transport": "tcp", "ip": "127.0.0.1", "shell_port": 1, "iopub_port": 2,
              "stdin_port": 3, "control_port": 4, "hb_port": 5, "key": "",
              "signature_scheme": "hmac-sha256"}


def test_a_checker_that_cannot_start_is_the_machines_fault_in_its_own_words(
        tmp_path, monkeypatch):
    broken = tmp_path / "elsewhere" / "course_grader"
    broken.mkdir(parents=True)
    (broken / "__init__.py").write_text("raise ImportError('the course cannot be read here')\n")
    monkeypatch.setenv("PYTHONPATH", str(broken.parent))
    checker = _Checker(CONNECTION, cwd=str(tmp_path), timeout=30, student_names=[],
                       confined=False)
    verdict = checker.ask({"op": "test", "source": "pass", "hidden_lines": [], "timeout": 30})
    assert verdict["kind"] == "machine" and not verdict["passed"]
    assert verdict["message"].startswith("the grading machine failed, not this submission: "
                                         "the grader's checker could not start (it exited "
                                         "with status 1); it said: ")
    assert verdict["message"].endswith("ImportError: the course cannot be read here")
    assert checker.ask({"op": "setup", "source": "pass"})["kind"] == "machine"


def test_a_checker_killed_while_judging_is_not_called_the_machines_fault(tmp_path):
    checker = _Checker(CONNECTION, cwd=str(tmp_path), timeout=30, student_names=[],
                       confined=False)
    assert checker.ask({"op": "setup", "source": "x = 1"}) == {"ok": True}
    verdict = checker.ask({"op": "test", "source": "import os; os._exit(9)",
                           "hidden_lines": [], "timeout": 30})
    assert verdict["kind"] == "grader"
    assert verdict["message"] == ("the grader's checker stopped (it exited with status 9); a "
                                  "value your code returned or a function it called back may "
                                  "have been too large")


def test_a_kernel_that_cannot_start_is_the_machines_fault_not_a_zero(fresh_course, tmp_path):
    """A sandboxed kernel that dies before running any of the submission's code (here: an
    address space too small for Python to start, as a broken sandbox or machine would do) gives
    every test a MachineFault verdict, so the batch grades the submission again instead of
    scoring it 0; nbgrader itself does not fail."""
    from course_grader.autograde import UnitJob
    from course_grader.worker import grade_submission

    course = tmp_path / "course"
    shutil.copytree(fresh_course, course)
    write(solve(course, released(course)), course / "submitted" / "alice" / UNIT)
    job = UnitJob.build(course, UNIT, extra_args=[
        '--SandboxedKernelManager.limits={"memory_bytes": 50000000}'])
    graded = grade_submission(job.task("alice", course / "submitted" / "alice" / UNIT),
                              job.template)
    assert not graded.failed, graded.notes
    faults = machine_faults(graded.autograded)
    assert len(faults) == 1 and "the kernel could not start" in faults[0], faults
