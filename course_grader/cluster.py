"""Grading on several machines: submissions as tasks on a Dask distributed cluster.

    dask scheduler                                  # one machine: the scheduler
    dask worker tcp://HOST:8786 --nthreads 2        # each grading machine (course + bubblewrap)
    python -m course_grader.autograde --scheduler tcp://HOST:8786     # the coordinator

Each submission is one task, `course_grader.worker.grade_submission`, whose arguments carry
all it needs (the staged files, the course's configuration, the unit's gradebook template,
sent to each worker once). A worker grades in a private folder and returns the autograded
notebooks; the coordinator alone writes the gradebook (`course_grader.autograde`). When a
worker dies mid-task, the scheduler runs the task again on another worker (up to Dask's
`distributed.scheduler.allowed-failures` times, then the submission scores 0 with a note);
the dead worker wrote nothing, so no submission is lost and none is half recorded.

Dask, because it runs plain Python functions on plain data with no broker to operate (the
scheduler is one process), reschedules the tasks of a lost worker by itself, and deploys on
what a university has: SSH, SLURM/PBS (dask-jobqueue), Kubernetes (dask-kubernetes).
"""

from __future__ import annotations

import uuid
from importlib.metadata import version

from course_grader import sandbox
from course_grader.worker import Graded, Submission, grade_submission

__all__ = ["Cluster"]


def _worker_report() -> dict[str, str | None]:
    """Run on each worker: what grading there depends on."""
    return {"nbgrader": version("nbgrader"), "course-utils": version("course-utils"),
            "sandbox": sandbox.unavailable_reason()}


class Cluster:
    """A connection to a running Dask scheduler, for `grade_unit(..., cluster=...)`."""

    def __init__(self, address: str, *, timeout: float = 30):
        from distributed import Client

        self.address = address
        self.client = Client(address, timeout=timeout)

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
