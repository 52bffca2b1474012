"""A cell's time limit counted in CPU seconds, so that a score never depends on the host's load.

The limit a student's code gets (`Execute.timeout`, per cell) is the CPU time that the kernel's
processes use while the cell runs, which a busy machine does not change; wall time only
backstops it (`SafeExecute.backstop_factor` times the limit, in nbgrader_hooks). A `CpuWatch`
samples the kernel's process tree (the kernel, or the sandbox's launcher and everything under
it) from /proc a few times a second while a cell runs:

* CPU time over the limit: the cell is interrupted (SIGINT to the kernel's process group, as
  jupyter_client does); if it has not stopped `grace` seconds later, the tree is killed;
* the wall-clock backstop reached under the limit: `busy_machine()` tells whether the kernel
  spent that time running or waiting for a CPU (the machine is to blame: grade it again) or
  sleeping and blocked (the student's code waited: its fault, as before).

    watch = CpuWatch(kernel_pid, limit=120)
    with watch.running():
        ...                          # the cell; watch.fired says why it was stopped, if it was
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

__all__ = ["CpuWatch", "tree_times"]

_TICKS = os.sysconf("SC_CLK_TCK")


def _children() -> dict[int, list[int]]:
    """ppid -> pids of every process on the host, from /proc/<pid>/stat."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    return children


def tree_times(pid: int) -> tuple[float, float]:
    """(CPU seconds, seconds spent waiting for a CPU) of process `pid` and all its descendants:
    user and system time, with that of the children they have reaped, and each process's
    run-queue wait (/proc/<pid>/schedstat; 0 where the kernel does not keep it)."""
    children = _children()
    cpu = wait = 0.0
    todo = [pid]
    while todo:
        current = todo.pop()
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        # utime, stime, cutime, cstime: fields 14-17 of stat(5), 11-14 after the name
        cpu += sum(int(f) for f in fields[11:15]) / _TICKS
        with contextlib.suppress(OSError, ValueError, IndexError):
            wait += int(Path(f"/proc/{current}/schedstat").read_text().split()[1]) / 1e9
        todo.extend(children.get(current, []))
    return cpu, wait


class CpuWatch:
    """Enforce a CPU-time `limit` (seconds) on the process tree of `pid` while a cell runs."""

    def __init__(self, pid: int | None, limit: float | None, *, grace: float = 15.0,
                 interval: float = 0.25) -> None:
        self.pid, self.limit, self.grace, self.interval = pid, limit, grace, interval
        self.fired: str | None = None    # what the cell did that stopped it ("used more...")
        self._start = (0.0, 0.0, 0.0)
        self._stop = threading.Event()

    @contextlib.contextmanager
    def running(self):
        """Watch while the block runs (nothing is watched without a pid or a limit)."""
        self.fired = None
        if self.pid is None or not self.limit:
            yield self
            return
        self._start = (time.monotonic(), *tree_times(self.pid))
        self._stop.clear()
        thread = threading.Thread(target=self._watch, daemon=True, name="cpu-watch")
        thread.start()
        try:
            yield self
        finally:
            self._stop.set()
            thread.join()

    def used(self) -> tuple[float, float, float]:
        """(wall, CPU, run-queue wait) seconds since the watched block began."""
        cpu, wait = tree_times(self.pid) if self.pid else (0.0, 0.0)
        start, cpu0, wait0 = self._start
        return time.monotonic() - start, max(0.0, cpu - cpu0), max(0.0, wait - wait0)

    def busy_machine(self) -> bool:
        """Whether the kernel spent most of the watched wall time running or waiting for a
        CPU (so a wall-clock limit reached under the CPU limit is the machine's doing), rather
        than sleeping or blocked."""
        wall, cpu, wait = self.used()
        return wall > 0 and cpu + wait >= 0.5 * wall

    def _watch(self) -> None:
        while not self._stop.wait(self.interval):
            _, cpu, _ = self.used()
            if cpu >= self.limit:
                break
        else:
            return
        self.fired = f"used more than its limit of {self.limit:g} s of CPU time and was interrupted"
        self._signal(signal.SIGINT)
        if self._stop.wait(self.grace):
            return
        self.fired = (f"used more than its limit of {self.limit:g} s of CPU time and did not stop "
                      f"when interrupted, so the kernel was stopped")
        self._signal(signal.SIGKILL)

    def _signal(self, signum: int) -> None:
        with contextlib.suppress(OSError):
            os.killpg(os.getpgid(self.pid), signum)
