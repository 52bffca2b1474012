"""A class run through nbgrader's own exchange, end to end, with real Unix users.

An instructor and two students are made as Unix accounts for this test (and removed after it,
whatever happens). Each runs nbgrader's own commands as themselves, in their own home:

* the instructor, in a course folder of their own (mode 0700: solutions, gradebook): generate
  and release unit 00; later collect, autograde (in the bubblewrap sandbox, as an ordinary
  user: bwrap's unprivileged user namespace), generate and release feedback;
* each student: fetch the assignment, write a solution into the fetched notebook (one solves
  all of it, one only the softmax), submit; the second submits after the due date the
  instructor set in between, and the gradebook records it late; then fetch their feedback.

The exchange root is world-writable, as nbgrader requires, plus the sticky bit (mode 1777): a
student can then neither rename nor delete the course's folder in it. What a student must not
read is checked by trying, as that student: listing the inbound folder, the other student's
submission, feedback and home, the instructor's course folder.

What nbgrader itself guarantees, and this test does not go beyond: a submission in the inbound
folder is a world-readable folder in a folder nobody else can list (mode 0733); its name holds
the submission time and 72 random bits, and that name is what keeps it from other students.
Released feedback is likewise found by a name made from the submission's secret.
"""

from __future__ import annotations

import datetime
import json
import os
import pwd
import re
import secrets
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import BIN, ROOT, is_graded_test, nbgrader_meta, read, system_tool
from nbgrader.api import Gradebook

UNIT = "00_attention_as_lookup"
NOTEBOOK = f"{UNIT}.ipynb"
COURSE_ID = "attention"
PARTIAL = {"softmax_solution"}                  # what the second student solves

USERADD, USERDEL, SETPRIV = (system_tool(t) for t in ("useradd", "userdel", "setpriv"))

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0,
                       reason="makes Unix users (useradd) and runs commands as them: needs root"),
    pytest.mark.skipif(USERADD is None or USERDEL is None,
                       reason="useradd/userdel (the passwd package) are not installed"),
    pytest.mark.skipif(SETPRIV is None,
                       reason="setpriv (util-linux) is needed to run commands as another user"),
]


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int
    home: Path


def _make_user(name: str, stack: ExitStack) -> User:
    subprocess.run([USERADD, "--create-home", "--shell", "/bin/sh", name],
                   check=True, capture_output=True, text=True)
    # removed even if a later step fails; -f: even if a process of theirs were still running
    stack.callback(subprocess.run, [USERDEL, "-r", "-f", name], capture_output=True)
    entry = pwd.getpwnam(name)
    home = Path(entry.pw_dir)
    # Debian's useradd makes homes 0755 (UMASK 022): a student could then read another's
    # fetched notebook and feedback. A class needs private homes.
    home.chmod(0o700)
    return User(name, entry.pw_uid, entry.pw_gid, home)


def _env(user: User) -> dict[str, str]:
    """A clean environment of the user's own: their HOME (so ~/.jupyter is theirs), USER and
    LOGNAME (nbgrader names a submission after the user), the venv first on PATH. A config
    file that fails to load stops nbgrader (traitlets would only warn, and the course's
    nbgrader_config.py is what puts the sandbox and hidden-test-free feedback in place)."""
    return {"HOME": str(user.home), "USER": user.name, "LOGNAME": user.name,
            "PATH": f"{BIN}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
            "MPLBACKEND": "Agg", "SHELL": "/bin/sh",
            "TRAITLETS_APPLICATION_RAISE_CONFIG_FILE_ERROR": "1"}


