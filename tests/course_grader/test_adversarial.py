"""Adversarial submissions against the whole grading pipeline (`course_grader.autograde`).

The corpus (course_grader/corpus.py) is graded once, four at a time on a Dask cluster of two
worker processes, in the sandbox; each case must get exactly its expected score and say what
happened, and nothing may leak or be left ungraded. Further tests: the unsafe flag, a killed
batch, and the feedback of bad cases.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from html import escape
from pathlib import Path

import nbformat
import pytest
from conftest import (
    BIN,
    link_sockets_code,
    local_dask_cluster,
    root_only_socket,
    run_nbgrader,
    tool_env,
)
from nbgrader.api import Gradebook

from course_grader import sandbox
from course_grader.corpus import CASES, NOTEBOOK, UNIT, build_corpus, released, solve, write

# A comment of unit 00's hidden tests that no visible test shares: feedback must not show it.
HIDDEN_ONLY = "catches a transpose or the wrong sum axis"

# Seconds per cell: short, so that the cases that hang wait it out quickly, with room for an
# honest cell on a loaded machine (in full runs on a slow host the slowest honest cell took
# 10-12 s: fork_bomb's forks, four submissions at a time beside the lectures).
CELL_TIMEOUT = 30


def autograde(course: Path, *args: str, env=None, timeout=1800) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "course_grader.autograde", UNIT, *args],
                          cwd=course, env=env or tool_env(), capture_output=True, text=True,
                          timeout=timeout)


def grades(course: Path, student: str) -> dict[str, float | None]:
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        sub = gb.find_submission(UNIT, student)
        return {g.name: (g.auto_score if g.manual_score is None else g.manual_score)
                for nb in sub.notebooks for g in nb.grades}


def autograded_text(course: Path, student: str) -> str:
    path = course / "autograded" / student / UNIT / NOTEBOOK
    return path.read_text(errors="replace") if path.exists() else ""


def autograded_outputs(course: Path, student: str) -> str:
    """Everything the cells printed or raised (not their source)."""
    path = course / "autograded" / student / UNIT / NOTEBOOK
    if not path.exists():
        return ""
    nb = nbformat.read(path, as_version=4)
    return json.dumps([c.get("outputs", []) for c in nb.cells])


@pytest.fixture(scope="module")
def graded(fresh_course, tmp_path_factory):
    if sandbox.unavailable_reason():
        pytest.fail(f"the adversarial corpus needs the sandbox: {sandbox.unavailable_reason()}")
    course = tmp_path_factory.mktemp("adversarial")
    shutil.copytree(fresh_course, course, dirs_exist_ok=True)
    build_corpus(course)
    start = time.monotonic()
    # On a Dask cluster of two worker processes (course_grader.cluster), as a large class is
    # graded; grading here with --jobs gives the same scores (below). Four at a
    # time: the cases that hang wait out their timeouts side by side (with 20 s per cell, 129 s
    # for the corpus alone on 2 cores, against 170 s two at a time; the same CPU time).
    with local_dask_cluster(n_workers=2, threads_per_worker=2,
                            certs=course / ".grading-certs") as address:
        proc = autograde(course, "--scheduler", address, "--cell-timeout", str(CELL_TIMEOUT))
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"(4 at a time on the cluster at {address}, sandboxed)" in proc.stdout
    status = json.loads((course / "autograde_status" / f"{UNIT}.json").read_text())
    feedback = subprocess.run([str(BIN / "nbgrader"), "generate_feedback", UNIT, "--force"],
                              cwd=course, env=tool_env(), capture_output=True, text=True,
                              timeout=900)
    # the table of the closing note: case, what it does, score, reason
    rows = [f"| {c.name} | {c.what} | {status[c.name]['score']:g}/{status[c.name]['max_score']:g}"
            f" | {status[c.name]['reason']} | {len(status[c.name]['flags'])} flag(s)"
            f" | {status[c.name]['seconds']:.1f} s |"
            for c in CASES]
    print(f"\n{len(CASES)} submissions graded in {elapsed:.1f} s (a cluster of 2 workers x 2 "
          "threads)\n" + "\n".join(rows))
    return course, status, feedback


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_each_bad_submission_gets_its_score_and_a_reason(graded, case):
    course, status, _ = graded
    entry = status[case.name]
    assert entry["score"] == case.score, entry
    assert entry["max_score"] == 9.0
    assert entry["reason"], "every submission gets a reason"
    scores = grades(course, case.name)
    assert None not in scores.values(), f"ungraded items: {scores}"
    assert sum(scores.values()) == case.score
    text = autograded_text(course, case.name)
    assert case.says in entry["reason"] or case.says in text, (
        f"{case.says!r} is neither in the reason {entry['reason']!r} nor in the notebook")
    if case.never:
        assert case.never not in autograded_outputs(course, case.name)
    noted = " | ".join(entry["flags"])
    if case.flagged:
        assert case.flagged in noted, f"the instructor is not told: {entry['flags']}"
    if case.name in ("correct", "untouched", "wrong_name"):
        assert not entry["flags"], "honest work is flagged"


def test_gradebook_is_sound_after_a_parallel_run(graded):
    course, status, _ = graded
    with sqlite3.connect(course / "gradebook.db") as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    assert set(status) == {c.name for c in CASES}


# Hostile and broken submissions of the corpus whose grading takes no timeout to wait out.
SAMPLE = ("correct", "untouched", "deletes_tests", "invalid_json", "wrong_name", "kills_kernel")


def test_grading_here_with_jobs_gives_what_the_cluster_gave(graded, fresh_course, tmp_path):
    """`--jobs 2` on this machine gives every item of the sample submissions the same score,
    and each submission the same status and reason, as the cluster gave them above (the
    corpus is graded on the cluster once: `autograde --scheduler` against `--jobs`); the
    status file names the worker that graded each one (none for a notebook that cannot be
    read)."""
    course, status, _ = graded
    here = tmp_path / "here"
    shutil.copytree(fresh_course, here)
    build_corpus(here, [c for c in CASES if c.name in SAMPLE])
    proc = autograde(here, "--jobs", "2", "--cell-timeout", str(CELL_TIMEOUT))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert {s: grades(here, s) for s in SAMPLE} == {s: grades(course, s) for s in SAMPLE}
    mine = json.loads((here / "autograde_status" / f"{UNIT}.json").read_text())

    def verdict(entry: dict) -> tuple:
        return entry["status"], entry["score"], entry["reason"]

    assert {s: verdict(mine[s]) for s in SAMPLE} == {s: verdict(status[s]) for s in SAMPLE}
    workers = {s: status[s]["worker"] for s in SAMPLE}
    assert workers.pop("invalid_json") == "", "a notebook that cannot be read goes to no worker"
    assert all(workers.values()), workers


def test_nothing_escaped_to_the_host(graded):
    course, _, _ = graded
    leaks = [p for p in [course / "pwned.txt", course / "submitted" / "pwned.txt",
                         course / "autograded" / "pwned.txt", Path.home() / "pwned.txt"]
             if p.exists()]
    assert not leaks
    assert not list(course.glob("autograded/*/*/in_working_copy.txt"))
    assert not list(course.glob("autograded/*/*/fill.bin"))
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "sleep 3613" not in ps, "the fork bomb's children outlived the sandbox"


def test_huge_output_is_cut(graded):
    course, _, _ = graded
    path = course / "autograded" / "huge_line" / UNIT / NOTEBOOK
    assert path.stat().st_size < 300_000
    nbformat.validate(nbformat.read(path, as_version=4))


def test_feedback_is_written_safely_for_every_graded_submission(graded):
    course, status, feedback = graded
    assert feedback.returncode == 0, feedback.stderr[-2000:]
    for case in CASES:
        if not (course / "autograded" / case.name / UNIT / NOTEBOOK).exists():
            continue
        html = (course / "feedback" / case.name / UNIT / f"{UNIT}.html").read_text()
        assert len(html) < 1_500_000, f"{case.name}: feedback of {len(html)} characters"
        assert "BEGIN HIDDEN TESTS" not in html and HIDDEN_ONLY not in html
    tampered = (course / "feedback" / "patches_check_helper" / UNIT / f"{UNIT}.html").read_text()
    assert "is wrong at index" in tampered
    searched = (course / "feedback" / "searches_hidden_tests" / UNIT / f"{UNIT}.html").read_text()
    outputs = autograded_outputs(course, "searches_hidden_tests")
    lines = hidden_lines(course)
    assert len(lines) > 10
    for line in lines:
        assert escape(line, quote=False) not in searched, line
        assert json.dumps(line)[1:-1] not in outputs, line


def hidden_lines(course: Path) -> list[str]:
    """The distinctive lines of the unit's hidden tests (long ones that no visible part of the
    notebook has)."""
    nb = nbformat.read(course / "solutions" / UNIT / NOTEBOOK, as_version=4)
    hidden, visible = [], set()
    for cell in nb.cells:
        inside = False
        for line in cell.source.splitlines():
            if "BEGIN HIDDEN TESTS" in line:
                inside = True
            elif "END HIDDEN TESTS" in line:
                inside = False
            elif inside:
                hidden.append(line.strip())
            else:
                visible.add(line.strip())
    return [line for line in hidden if len(line) > 30 and line not in visible]
    hung = (course / "feedback" / "swallows_interrupt" / UNIT / f"{UNIT}.html").read_text()
    assert "did not stop when interrupted" in hung


def test_grading_refuses_without_the_sandbox_unless_told(fresh_course, tmp_path):
    course = tmp_path / "course"
    shutil.copytree(fresh_course, course)
    write(solve(course, released(course)), course / "submitted" / "eve" / UNIT)
    env = tool_env()
    env["PATH"] = str(BIN)  # no bwrap on this PATH
    refused = autograde(course, env=env)
    assert refused.returncode == 2
    assert "Refusing to autograde" in refused.stderr and "bubblewrap" in refused.stderr
    assert "--unsafe" in refused.stderr
    assert not (course / "autograded").exists()
    # plain nbgrader refuses too, with the same advice
    proc = subprocess.run([str(BIN / "nbgrader"), "autograde", UNIT], cwd=course, env=env,
                          capture_output=True, text=True, timeout=600)
    assert "Refusing to autograde" in proc.stdout + proc.stderr
    unsafe = autograde(course, "--unsafe", env=env)
    assert unsafe.returncode == 0, unsafe.stderr
    assert "WARNING: grading without the sandbox" in unsafe.stderr
    assert sum(grades(course, "eve").values()) == 9.0


def test_a_killed_batch_keeps_what_it_finished(fresh_course, tmp_path):
    course = tmp_path / "course"
    shutil.copytree(fresh_course, course)
    for student in ("k1", "k2", "k3"):
        write(solve(course, released(course)), course / "submitted" / student / UNIT)
    status_file = course / "autograde_status" / f"{UNIT}.json"
    proc = subprocess.Popen([sys.executable, "-m", "course_grader.autograde", UNIT],
                            cwd=course, env=tool_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not status_file.exists():
        time.sleep(0.2)
    time.sleep(1.0)  # now in the middle of the second submission
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = json.loads(status_file.read_text())
    assert len(finished) >= 1
    with sqlite3.connect(course / "gradebook.db") as con:
        assert con.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    for student in finished:
        assert sum(grades(course, student).values()) == 9.0
    again = autograde(course)
    assert again.returncode == 0
    assert sorted(json.loads(status_file.read_text())) == ["k1", "k2", "k3"]
    for student in ("k1", "k2", "k3"):
        assert sum(grades(course, student).values()) == 9.0


def test_plain_nbgrader_autograde_is_sandboxed_too(graded):
    # The config makes SafeExecute nbgrader's executor, so the formgrader's button is safe too.
    course, _, _ = graded
    run_nbgrader("autograde", UNIT, "--student", "reads_hidden", "--force",
                 f"--Execute.timeout={CELL_TIMEOUT}", cwd=course)
    text = autograded_outputs(course, "reads_hidden")
    assert "blocked: read" in text and "ESCAPED" not in text


def test_report_on_the_graded_corpus(graded, tmp_path):
    import csv

    course, status, _ = graded
    proc = subprocess.run([sys.executable, "-m", "course_grader.report", "--course", str(course),
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=300,
                          env=tool_env())
    assert proc.returncode == 0, proc.stderr
    with (tmp_path / f"{UNIT}_students.csv").open() as f:
        students = {row["student"]: row for row in csv.DictReader(f)}
    assert set(students) == {c.name for c in CASES}
    for case in CASES:
        assert float(students[case.name]["score"]) == case.score
        assert students[case.name]["reason"] == status[case.name]["reason"]
    with (tmp_path / f"{UNIT}_items.csv").open() as f:
        items = list(csv.DictReader(f))
    assert len(items) == 6
    for item in items:  # the failure rate is what the gradebook says
        scores = [grades(course, c.name)[item["item"]] for c in CASES]
        failed = sum(s < float(item["max_points"]) for s in scores)
        assert int(item["failed"]) == failed
        assert float(item["failure_rate"]) == pytest.approx(failed / len(CASES), abs=1e-3)
    rates = [float(i["failure_rate"]) for i in items]
    assert rates == sorted(rates, reverse=True), "most-failed first"
    assert (tmp_path / f"{UNIT}_histogram.png").stat().st_size > 10_000


def test_any_id_nbgrader_can_grade_is_graded_and_the_others_are_refused(fresh_course, tmp_path):
    """A student id that starts with '-' (nbgrader's command line took it for an option, and
    the student scored 0) is graded; one that nbgrader would strip or read as a glob is not
    graded, scored or recorded, and the instructor is told why."""
    here = tmp_path / "ids"
    shutil.copytree(fresh_course, here)
    for student in ("-7", " 12", "a[1]"):
        write(solve(here, released(here)), here / "submitted" / student / UNIT)
    proc = autograde(here, "--jobs", "1", "--cell-timeout", str(CELL_TIMEOUT))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    status = json.loads((here / "autograde_status" / f"{UNIT}.json").read_text())
    assert (status["-7"]["status"], status["-7"]["score"]) == ("graded", 9.0), status["-7"]
    assert sum(grades(here, "-7").values()) == 9.0
    for student, why in ((" 12", "white space"), ("a[1]", "glob character")):
        assert (status[student]["status"], status[student]["score"]) == ("refused", None)
        assert "nbgrader cannot grade the student id" in status[student]["reason"]
        assert why in status[student]["reason"]
    with Gradebook(f"sqlite:///{here / 'gradebook.db'}") as gb:
        assert {s.student.id for s in gb.find_assignment(UNIT).submissions} == {"-7"}


def test_a_kernel_that_links_its_sockets_to_a_host_socket_reaches_nothing(fresh_course, tmp_path):
    """A submission whose first cell replaces the kernel's sockets (on its sandbox's /tmp)
    with links to a root-only socket of the host, before the checker connects: the grader
    follows none of them (0 connections to the host socket, where reaching the sockets as
    /proc/<pid>/root/... connected 414 times), stops the kernel, and the student is told."""
    here = tmp_path / "course"
    shutil.copytree(fresh_course, here)
    nb = solve(here, released(here))
    nb.cells.insert(0, nbformat.v4.new_code_cell(link_sockets_code(tmp_path / "victim.sock")))
    write(nb, here / "submitted" / "links" / UNIT)
    with root_only_socket(tmp_path / "victim.sock") as accepted:
        proc = autograde(here, "--jobs", "1", "--cell-timeout", str(CELL_TIMEOUT))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert accepted == [], f"{len(accepted)} connection(s) reached the host socket"
    entry = json.loads((here / "autograde_status" / f"{UNIT}.json").read_text())["links"]
    assert entry["score"] == 0.0 and "kernel stopped" in entry["reason"], entry
    text = autograded_text(here, "links")
    assert "refused to follow" in text and "is a link" in text, entry
