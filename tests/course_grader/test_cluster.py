"""Grading on a Dask cluster (`course_grader.cluster`, `autograde --scheduler`), against a real
scheduler and real worker processes (distributed.LocalCluster): a worker killed
mid-submission, and a cluster that cannot grade.

The adversarial corpus itself is graded on such a cluster in test_adversarial.py, which also
checks that grading here (`--jobs 2`) gives its sample the same scores.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil
import pytest
from conftest import local_dask_cluster, tool_env
from nbgrader.api import Gradebook

from course_grader import sandbox
from course_grader.autograde import grade_unit
from course_grader.cluster import Cluster
from course_grader.corpus import UNIT, released, solve, write

pytestmark = pytest.mark.skipif(bool(sandbox.unavailable_reason()),
                                reason=f"needs the sandbox: {sandbox.unavailable_reason()}")


def make_submissions(course: Path, n: int) -> dict[str, float]:
    """n submissions of unit 00, alternately solved and untouched; student -> expected score."""
    expected = {}
    for i in range(n):
        nb = released(course, UNIT)
        student = f"s{i}"
        write(solve(course, nb) if i % 2 == 0 else nb, course / "submitted" / student / UNIT)
        expected[student] = 9.0 if i % 2 == 0 else 0.0
    return expected


def gradebook_scores(course: Path) -> dict[str, dict[str, float | None]]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        return {sub.student.id: {g.name: g.auto_score for nb in sub.notebooks for g in nb.grades}
                for sub in gb.find_assignment(UNIT).submissions}


@pytest.fixture
def course(fresh_course, tmp_path):
    dest = tmp_path / "course"
    shutil.copytree(fresh_course, dest)
    return dest


def test_a_worker_killed_mid_submission_loses_nothing(course):
    """SIGKILL the worker process while its nbgrader is grading: the scheduler runs that
    submission again on another worker, every submission gets its score once, and the dead
    worker's nbgrader (and so its kernel) died with it."""
    expected = make_submissions(course, 4)
    with local_dask_cluster(n_workers=2, threads_per_worker=1) as address, \
            Cluster(address) as cluster:
        pids = cluster.client.run(os.getpid)
        result: dict = {}
        grading = threading.Thread(target=lambda: result.update(
            grade_unit(course, UNIT, jobs=2, cluster=cluster, progress=lambda _: None)))
        grading.start()
        victim = killed_student = nbgrader_pid = None
        deadline = time.monotonic() + 120
        while victim is None and time.monotonic() < deadline:
            for pid in pids.values():
                found = grading_nbgrader(pid)
                if found:
                    victim, (nbgrader_pid, killed_student) = pid, found
                    break
            time.sleep(0.2)
        assert victim, "no worker started grading within 2 minutes"
        tree = running_kernel_tree(victim)  # mid-submission: nbgrader is running the kernel
        os.kill(victim, signal.SIGKILL)
        grading.join(timeout=600)
        assert not grading.is_alive()
    assert {s: o.score for s, o in result.items()} == expected
    assert all(o.status == "graded" for o in result.values()), result
    redone = result[killed_student]
    assert redone.worker and not redone.worker.endswith(f":{victim}"), redone.worker
    scores = gradebook_scores(course)
    assert sorted(scores) == sorted(expected)   # one submission each
    assert {s: sum(g.values()) for s, g in scores.items()} == expected
    # nothing of the killed worker's submission is left: not its nbgrader, its sandbox
    # launcher, bwrap or the kernel, nor its folder (removed by the worker that regraded it)
    assert nbgrader_pid in {p.pid for p in tree}
    # a launcher told to stop ends its sandbox and cleans up first (seconds on a busy machine)
    deadline = time.monotonic() + 20
    while (survivors := [p for p in tree if alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not survivors, [command(p) for p in survivors]
    assert not list(Path(tempfile.gettempdir()).glob(f"grade-*-pid{victim}-*"))


def grading_nbgrader(worker: int) -> tuple[int, str] | None:
    """(pid, student) of the nbgrader that `worker` runs, once it has started a kernel's
    sandbox launcher: nbgrader is the launcher's parent, and its working folder is the
    submission's private course, which holds that one student's submission (not the unit's
    reference solution, which the cluster grades first: autograde.check_reference)."""
    from course_grader.worker import SELF_CHECK_STUDENT

    for process in psutil.Process(worker).children(recursive=True):
        if "course_grader.sandbox" not in command(process):
            continue
        try:
            nbgrader = process.parent()
            students = os.listdir(Path(nbgrader.cwd()) / "submitted")
        except (psutil.Error, OSError):
            continue
        if len(students) == 1 and students[0] != SELF_CHECK_STUDENT:
            return nbgrader.pid, students[0]
    return None


def command(process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def alive(process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def running_kernel_tree(pid: int) -> list:
    """The processes under `pid` once one of them is a graded kernel (within 60 s)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        tree = psutil.Process(pid).children(recursive=True)
        # the kernel itself, not the launcher or bwrap whose command lines also name it
        if any(command(p)[1:3] == ["-m", "ipykernel_launcher"] for p in tree):
            return tree
        time.sleep(0.1)
    raise AssertionError("the worker started no kernel within 60 s")


def test_an_unreachable_scheduler_is_refused_clearly(course):
    make_submissions(course, 1)
    proc = subprocess.run([sys.executable, "-m", "course_grader.autograde", UNIT,
                           "--scheduler", "tcp://127.0.0.1:9"], cwd=course, env=tool_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in proc.stderr
    assert not (course / "autograded").exists()
