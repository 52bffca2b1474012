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

`tree_cpu()` counts the CPU time of whole grading runs for the benchmark (`make
bench-autograde`): every process a command starts and everything they start in turn, the
sandboxed ones included, which leave the starting process's tree (a launcher killed with its
kernel leaves the sandbox to init) and are never waited for by it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path

__all__ = ["CgroupCpu", "CpuWatch", "ReapedCpu", "tree_cpu", "tree_times"]

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


# ------------------------------------------------------------------ CPU of whole runs

class CgroupCpu:
    """The CPU time (user + system) of every process started into a new cgroup (`join` as a
    preexec_fn) and of all their descendants, however they end: cgroup v1's cpuacct.usage or
    cgroup v2's cpu.stat. Made beneath this process's own cgroup in `mount` (the hierarchy's
    mount point, `root` the cgroup it shows there); `close` removes it."""

    def __init__(self, mount: str, root: str, own: str, version: int) -> None:
        self.version = version
        relative = own[len(root):] if own.startswith(root) else own
        self.path = Path(mount, relative.lstrip("/"), f"course-cpu-{os.getpid()}")
        self.path.mkdir()
        self.method = f"a cgroup ({self.path})"

    def join(self) -> None:
        """Move the calling process into the cgroup (in a child, before exec)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def seconds(self) -> float:
        if self.version == 1:
            return int((self.path / "cpuacct.usage").read_text()) / 1e9
        stat = dict(line.split() for line in (self.path / "cpu.stat").read_text().splitlines())
        return int(stat["usage_usec"]) / 1e6

    def members(self) -> set[int]:
        return {int(p) for p in (self.path / "cgroup.procs").read_text().split()}

    def settle(self, keep: set[int] = frozenset(), timeout: float = 60.0) -> bool:
        """Wait until no process but those of `keep` is left in the cgroup (a sandbox ends a
        moment after the command that started it); whether that happened in `timeout` s."""
        return _settle(self.members, keep, timeout)

    def close(self) -> None:
        for pid in self.members():
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for _ in range(100):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                time.sleep(0.05)



def _settle(members, keep: set[int], timeout: float) -> bool:
    """Poll `members()` until it holds no process but those of `keep`, for `timeout` s at
    most; whether it got there."""
    deadline = time.monotonic() + timeout
    while members() - set(keep):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True

class ReapedCpu:
    """The same count where no cgroup can hold the tree: this process becomes the subreaper of
    its descendants (Linux's PR_SET_CHILD_SUBREAPER), so that a process whose parent ended
    first is waited for here rather than by init, and every descendant's time reaches this
    process's RUSAGE_CHILDREN when it ends; the processes still running count by /proc
    (`tree_times`). Counts every process this one starts, whatever starts it."""

    method = "this process as the subreaper of its descendants, and /proc"

    def __init__(self) -> None:
        import ctypes

        if ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "cannot become the subreaper of the processes "
                                              "it starts")

    def join(self) -> None:
        """Nothing to do in a child: its descendants come back here."""

    def members(self) -> set[int]:
        self._reap()
        return set(_children().get(os.getpid(), []))

    def seconds(self) -> float:
        import resource

        self._reap()
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime + sum(tree_times(pid)[0]
                                                     for pid in self.members())

    def settle(self, keep: set[int] = frozenset(), timeout: float = 60.0) -> bool:
        return _settle(self.members, keep, timeout)

    def close(self) -> None:
        self._reap()

    @staticmethod
    def _reap() -> None:
        """Wait for the children that have ended (the orphans handed to this process)."""
        while True:
            try:
                pid, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return


_PR_SET_CHILD_SUBREAPER = 36


def tree_cpu() -> CgroupCpu | ReapedCpu:
    """The best count of a run's CPU time this process can make: a cgroup that holds every
    process of the run, or else `ReapedCpu`. A cgroup holds them unless the grading sandbox
    moves its processes into a cgroup of the same hierarchy, which it does as root to cap
    their number (a pids cgroup: course_grader.sandbox); so: cgroup v1's cpuacct where it is
    not mounted with pids, or cgroup v2 when grading is not root's."""
    mounts = _cgroup_mounts()
    own = _own_cgroups()
    for mount, root, fstype, options in mounts:
        if fstype == "cgroup" and "cpuacct" in options and "pids" not in options:
            key = next((k for k in own if "cpuacct" in k.split(",")), None)
            version = 1
        elif fstype == "cgroup2" and os.getuid() != 0:
            key, version = "", 2
        else:
            continue
        if key is None or key not in own:
            continue
        try:
            return CgroupCpu(mount, root, own[key], version)
        except OSError:
            continue
    return ReapedCpu()


def _cgroup_mounts() -> list[tuple[str, str, str, set[str]]]:
    """(mount point, root, file system type, super options) of each cgroup hierarchy."""
    found = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        before, _, after = line.partition(" - ")
        fields, tail = before.split(), after.split()
        if len(tail) >= 3 and tail[0] in ("cgroup", "cgroup2"):
            found.append((fields[4], fields[3], tail[0], set(tail[2].split(","))))
    return found


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup in each hierarchy: controllers ("" for v2) -> path."""
    own = {}
    for line in Path("/proc/self/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        own[controllers] = path
    return own
