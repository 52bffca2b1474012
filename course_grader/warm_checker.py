"""Checkers forked from a warm parent: the checker's libraries imported once per grading
worker, not once per notebook.

A cold checker (`nbgrader_hooks._Checker`) is a new Python in a sandbox of its own that spends
about two CPU-seconds importing PyTorch and the check convention before it judges anything:
as much as all the rest of a unit-00 submission's grading. A `CheckerServer` starts one such
Python per grading worker, confined as a checker is (`course_grader.sandbox`: no network,
read-only files, no privileges, limits), which imports them once and then forks a checker
for each notebook that asks (`fork`). Each forked checker

* starts from the parent's state, never another checker's: the parent runs no test, and
  whatever a checker changes (a module's value, a file it writes) ends with it;
* is confined inside the shared sandbox as well (`course_grader.landlock`): it can write only
  in a fresh folder of its own (its working folder, HOME and TMPDIR), which is removed when
  it ends, read nothing else of the sandbox's /tmp (where the others' folders are), and
  cannot signal the parent or another checker; none of them is dumpable, so
  none can trace another or read its memory or its /proc files; and it holds only its own
  descriptors: its conversation with the executor, its stderr, and the folder of its
  kernel's relayed sockets, which it reaches as /proc/self/fd/RELAY_FD/<name> (no path leads
  there from the sandbox, so no other checker can reach that kernel);
* has a checker's limits: CPU time, memory, file size and open files are its own (setrlimit);
  the parent enforces its wall time; processes count against the sandbox's one limit.

The executor speaks to a forked checker as to a cold one: `ForkedChecker` offers the part of
`subprocess.Popen` that `_Checker` uses, and how the checker ended comes from the parent
(`ForkedChecker.exit_record`, worded as the sandbox's own record). Where the kernel cannot
confine forked checkers (`landlock.unavailable_reason`), the server does not start
(`CheckerServerUnavailable`) and every checker starts cold, as before.

    server = CheckerServer(folder, limits)        # once per worker: a second or two of CPU
    proc = fork(server.address, relay_dir, log_fd, limits)   # per notebook: milliseconds
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from course_grader import sandbox

__all__ = ["RELAY_FD", "SERVER_ENV", "CheckerServer", "CheckerServerUnavailable",
           "ForkedChecker", "fork", "relayed_ip", "serve"]

# Set by course_grader.worker for the nbgrader it starts: the address of its worker's server.
SERVER_ENV = "COURSE_CHECKER_SERVER"
RELAY_FD = 3   # a forked checker's descriptor of its kernel's relay folder
PRELOAD = ("course_grader.checker",)   # what the parent imports once for all its checkers
# The parent lives as long as its worker (it dies with it); these only backstop it. Each
# checker it forks has the checker's own CPU and wall-time limits.
PARENT_CPU_SECONDS = 24 * 3600
PARENT_WALL_SECONDS = 7 * 24 * 3600
_PR_SET_DUMPABLE = 4


class CheckerServerUnavailable(RuntimeError):
    """This machine cannot confine forked checkers; checkers start cold instead."""


def relayed_ip(base: str) -> str:
    """The `ip` of a forked checker's connection info for sockets named `<base>-<port>` in its
    kernel's relay folder."""
    return f"/proc/self/fd/{RELAY_FD}/{base}"


# ------------------------------------------------------------------ the executor's side

