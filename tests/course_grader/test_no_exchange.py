"""A class that hands in by upload or LMS sees no exchange errors; one that uses nbgrader's
exchange names its folder once, for the instructor and the student edition alike
(course_grader/exchange.py, nbgrader_config.py, course_publish/student_edition/).

Real servers, real pages: the instructor's Jupyter server on a course folder, its formgrader
pages opened in Chromium with the server's log kept; the student edition's own `make lab`
(on a stand-in .venv whose programs are this one's), its JupyterLab driven in Chromium. No
nbgrader configuration outside the folders: a fresh JUPYTER_CONFIG_DIR, no NBGRADER_EXCHANGE.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import BIN, tool_env

from course_grader.exchange import NO_EXCHANGE
from course_publish import edition

UNIT = "00_attention_as_lookup"
TOKEN = "no-exchange-token"
ERRORS = ("does not exist", "Error fetching courses", "Unwritable", "could not be created")
FORMGRADER_PAGES = ("formgrader", "formgrader/gradebook", "formgrader/manage_students",
                    f"formgrader/manage_submissions/{UNIT}")


def alarms(log: str) -> list[str]:
    """The CRITICAL and ERROR lines of a Jupyter server's log."""
    return [line for line in log.splitlines() if re.match(r"\[[CE] ", line)]


def hermetic_env(tmp: Path, **extra: str) -> dict[str, str]:
    """This venv's tools, and no Jupyter or nbgrader configuration from outside the test."""
    env = {k: v for k, v in tool_env().items()
           if k not in ("NBGRADER_EXCHANGE", "JUPYTER_CONFIG_PATH")}
    for name in ("config", "runtime", "data"):
        (tmp / name).mkdir(parents=True, exist_ok=True)
    env |= {"JUPYTER_CONFIG_DIR": str(tmp / "config"), "JUPYTER_RUNTIME_DIR": str(tmp / "runtime"),
            "JUPYTER_DATA_DIR": str(tmp / "data")}
    return env | extra


