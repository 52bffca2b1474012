"""A cell's limit in CPU time (course_grader.cpu_watch), measured on real processes."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

import pytest

from course_grader.cpu_watch import CpuWatch, tree_times

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

BURN = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass\n"


def start(code: str, *, cpu: int | None = None) -> subprocess.Popen:
    """`code` in a Python of its own session (as a kernel is), optionally pinned to one CPU."""
    cmd = [sys.executable, "-c", code]
    if cpu is not None:
        cmd = ["taskset", "-c", str(cpu), *cmd]
    return subprocess.Popen(cmd, start_new_session=True, stderr=subprocess.PIPE, text=True)


@contextlib.contextmanager
def busy_on(cpu: int, count: int):
    """`count` processes that spin on CPU number `cpu`: a loaded machine."""
    procs = [start("while True: pass", cpu=cpu) for _ in range(count)]
    try:
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def test_a_trees_time_counts_its_children_living_and_reaped():
    """A parent that runs one child to its end and keeps another burning: both count."""
    code = ("import subprocess, sys\n"
            f"subprocess.run([sys.executable, '-c', {BURN.format(seconds=0.6)!r}])\n"
            f"child = subprocess.Popen([sys.executable, '-c', {BURN.format(seconds=30)!r}])\n"
            "import time; time.sleep(30)\n")
    proc = start(code)
    try:
        time.sleep(2.5)
        cpu, _ = tree_times(proc.pid)
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()
    assert 1.2 <= cpu <= 3.0, cpu   # 0.6 reaped + about 1.5 burning + the Pythons' starts


def test_a_cell_over_its_cpu_limit_is_interrupted():
    proc = start(BURN.format(seconds=60))
    watch = CpuWatch(proc.pid, 1.0, grace=5)
    with watch.running():
        proc.wait(timeout=30)
    assert "KeyboardInterrupt" in proc.stderr.read()
    assert watch.fired.startswith("used more than its limit of 1 s of CPU time and was interrupted")


def test_one_that_ignores_the_interrupt_is_killed_after_the_grace():
    proc = start("import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                 + BURN.format(seconds=60))
    watch = CpuWatch(proc.pid, 1.0, grace=1)
    with watch.running():
        proc.wait(timeout=30)
    assert proc.returncode == -9
    assert "did not stop when interrupted" in watch.fired


def test_honest_work_on_a_loaded_machine_is_not_stopped():
    """1.5 CPU-s of work sharing one core with three spinning processes takes about 6 s of
    wall time, beyond a limit of 2 s that a wall clock would have enforced; counted in CPU
    time it stays under the limit, and the watch says the machine, not the cell, was slow."""
    with busy_on(0, 3):
        proc = start(BURN.format(seconds=1.5), cpu=0)
        watch = CpuWatch(proc.pid, 2.0)
        with watch.running():
            while proc.poll() is None:    # the last sample while it lives
                wall, cpu, wait = watch.used()
                busy = watch.busy_machine()
                time.sleep(0.2)
    assert proc.returncode == 0 and watch.fired is None
    assert wall > 2.0 * 1.5, (wall, cpu, wait)   # a wall clock would have stopped it
    assert 1.0 <= cpu < 2.0 and wait > cpu, (wall, cpu, wait)
    assert busy, (wall, cpu, wait)


def test_a_sleeping_cell_is_not_the_machines_fault():
    proc = start("import time; time.sleep(3)")
    watch = CpuWatch(proc.pid, 1.0)
    with watch.running():
        time.sleep(2)
        assert not watch.busy_machine(), watch.used()
        proc.wait(timeout=30)
    assert watch.fired is None
