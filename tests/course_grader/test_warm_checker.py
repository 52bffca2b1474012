"""Checkers forked from a warm parent (course_grader.warm_checker), driven for real: a server in
its sandbox, checkers forked from it, test cells that attack each other, and one checker that
grades a real kernel through `nbgrader_hooks._Checker`."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest
from conftest import ROOT

from course_grader import landlock, sandbox, warm_checker, worker
from course_grader.nbgrader_hooks import CHECKER_LIMITS, _Checker

pytestmark = pytest.mark.skipif(sandbox.unavailable_reason() is not None,
                                reason="no sandbox here (test_sandbox_is_available says why)")
LIMITS = sandbox.Limits(**CHECKER_LIMITS)
needs_landlock = pytest.mark.skipif(landlock.unavailable_reason() is not None,
                                    reason=f"{landlock.unavailable_reason()}: checkers start "
                                           f"cold here (test_the_server_refuses_... says so)")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    folder = tmp_path_factory.mktemp("warm") / "server"
    folder.mkdir(mode=0o700)
    if landlock.unavailable_reason():
        pytest.skip(landlock.unavailable_reason())
    server = warm_checker.CheckerServer(folder, LIMITS)
    yield server
    server.close()


@contextlib.contextmanager
def forked(server, limits: sandbox.Limits = LIMITS):
    """A checker forked by `server`, with an empty relay folder (no kernel: the test cells
    below use none), stopped at the end."""
    with tempfile.TemporaryDirectory() as relay, tempfile.TemporaryFile() as log:
        proc = warm_checker.fork(server.address, relay, log.fileno(), limits)
        try:
            yield proc
        finally:
            if proc.poll() is None:
                with contextlib.suppress(OSError):
                    send(proc, {"op": "stop"})
            proc.wait(timeout=30)


def send(proc, request: dict) -> None:
    proc.stdin.write(json.dumps(request) + "\n")
    proc.stdin.flush()


def ask(proc, request: dict, wait: float = 120) -> dict:
    send(proc, request)
    assert select.select([proc.stdout], [], [], wait)[0], f"no answer to {request}"
    line = proc.stdout.readline()
    assert line, f"the checker ended ({proc.wait(timeout=10)}: {proc.exit_record()})"
    return json.loads(line)


def cell(proc, source: str, timeout: float = 60) -> str:
    """Run `source` as a test cell; what it printed. It must pass."""
    verdict = ask(proc, {"op": "test", "source": source, "hidden_lines": [], "timeout": timeout})
    assert verdict["passed"], verdict
    return verdict["stdout"]


def test_a_value_left_in_a_module_by_one_checker_is_not_seen_by_the_next(server):
    leave = ("import os, torch\nfrom course_utils import grading\n"
             "grading.LEFT_BEHIND = 'by the first'\ntorch.nn.functional.LEFT_BEHIND = 1\n"
             "open('left.txt', 'w').write('x')\nprint(os.getcwd())")
    look = """
import os, torch
from course_utils import grading
print(hasattr(grading, 'LEFT_BEHIND'), hasattr(torch.nn.functional, 'LEFT_BEHIND'))
for name, act in [("read", lambda: open({folder!r} + '/left.txt').read()),
                  ("list", lambda: os.listdir({folder!r})), ("find", lambda: os.listdir('/tmp'))]:
    try:
        print(name, act())
    except OSError as err:
        print(name, type(err).__name__)
