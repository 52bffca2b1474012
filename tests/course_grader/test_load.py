"""Scores that do not depend on the machine's load: the adversarial corpus's timed cases graded
while two busy processes hold both cores (course_grader.cpu_watch: a cell's limit is CPU time,
with a wall-clock backstop).

Marked `alone`: `make test` runs it after the rest of the suite, in a pytest of its own, since
its busy processes would slow whatever ran beside it (a lecture's kernel start timed out so).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from test_adversarial import autograde, autograded_text, grades

from course_grader import sandbox
from course_grader.corpus import CASES, UNIT, build_corpus, released, solve, write

pytestmark = [pytest.mark.alone,
              pytest.mark.skipif(bool(sandbox.unavailable_reason()),
                                 reason=f"needs the sandbox: {sandbox.unavailable_reason()}")]

# The corpus's cases whose grading takes time, honest or not, and cells that hang, asleep or
# at work. (Graded as root, each sandboxed kernel has a cgroup of its own, which the scheduler
# shares a CPU with as one group: even 8 spinners slowed its cells less than a quarter, so this
# checks that nothing depends on the load; that a CPU-time limit spares work a wall clock would
# stop is test_cpu_watch's.)
SPINNERS = 2
TIMED = ("correct", "huge_line", "binary_junk", "moves_tests", "kills_kernel",
         "swallows_interrupt", "hangs_in_tests", "imports_test_library")
SLOW_WORK = "end = time.process_time() + 4\nwhile time.process_time() < end:\n    pass"


def slow_but_honest(course: Path) -> nbformat.NotebookNode:
    """The instructor's solution, whose softmax cell first works for 4 CPU-seconds."""
    nb = solve(course, released(course))
    for cell in nb.cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == "softmax_solution":
            cell.source = f"import time\n{SLOW_WORK}\n" + cell.source
    return nb


def test_a_loaded_machine_gives_the_scores_of_an_idle_one(fresh_course, tmp_path):
    """Graded two at a time beside two busy processes, with 10 s of CPU per cell: each timed
    case gets the score and reason it gets on an idle machine (the corpus's expectations,
    which test_adversarial asserts item by item at 30 s per cell), a solution that works
    4 CPU-s in one cell keeps full marks, and nothing needs regrading."""
    here = tmp_path / "loaded"
    shutil.copytree(fresh_course, here)
    cases = [c for c in CASES if c.name in TIMED]
    build_corpus(here, cases)
    write(slow_but_honest(here), here / "submitted" / "slow_but_honest" / UNIT)
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                for _ in range(SPINNERS)]
    try:
        proc = autograde(here, "--jobs", "2", "--cell-timeout", "10")
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    status = json.loads((here / "autograde_status" / f"{UNIT}.json").read_text())
    for case in cases:
        entry = status[case.name]
        assert (entry["status"], entry["score"]) != ("needs-regrading", None), entry
        assert entry["score"] == case.score == sum(grades(here, case.name).values()), entry
        assert case.says in entry["reason"] or case.says in autograded_text(here, case.name), entry
    assert status["slow_but_honest"]["score"] == 9.0, status["slow_but_honest"]
