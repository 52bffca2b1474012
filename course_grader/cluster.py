"""Grading on several machines: submissions as tasks on a Dask distributed cluster.

    python -m course_grader.cluster certs                 # once: the course's certificates
    python -m course_grader.cluster scheduler --host IP   # one machine: the scheduler
    python -m course_grader.cluster worker tls://IP:8786  # each grading machine
    python -m course_grader.autograde --scheduler tls://IP:8786     # the coordinator

(`make grading-certs`, `make grading-scheduler HOST=IP`, `make grading-worker
SCHEDULER=tls://IP:8786`, `make autograde SCHEDULER=tls://IP:8786`.) A Dask worker runs any
function a connected client sends, as the worker's user, so the cluster speaks mutual TLS
only, with the course's certificates (`course_grader.cluster_certs`): a scheduler, worker or
client without the course's key is refused, and a plain `tcp://` address is refused here
before anything connects. The scheduler and its dashboard listen on 127.0.0.1 unless told
otherwise; each worker is named after its host and process id, so several share a machine.

Each submission is one task, `course_grader.worker.grade_submission`, whose arguments carry
all it needs (the staged files, the course's configuration, the unit's gradebook template,
sent to each worker once). A worker grades in a private folder and returns the autograded
notebooks; the coordinator alone writes the gradebook (`course_grader.autograde`). When a
worker dies mid-task, the scheduler runs the task again on another worker (up to Dask's
`distributed.scheduler.allowed-failures` times; then the submission is marked
"needs-regrading", never scored);
the dead worker wrote nothing, so no submission is lost and none is half recorded.

Dask, because it runs plain Python functions on plain data with no broker to operate (the
scheduler is one process), reschedules the tasks of a lost worker by itself, and deploys on
what a university has: SSH, SLURM/PBS (dask-jobqueue), Kubernetes (dask-kubernetes).
"""

from __future__ import annotations

import argparse
import os
import socket
import sys
import uuid
from importlib.metadata import version
from pathlib import Path

from course_grader import cluster_certs, sandbox
from course_grader.cluster_certs import CertificateError
from course_grader.worker import Graded, Submission, grade_submission

__all__ = ["Cluster", "main", "reaching_address", "require_tls", "scheduler_command",
           "worker_command", "worker_name"]

PORT = 8786
LOOPBACK = "127.0.0.1"
DASHBOARD = f"{LOOPBACK}:8787"
# Dask reads `require_encryption` from its configuration when a Security leaves it unset; a
# user's ~/.config/dask saying false must not turn it off (the environment comes last)
_ENCRYPTION_ENV = {"DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION": "True"}


def require_tls(address: str) -> str:
    """`address` if it is a scheduler's tls:// address; any other is refused."""
    if not address.startswith("tls://"):
        raise CertificateError(
            f"refusing the scheduler address {address!r}: the grading cluster speaks TLS only "
            "(plain TCP would let anyone who reaches the port run code on the workers); "
            f"give its tls:// address, e.g. tls://HOST:{PORT}")
    return address


def _tls_args(certs: Path) -> list[str]:
    cluster_certs.security(certs)   # refuses a missing folder or a key that others can read
    return ["--tls-ca-file", str(certs / cluster_certs.CA_CERT),
            "--tls-cert", str(certs / cluster_certs.CERT),
            "--tls-key", str(certs / cluster_certs.KEY)]


def scheduler_command(certs: Path, *, host: str = LOOPBACK, port: int = PORT,
                      dashboard: str = DASHBOARD) -> list[str]:
    """The command that runs the cluster's scheduler: TLS on `host`:`port`, its dashboard
    (HTTP, unauthenticated) on `dashboard`; both on the loopback unless given."""
    return [sys.executable, "-m", "distributed.cli.dask_scheduler", "--protocol", "tls",
            "--host", host, "--port", str(port), "--dashboard-address", dashboard,
            *_tls_args(certs)]


def worker_name() -> str:
    """This process's worker name: its host and process id, unique among the workers that
    run at one time, so several can share a machine (Dask refuses a name already taken)."""
    return f"{socket.gethostname()}-{os.getpid()}"


def reaching_address(scheduler: str) -> str:
    """The IP address of this machine's interface that leads to `scheduler`'s host."""
    from distributed.comm import get_address_host
    from distributed.utils import get_ip

    return get_ip(get_address_host(scheduler))


def worker_command(scheduler: str, certs: Path, *, nthreads: int, name: str,
                   host: str) -> list[str]:
    """The command that runs one grading worker (under Dask's nanny, which restarts it if it
    dies) of `nthreads` threads named `name`, connected to `scheduler` over TLS. It and its
    nanny listen (TLS: the scheduler and the other workers call them) on `host` alone, and
    its HTTP server (health and metrics, unauthenticated) on the loopback."""
    return [sys.executable, "-m", "distributed.cli.dask_worker", require_tls(scheduler),
            "--nworkers", "1", "--nthreads", str(nthreads), "--name", name, "--host", host,
            "--no-dashboard", "--dashboard-address", f"{LOOPBACK}:0", *_tls_args(certs)]


