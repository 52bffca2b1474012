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


def test_what_a_worker_computes_once_is_computed_once_by_threads_asking_together(monkeypatch):
    """`prepare` is asked by every grading thread at its first submission; computing what the
    sandbox hides parses requirement markers with `ast`, which CPython 3.11 does not allow in
    two threads at once: only one thread may compute it, the others wait for its result."""
    import threading

    from course_grader import sandbox

    calls = []

    def slow_write(path):
        calls.append(threading.get_ident())
        time.sleep(0.3)   # long enough for the other threads to arrive meanwhile
        Path(path).write_text('{"hidden": []}')

    monkeypatch.setattr(sandbox, "write_hidden_file", slow_write)
    monkeypatch.setattr(sandbox, "unavailable_reason", lambda: None)
    worker._hidden_imports.cache_clear()
    worker._sandbox_problem.cache_clear()
    try:
        results = []
        threads = [threading.Thread(target=lambda: results.append(worker.prepare()))
                   for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert len(calls) == 1
        assert results == [(None, '{"hidden": []}')] * 4
    finally:
        worker._hidden_imports.cache_clear()
        worker._sandbox_problem.cache_clear()


def test_the_fork_servers_folder_is_removed_once_its_worker_is_gone(folder, tmp_path):
    """The fork server's socket folder is named like a grading folder, with the worker's pid:
    after a killed worker, the next worker's `remove_orphaned_folders` removes it."""
    import multiprocessing

    worker.run_nbgrader(["db", "student", "list"], folder, env(), timeout=120)
    server_folder = Path(multiprocessing.current_process()._config["tempdir"])
    assert server_folder.name.startswith(f"grade-forkserver-pid{os.getpid()}-")
    assert server_folder.is_dir()
    assert server_folder not in worker.remove_orphaned_folders(server_folder.parent)  # alive
    dead = psutil.Popen(["true"])
    dead.wait()
    orphan = tmp_path / f"grade-forkserver-pid{dead.pid}-abc"
    orphan.mkdir()
    assert worker.remove_orphaned_folders(tmp_path) == [orphan]
