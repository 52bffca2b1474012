"""Autograding throughput: seconds per submission and submissions per minute, here with
`--jobs 1` and `--jobs 2`, without the sandbox, and on a local Dask cluster of two workers.

    make bench-autograde      (or: python -m course_grader.benchmark [--submissions 20]
                               [--unit U] [--corpus] [--course DIR], in the course's folder)

Builds a throw-away course with the real release of a unit (00 unless --unit) and N
submissions (half solved, half untouched; with --corpus, the adversarial corpus of
course_grader.corpus instead), grades them from scratch once per mode with
`python -m course_grader.autograde`, and prints wall time, seconds per submission and
submissions per minute. The cluster is real: `dask scheduler` and two `dask worker`
processes of one thread each, started here and stopped at the end. Every mode must give
every submission the same score, item by item; the benchmark says whether they did.
Prints figures; asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from course_grader.corpus import CASES, UNIT, build_corpus, released, solve, write

BIN = Path(sys.executable).parent
MODES = ["jobs1", "jobs2", "unsafe", "jobs4", "cluster"]   # jobs4: the corpus only


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


def children_cpu() -> float:
    """CPU seconds (user + system) of this process's finished children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def machine_cpu() -> float:
    """CPU seconds this machine has spent busy (every process, user + system) since boot."""
    import psutil

    times = psutil.cpu_times()
    return sum(times) - times.idle - getattr(times, "iowait", 0.0)


def grade(course: Path, unit: str, *args: str) -> tuple[float, float, float, dict]:
    """Grade every submission from scratch; (seconds, CPU seconds of the grading command and
    the processes it waited for, CPU seconds of the whole machine, student -> (status,
    score, reason)). The first misses the sandboxed kernels (killed with their sandbox, never
    waited for) and a cluster's workers; the second counts them, and every other program
    running meanwhile: read it on a quiet machine."""
    for folder in ("autograded", "autograde_status"):
        shutil.rmtree(course / folder, ignore_errors=True)
    (course / "gradebook.db").unlink(missing_ok=True)
    subprocess.run([str(BIN / "nbgrader"), "generate_assignment", unit, "--force",
                    "--log-level=ERROR"], cwd=course, env=env(), check=True)
    start, cpu, machine = time.perf_counter(), children_cpu(), machine_cpu()
    proc = subprocess.run([sys.executable, "-m", "course_grader.autograde", unit, *args],
                          cwd=course, env=env(), capture_output=True, text=True)
    elapsed, cpu = time.perf_counter() - start, children_cpu() - cpu
    machine = machine_cpu() - machine
    if proc.returncode != 0:
        raise SystemExit(f"autograde {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    status = json.loads((course / "autograde_status" / f"{unit}.json").read_text())
    return elapsed, cpu, machine, {s: (e["status"], e["score"], e["reason"])
                                   for s, e in status.items()}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def dask_cluster(certs: Path, workers: int = 2, threads: int = 1):
    """A scheduler and `workers` worker processes on this machine, started as an instructor
    starts them (make grading-certs, grading-scheduler, grading-worker: mutual TLS, with new
    certificates in `certs`); yields the scheduler's address."""
    from course_grader import cluster_certs
    from course_grader.cluster import Cluster

    cluster_certs.make_certificates(certs)
    address = f"tls://127.0.0.1:{_free_port()}"
    tool = [sys.executable, "-m", "course_grader.cluster"]
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL, "env": env(),
             "start_new_session": True}
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