def as_user(user: User, *cmd: str, cwd: Path | None = None, input: str | None = None,
            env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `cmd` as `user` (real and effective ids, their groups), never as root."""
    return subprocess.run(
        [SETPRIV, f"--reuid={user.uid}", f"--regid={user.gid}", "--init-groups", "--", *cmd],
        cwd=cwd or user.home, env=_env(user) | (env or {}), input=input, capture_output=True,
        text=True, errors="replace", timeout=timeout)


def nbgrader_as(user: User, *args: str, cwd: Path | None = None,
                env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    proc = as_user(user, str(BIN / "nbgrader"), *args, cwd=cwd, env=env)
    assert proc.returncode == 0, (f"nbgrader {' '.join(args)} as {user.name} failed:\n"
                                  f"{proc.stdout}\n{proc.stderr}")
    return proc


def refused(user: User, *cmd: str) -> str:
    """`cmd` run as `user` must fail for want of permission; returns its error output."""
    proc = as_user(user, *cmd)
    assert proc.returncode != 0, f"{user.name} could run {cmd}:\n{proc.stdout[:500]}"
    assert "Permission denied" in proc.stderr, (cmd, proc.stderr)
    return proc.stderr


def _open_ancestors(paths: list[Path], stack: ExitStack) -> None:
    """Other users must be able to reach the venv's Python, the Python installation it was made
    from (here under /root/.pyenv, and /root is 0700) and the course's packages (course_utils,
    course_grader, installed editable from the checkout). Only folders on those paths that
    others cannot traverse get o+x (search, not listing), and only for the duration of this
    test: their modes are put back afterwards. Where nothing needs it (a checkout and Python
    outside a private home), nothing is changed."""
    for path in paths:
        for folder in [*reversed(Path(path).parents), Path(path)]:
            mode = folder.stat().st_mode
            if stat.S_ISDIR(mode) and not mode & stat.S_IXOTH:
                folder.chmod(stat.S_IMODE(mode) | stat.S_IXOTH)
                stack.callback(folder.chmod, stat.S_IMODE(mode))


def _config(user: User, exchange: Path) -> None:
    """~/.jupyter/nbgrader_config.py: where the exchange is and which course this is."""
    folder = user.home / ".jupyter"
    folder.mkdir()
    (folder / "nbgrader_config.py").write_text(
        "c = get_config()  # noqa: F821\n"
        f"c.Exchange.root = {str(exchange)!r}\n"
        f"c.CourseDirectory.course_id = {COURSE_ID!r}\n")
    for path in (folder, folder / "nbgrader_config.py"):
        os.chown(path, user.uid, user.gid)


# Run by a student, on their own fetched notebook: the cells named in the JSON on stdin get
# that source (what the student typed), and a last cell of their own says where it runs.
FILL = r"""
import json, sys, nbformat
path, sources = sys.argv[1], json.load(sys.stdin)
nb = nbformat.read(path, as_version=4)
for cell in nb.cells:
    grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
    if grade_id in sources:
        cell.source = sources[grade_id]
