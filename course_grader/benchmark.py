"""What autograding costs: the course's CPU-seconds per submission against plain nbgrader's on
the same submissions, and seconds per submission in each grading mode.

    make bench-autograde      (or: python -m course_grader.benchmark [--submissions 20]
                               [--rounds 3] [--unit U] [--corpus] [--course DIR]
                               [--modes compare jobs1 ...], in the course's folder)

Builds a throw-away course with the real release of a unit (00 unless --unit) and N
submissions (half solved, half untouched; with --corpus, the adversarial corpus of
course_grader.corpus instead), then:

* compare: grades them `--rounds` times with the course (`python -m course_grader.autograde
  --jobs 1`: kernels in the sandbox, test cells in the course's checkers) and
  with plain nbgrader (`nbgrader autograde` in a copy of the course configured as nbgrader
  comes: every cell, the tests too, in a kernel of the grading user's), interleaved course,
  plain, course, plain...; prints each run's CPU-seconds per submission and the ratio, then
  the median and range of each, and whether both gave every submission the same score;
* the modes: grades them once each with `--jobs 1`, `--jobs 2`, without the sandbox, and on
  a local Dask cluster (a real `dask scheduler` and two workers of one thread, started here
  and stopped at the end), and prints seconds and CPU-seconds per submission and submissions
  per minute. Every mode must give every submission the same score, item by item; it says
  whether they did.

The CPU of a run is that of every process it starts, the sandboxed ones included, which leave
the grading command's process tree and are killed rather than waited for
(`cpu_watch.tree_cpu`: a cgroup that holds the whole run where the machine allows one,
otherwise this process as their subreaper). A run's total is divided by its N submissions, so
its fixed costs (starting nbgrader; for the course also its self-check of the reference
solution and what its worker starts once) are shared by them: more submissions, smaller share.
CPU time barely depends on what else the machine runs; wall time does. Prints figures;
asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from course_grader.corpus import CASES, UNIT, build_corpus, released, solve, write
from course_grader.cpu_watch import tree_cpu

BIN = Path(sys.executable).parent
MODES = ["compare", "jobs1", "jobs2", "unsafe", "jobs4", "cluster"]   # jobs4: the corpus only
# Plain nbgrader: the course's folders and cell time limit, and nothing else of its own.
PLAIN_CONFIG = """c = get_config()  # noqa: F821
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "exercises"
c.Execute.timeout = 120
"""


def env() -> dict[str, str]:
    out = dict(os.environ)
    out["PATH"] = f"{BIN}{os.pathsep}{out.get('PATH', '')}"
    out["MPLBACKEND"] = "Agg"
    return out


def make_course(root: Path, base: Path, submissions: int, unit: str, corpus: bool) -> Path:
    course = base / "course"
    course.mkdir()
    shutil.copy(root / "nbgrader_config.py", course)
    shutil.copytree(root / "solutions", course / "solutions")
    subprocess.run([str(BIN / "nbgrader"), "generate_assignment", unit, "--force",
                    "--log-level=WARN"], cwd=course, env=env(), check=True)
    if corpus:
        build_corpus(course)
        return course
    for i in range(submissions):
        nb = released(course, unit)
        write(solve(course, nb, unit=unit) if i % 2 == 0 else nb,
              course / "submitted" / f"s{i:02d}" / unit, f"{unit}.ipynb")
    return course


def make_plain(course: Path, base: Path) -> Path:
    """A copy of `course` for plain nbgrader: the same solutions and submissions, nbgrader's
    own configuration (PLAIN_CONFIG)."""
    plain = base / "plain"
    plain.mkdir()
    shutil.copytree(course / "solutions", plain / "solutions")
    shutil.copytree(course / "submitted", plain / "submitted")
    (plain / "nbgrader_config.py").write_text(PLAIN_CONFIG)
    return plain


@dataclass
class Run:
    """One grading run: wall seconds, CPU-seconds of all its processes, and student -> its
    (status, score, reason) (plain nbgrader: ("graded", score, "")."""

    seconds: float
    cpu: float
    verdicts: dict


def release(folder: Path, unit: str) -> None:
    """A fresh gradebook and release, and no earlier grading (not measured)."""
    for name in ("autograded", "autograde_status"):
        shutil.rmtree(folder / name, ignore_errors=True)
    (folder / "gradebook.db").unlink(missing_ok=True)
    subprocess.run([str(BIN / "nbgrader"), "generate_assignment", unit, "--force",
                    "--log-level=ERROR"], cwd=folder, env=env(), check=True)


def measured(meter, cmd: list[str], folder: Path,
             settle: float | None = 60.0) -> tuple[float, float, subprocess.CompletedProcess]:
    """Run `cmd` in `folder` with its processes counted by `meter`: (wall seconds, CPU-seconds
    of the command and everything it started, until all of it ended or `settle` s passed
    after the command, the processes already there excepted; None: until the command
    ended), and the finished command."""
    already = meter.members()
    start, cpu = time.perf_counter(), meter.seconds()
    proc = subprocess.run(cmd, cwd=folder, env=env(), capture_output=True, text=True,
                          preexec_fn=meter.join)
    if settle is not None and not meter.settle(keep=already, timeout=settle):
        print(f"    (processes of the run were still running {settle:g} s after it; "
              f"counted until then)", flush=True)
    return time.perf_counter() - start, meter.seconds() - cpu, proc


def grade(meter, course: Path, unit: str, *args: str, settle: float | None = 60.0) -> Run:
    """Grade every submission from scratch with `course_grader.autograde ARGS`."""
    release(course, unit)
    seconds, cpu, proc = measured(meter, [sys.executable, "-m", "course_grader.autograde",
                                          unit, *args], course, settle)
    if proc.returncode != 0:
        raise SystemExit(f"autograde {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    status = json.loads((course / "autograde_status" / f"{unit}.json").read_text())
    return Run(seconds, cpu, {s: (e["status"], e["score"], e["reason"])
                              for s, e in status.items()})


def grade_plain(meter, plain: Path, unit: str) -> Run:
    """Grade every submission from scratch with plain `nbgrader autograde`."""
    from nbgrader.api import Gradebook

    release(plain, unit)
    seconds, cpu, proc = measured(meter, [str(BIN / "nbgrader"), "autograde", unit, "--force",
                                          "--log-level=ERROR"], plain)
    if proc.returncode != 0:
        raise SystemExit(f"plain nbgrader autograde failed:\n{proc.stdout}\n{proc.stderr}")
    with Gradebook(f"sqlite:///{plain / 'gradebook.db'}") as gb:
        scores = {s.student.id: s.score for s in gb.find_assignment(unit).submissions}
    return Run(seconds, cpu, {s: ("graded", score, "") for s, score in scores.items()})


def compare(meter, course: Path, plain: Path, unit: str, n: int, rounds: int) -> None:
    """The course against plain nbgrader, interleaved: CPU-seconds per submission."""
    print(f"  course (`autograde --jobs 1`) against plain `nbgrader autograde`, {rounds} rounds "
          f"of {n}, interleaved; CPU-seconds per submission:", flush=True)
    ours, theirs = [], []
    for number in range(1, rounds + 1):
        ours.append(grade(meter, course, unit, "--jobs", "1"))
        theirs.append(grade_plain(meter, plain, unit))
        a, b = ours[-1], theirs[-1]
        print(f"    round {number}: course {a.cpu / n:5.2f} ({a.seconds:5.0f} s)   plain "
              f"{b.cpu / n:5.2f} ({b.seconds:5.0f} s)   ratio {a.cpu / b.cpu:4.2f}", flush=True)
    for label, values in (("course", [r.cpu / n for r in ours]),
                          ("plain nbgrader", [r.cpu / n for r in theirs]),
                          ("ratio", [a.cpu / b.cpu for a, b in zip(ours, theirs, strict=True)])):
        print(f"    {label:<15} median {statistics.median(values):5.2f}   range "
              f"{min(values):5.2f} - {max(values):5.2f}   (spread {spread(values):.0%})")
    differ = sorted(s for s in ours[0].verdicts
                    if ours[0].verdicts[s][1] != theirs[0].verdicts.get(s, (None, None))[1])
    print("    scores: " + ("the same for every submission" if not differ else
                            f"DIFFER for {differ}"), flush=True)


def spread(values: list[float]) -> float:
    """The range of `values` as a fraction of their median."""
    return (max(values) - min(values)) / statistics.median(values)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def dask_cluster(certs: Path, meter, workers: int = 2, threads: int = 1):
    """A scheduler and `workers` worker processes on this machine, started as an instructor
    starts them (make grading-certs, grading-scheduler, grading-worker: mutual TLS, with new
    certificates in `certs`), counted by `meter`; yields the scheduler's address."""
    from course_grader import cluster_certs
    from course_grader.cluster import Cluster

    cluster_certs.make_certificates(certs)
    address = f"tls://127.0.0.1:{_free_port()}"
    tool = [sys.executable, "-m", "course_grader.cluster"]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env(),
             "start_new_session": True, "preexec_fn": meter.join}
    procs = [subprocess.Popen([*tool, "scheduler", "--certs", str(certs), "--port",
                               address.rsplit(":", 1)[1], "--dashboard", "127.0.0.1:0"],
                              **quiet)]
    try:
        procs += [subprocess.Popen([*tool, "worker", address, "--certs", str(certs),
                                    "--nthreads", str(threads)], **quiet)
                  for _ in range(workers)]
        with Cluster(address, certs=certs, timeout=60) as cluster:
            cluster.client.wait_for_workers(workers, timeout=120)
        yield address
    finally:
        for proc in reversed(procs):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)