def measure(course: Path, unit: str, n: int, label: str, args: list[str],
            seconds: dict[str, float], verdicts: dict[str, dict]) -> None:
    """Grade with `args`, print the figures, and keep the time and the verdicts under `label`."""
    seconds[label], cpu, machine, verdicts[label] = grade(course, unit, *args)
    wall = seconds[label]
    # CPU per submission, and the cores kept busy on average (CPU / wall): where a parallel
    # mode gains less than its jobs, this says whether the CPU was full. "command": the
    # grading command and what it waited for (no kernels, no cluster workers); "machine":
    # everything this machine ran meanwhile.
    command = "" if "--scheduler" in args else \
        f"   command {cpu / n:5.2f} CPU-s each, {cpu / wall:4.2f} cores busy;"
    print(f"  {label:<36} {wall:7.1f} s   {wall / n:5.2f} s per submission   "
          f"{60 * n / wall:5.1f} per minute{command}   machine {machine / n:5.2f} "
          f"CPU-s each, {machine / wall:4.2f} of {os.cpu_count()} cores busy", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--submissions", type=int, default=20)
    parser.add_argument("--unit", default=UNIT, help="the unit to grade (default: %(default)s)")
    parser.add_argument("--corpus", action="store_true",
                        help="grade the adversarial corpus (unit 00) instead")
    parser.add_argument("--course", type=Path, default=Path.cwd(),
                        help="the course folder (nbgrader_config.py, solutions/)")
    parser.add_argument("--modes", nargs="+", default=MODES, choices=MODES,
                        help="what to time (default: all)")
    opts = parser.parse_args()
    unit = UNIT if opts.corpus else opts.unit
    with tempfile.TemporaryDirectory(prefix="bench-autograde-") as tmp:
        course = make_course(opts.course.resolve(), Path(tmp), opts.submissions, unit,
                             opts.corpus)
        n = len(CASES) if opts.corpus else opts.submissions
        what = "the adversarial corpus" if opts.corpus else "half solved, half untouched"
        print(f"{n} submissions of {unit} ({what}), on {os.cpu_count()} cores")
        runs = {"jobs1": ("sandboxed, --jobs 1", ["--jobs", "1"]),
                "jobs2": ("sandboxed, --jobs 2", ["--jobs", "2"])}
        if not opts.corpus:
            runs["unsafe"] = ("unsafe (no sandbox), --jobs 1", ["--jobs", "1", "--unsafe"])
        if opts.corpus:   # its hanging cases wait out timeouts: four at a time, as its test
            runs["jobs4"] = ("sandboxed, --jobs 4", ["--jobs", "4"])
        # the corpus's hanging cases wait out the cell timeout: 20 s, as its test sets it
        timeout = ["--cell-timeout", "20"] if opts.corpus else []
        seconds, verdicts = {}, {}
        for key, (label, args) in runs.items():
            if key in opts.modes:
                measure(course, unit, n, label, [*args, *timeout], seconds, verdicts)
        if "cluster" in opts.modes:
            with dask_cluster(course / ".grading-certs", workers=2,
                              threads=2 if opts.corpus else 1) as address:
                label = f"Dask cluster, 2 workers x {2 if opts.corpus else 1} thread(s)"
                measure(course, unit, n, label, ["--scheduler", address, *timeout], seconds,
                        verdicts)
        compare(seconds, verdicts, n)


def compare(seconds: dict[str, float], verdicts: dict[str, dict], n: int) -> None:
    """Print the speed-ups, and whether every mode gave every submission the same verdict."""
    one, two = seconds.get("sandboxed, --jobs 1"), seconds.get("sandboxed, --jobs 2")
    if one and two:
        print(f"  --jobs 2 over --jobs 1: {one / two:.2f}x")
    unsafe = seconds.get("unsafe (no sandbox), --jobs 1")
    if one and unsafe:
        print(f"  sandbox overhead per submission: {(one - unsafe) / n:+.2f} s "
              f"({one / unsafe - 1:+.0%})")
    reference = next(iter(verdicts.values()))
    first = next(iter(verdicts))
    for label, found in verdicts.items():
        differ = sorted(s for s in reference if found.get(s, (None,))[:2] != reference[s][:2])
        print(f"  {label}: " + (f"every score and status as {first}" if not differ
                                else f"DIFFERS from {first} for {differ}"))
        for student in differ:
            print(f"    {student}: {first}: {reference[student]}\n"
                  f"    {' ' * len(student)}  {label}: {found.get(student)}")


if __name__ == "__main__":
    main()