@contextlib.contextmanager
def served(command, cwd: Path, env: dict[str, str], log: Path):
    """Run `command(port)`, a Jupyter server on that port with token TOKEN, writing its log
    to `log`; yield its base URL once it answers; stop it (its whole process group)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with open(log, "w") as out:
        proc = subprocess.Popen(command(port), cwd=cwd, env=env, stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{base}/api/status?token={TOKEN}", timeout=5):
                    break
            except OSError:
                assert proc.poll() is None, f"the server exited:\n{log.read_text()[-3000:]}"
                assert time.monotonic() < deadline, "the server did not answer within 120 s"
                time.sleep(0.5)
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def server_args(port: int) -> list[str]:
    return ["--no-browser", f"--port={port}", "--ip=127.0.0.1",
            f"--IdentityProvider.token={TOKEN}",
            *(["--allow-root"] if os.geteuid() == 0 else [])]


@pytest.fixture(scope="module")
def course(fresh_course, tmp_path_factory) -> Path:
    course = tmp_path_factory.mktemp("no-exchange-course")
    shutil.copytree(fresh_course, course, dirs_exist_ok=True)
    return course


def formgrader_visit(browser, course: Path, tmp: Path, **extra: str) -> tuple[dict, list[str]]:
    """Open every formgrader page on a fresh server in `course`: each page's text, and the
    CRITICAL and ERROR lines the server logged from the first page to the last."""
    log = tmp / "server.log"
    texts = {}
    command = lambda port: [str(BIN / "jupyter"), "server", *server_args(port)]  # noqa: E731
    with served(command, course, hermetic_env(tmp, **extra), log) as base:
        start = len(log.read_text())
        page = browser.new_page()
        for path in FORMGRADER_PAGES:
            page.goto(f"{base}/{path}?token={TOKEN}", wait_until="load", timeout=60_000)
            page.wait_for_selector("table", timeout=30_000)
            page.wait_for_timeout(1500)   # the tables fill in from the formgrader's API
            texts[path] = page.inner_text("body")
        page.close()
        logged = log.read_text()[start:]   # before the server is stopped (which logs [C])
    return texts, alarms(logged)


def test_the_formgrader_neither_warns_nor_logs_without_an_exchange(course, browser, tmp_path):
    texts, logged = formgrader_visit(browser, course, tmp_path / "off")
    assert UNIT in texts["formgrader"], "the formgrader did not list the course's units"
    for path, text in texts.items():
        assert not [e for e in ERRORS if e in text], (path, text[:2000])
    assert logged == [], logged
    # the control: the same pages with an exchange named that is not there warn and log
    texts, logged = formgrader_visit(browser, course, tmp_path / "on",
                                     NBGRADER_EXCHANGE=str(tmp_path / "missing"))
    assert "does not exist" in texts["formgrader"]
    assert any("Unwritable directory" in line and line.startswith("[C") for line in logged), logged


def test_without_an_exchange_release_says_how_to_use_one(course, tmp_path):
    proc = subprocess.run([str(BIN / "nbgrader"), "release_assignment", UNIT], cwd=course,
                          env=hermetic_env(tmp_path), capture_output=True, text=True, timeout=300)
    assert proc.returncode != 0
    assert NO_EXCHANGE in proc.stdout + proc.stderr
    assert "NBGRADER_EXCHANGE=" in NO_EXCHANGE


@pytest.fixture(scope="module")
def student_edition(tmp_path_factory) -> Path:
    """The student edition as built for students, with a stand-in .venv whose programs are
    this one's (its set-up stamps made after the Makefile, so `make lab` only starts
    JupyterLab: nothing is installed or switched off in this venv)."""
    out = edition.build(tmp_path_factory.mktemp("edition") / "student")
    venv = out / ".venv"
    venv.mkdir()
    (venv / "bin").symlink_to(BIN, target_is_directory=True)
    for stamp in (".setup-done", ".student-setup-done"):
        (venv / stamp).touch()
    return out


def open_lab(browser, base: str):
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    page.goto(f"{base}/lab?token={TOKEN}", wait_until="load", timeout=120_000)
    page.locator(".lm-MenuBar-itemLabel", has_text="Help").wait_for(timeout=120_000)
    page.wait_for_timeout(2000)   # every plugin's menu in place
    return page


def make_lab(edition_dir: Path, tmp: Path, **extra: str):
    command = lambda port: ["make", "lab", "LAB_ARGS=" + " ".join(server_args(port))]  # noqa: E731
    return served(command, edition_dir, hermetic_env(tmp, **extra), tmp / "lab.log")


def test_the_editions_lab_has_no_assignment_list_without_an_exchange(student_edition, browser,
                                                                     tmp_path):
    log = tmp_path / "lab.log"
    with make_lab(student_edition, tmp_path) as base:
        start = len(log.read_text())
        page = open_lab(browser, base)
        menus = page.locator(".lm-MenuBar-itemLabel").all_inner_texts()
        text = page.inner_text("body")
        page.goto(f"{base}/lab/tree/exercises/{UNIT}/{UNIT}.ipynb?token={TOKEN}",
                  wait_until="load", timeout=120_000)
        page.locator(".validate-button").wait_for(timeout=120_000)   # Validate stays
        page.close()
        logged = alarms(log.read_text()[start:])
    assert "File" in menus and "Nbgrader" not in menus, menus
    assert not [e for e in ERRORS if e in text], text[:2000]
    assert logged == [], logged


def test_one_exchange_folder_for_the_instructor_and_the_edition(course, student_edition, browser,
                                                                tmp_path):
    """The instructor releases unit 00 into the folder NBGRADER_EXCHANGE names; the edition's
    `make lab`, with the same variable, shows it in the Assignment List, without an error."""
    exchange = tmp_path / "exchange"
    exchange.mkdir()
    exchange.chmod(0o1777)   # as nbgrader requires: every account writes there
    released = subprocess.run([str(BIN / "nbgrader"), "release_assignment", UNIT, "--force"],
                              cwd=course, capture_output=True, text=True, timeout=300,
                              env=hermetic_env(tmp_path / "instructor",
                                               NBGRADER_EXCHANGE=str(exchange)))
    assert released.returncode == 0, released.stdout + released.stderr
    assert (exchange / "attention" / "outbound" / UNIT / f"{UNIT}.ipynb").is_file()

    log = tmp_path / "student" / "lab.log"
    with make_lab(student_edition, tmp_path / "student", NBGRADER_EXCHANGE=str(exchange)) as base:
        start = len(log.read_text())
        page = open_lab(browser, base)
        page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").click()
        page.locator(".lm-Menu-itemLabel", has_text="Assignment List").click()
        listing = page.locator("#released_assignments_list")
        listing.get_by_text(UNIT).wait_for(timeout=60_000)
        text = page.locator("#jp-main-dock-panel").inner_text()
        page.close()
        logged = alarms(log.read_text()[start:])
    assert "attention" in text and UNIT in text
    assert not [e for e in ERRORS if e in text], text[:2000]
    assert logged == [], logged