def measure(meter, course: Path, unit: str, n: int, label: str, args: list[str],
            runs: dict[str, Run]) -> None:
    """Grade with `args`, print the figures, and keep the run under `label`."""
    # a cluster's processes outlive the run (its workers, and what each starts once): they
    # are counted while it runs, not waited for
    settle = None if "--scheduler" in args else 60.0
    runs[label] = run = grade(meter, course, unit, *args, settle=settle)
    # CPU per submission, and the cores kept busy on average (CPU / wall): where a parallel
    # mode gains less than its jobs, this says whether the CPU was full
    print(f"  {label:<36} {run.seconds:7.1f} s   {run.seconds / n:5.2f} s per submission   "
          f"{60 * n / run.seconds:5.1f} per minute   {run.cpu / n:5.2f} CPU-s each, "
          f"{run.cpu / run.seconds:4.2f} of {os.cpu_count()} cores busy", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--submissions", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3,
                        help="course and plain nbgrader runs each, interleaved (compare)")
    parser.add_argument("--unit", default=UNIT, help="the unit to grade (default: %(default)s)")
    parser.add_argument("--corpus", action="store_true",
                        help="grade the adversarial corpus (unit 00) instead")
    parser.add_argument("--course", type=Path, default=Path.cwd(),
                        help="the course folder (nbgrader_config.py, solutions/)")
    parser.add_argument("--modes", nargs="+", default=MODES, choices=MODES,
                        help="what to measure (default: all)")
    opts = parser.parse_args()
    if opts.submissions < 1 or opts.rounds < 1:
        parser.error("--submissions and --rounds must be positive integers")
    unit = UNIT if opts.corpus else opts.unit
    meter = tree_cpu()
    with tempfile.TemporaryDirectory(prefix="bench-autograde-") as tmp:
        course = make_course(opts.course.resolve(), Path(tmp), opts.submissions, unit,
                             opts.corpus)
        n = len(CASES) if opts.corpus else opts.submissions
        what = "the adversarial corpus" if opts.corpus else "half solved, half untouched"
        print(f"{n} submissions of {unit} ({what}), on {os.cpu_count()} cores; CPU counted "
              f"by {meter.method}")
        try:
            if "compare" in opts.modes and not opts.corpus:
                compare(meter, course, make_plain(course, Path(tmp)), unit, n, opts.rounds)
            modes(meter, course, unit, n, opts)
        finally:
            meter.close()