def fork(address: str, relay_dir: str | os.PathLike, log_fd: int,
         limits: sandbox.Limits) -> ForkedChecker:
    """A checker forked by the server at `address`, its stderr the open file `log_fd`, its
    kernel's relayed sockets those in `relay_dir`, with `limits`' CPU time, memory, file size,
    open files and wall time. Raises OSError if the server cannot be reached."""
    request = json.dumps({"limits": dataclasses.asdict(limits)}) + "\n"
    control = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    control.settimeout(30)
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        control.connect(address)
        relay = os.open(relay_dir, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            socket.send_fds(control, [request.encode()], [theirs.fileno(), log_fd, relay])
        finally:
            os.close(relay)
    except OSError:
        control.close()
        mine.close()
        raise
    finally:
        theirs.close()
    control.settimeout(None)
    return ForkedChecker(control, mine)


class ForkedChecker:
    """The executor's end of a forked checker: `stdin` and `stdout` (one JSON line each way, as
    a cold checker's pipes), and `poll`, `wait` and `kill` as subprocess.Popen's. `kill` hangs
    up, and the parent then kills the checker; the parent sends how it ended (`exit_record`)
    and hangs up in turn."""

    def __init__(self, control: socket.socket, stdio: socket.socket) -> None:
        self._control = control
        self._stdio = stdio
        self.stdin = stdio.makefile("w", encoding="utf-8")
        self.stdout = stdio.makefile("r", encoding="utf-8")
        self.returncode: int | None = None
        self._record: dict | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self._read_record(0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and not self._read_record(timeout):
            raise subprocess.TimeoutExpired("a forked checker", timeout)
        return self.returncode

    def kill(self) -> None:
        with contextlib.suppress(OSError):
            self._control.shutdown(socket.SHUT_WR)

    def exit_record(self) -> dict | None:
        """How the checker ended ({"returncode", "reason"}), once it has."""
        return self._record

    def _read_record(self, timeout: float | None) -> bool:
        if not select.select([self._control], [], [], timeout)[0]:
            return False
        data = b""
        self._control.settimeout(10)
        with contextlib.suppress(OSError):
            while not data.endswith(b"\n"):
                chunk = self._control.recv(4096)
                if not chunk:
                    break
                data += chunk
        try:
            record = json.loads(data)
            record = {"returncode": int(record["returncode"]), "reason": str(record["reason"])}
        except (ValueError, KeyError, TypeError):   # the parent itself is gone
            record = {"returncode": -signal.SIGKILL,
                      "reason": "the sandbox of the warm checkers ended while it ran"}
        self._record, self.returncode = record, record["returncode"]
        for closing in (self.stdin, self.stdout, self._stdio, self._control):
            with contextlib.suppress(OSError):
                closing.close()
        return True


class CheckerServer:
    """The warm parent of a worker's checkers, in a sandbox of its own (`sandbox.wrap`, with
    `limits` but a parent's CPU and wall time), listening at `address` (a socket in `folder`,
    a private folder of the grading user's that the server uses and `close` removes). Raises
    CheckerServerUnavailable if the machine cannot confine forked checkers, RuntimeError if
    the server did not start within `timeout` seconds."""

    def __init__(self, folder: str | os.PathLike, limits: sandbox.Limits,
                 timeout: float = 120) -> None:
        self.folder = Path(folder)
        for name in ("work", "runtime"):
            (self.folder / name).mkdir()
        self.address = str(self.folder / "checkers.sock")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(self.address)
        self._listener.listen(64)
        self._log = open(self.folder / "server.log", "w+b")  # noqa: SIM115 - kept open
        parent = dataclasses.replace(limits, cpu_seconds=PARENT_CPU_SECONDS,
                                     wall_seconds=PARENT_WALL_SECONDS)
        package_dir = str(Path(__file__).resolve().parent)
        self._cmd = sandbox.wrap([sys.executable, "-P", "-m", "course_grader.warm_checker"],
                                 workdir=self.folder / "work",
                                 runtime_dir=self.folder / "runtime", limits=parent,
                                 importable=None, stdio=True,
                                 binds=[(package_dir, package_dir)])
        self.proc: subprocess.Popen | None = None
        started = threading.Event()
        # the launcher is told of its parent's death (sandbox._end_with_parent), and Linux
        # means the thread that started it: a thread that lives as long as the server does
        threading.Thread(target=self._run, args=(started,), daemon=True,
                         name="warm-checker-server").start()
        started.wait()
        try:
            self._wait_ready(timeout)
        except BaseException:
            self.close()
            raise

    def _run(self, started: threading.Event) -> None:
        try:
            self.proc = subprocess.Popen(self._cmd, stdin=self._listener.fileno(),
                                         stdout=subprocess.PIPE, stderr=self._log,
                                         cwd=self.folder / "work",
                                         env=dict(os.environ, MPLBACKEND="Agg"))
        finally:
            # only the sandbox holds the listening socket now: once it has ended, a checker
            # asked for is refused at once (and starts cold) instead of waiting for an answer
            self._listener.close()
            started.set()
        self.proc.wait()

    def _wait_ready(self, timeout: float) -> None:
        if self.proc is None:
            raise RuntimeError("the warm checkers' sandbox could not be started")
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        line = self.proc.stdout.readline() if ready else b""
        self.proc.stdout.close()
        try:
            answer = json.loads(line)
        except ValueError:
            answer = None
        if isinstance(answer, dict) and answer.get("ready") is True:
            return
        if isinstance(answer, dict) and answer.get("ready") is False:
            raise CheckerServerUnavailable(str(answer.get("reason")))
        raise RuntimeError(f"the warm checkers' parent did not start within {timeout:g} s; "
                           f"it said: {self._last_words() or '(nothing)'}")

    def _last_words(self) -> str:
        texts = []
        with contextlib.suppress(OSError):
            texts.append((self.folder / "runtime" / sandbox.KERNEL_LOG).read_text(
                errors="replace"))
        self._log.seek(0)
        texts.append(self._log.read().decode(errors="replace"))
        lines = [line.strip() for text in texts for line in text.splitlines() if line.strip()]
        return " | ".join(lines[-6:])[-1500:]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def close(self) -> None:
        """Stop the parent and every checker it still runs, and remove `folder`."""
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.terminate()   # the launcher ends the whole sandbox
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        self.proc.wait(timeout=10)
            # a launcher that was killed could not end its sandbox (as root): end it here
            sandbox.remove_cgroup(self.proc.pid)
        self._listener.close()
        self._log.close()
        shutil.rmtree(self.folder, ignore_errors=True)


# ------------------------------------------------------------------ the parent, in its sandbox

@dataclasses.dataclass
class _Child:
    control: socket.socket   # the executor's hang-up arrives here; the exit record goes here
    folder: str
    deadline: float
    wall_seconds: int
    cpu_seconds: int
    killed_for: str = ""


class _Parent:
    """Accept fork requests on `listener` (fd 0) and keep track of the checkers forked."""

    def __init__(self, listener: socket.socket) -> None:
        self.listener = listener
        self.children: dict[int, _Child] = {}
        self.poller = select.poll()
        self.poller.register(listener, select.POLLIN)
        self.wakeup_read, self.wakeup_write = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        signal.set_wakeup_fd(self.wakeup_write)
        signal.signal(signal.SIGCHLD, lambda *_: None)   # the wake-up fd hears of it
        self.poller.register(self.wakeup_read, select.POLLIN)
        self._by_fd: dict[int, int] = {}   # control fd -> child pid

    def run(self) -> None:
        while True:
            now = time.monotonic()
            deadlines = [c.deadline for c in self.children.values() if not c.killed_for]
            wait = max(0.0, min(deadlines) - now) if deadlines else None
            for fd, _ in self.poller.poll(None if wait is None else int(wait * 1000) + 1):
                if fd == self.listener.fileno():
                    self._accept()
                elif fd == self.wakeup_read:
                    with contextlib.suppress(OSError):
                        os.read(self.wakeup_read, 4096)
                elif fd in self._by_fd:   # the executor hung up: the checker is not needed
                    self._kill(self._by_fd[fd], "the grader stopped it")
            self._reap()
            for pid, child in list(self.children.items()):
                if not child.killed_for and time.monotonic() >= child.deadline:
                    self._kill(pid, f"it ran longer than the wall-time limit of "
                                    f"{child.wall_seconds} s")

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except OSError:
            return
        conn.settimeout(10)
        fds: list[int] = []
        try:
            request = _receive_request(conn, fds)
            stdio, log, relay = fds
            limits = sandbox.Limits(**request["limits"])
        except (OSError, ValueError, KeyError, TypeError):
            for fd in fds:
                os.close(fd)
            conn.close()
            return
        folder = _fresh_folder()
        sys.stderr.flush()
        try:
            pid = os.fork()
        except OSError as err:
            _send_record(conn, 125, f"it could not be started ({err})")
            for fd in fds:
                os.close(fd)
            shutil.rmtree(folder, ignore_errors=True)
            return
        if pid == 0:
            self._forget_in_child(conn)
            _become_checker(stdio, log, relay, folder, limits)   # never returns
        for fd in fds:
            os.close(fd)
        conn.settimeout(None)
        self.children[pid] = _Child(conn, folder, time.monotonic() + limits.wall_seconds,
                                    limits.wall_seconds, limits.cpu_seconds)
        self._by_fd[conn.fileno()] = pid
        self.poller.register(conn, select.POLLRDHUP | select.POLLHUP)

    def _forget_in_child(self, mine: socket.socket) -> None:
        """In a new checker: drop the parent's descriptors (they are closed with every other
        one in `_become_checker`) without letting their objects close them later, when the
        numbers may belong to something else."""
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for sock in (self.listener, mine, *(c.control for c in self.children.values())):
            sock.detach()

    def _kill(self, pid: int, why: str) -> None:
        child = self.children.get(pid)
        if child is None or child.killed_for:
            return
        child.killed_for = why
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        with contextlib.suppress(KeyError, ValueError):
            self.poller.unregister(child.control)

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            child = self.children.pop(pid, None)
            if child is None:
                continue
            self._by_fd.pop(child.control.fileno(), None)
            with contextlib.suppress(KeyError, ValueError):
                self.poller.unregister(child.control)
            returncode = os.waitstatus_to_exitcode(status)
            cpu = usage.ru_utime + usage.ru_stime
            _send_record(child.control, returncode, child.killed_for or
                         _ended(returncode, cpu >= child.cpu_seconds - 1, child.cpu_seconds))
            shutil.rmtree(child.folder, ignore_errors=True)


def _receive_request(conn: socket.socket, fds: list[int]) -> dict:
    """The executor's request (one JSON line), with the three descriptors sent beside it."""
    data = b""
    while not data.endswith(b"\n") and len(data) < 65536:
        chunk, received, _, _ = socket.recv_fds(conn, 65536, 3)
        fds.extend(received)
        if not chunk:
            break
        data += chunk
    if len(fds) != 3:
        raise ValueError(f"expected three descriptors with the request, got {len(fds)}")
    return json.loads(data)


def _send_record(conn: socket.socket, returncode: int, reason: str) -> None:
    with contextlib.suppress(OSError):
        conn.settimeout(5)
        conn.sendall((json.dumps({"returncode": returncode, "reason": reason}) + "\n").encode())
    conn.close()


def _ended(returncode: int, out_of_cpu: bool, cpu_seconds: int) -> str:
    """How a checker that ended with `returncode` ended, in the sandbox's words."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        if name == "SIGXCPU" or (name == "SIGKILL" and out_of_cpu):
            return f"it used more than the CPU-time limit of {cpu_seconds} s"
        return f"it was killed by {name}"
    return f"it exited with status {returncode}"


def _fresh_folder() -> str:
    """A new folder for a checker, on the sandbox's /tmp, which checkers cannot list: its
    random name is known to its checker alone."""
    import tempfile

    return tempfile.mkdtemp(prefix="checker-", dir="/tmp")


def _become_checker(stdio: int, log: int, relay: int, folder: str,
                    limits: sandbox.Limits) -> None:
    """In the forked child: become a checker (course_grader.checker.main) that speaks over
    `stdio`, writes its stderr to `log`, reaches its kernel through `relay` and is confined
    to `folder`. Never returns."""
    code = 1
    try:
        os.dup2(stdio, 0)
        os.dup2(stdio, 1)
        os.dup2(log, 2)
        os.dup2(relay, RELAY_FD)
        os.closerange(RELAY_FD + 1, os.sysconf("SC_OPEN_MAX"))
        sandbox.signal_on_parent_death(signal.SIGKILL)
        _limit(limits)
        _enter(folder)
        from course_grader import landlock

        landlock.confine(writable=[folder, "/dev/null"], readable=_readable())
        _reseed()
        from course_grader import checker

        sys.stdin = open(0, encoding="utf-8", closefd=False)  # noqa: SIM115 - for main()
        code = checker.main()
    except BaseException:  # noqa: BLE001 - its last words, for the executor's message
        import traceback

        traceback.print_exc()
    finally:
        with contextlib.suppress(Exception):
            sys.stderr.flush()
        os._exit(code)


def _limit(limits: sandbox.Limits) -> None:
    import resource

    for name, value in (("RLIMIT_CPU", limits.cpu_seconds), ("RLIMIT_AS", limits.memory_bytes),
                        ("RLIMIT_FSIZE", limits.file_bytes),
                        ("RLIMIT_NOFILE", limits.open_files)):
        hard = value + 5 if name == "RLIMIT_CPU" else value   # SIGXCPU first, as the sandbox
        resource.setrlimit(getattr(resource, name), (value, hard))


def _readable() -> list[str]:
    """What a checker may read: the sandbox's whole file system but its /tmp, where the
    other checkers' folders are; and of /tmp what Python imports from (a course or a virtual
    environment placed there)."""
    import course_grader
    import course_utils

    paths = [entry.path for entry in os.scandir("/") if entry.name != "tmp"]
    imported = [*sys.path, sys.prefix, sys.base_prefix,
                *(os.path.dirname(p.__file__) for p in (course_grader, course_utils))]
    paths += sorted({p for p in map(os.path.realpath, imported)
                     if p.startswith("/tmp/") and os.path.exists(p)})
    return paths


def _enter(folder: str) -> None:
    import tempfile

    os.chdir(folder)
    os.environ.update(HOME=folder, TMPDIR=folder, MPLCONFIGDIR=f"{folder}/matplotlib")
    tempfile.tempdir = None


def _reseed() -> None:
    """Draw new seeds where a new Python does (PyTorch's generator, the random module, NumPy's
    global generator), so that checkers forked from one parent share no random state: each
    draws as a cold checker would, from a seed of its own."""
    import random

    random.seed()
    for name, reseed in (("torch", "seed"), ("numpy", "random")):
        module = sys.modules.get(name)
        if module is not None:
            (module.seed if reseed == "seed" else module.random.seed)()


def serve() -> int:
    """The parent: started by `CheckerServer` in its sandbox, with the listening socket as its
    stdin. Says on stdout whether it is ready (or why it cannot confine checkers), then forks
    a checker for each request until it is stopped."""
    import gc

    from course_grader import landlock

    ready = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)   # stray writes must not reach the executor's pipe
    problem = landlock.unavailable_reason()
    if problem:
        ready.write(json.dumps({"ready": False, "reason": problem}) + "\n")
        ready.close()
        return 1
    import importlib

    for name in PRELOAD:
        importlib.import_module(name)
    sys.modules["torch"].set_num_threads(1)
    # no checker may trace this process or another checker, nor read their memory
    import ctypes

    ctypes.CDLL(None).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    gc.freeze()   # what was imported stays shared with the children, not copied by their GC
    parent = _Parent(socket.socket(fileno=0))
    ready.write(json.dumps({"ready": True}) + "\n")
    ready.close()
    parent.run()
    return 0


if __name__ == "__main__":
    sys.exit(serve())
