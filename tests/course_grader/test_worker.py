"""How a grading worker runs nbgrader (course_grader.worker.run_nbgrader): a new process per
submission, forked from a fork server that has nbgrader imported, with exactly the folder and
environment it is given, its output kept, killed when it runs too long."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import psutil
import pytest

from course_grader import worker

# nbgrader runs the nbgrader_config.py of its folder first: this one records what it saw
# (folder, environment, process), then waits as long as COURSE_TEST_SLEEP says.
CONFIG = """
import json, os, sys, time
with open("seen.json", "w") as f:
    json.dump({"cwd": os.getcwd(), "env": dict(os.environ), "pid": os.getpid(),
               "ppid": os.getppid(), "main": getattr(sys.modules["__main__"], "__file__", None),
               "modules": sorted(sys.modules)}, f)
print("config ran", flush=True)
time.sleep(float(os.environ.get("COURSE_TEST_SLEEP", "0")))
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "nbgrader_config.py").write_text(CONFIG)
    return tmp_path


def env(**extra: str) -> dict[str, str]:
    return {"PATH": os.environ["PATH"], "HOME": os.environ.get("HOME", "/tmp"), **extra}


def test_nbgrader_runs_in_its_folder_with_exactly_the_environment_given(folder):
    returncode, log = worker.run_nbgrader(["db", "student", "list"], folder,
                                          env(COURSE_TEST_MARK="x1"), timeout=120)
    assert returncode == 0, log
    assert "config ran" in log
    seen = json.loads((folder / "seen.json").read_text())
    assert seen["cwd"] == str(folder)
    assert seen["env"]["COURSE_TEST_MARK"] == "x1"
    assert "PYTEST_CURRENT_TEST" not in seen["env"], "the caller's environment leaked"
    assert seen["pid"] != os.getpid()
    if sys.platform == "linux":
        # forked from the fork server, which had nbgrader imported; not this test's __main__
        assert seen["ppid"] != os.getpid()
        assert "nbgrader.apps.nbgraderapp" in seen["modules"]
        assert "_pytest" not in {m.split(".")[0] for m in seen["modules"]}


def test_a_failing_nbgrader_gives_its_status_and_its_log(folder):
    returncode, log = worker.run_nbgrader(["autograde", "no_such_unit"], folder, env(),
                                          timeout=120)
    assert returncode == 1, log   # as the nbgrader command exits
    assert "no_such_unit" in log


def test_nbgrader_that_runs_too_long_is_killed(folder):
    start = time.monotonic()
    returncode, log = worker.run_nbgrader(["db", "student", "list"], folder,
                                          env(COURSE_TEST_SLEEP="600"), timeout=5)
    assert returncode is None
    assert time.monotonic() - start < 60
    seen = json.loads((folder / "seen.json").read_text())
    assert not psutil.pid_exists(seen["pid"]) or \
        psutil.Process(seen["pid"]).status() == psutil.STATUS_ZOMBIE
