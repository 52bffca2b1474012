"""Shared fixtures: paths, the nbgrader command, and a throw-away course directory."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import nbformat
import pytest

from course_utils import units as registered

# One thread per process, for this process and every process it starts (kernels, nbgrader,
# servers), unless the caller chose: `make test` runs two workers on two cores, each with
# kernels and checkers of its own, and PyTorch's default of a thread per core made every one of
# them spin against the others (test_transformer took 31 s in a full run, 4-5 s with this).
# Set before any test module imports torch; the lectures set their own thread counts.
os.environ.setdefault("OMP_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
UNITS = [unit.name for unit in registered.UNITS]   # course_utils/units.py; tests/test_units.py


def system_tool(name: str) -> str | None:
    """The full path of a system program (useradd, setpriv, ...): on PATH, or in the sbin
    folders, which a login shell's PATH often lacks (Debian's, and `su` without `-`); None if
    it is not installed."""
    return shutil.which(name) or shutil.which(name, path="/usr/local/sbin:/usr/sbin:/sbin")


def tool_env() -> dict[str, str]:
    """The environment for nbgrader and jupyter: this venv's bin first on PATH (nbgrader runs
    `alembic` by name) and a non-interactive matplotlib backend."""
    env = dict(os.environ)
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"
    env["MPLBACKEND"] = "Agg"
    return env


def run_nbgrader(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [str(BIN / "nbgrader"), *args], cwd=cwd, env=tool_env(),
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


@contextlib.contextmanager
def jupyter(app: str, root: Path, token: str, runtime_dir: Path):
    """Serve `root` with `jupyter <app>` (lab or server) on a free local port, token
    `token`; yields the base URL once the server answers, stops it afterwards."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = tool_env() | {"JUPYTER_RUNTIME_DIR": str(runtime_dir)}
    proc = subprocess.Popen(
        [str(BIN / "jupyter"), app, "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--IdentityProvider.token={token}", f"--ServerApp.root_dir={root}",
         *(["--allow-root"] if os.geteuid() == 0 else [])],
        cwd=root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={token}", timeout=5):
                    break
            except OSError:
                assert proc.poll() is None, f"jupyter {app} exited during start-up"
                assert time.monotonic() < deadline, f"jupyter {app} did not answer within 60 s"
                time.sleep(0.5)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextlib.contextmanager
def local_dask_cluster(n_workers: int = 2, threads_per_worker: int = 1, *, certs: Path):
    """A real Dask scheduler (in this process) and `n_workers` worker processes, each under a
    nanny that restarts it if it dies, speaking mutual TLS with new course certificates made
    in the folder `certs` (which the coordinator then needs); yields the scheduler's tls://
    address."""
    from distributed import LocalCluster

    from course_grader import cluster_certs

    cluster_certs.make_certificates(certs)
    env = {"PATH": tool_env()["PATH"], "MPLBACKEND": "Agg"}
    with LocalCluster(n_workers=n_workers, threads_per_worker=threads_per_worker,
                      processes=True, dashboard_address=None, host="127.0.0.1",
                      protocol="tls://", security=cluster_certs.security(certs),
                      env=env) as cluster:
        yield cluster.scheduler_address


def notebooks(folder: str) -> list[Path]:
    found = (ROOT / folder).glob("**/*.ipynb")
    return sorted(p for p in found if ".ipynb_checkpoints" not in p.parts)


def read(path: Path) -> nbformat.NotebookNode:
    return nbformat.read(path, as_version=4)


def nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


def solved(released: Path, unit: str, solve: set[str] | None = None) -> nbformat.NotebookNode:
    """The released notebook `released`, with the solution cells named in `solve` (grade ids;
    None = all) filled in from the instructor's source of `unit`: a student's submission."""
    answers = {nbgrader_meta(c).get("grade_id"): c.source
               for c in read(ROOT / "solutions" / unit / f"{unit}.ipynb").cells}
    nb = read(released)
    for cell in nb.cells:
        meta = nbgrader_meta(cell)
        if meta.get("solution") and (solve is None or meta["grade_id"] in solve):
            cell.source = re.sub(r"\s*### (BEGIN|END) SOLUTION", "", answers[meta["grade_id"]])
    return nb


def is_graded_test(cell) -> bool:
    meta = nbgrader_meta(cell)
    return cell.cell_type == "code" and bool(meta.get("grade")) and not meta.get("solution")


@pytest.fixture(scope="session")
def fresh_course(tmp_path_factory) -> Path:
    """A copy of the course's nbgrader set-up in a temporary folder, with every unit released
    there by `nbgrader generate_assignment` (and so a gradebook that knows every unit).
    The release is made once per test run: the xdist workers share it (the first one makes
    it, under a lock; nine nbgrader runs, half a minute of CPU) and each gets its own copy."""
    run_dir = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):   # basetemp is <run>/popen-gw<n>
        run_dir = run_dir.parent
    shared = run_dir / "released-course"
    with open(run_dir / "released-course.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (shared / ".complete").exists():
            shutil.rmtree(shared, ignore_errors=True)
            shared.mkdir()
            shutil.copy(ROOT / "nbgrader_config.py", shared)
            shutil.copytree(ROOT / "solutions", shared / "solutions")
            for unit in UNITS:
                run_nbgrader("generate_assignment", unit, "--force", cwd=shared)
            (shared / ".complete").touch()
    course = tmp_path_factory.mktemp("course")
    shutil.copytree(shared, course, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".complete"))
    return course


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (user + system), in seconds."""
    own, children = (resource.getrusage(who) for who in (resource.RUSAGE_SELF,
                                                          resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item.stash[CPU_AT_START] = cpu_seconds()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item):
    yield
    # what this test cost in CPU (its set-up, a module fixture's included, and its processes),
    # beside its wall time in the report `make test` writes; `make bench` sums both by file
    start = item.stash.get(CPU_AT_START, None)
    if start is not None:
        item.user_properties.append(("cpu_seconds", round(cpu_seconds() - start, 3)))


CPU_AT_START = pytest.StashKey[float]()

# The order in which `make test`'s two xdist workers take the files (a file at a time): the
# longest first, longest-processing-time style (in full runs on a slow 2-core host: 15-16,
# 10-12, 3.5-5 and 2-3 minutes each, against a minute or less for any other file); the other
# files that start kernels, sandboxes, servers or a browser, which wait on them in part, next;
# the unit tests last, short and bound by CPU, so that they fill the end of the run on both
# cores instead of a file that waits on a server running alone there.
LONGEST_FIRST = ("tests/notebooks/test_lectures.py", "tests/notebooks/test_questions.py",
                 "tests/course_grader/test_adversarial.py",
                 "tests/course_grader/test_autograde.py", "tests/notebooks/test_release.py",
                 "tests/course_publish/test_site.py", "tests/course_publish/test_edition.py")
WITH_PROCESSES = ("tests/course_grader/", "tests/notebooks/")


def file_rank(path: str) -> int:
    """Where the test file `path` (relative to the project, as in a node id) goes in the run."""
    if path in LONGEST_FIRST:
        return LONGEST_FIRST.index(path)
    return len(LONGEST_FIRST) + (0 if path.startswith(WITH_PROCESSES) else 1)


def pytest_configure(config):
    # xdist orders --dist loadfile's files by their number of tests unless told not to: that
    # put the unit tests' files first and the ones that wait on servers last
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


def pytest_collection_modifyitems(items):
    # a stable sort: the tests of each file keep their order
    items.sort(key=lambda item: file_rank(item.nodeid.split("::")[0]))


@pytest.fixture(scope="module")
def one_thread():
    """For modules whose training must be bitwise reproducible: one thread whatever
    OMP_NUM_THREADS the caller chose (the suite's default is one already, top of this file),
    and the caller's count restored afterwards. Use with
    `pytestmark = pytest.mark.usefixtures("one_thread")`."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def story_tok():
    """The tiny BERT's tokenizer, tiny_bert.story_tokenizer(seed=0) (about 570 tokens), shared
    by the tests of tiny_bert, bert_pretraining, fine_tuning and shipped_tiny_bert."""
    from course_utils.tiny_bert import story_tokenizer

    return story_tokenizer()


# Debian's chromium, driven by Playwright (its own browser download is never used): the
# browser tests of the formgrader and of the widgets share it.
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    assert CHROMIUM, "chromium is not installed: `make browser` installs it (Debian/Ubuntu)"
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--disable-background-networking"])
        yield browser
        browser.close()


@contextlib.contextmanager
def root_only_socket(path: Path):
    """A Unix socket of the host listening at `path`, readable by its owner alone (root, in
    these tests): what a hostile kernel would have the grader connect to. Yields the list of
    connections it accepted."""
    import threading

    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    os.chmod(path, 0o600)
    listener.listen(64)
    accepted: list[socket.socket] = []

    def count() -> None:
        with contextlib.suppress(OSError):
            while True:
                accepted.append(listener.accept()[0])

    threading.Thread(target=count, daemon=True).start()
    try:
        yield accepted
    finally:
        listener.close()


def link_sockets_code(target: Path) -> str:
    """Code that, run in a sandboxed kernel, puts a link to `target` in place of each of the
    kernel's sockets (course_grader.sandbox.SOCKET_DIR)."""
    from course_grader.sandbox import SOCKET_DIR

    return ("import glob, os\n"
            f"for path in glob.glob({SOCKET_DIR + '/ipc-*'!r}):\n"
            "    os.remove(path)\n"
            f"    os.symlink({str(target)!r}, path)\n")


@pytest.fixture(scope="module")
def graded_memory_kernel():
    """One plain kernel for a module's grading cases (their namespace is reset between them),
    limited to the address space a graded kernel has (`sandbox.Limits.memory_bytes`); the
    set-ups' seeding of this process is undone afterwards. (km, kc)."""
    import random

    import numpy as np
    import torch
    from jupyter_client.manager import start_new_kernel

    from course_grader.sandbox import Limits

    states = random.getstate(), np.random.get_state(), torch.get_rng_state()
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        limit = Limits().memory_bytes
        reply = kc.execute_interactive(
            f"import resource\nresource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))\n"
            f"del resource", timeout=60)
        assert reply["content"]["status"] == "ok", reply["content"]
        yield km, kc
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        random.setstate(states[0])
        np.random.set_state(states[1])
        torch.set_rng_state(states[2])