def modes(meter, course: Path, unit: str, n: int, opts) -> None:
    """Grade once in each of the chosen modes and compare their scores."""
    runs_by_mode = {"jobs1": ("sandboxed, --jobs 1", ["--jobs", "1"]),
                    "jobs2": ("sandboxed, --jobs 2", ["--jobs", "2"])}
    if not opts.corpus:
        runs_by_mode["unsafe"] = ("unsafe (no sandbox), --jobs 1", ["--jobs", "1", "--unsafe"])
    if opts.corpus:   # its hanging cases wait out timeouts: four at a time, as its test
        runs_by_mode["jobs4"] = ("sandboxed, --jobs 4", ["--jobs", "4"])
    # the corpus's hanging cases wait out the cell timeout: 20 s, as its test sets it
    timeout = ["--cell-timeout", "20"] if opts.corpus else []
    runs: dict[str, Run] = {}
    for key, (label, args) in runs_by_mode.items():
        if key in opts.modes:
            measure(meter, course, unit, n, label, [*args, *timeout], runs)
    if "cluster" in opts.modes:
        with dask_cluster(course / ".grading-certs", meter, workers=2,
                          threads=2 if opts.corpus else 1) as address:
            label = f"Dask cluster, 2 workers x {2 if opts.corpus else 1} thread(s)"
            measure(meter, course, unit, n, label, ["--scheduler", address, *timeout], runs)
    if runs:
        same_scores(runs, n)


def same_scores(runs: dict[str, Run], n: int) -> None:
    """Print the speed-ups, and whether every mode gave every submission the same verdict."""
    one, two = runs.get("sandboxed, --jobs 1"), runs.get("sandboxed, --jobs 2")
    if one and two:
        print(f"  --jobs 2 over --jobs 1: {one.seconds / two.seconds:.2f}x")
    unsafe = runs.get("unsafe (no sandbox), --jobs 1")
    if one and unsafe:
        print(f"  sandbox overhead per submission: {(one.cpu - unsafe.cpu) / n:+.2f} CPU-s "
              f"({one.cpu / unsafe.cpu - 1:+.0%})")
    first, reference = next(iter(runs.items()))
    for label, run in runs.items():
        differ = sorted(s for s in reference.verdicts
                        if run.verdicts.get(s, (None,))[:2] != reference.verdicts[s][:2])
        print(f"  {label}: " + (f"every score and status as {first}" if not differ
                                else f"DIFFERS from {first} for {differ}"))
        for student in differ:
            print(f"    {student}: {first}: {reference.verdicts[student]}\n"
                  f"    {' ' * len(student)}  {label}: {run.verdicts.get(student)}")


if __name__ == "__main__":
    main()
