"""Autograding speed: per-submission time with and without the sandbox, JOBS=2 vs JOBS=1.

    make bench-autograde      (or: python -m course_grader.benchmark [--submissions 20]
                               [--unit U] [--course DIR], run in the course's folder)

Builds a throw-away course with the real release of a unit (00 unless --unit) and N
submissions (half solved, half untouched), grades them three times from scratch with
`python -m course_grader.autograde`, and prints wall time per run and per submission.
Prints figures; asserts nothing about speed.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from course_grader.corpus import UNIT, released, solve, write

BIN = Path(sys.executable).parent


def env() -> dict[str, str]:
    import os

    out = dict(os.environ)
    out["PATH"] = f"{BIN}{os.pathsep}{out.get('PATH', '')}"
    out["MPLBACKEND"] = "Agg"
    return out


def make_course(root: Path, base: Path, submissions: int, unit: str) -> Path:
    course = base / "course"
    course.mkdir()
    shutil.copy(root / "nbgrader_config.py", course)
    shutil.copytree(root / "solutions", course / "solutions")
    subprocess.run([str(BIN / "nbgrader"), "generate_assignment", unit, "--force",
                    "--log-level=WARN"], cwd=course, env=env(), check=True)
    for i in range(submissions):
        nb = released(course, unit)
        write(solve(course, nb, unit=unit) if i % 2 == 0 else nb,
              course / "submitted" / f"s{i:02d}" / unit, f"{unit}.ipynb")
    return course


def grade(course: Path, unit: str, *args: str) -> float:
    for folder in ("autograded", "autograde_status"):
        shutil.rmtree(course / folder, ignore_errors=True)
    (course / "gradebook.db").unlink(missing_ok=True)
    subprocess.run([str(BIN / "nbgrader"), "generate_assignment", unit, "--force",
                    "--log-level=WARN"], cwd=course, env=env(), check=True)
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "course_grader.autograde", unit, *args],
                          cwd=course, env=env(), capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"autograde {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--submissions", type=int, default=20)
    parser.add_argument("--unit", default=UNIT, help="the unit to grade (default: %(default)s)")
    parser.add_argument("--course", type=Path, default=Path.cwd(),
                        help="the course folder (nbgrader_config.py, solutions/)")
    opts = parser.parse_args()
    n = opts.submissions
    with tempfile.TemporaryDirectory(prefix="bench-autograde-") as tmp:
        course = make_course(opts.course.resolve(), Path(tmp), n, opts.unit)
        runs = [("sandboxed, JOBS=1", ["--jobs", "1"]),
                ("unsafe (no sandbox), JOBS=1", ["--jobs", "1", "--unsafe"]),
                ("sandboxed, JOBS=2", ["--jobs", "2"])]
        results = {}
        print(f"{n} submissions of {opts.unit} (half solved, half untouched)")
        for label, args in runs:
            results[label] = grade(course, opts.unit, *args)
            print(f"  {label:<30} {results[label]:7.1f} s   "
                  f"{results[label] / n:5.2f} s per submission", flush=True)
        one, two = results["sandboxed, JOBS=1"], results["sandboxed, JOBS=2"]
        unsafe = results["unsafe (no sandbox), JOBS=1"]
        print(f"  sandbox overhead per submission: {(one - unsafe) / n:+.2f} s "
              f"({one / unsafe - 1:+.0%})")
        print(f"  JOBS=2 speed-up over JOBS=1: {one / two:.2f}x")


if __name__ == "__main__":
    main()