"""
    with forked(server) as first:
        folder = cell(first, leave).strip()
        with forked(server) as beside:   # at the same time
            seen = cell(beside, look.format(folder=folder)).splitlines()
        assert seen == ["False False", "read PermissionError", "list PermissionError",
                        "find PermissionError"]
        assert cell(first, look.format(folder=folder)).splitlines()[:3] == [
            "True True", "read x", "list ['left.txt']"]
    with forked(server) as after:   # after it ended: its folder is gone too
        seen = cell(after, look.format(folder=folder)).splitlines()
        assert seen[:2] == ["False False", "read FileNotFoundError"]


def test_each_checker_draws_from_seeds_of_its_own(server):
    """As cold checkers did (each a new Python, seeded from the system's entropy): no two
    forked checkers draw the same unseeded numbers, from PyTorch, random or NumPy."""
    draw = ("import random, numpy, torch\n"
            "print(torch.rand(2).tolist(), random.random(), numpy.random.rand())")
    with forked(server) as one, forked(server) as two:
        first, second = cell(one, draw).strip(), cell(two, draw).strip()
    with forked(server) as three:
        third = cell(three, draw).strip()
    for a, b in ((first, second), (first, third), (second, third)):
        assert [x != y for x, y in zip(a.split("] "), b.split("] "), strict=True)] == [True, True]
        assert a.split()[-1] != b.split()[-1]


def test_a_checker_writes_only_in_its_own_folder(server):
    attempt = ("import os\nfor path in {paths!r}:\n    try:\n        open(path, 'w').write('x')\n"
               "        print(path, 'written')\n    except OSError as err:\n"
               "        print(path, type(err).__name__)\n")
    with forked(server) as one, forked(server) as two:
        theirs = cell(two, "import os\nprint(os.getcwd())").strip()
        # the parent's working folder is a writable tmpfs of the sandbox, as /tmp is
        paths = ["mine.txt", "/dev/null", "/tmp/outside.txt", f"{theirs}/planted.py",
                 f"{server.folder}/work/x"]
        said = dict(line.rsplit(" ", 1) for line in cell(one, attempt.format(paths=paths))
                    .strip().splitlines())
    assert said == {"mine.txt": "written", "/dev/null": "written",
                    "/tmp/outside.txt": "PermissionError",
                    f"{theirs}/planted.py": "PermissionError",
                    f"{server.folder}/work/x": "PermissionError"}


def test_a_checker_cannot_signal_trace_or_read_another(server):
    attack = """
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
for name, act in [("kill other", lambda: os.kill({other}, signal.SIGKILL)),
                  ("stop parent", lambda: os.kill(os.getppid(), signal.SIGSTOP)),
                  ("environ", lambda: open("/proc/{other}/environ").read()),
                  ("memory", lambda: open("/proc/{other}/mem", "rb").read(1)),
                  ("fds", lambda: os.listdir("/proc/{other}/fd"))]:
    try:
        act()
        print(name, "DONE")
    except OSError as err:
        print(name, type(err).__name__)
print("ptrace", libc.ptrace(16, {other}, 0, 0), ctypes.get_errno())   # PTRACE_ATTACH
"""
    with forked(server) as victim, forked(server) as attacker:
        other = int(cell(victim, "import os\nprint(os.getpid())"))
        said = cell(attacker, attack.format(other=other)).strip().splitlines()
        assert said[:5] == ["kill other PermissionError", "stop parent PermissionError",
                            "environ PermissionError", "memory PermissionError",
                            "fds PermissionError"]
        assert said[5] == "ptrace -1 1"   # EPERM
        assert cell(victim, "print('still here')").strip() == "still here"


def test_a_checker_holds_its_own_descriptors_only_and_stays_in_the_sandbox(server):
    look = f"""
import os, socket
links = []
for fd in os.listdir("/proc/self/fd"):
    try:
        links.append(os.readlink(f"/proc/self/fd/{{fd}}"))
    except OSError:   # the listing's own descriptor, closed by now
        pass
sockets = {{link for link in links if link.startswith("socket:")}}
print(len(sockets), os.path.isdir("/proc/self/fd/{warm_checker.RELAY_FD}"))
print(os.path.exists({str(ROOT / "solutions")!r}), os.path.exists({server.address!r}))
try:
    socket.create_connection(("127.0.0.1", {{port}}), timeout=5)
    print("network reached")
except OSError as err:
    print("network", type(err).__name__)
"""
    with socket.create_server(("127.0.0.1", 0)) as host, forked(server) as proc:
        said = cell(proc, look.replace("{port}", str(host.getsockname()[1]))).split("\n")
    assert said[0] == "1 True", "only its own conversation, and its kernel's relay folder"
    assert said[1] == "False False", "the course's files and the server's socket are not there"
    assert said[2] in ("network ConnectionRefusedError", "network OSError")


def test_the_limits_are_each_checkers_own(server):
    spin = "import time\nend = time.process_time() + 30\nwhile time.process_time() < end: pass"
    with forked(server, sandbox.Limits(**{**CHECKER_LIMITS, "cpu_seconds": 2})) as proc:
        send(proc, {"op": "test", "source": spin, "hidden_lines": [], "timeout": 60})
        proc.wait(timeout=120)
    assert proc.exit_record()["reason"] == "it used more than the CPU-time limit of 2 s"
    with forked(server, sandbox.Limits(**{**CHECKER_LIMITS, "wall_seconds": 2})) as proc:
        send(proc, {"op": "test", "source": "import time\ntime.sleep(60)", "hidden_lines": [],
                    "timeout": 60})
        proc.wait(timeout=60)
    assert proc.exit_record()["reason"] == "it ran longer than the wall-time limit of 2 s"
    with forked(server) as proc:   # the others kept their own limits
        assert cell(proc, "print(sum(range(10)))").strip() == "45"


def test_hanging_up_stops_the_checker(server):
    with forked(server) as proc:
        send(proc, {"op": "test", "source": "import time\ntime.sleep(60)", "hidden_lines": [],
                    "timeout": 60})
        proc.kill()
        assert proc.wait(timeout=30) == -signal.SIGKILL
        assert proc.exit_record()["reason"] == "the grader stopped it"


STUDENT = """
import torch
def softmax(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)
def wrong_softmax(x, dim=-1):
    return torch.exp(x)
"""


@needs_landlock
def test_a_forked_checker_grades_a_real_kernel_through_its_relay(server, tmp_path,
                                                                 monkeypatch):
    """The executor's checker (`_Checker`, confined) is forked when the worker names a server,
    and reaches the kernel only through /proc/self/fd/RELAY_FD."""
    from jupyter_client.manager import KernelManager

    (tmp_path / "k").mkdir()
    km = KernelManager(transport="ipc", ip=str(tmp_path / "k" / "ipc"))
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    checker = None
    try:
        kc.wait_for_ready(timeout=120)
        assert kc.execute_interactive(STUDENT, timeout=120)["content"]["status"] == "ok"
        monkeypatch.setenv(warm_checker.SERVER_ENV, server.address)
        info = {k: v.decode() if isinstance(v, bytes) else v
                for k, v in km.get_connection_info().items()}
        checker = _Checker(info, cwd=str(tmp_path), timeout=60,
                           student_names=["softmax", "wrong_softmax"], confined=True)
        assert isinstance(checker.proc, warm_checker.ForkedChecker)
        assert checker.ask({"op": "setup", "source": "import torch\nfrom course_utils import "
                                                     "grading"})["ok"]
        test = ("x = torch.randn(3, 5)\ngrading.check_tensor({fn}(x), torch.softmax(x, -1), "
                "what='{fn}(x)')")
        good = checker.ask({"op": "test", "source": test.format(fn="softmax"),
                            "hidden_lines": [], "timeout": 60})
        bad = checker.ask({"op": "test", "source": test.format(fn="wrong_softmax"),
                           "hidden_lines": [], "timeout": 60})
        assert good["passed"], good
        assert not bad["passed"] and "wrong_softmax(x)" in bad["message"], bad
    finally:
        if checker is not None:
            checker.close()
        kc.stop_channels()
        km.shutdown_kernel(now=True)


@needs_landlock
def test_a_stopped_server_refuses_at_once_and_the_checker_starts_cold(tmp_path, monkeypatch):
    folder = tmp_path / "server"
    folder.mkdir(mode=0o700)
    server = warm_checker.CheckerServer(folder, LIMITS)
    try:
        server.proc.terminate()   # its launcher ends the sandbox, the only listener
        server.proc.wait(timeout=30)
        (tmp_path / "relay").mkdir()
        with pytest.raises(ConnectionRefusedError):
            warm_checker.fork(server.address, tmp_path / "relay", 2, LIMITS)
        monkeypatch.setenv(warm_checker.SERVER_ENV, server.address)
        info = {"transport": "ipc", "ip": str(tmp_path / "kernel" / "ipc"), "key": "",
                "signature_scheme": "hmac-sha256", "shell_port": 1, "iopub_port": 2,
                "stdin_port": 3, "control_port": 4, "hb_port": 5}
        checker = _Checker(info, cwd=str(tmp_path), timeout=30, student_names=[],
                           confined=True)
        try:
            assert isinstance(checker.proc, subprocess.Popen), "a cold checker, as before"
            assert checker.ask({"op": "setup", "source": "x = 1"}) == {"ok": True}
        finally:
            checker.close()
    finally:
        server.close()


@needs_landlock
def test_a_worker_keeps_one_server_and_starts_another_when_it_stopped():
    try:
        first = worker.checker_server()
        assert first and worker.checker_server() == first
        launcher = worker._checkers["server"].proc
        os.kill(launcher.pid, signal.SIGKILL)
        launcher.wait(timeout=30)
        second = worker.checker_server()
        assert second and second != first and Path(second).is_socket()
        assert not Path(first).exists(), "the stopped server's folder is removed"
        # nothing of the stopped server's sandbox is left (as root: its pids cgroup is gone)
        assert sandbox.cgroup_of(launcher.pid) is None
    finally:
        worker._stop_checker_server()


def test_the_server_refuses_where_checkers_cannot_be_confined(tmp_path):
    """Where Landlock cannot confine a forked checker the server does not start, and says why
    (checkers then start cold); where it can, it starts."""
    folder = tmp_path / "server"
    folder.mkdir(mode=0o700)
    problem = landlock.unavailable_reason()
    if problem:
        with pytest.raises(warm_checker.CheckerServerUnavailable, match="Landlock"):
            warm_checker.CheckerServer(folder, LIMITS)
        assert not folder.exists()
        return
    server = warm_checker.CheckerServer(folder, LIMITS)
    try:
        assert server.alive()
    finally:
        server.close()
    assert not folder.exists()
