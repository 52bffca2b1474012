"""A cell's limit in CPU time (course_grader.cpu_watch), measured on real processes."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

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


# A command that leaves 1.5 CPU-s of work behind it: a grandchild in a session of its own that
# outlives its parent, as a sandbox outlives a launcher killed with its kernel. The command's
# own process never waits for it.
LEAVES_WORK = ("import subprocess, sys\n"
               f"subprocess.Popen([sys.executable, '-c', {BURN.format(seconds=1.5)!r}], "
               "start_new_session=True)\n")
COUNT = """
import json, resource, subprocess, sys
from course_grader import cpu_watch

def waited():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime

meter = cpu_watch.{make}
before, cpu = waited(), meter.seconds()
subprocess.run([sys.executable, "-c", {code!r}], preexec_fn=meter.join, check=True)
missed = waited() - before   # what a wait-based count sees once the command returned
settled = meter.settle(timeout=60)
print(json.dumps({{"method": meter.method, "counted": meter.seconds() - cpu,
                   "waited": missed, "settled": settled}}))
meter.close()
"""


def count_run(make: str) -> dict:
    """The CPU of LEAVES_WORK as a meter made by `make` counts it (in a Python of its own:
    ReapedCpu makes its process the subreaper of what it starts)."""
    proc = subprocess.run([sys.executable, "-c", COUNT.format(make=make, code=LEAVES_WORK)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("make", ["tree_cpu()", "ReapedCpu()"])
def test_a_runs_cpu_counts_the_processes_that_left_its_tree(make):
    found = count_run(make)
    assert found["settled"], found
    assert found["waited"] < 0.5, found   # a wait-based count misses the grandchild
    assert 1.5 <= found["counted"] <= 3.0, found   # 1.5 burnt + two Pythons' starts


def test_tree_cpu_uses_a_cgroup_where_grading_cannot_leave_it():
    """On a cgroup v1 machine with cpuacct apart from pids (the sandbox moves its processes
    into a pids cgroup, as root), or on cgroup v2 when grading is not root's, a cgroup holds
    the run; elsewhere the subreaper counts it."""
    mounts = Path("/proc/self/mountinfo").read_text()
    v1 = any(" - cgroup " in line and "cpuacct" in line.rsplit(" ", 1)[-1]
             and "pids" not in line.rsplit(" ", 1)[-1] for line in mounts.splitlines())
    found = count_run("tree_cpu()")["method"]
    if v1 and os.getuid() == 0:
        assert found.startswith("a cgroup ("), found
    elif not v1 and os.getuid() == 0:
        assert found.startswith("this process as the subreaper"), found
