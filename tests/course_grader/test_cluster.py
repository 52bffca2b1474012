"""Grading on a Dask cluster (`course_grader.cluster`, `autograde --scheduler`), against a real
scheduler and real worker processes: the cluster as a user starts it (`python -m
course_grader.cluster certs / scheduler / worker`, which `make grading-certs`,
`grading-scheduler` and `grading-worker` run) and what it refuses, a worker killed
mid-submission (distributed.LocalCluster), and a cluster that cannot be used.

A Dask worker runs whatever function a connected client sends, so the cluster must refuse
everyone without the course's key: another Unix user, made by the test, tries with no
certificate, with a certificate authority of their own and over plain TCP, against the
scheduler, each worker and each nanny, and the functions they send would leave a marker file;
the same attempts with the course's key leave one on each.

The adversarial corpus itself is graded on such a cluster in test_adversarial.py, which also
checks that grading here (`--jobs 2`) gives its sample the same scores.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest
from conftest import BIN, ROOT, local_dask_cluster, tool_env
from nbgrader.api import Gradebook
from test_exchange import SETPRIV, USERADD, USERDEL, _make_user, _open_ancestors, as_user, refused

from course_grader import autograde, sandbox
from course_grader.autograde import grade_unit
from course_grader.cluster import Cluster, scheduler_command
from course_grader.cluster_certs import CA_CERT, KEY, CertificateError, make_certificates, security
from course_grader.corpus import UNIT, released, solve, write

pytestmark = pytest.mark.skipif(bool(sandbox.unavailable_reason()),
                                reason=f"needs the sandbox: {sandbox.unavailable_reason()}")
needs_users = pytest.mark.skipif(
    os.geteuid() != 0 or None in (USERADD, USERDEL, SETPRIV),
    reason="makes a Unix user (useradd, userdel) and runs commands as them (setpriv, as root)")


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


# -- the course's certificates and commands, without a cluster

def test_the_certificates_key_is_private_and_not_replaced_by_mistake(tmp_path):
    certs = tmp_path / "certs"
    make_certificates(certs)
    modes = {p.name: p.stat().st_mode & 0o777 for p in [certs, *certs.iterdir()]}
    assert modes == {"certs": 0o700, "ca.pem": 0o644, "grading.pem": 0o644,
                     "grading.key": 0o600}
    first_ca = (certs / CA_CERT).read_bytes()
    with pytest.raises(CertificateError, match="--force"):
        make_certificates(certs)
    assert (certs / CA_CERT).read_bytes() == first_ca
    make_certificates(certs, force=True)   # a new authority: every old key is shut out
    assert (certs / CA_CERT).read_bytes() != first_ca
    assert security(certs).require_encryption
    (certs / KEY).chmod(0o640)
    with pytest.raises(CertificateError, match="can be read by others"):
        security(certs)
    with pytest.raises(CertificateError, match="make grading-certs"):
        security(tmp_path / "nowhere")


def make_dry_run(*args: str, env: dict[str, str] | None = None) -> str:
    """What `make ARGS` would run (the set-up taken as done), on one line."""
    proc = subprocess.run(["make", "-s", "-n", f"VENV={BIN.parent}", "-o",
                           str(BIN.parent / ".setup-done"), *args], cwd=ROOT,
                          env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return " ".join(proc.stdout.replace("\\\n", " ").split())


def test_the_scheduler_listens_on_the_loopback_unless_told(tmp_path):
    """Its TLS port and its dashboard (HTTP, no authentication) both on 127.0.0.1; a HOST in
    the environment (some shells export the machine's name) changes nothing."""
    make_certificates(tmp_path)
    command = " ".join(scheduler_command(tmp_path))
    assert "--protocol tls --host 127.0.0.1 --port 8786" in command
    assert "--dashboard-address 127.0.0.1:8787" in command
    assert f"--tls-key {tmp_path / KEY}" in command
    made = make_dry_run("grading-scheduler", env={"HOST": "example.org"})
    assert "course_grader.cluster scheduler --certs .grading-certs --host 127.0.0.1 " \
           "--dashboard 127.0.0.1:8787" in made
    assert "--host 0.0.0.0 " in make_dry_run("grading-scheduler", "HOST=0.0.0.0")


def test_the_course_tools_refuse_a_plain_tcp_address(tmp_path):
    make_certificates(tmp_path / "certs")
    with pytest.raises(CertificateError, match="speaks TLS only"):
        Cluster("tcp://127.0.0.1:8786", certs=tmp_path / "certs")
    worker = subprocess.run([sys.executable, "-m", "course_grader.cluster", "worker",
                             "tcp://127.0.0.1:8786", "--certs", str(tmp_path / "certs")],
                            env=tool_env(), capture_output=True, text=True, timeout=120)
    assert worker.returncode == 2
    assert "refusing the scheduler address 'tcp://127.0.0.1:8786'" in worker.stderr
    assert "the grading cluster speaks TLS only" in worker.stderr


# -- a cluster started as a user starts it: certificates, a scheduler, two workers

@dataclass
class TlsCluster:
    address: str
    certs: Path
    base: Path                        # readable by others; holds certs (0700) and markers
    scheduler: subprocess.Popen
    workers: list[subprocess.Popen]   # their nannies: `python -m course_grader.cluster worker`
    log: Path                         # the scheduler's


def start(command: list[str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT,
                                env=tool_env(), start_new_session=True)


def scheduler_address(proc: subprocess.Popen, log: Path) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        for line in log.read_text(errors="replace").splitlines():
            if "Scheduler at:" in line:
                return line.split()[-1]
        time.sleep(0.2)
    raise AssertionError(f"the scheduler did not start:\n{log.read_text(errors='replace')}")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM (a nanny stops its worker), then SIGKILL for whatever of its tree is left."""
    try:
        tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
    except psutil.Error:
        tree = []
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    for process in psutil.wait_procs(tree, timeout=10)[1]:
        process.kill()


@pytest.fixture(scope="module")
def tls_cluster():
    with ExitStack() as stack:
        base = Path(tempfile.mkdtemp(prefix="grading-cluster-"))
        stack.callback(shutil.rmtree, base, ignore_errors=True)
        base.chmod(0o755)
        certs = base / "certs"
        made = subprocess.run([sys.executable, "-m", "course_grader.cluster", "certs",
                               "--out", str(certs)], env=tool_env(), capture_output=True,
                              text=True, timeout=120)
        assert made.returncode == 0, made.stderr
        log = base / "scheduler.log"
        scheduler = start([sys.executable, "-m", "course_grader.cluster", "scheduler",
                           "--certs", str(certs), "--port", "0"], log)
        stack.callback(stop, scheduler)
        address = scheduler_address(scheduler, log)
        workers = []
        for i in range(2):
            workers.append(start([sys.executable, "-m", "course_grader.cluster", "worker",
                                  address, "--certs", str(certs), "--nthreads", "1"],
                                 base / f"worker{i}.log"))
            stack.callback(stop, workers[-1])
        with Cluster(address, certs=certs) as cluster:
            cluster.client.wait_for_workers(2, timeout=120)
        yield TlsCluster(address, certs, base, scheduler, workers, log)


def test_two_workers_share_a_machine_under_names_of_their_own(tls_cluster):
    assert tls_cluster.address.startswith("tls://127.0.0.1:")
    with Cluster(tls_cluster.address, certs=tls_cluster.certs) as cluster:
        names = {w["name"] for w in cluster.client.scheduler_info()["workers"].values()}
        assert cluster.threads() == 2
    host = socket.gethostname()
    assert names == {f"{host}-{w.pid}" for w in tls_cluster.workers}


def listening(proc: subprocess.Popen) -> set[str]:
    """host:port of every socket that `proc` or a process under it listens on."""
    found = set()
    for process in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]:
        for conn in process.net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN:
                found.add(f"{conn.laddr.ip}:{conn.laddr.port}")
    return found


def test_the_cluster_listens_on_the_loopback_only(tls_cluster):
    """Started without an address, the scheduler (its TLS port and its HTTP dashboard) and the
    workers and nannies (TLS, and HTTP for health) listen on 127.0.0.1 alone."""
    scheduler = listening(tls_cluster.scheduler)
    assert len(scheduler) >= 2, scheduler
    workers = set().union(*(listening(w) for w in tls_cluster.workers))
    assert len(workers) >= 6, workers   # per worker: the nanny, the worker, its HTTP server
    assert {a.rsplit(":", 1)[0] for a in scheduler | workers} == {"127.0.0.1"}


# Run as another Unix user: connect to each endpoint (op=address) over TLS that trusts any
# server and presents the certificate in CERTS ("": none; "tcp": plain TCP instead), and ask
# it to run a function that creates a file in MARKERS; one line per endpoint.
ATTACK = """
import asyncio, functools, ssl, sys
from pathlib import Path
from distributed import Client
from distributed.core import rpc
from distributed.protocol.pickle import dumps
from distributed.security import Security

certs, markers, *targets = sys.argv[1:]

def connection_args():
    if certs == "tcp":
        return {}
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    if certs:
        ctx.load_cert_chain(f"{certs}/grading.pem", f"{certs}/grading.key")
    return {"ssl_context": ctx, "require_encryption": False, "extra_conn_args": {}}

class AnyServer(Security):
    def get_connection_args(self, role):
        return connection_args()

def marker(name):
    return functools.partial(Path.touch, Path(markers, name))

async def call(op, address, name):
    remote = rpc(address, connection_args=connection_args(), timeout=10)
    try:
        await getattr(remote, op)(function=dumps(marker(name)))
    finally:
        await remote.close_rpc()

for i, target in enumerate(targets):
    op, address = target.split("=", 1)
    address = address.replace("tls://", "tcp://") if certs == "tcp" else address
    try:
        if op == "submit":
            with Client(address, security=AnyServer(), timeout=10) as client:
                client.submit(marker("submit"), pure=False).result(timeout=60)
        else:
            asyncio.run(call(op, address, f"{op}-{i}"))
        print(op, address, "ran")
    except Exception as err:
        print(op, address, f"refused: {type(err).__name__}: {err.__cause__ or err}")
"""


def endpoints(cluster: TlsCluster) -> list[str]:
    """Every place that runs a function it is sent: a task and the scheduler itself, each
    worker and each nanny (Dask's `run` handler)."""
    with Cluster(cluster.address, certs=cluster.certs) as client:
        workers = client.client.scheduler_info()["workers"]
    found = [f"submit={cluster.address}", f"run_function={cluster.address}"]
    for address, worker in sorted(workers.items()):
        found += [f"run={address}", f"run={worker['nanny']}"]
    return found


def attack(run, certs: str, markers: Path, targets: list[str]) -> list[str]:
    markers.mkdir()
    proc = run(str(BIN / "python"), "-c", ATTACK, certs, str(markers), *targets)
    lines = proc.stdout.splitlines()
    assert len(lines) == len(targets), proc.stdout + proc.stderr
    return lines


def logged(log: Path, *texts: str) -> None:
    """Every one of `texts` is in `log` within 10 s (a server logs a refusal as it happens)."""
    deadline = time.monotonic() + 10
    while (missing := [t for t in texts if t not in log.read_text(errors="replace")]) \
            and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not missing, f"{log.name} does not say {missing}"


@needs_users
def test_without_the_courses_key_nobody_runs_anything(tls_cluster):
    """Another Unix user cannot read the key, and with no certificate, with a certificate
    authority of their own (made with the course's tool) or over plain TCP, every endpoint
    refuses them: no marker appears. With the course's key, the same script runs a function
    on each: the markers appear, so the attempts above were real ones."""
    targets = endpoints(tls_cluster)
    markers = tls_cluster.base / "markers"
    markers.mkdir()
    with ExitStack() as stack:
        _open_ancestors([Path(sys.executable).resolve().parent, Path(sys.base_prefix).resolve(),
                         Path(sys.prefix).resolve(), ROOT], stack)
        stranger = _make_user(f"crs-grdr-{secrets.token_hex(3)}", stack)
        refused(stranger, "cat", str(tls_cluster.certs / KEY))
        refused(stranger, "ls", str(tls_cluster.certs))
        own = stranger.home / "own-certs"
        made = as_user(stranger, str(BIN / "python"), "-m", "course_grader.cluster", "certs",
                       "--out", str(own))
        assert made.returncode == 0, made.stderr

        def as_stranger(*cmd):
            return as_user(stranger, *cmd, timeout=300)

        seen = {how: attack(as_stranger, certs, markers / how, targets)
                for how, certs in [("no-certificate", ""), ("own-ca", str(own)),
                                   ("plain-tcp", "tcp")]}
    print("\n" + "\n".join(f"{how}: {line}" for how, lines in seen.items() for line in lines))
    assert all(" refused: " in line for lines in seen.values() for line in lines), seen
    assert not [p for p in markers.rglob("*") if p.is_file()]
    # the refusals are the servers' own (the attempts trust any server): each process
    # logs why, for no certificate, another authority's, and what is not TLS at all
    for log in [tls_cluster.log, *(tls_cluster.base / f"worker{i}.log" for i in range(2))]:
        logged(log, "TLS handshake failed with remote", "PEER_DID_NOT_RETURN_A_CERTIFICATE",
               "CERTIFICATE_VERIFY_FAILED", "WRONG_VERSION_NUMBER")

    def as_root(*cmd):
        return subprocess.run(cmd, env=tool_env(), capture_output=True, text=True, timeout=300)

    keyed = attack(as_root, str(tls_cluster.certs), markers / "course-key", targets)
    assert all(line.endswith(" ran") for line in keyed), keyed
    assert len(list((markers / "course-key").iterdir())) == len(targets)


def test_with_the_key_the_cluster_grades_as_jobs_1_does(tls_cluster, course, tmp_path):
    """`autograde --scheduler tls://...` gives every item the score `--jobs 1` gives here, and
    each submission was graded by one of the cluster's worker processes."""
    expected = make_submissions(course, 2)
    here = tmp_path / "here"
    shutil.copytree(course, here)
    on_cluster = subprocess.run(
        [sys.executable, "-m", "course_grader.autograde", UNIT, "--scheduler",
         tls_cluster.address, "--certs", str(tls_cluster.certs)], cwd=course, env=tool_env(),
        capture_output=True, text=True, timeout=900)
    assert on_cluster.returncode == 0, on_cluster.stdout + on_cluster.stderr
    assert f"(2 at a time on the cluster at {tls_cluster.address}, sandboxed)" \
        in on_cluster.stdout
    alone = subprocess.run([sys.executable, "-m", "course_grader.autograde", UNIT, "--jobs",
                            "1"], cwd=here, env=tool_env(), capture_output=True, text=True,
                           timeout=900)
    assert alone.returncode == 0, alone.stdout + alone.stderr
    scores = gradebook_scores(course)
    assert scores == gradebook_scores(here)
    assert {s: sum(g.values()) for s, g in scores.items()} == expected
    with Cluster(tls_cluster.address, certs=tls_cluster.certs) as cluster:
        pids = set(cluster.client.run(os.getpid).values())
    status = json.loads((course / "autograde_status" / f"{UNIT}.json").read_text())
    assert {int(status[s]["worker"].rsplit(":", 1)[1]) for s in expected} <= pids, status


# -- a worker killed mid-submission; a scheduler that cannot be used

def test_a_worker_killed_mid_submission_loses_nothing(course):
    """SIGKILL the worker process while its nbgrader is grading: the scheduler runs that
    submission again on another worker, every submission gets its score once, and the dead
    worker's nbgrader (and so its kernel) died with it."""
    expected = make_submissions(course, 4)
    certs = course.parent / "certs"
    with local_dask_cluster(n_workers=2, threads_per_worker=1, certs=certs) as address, \
            Cluster(address, certs=certs) as cluster:
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


def test_an_unusable_scheduler_is_refused_clearly(course, capsys):
    """Unreachable, plain TCP, or no certificates: `autograde --scheduler` says which, exits
    with 2 and grades nothing."""
    make_submissions(course, 1)
    make_certificates(course / ".grading-certs")
    proc = subprocess.run([sys.executable, "-m", "course_grader.autograde", UNIT,
                           "--scheduler", "tls://127.0.0.1:9"], cwd=course, env=tool_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "cannot reach the Dask scheduler at tls://127.0.0.1:9" in proc.stderr
    refusals = {"tcp://127.0.0.1:9": "refusing the scheduler address 'tcp://127.0.0.1:9': the "
                "grading cluster speaks TLS only",
                "127.0.0.1:9": "give its tls:// address"}
    for address, says in refusals.items():
        assert autograde.main([UNIT, "--course", str(course), "--scheduler", address]) == 2
        assert says in capsys.readouterr().err
    assert autograde.main([UNIT, "--course", str(course), "--scheduler", "tls://127.0.0.1:9",
                           "--certs", str(course / "none")]) == 2
    assert "no grading-cluster certificates in" in capsys.readouterr().err
    assert not (course / "autograded").exists()