def _worker_report() -> dict[str, str | None]:
    """Run on each worker: what grading there depends on."""
    return {"nbgrader": version("nbgrader"), "course-utils": version("course-utils"),
            "sandbox": sandbox.unavailable_reason()}


class Cluster:
    """A connection to a running Dask scheduler at a tls:// `address`, as a member holding the
    certificates in `certs`, for `grade_unit(..., cluster=...)`. Raises CertificateError for
    another address or unusable certificates, OSError when the scheduler cannot be reached
    or refuses them."""

    def __init__(self, address: str, *, certs: Path, timeout: float = 30):
        from distributed import Client

        self.address = require_tls(address)
        self.client = Client(address, security=cluster_certs.security(certs),
                             timeout=timeout)

    def threads(self) -> int:
        """How many tasks the workers run at once (their threads, summed)."""
        return sum(self.client.nthreads().values())

    def problems(self, *, unsafe: bool) -> list[str]:
        """Why some worker cannot grade like this machine (none: the list is empty)."""
        reports = self.client.run(_worker_report)
        if not reports:
            return [f"the scheduler at {self.address} has no worker"]
        here = _worker_report()
        out = []
        for worker, report in sorted(reports.items()):
            for package in ("nbgrader", "course-utils"):
                if report[package] != here[package]:
                    out.append(f"{worker} has {package} {report[package]}, this machine "
                               f"{here[package]}")
            if report["sandbox"] and not unsafe:
                out.append(f"{worker} cannot run the sandbox: {report['sandbox']}")
        return out

    def runner(self, template: bytes):
        """A function that grades one Submission on the cluster and returns its Graded;
        the unit's gradebook template goes to every worker once."""
        shared = self.client.scatter(template, broadcast=True, hash=False)

        def run(task: Submission) -> Graded:
            key = f"grade-{task.unit}-{task.student}-{uuid.uuid4().hex[:8]}"
            return self.client.submit(grade_submission, task, shared, key=key,
                                      pure=False).result()

        return run

    def close(self) -> None:
        self.client.close()

    def __enter__(self) -> Cluster:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _exec(command: list[str]) -> None:
    """Become `command` (same process id), with encryption required."""
    sys.stdout.flush()
    os.execve(command[0], command, {**os.environ, **_ENCRYPTION_ENV})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_grader.cluster",
                                     description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    certs = commands.add_parser("certs", help="make the course's certificate authority and key")
    certs.add_argument("--out", type=Path, default=Path(cluster_certs.DEFAULT_FOLDER))
    certs.add_argument("--days", type=int, default=365, help="validity (default: 365)")
    certs.add_argument("--force", action="store_true", help="replace existing certificates")
    scheduler = commands.add_parser("scheduler", help="run the scheduler")
    scheduler.add_argument("--host", default=LOOPBACK,
                           help=f"address to listen on (default: {LOOPBACK})")
    scheduler.add_argument("--port", type=int, default=PORT)
    scheduler.add_argument("--dashboard", default=DASHBOARD,
                           help=f"the dashboard's address (default: {DASHBOARD})")
    worker = commands.add_parser("worker", help="run a grading worker")
    worker.add_argument("scheduler", help=f"the scheduler's address, tls://HOST:{PORT}")
    worker.add_argument("--nthreads", type=int, default=len(os.sched_getaffinity(0)),
                        help="submissions graded at once (default: one per core)")
    worker.add_argument("--host", help="address to listen on (default: this machine's "
                        "address towards the scheduler)")
    for command in (scheduler, worker):
        command.add_argument("--certs", type=Path, default=Path(cluster_certs.DEFAULT_FOLDER))
    opts = parser.parse_args(argv)
    try:
        if opts.command == "certs":
            cluster_certs.make_certificates(opts.out, days=opts.days, force=opts.force)
            print(f"certificates in {opts.out}/: copy this folder (mode 0700, its key 0600) to "
                  "the scheduler, every worker and the coordinator, and to no one else")
            return 0
        if opts.command == "scheduler":
            _exec(scheduler_command(opts.certs, host=opts.host, port=opts.port,
                                    dashboard=opts.dashboard))
        if os.geteuid() == 0:
            print("WARNING: this grading worker runs as root: whoever holds the course's key "
                  "could run code as root here. Run it as an unprivileged user.",
                  file=sys.stderr)
        _exec(worker_command(opts.scheduler, opts.certs, nthreads=opts.nthreads,
                             name=worker_name(),
                             host=opts.host or reaching_address(require_tls(opts.scheduler))))
    except CertificateError as err:
        print(err, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