nb.cells.append(nbformat.v4.new_code_cell(WHERE))
nbformat.write(nb, path)
"""
# graded in course_grader.sandbox, a kernel sees COURSE_SANDBOX=1 (set by the sandbox alone) and
# is uid 1000 in its own user namespace
WHERE = 'import os\nprint(f"sandbox={os.environ.get(\'COURSE_SANDBOX\')} uid={os.getuid()}")'
FILL = FILL.replace("WHERE", repr(WHERE))


def _answers(solve: set[str] | None) -> dict[str, str]:
    """The instructor's solutions for the solution cells in `solve` (None: all), as the
    student would type them (without nbgrader's markers)."""
    answers = {}
    for cell in read(ROOT / "solutions" / UNIT / NOTEBOOK).cells:
        meta = nbgrader_meta(cell)
        if meta.get("solution") and (solve is None or meta["grade_id"] in solve):
            answers[meta["grade_id"]] = re.sub(r"\s*### (BEGIN|END) SOLUTION", "", cell.source)
    return answers


def _points(grade_ids: set[str] | None) -> float:
    cells = read(ROOT / "solutions" / UNIT / NOTEBOOK).cells
    return sum(nbgrader_meta(c)["points"] for c in cells if is_graded_test(c)
               and (grade_ids is None or nbgrader_meta(c)["grade_id"] in grade_ids))


def _shown_score(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


@pytest.fixture(scope="module")
def classroom():
    """Users, exchange and course folder; the whole flow run once. Yields what it found."""
    with ExitStack() as stack:
        _open_ancestors([Path(sys.executable).resolve().parent, Path(sys.base_prefix).resolve(),
                         Path(sys.prefix).resolve(), ROOT], stack)
        tag = secrets.token_hex(3)
        instructor = _make_user(f"crs-instr-{tag}", stack)
        on_time = _make_user(f"crs-stud1-{tag}", stack)
        late = _make_user(f"crs-stud2-{tag}", stack)

        base = Path(tempfile.mkdtemp(prefix="crs-exchange-"))
        stack.callback(shutil.rmtree, base, ignore_errors=True)
        base.chmod(0o755)
        exchange = base / "exchange"
        exchange.mkdir()
        exchange.chmod(0o1777)   # nbgrader: writable by everyone; +t: no one renames another's
        course = base / "course"
        course.mkdir()
        shutil.copy(ROOT / "nbgrader_config.py", course)
        for folder in ("solutions", "exercises"):
            shutil.copytree(ROOT / folder, course / folder)
        for folder, _, files in os.walk(course):
            for name in (".", *files):
                os.chown(os.path.join(folder, name), instructor.uid, instructor.gid)
        course.chmod(0o700)
        for user in (instructor, on_time, late):
            _config(user, exchange)

        # The users can run the venv's Python and import what they need.
        probe = as_user(instructor, str(BIN / "python"), "-c",
                        "import nbgrader, torch, course_grader.nbgrader_hooks")
        assert probe.returncode == 0, f"another user cannot run the venv's Python:\n{probe.stderr}"

        # -- instructor: the gradebook learns the unit; the release goes to the exchange
        nbgrader_as(instructor, "generate_assignment", UNIT, "--force", cwd=course)
        nbgrader_as(instructor, "release_assignment", UNIT, cwd=course)

        # -- students: fetch, answer, submit; the due date falls between the two submissions
        def take_part(student: User, solve: set[str] | None) -> None:
            nbgrader_as(student, "fetch_assignment", UNIT)
            fetched = student.home / UNIT / NOTEBOOK
            assert fetched.stat().st_uid == student.uid
            assert "YOUR CODE HERE" in fetched.read_text()
            wrote = as_user(student, str(BIN / "python"), "-c", FILL, str(fetched),
                            input=json.dumps(_answers(solve)))
            assert wrote.returncode == 0, wrote.stderr
            nbgrader_as(student, "submit", UNIT)

        take_part(on_time, solve=None)
        time.sleep(0.05)
        due = datetime.datetime.now(datetime.UTC)
        nbgrader_as(instructor, "db", "assignment", "add", UNIT,
                    f"--duedate={due:%Y-%m-%d %H:%M:%S.%f} UTC", cwd=course)
        time.sleep(0.05)
        take_part(late, solve=PARTIAL)

        # -- instructor: collect, grade (sandboxed), feedback
        nbgrader_as(instructor, "collect", UNIT, cwd=course)
        graded = nbgrader_as(instructor, "autograde", UNIT, cwd=course)
        nbgrader_as(instructor, "generate_feedback", UNIT, cwd=course)
        nbgrader_as(instructor, "release_feedback", UNIT, cwd=course)

        # -- students: their feedback
        for student in (on_time, late):
            nbgrader_as(student, "fetch_feedback", UNIT)

        yield {"instructor": instructor, "on_time": on_time, "late": late, "course": course,
               "exchange": exchange, "due": due, "autograde_log": graded.stdout + graded.stderr}


def _feedback(student: User) -> list[Path]:
    return sorted((student.home / UNIT / "feedback").glob(f"*/{UNIT}.html"))


def _submission(course: Path, student: User):
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        s = gb.find_submission(UNIT, student.name)
        return s.score, s.max_score, s.total_seconds_late, s.timestamp


def test_both_submissions_were_collected_and_graded_in_the_sandbox(classroom):
    course = classroom["course"]
    full = _points(None)
    assert full > 0
    score, max_score, *_ = _submission(course, classroom["on_time"])
    assert score == max_score == full
    score, max_score, *_ = _submission(course, classroom["late"])
    assert max_score == full and score == _points({"softmax_basic", "softmax_stable"}) < full
    for student in (classroom["on_time"], classroom["late"]):
        submitted = course / "submitted" / student.name / UNIT
        assert (submitted / NOTEBOOK).is_file() and (submitted / "timestamp.txt").is_file()
    # it ran in the sandbox (as the instructor, an ordinary user: no UNSAFE anywhere)
    for student in (classroom["on_time"], classroom["late"]):
        graded = read(course / "autograded" / student.name / UNIT / NOTEBOOK)
        said = "".join(o.get("text", "") for o in graded.cells[-1].get("outputs", []))
        assert "sandbox=1 uid=1000" in said, said


def test_the_submission_after_the_due_date_is_recorded_late(classroom):
    course, due = classroom["course"], classroom["due"].replace(tzinfo=None)
    _, _, on_time_late, on_time_at = _submission(course, classroom["on_time"])
    _, _, late_by, late_at = _submission(course, classroom["late"])
    assert on_time_at < due < late_at
    assert on_time_late == 0
    assert late_by > 0
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        assert gb.find_assignment(UNIT).duedate == due


def test_each_student_fetches_their_own_feedback_with_their_score(classroom):
    course = classroom["course"]
    pages = {}
    for key in ("on_time", "late"):
        student = classroom[key]
        found = _feedback(student)
        assert len(found) == 1, f"{student.name}: {found}"
        assert found[0].stat().st_uid == student.uid
        score, max_score, *_ = _submission(course, student)
        text = _shown_score(found[0].read_text())
        assert re.search(rf"Score:\s*{score:g}\.?0*\s*/\s*{max_score:g}", text), text[:300]
        pages[key] = text
    assert pages["on_time"] != pages["late"]
    assert "BEGIN HIDDEN TESTS" not in pages["on_time"] + pages["late"]


def test_a_student_cannot_read_the_other_students_submission(classroom):
    late, on_time = classroom["late"], classroom["on_time"]
    inbound = classroom["exchange"] / COURSE_ID / "inbound"
    mine = [p for p in inbound.iterdir() if p.name.startswith(f"{late.name}+")]
    theirs = [p for p in inbound.iterdir() if p.name.startswith(f"{on_time.name}+")]
    assert len(mine) == 1 and len(theirs) == 1
    # the inbound folder cannot be listed, so the other's submission cannot be found
    refused(late, "ls", str(inbound))
    proc = as_user(late, "sh", "-c", f'cat "{inbound}"/{on_time.name}+*/{NOTEBOOK}')
    assert proc.returncode != 0 and '"cells"' not in proc.stdout
    # nor read in the instructor's course, nor in the other student's home or cache
    refused(late, "cat", str(classroom["course"] / "submitted" / on_time.name / UNIT / NOTEBOOK))
    refused(late, "cat", str(on_time.home / UNIT / NOTEBOOK))
    refused(late, "ls", str(on_time.home))
    # the control: the student's own submission is there for them
    assert as_user(late, "ls", str(mine[0])).returncode == 0


def test_a_student_cannot_read_the_instructors_course_folder(classroom):
    course = classroom["course"]
    for student in (classroom["on_time"], classroom["late"]):
        refused(student, "ls", str(course))
        refused(student, "cat", str(course / "gradebook.db"))
        refused(student, "cat", str(course / "solutions" / UNIT / NOTEBOOK))
        refused(student, "cat", str(course / "nbgrader_config.py"))
    # the control: the instructor can
    assert as_user(classroom["instructor"], "ls", str(course / "solutions")).returncode == 0


def test_a_student_cannot_read_the_other_students_feedback(classroom):
    late, on_time = classroom["late"], classroom["on_time"]
    theirs = _feedback(on_time)[0]
    refused(late, "cat", str(theirs))
    refused(late, "ls", str(classroom["exchange"] / COURSE_ID / "feedback"))
    refused(late, "cat", str(classroom["course"] / "feedback" / on_time.name / UNIT
                             / f"{UNIT}.html"))
    refused(on_time, "cat", str(_feedback(late)[0]))
    assert as_user(on_time, "cat", str(theirs)).returncode == 0


def test_a_student_cannot_take_over_the_course_in_the_exchange(classroom):
    """The exchange root is world-writable; its sticky bit keeps the course's folder (and so
    what students fetch) the instructor's: no student can rename it and put their own there."""
    late, exchange = classroom["late"], classroom["exchange"]
    proc = as_user(late, "mv", str(exchange / COURSE_ID), str(exchange / "moved"))
    assert proc.returncode != 0 and (exchange / COURSE_ID).is_dir()
    refused(late, "touch", str(exchange / COURSE_ID / "outbound" / UNIT / "extra.ipynb"))
