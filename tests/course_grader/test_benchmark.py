"""`make bench-autograde`'s comparison (course_grader.benchmark), run for real on one
submission: the course against plain nbgrader, interleaved, CPU counted for every process."""

from __future__ import annotations

import re
import statistics
import subprocess
import sys

import pytest
from conftest import ROOT, tool_env

from course_grader import sandbox

pytestmark = pytest.mark.skipif(sandbox.unavailable_reason() is not None,
                                reason="no sandbox here (test_sandbox_is_available says why)")
ROUND = re.compile(r"round (\d): course +([\d.]+) \( *\d+ s\) +plain +([\d.]+) \( *\d+ s\) +"
                   r"ratio +([\d.]+)")
SUMMARY = re.compile(r"(course|plain nbgrader|ratio) +median +([\d.]+) +range +([\d.]+) - +"
                     r"([\d.]+)")


def test_the_comparison_prints_both_sides_interleaved_with_their_median_and_range():
    proc = subprocess.run([sys.executable, "-m", "course_grader.benchmark", "--submissions", "1",
                           "--rounds", "2", "--modes", "compare", "--course", str(ROOT)],
                          capture_output=True, text=True, timeout=1800, env=tool_env(),
                          cwd=ROOT)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    assert re.search(r"CPU counted by (a cgroup \(|this process as the subreaper)", out), out
    rounds = [(int(n), float(a), float(b), float(r)) for n, a, b, r in ROUND.findall(out)]
    assert [r[0] for r in rounds] == [1, 2], out
    for _, course, plain, ratio in rounds:
        # every run grades a notebook in a kernel that imports PyTorch: more than a CPU-second
        assert course > 1.0 and plain > 1.0, out
        assert ratio == pytest.approx(course / plain, abs=0.01), out
    summary = {label: tuple(map(float, rest)) for label, *rest in SUMMARY.findall(out)}
    columns = {"course": [r[1] for r in rounds], "plain nbgrader": [r[2] for r in rounds],
               "ratio": [r[3] for r in rounds]}
    for label, values in columns.items():
        median, low, high = summary[label]
        assert median == pytest.approx(statistics.median(values), abs=0.011), out
        assert (low, high) == (min(values), max(values)), out
    assert "scores: the same for every submission" in out
