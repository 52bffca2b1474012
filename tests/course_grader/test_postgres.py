"""The gradebook on a PostgreSQL server (COURSE_DB_URL), against a real server that the test
starts from Debian's package (`make postgres` installs it) and removes: nbgrader releases into
it, `course_grader.autograde` grades into it (two at a time, its only writer), `make report`
reads it, and no SQLite file appears.
"""

from __future__ import annotations

import contextlib
import csv
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from conftest import BIN, ROOT, tool_env
from nbgrader.api import Gradebook

from course_grader import sandbox
from course_grader.corpus import UNIT, released, solve, write


def _postgres_bin() -> Path | None:
    found = shutil.which("initdb") or next(
        iter(sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"), reverse=True)), None)
    return Path(found).resolve().parent if found else None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def postgres_server():
    """A throw-away PostgreSQL server on 127.0.0.1 (trust authentication, user `grader`,
    database `gradebook`) in a temporary folder of its own; yields its SQLAlchemy URL.
    PostgreSQL refuses to run as root, so as root it runs as the `postgres` user that Debian's
    package creates (the folder is then that user's: pytest's temporary folders are not)."""
    bindir = _postgres_bin()
    if bindir is None:
        pytest.skip("PostgreSQL is not installed: `make postgres` installs Debian's package")
    ids = None
    if os.getuid() == 0:
        entry = pwd.getpwnam("postgres")
        ids = (entry.pw_uid, entry.pw_gid)
    base = Path(tempfile.mkdtemp(prefix="course-postgres-"))
    data, sock = base / "data", base / "socket"
    sock.mkdir()
    for folder in (base, sock):
        if ids:
            os.chown(folder, *ids)

    def as_owner() -> None:
        if ids:
            os.setgid(ids[1])
            os.setuid(ids[0])

    init = subprocess.run([str(bindir / "initdb"), "-D", str(data), "-U", "grader",
                           "--auth=trust", "-E", "UTF8", "--no-sync"], capture_output=True,
                          text=True, preexec_fn=as_owner, cwd=base)
    if init.returncode != 0:
        shutil.rmtree(base, ignore_errors=True)
        raise AssertionError(f"initdb failed:\n{init.stdout}\n{init.stderr}")
    port = _free_port()
    log = open(base / "postgres.log", "wb")  # noqa: SIM115 - closed below
    server = subprocess.Popen([str(bindir / "postgres"), "-D", str(data), "-p", str(port),
                               "-k", str(sock), "-c", "listen_addresses=127.0.0.1",
                               "-c", "fsync=off"], stdout=log, stderr=subprocess.STDOUT,
                              preexec_fn=as_owner, cwd=base)
    try:
        import psycopg

        deadline = time.monotonic() + 60
        while True:
            try:
                with psycopg.connect(host="127.0.0.1", port=port, user="grader",
                                     dbname="postgres", autocommit=True) as con:
                    con.execute("CREATE DATABASE gradebook")
                break
            except psycopg.OperationalError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError("PostgreSQL did not start:\n"
                                         + (base / "postgres.log").read_text()) from None
                time.sleep(0.2)
        yield f"postgresql+psycopg://grader@127.0.0.1:{port}/gradebook"
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.skipif(bool(sandbox.unavailable_reason()),
                    reason=f"needs the sandbox: {sandbox.unavailable_reason()}")
def test_release_grading_and_report_on_a_postgresql_gradebook(tmp_path):
    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions" / UNIT, course / "solutions" / UNIT)
    with postgres_server() as url:
        env = {**tool_env(), "COURSE_DB_URL": url}

        def run(*cmd: str) -> subprocess.CompletedProcess:
            proc = subprocess.run(list(cmd), cwd=course, env=env, capture_output=True,
                                  text=True, timeout=600)
            assert proc.returncode == 0, proc.stdout + proc.stderr
            return proc

        run(str(BIN / "nbgrader"), "generate_assignment", UNIT, "--force", "--log-level=WARN")
        write(solve(course, released(course, UNIT)), course / "submitted" / "ada" / UNIT)
        write(released(course, UNIT), course / "submitted" / "bob" / UNIT)
        graded = run(sys.executable, "-m", "course_grader.autograde", UNIT, "--jobs", "2")
        assert "2 submissions in" in graded.stdout and "gradebook integrity: ok" in graded.stdout
        # an honest run warns of nothing (recording a new submission printed three SQLAlchemy
        # warnings per run: gradebook.record)
        assert "warning" not in graded.stderr.lower(), graded.stderr
        run(sys.executable, "-m", "course_grader.report", "--out", "reports")
        with Gradebook(url, course_id="attention") as gb:
            scores = {s.student.id: s.score for s in gb.find_assignment(UNIT).submissions}
    assert scores == {"ada": 9.0, "bob": 0.0}
    assert not (course / "gradebook.db").exists(), "a SQLite gradebook was made beside it"
    with open(course / "reports" / f"{UNIT}_students.csv", newline="") as f:
        totals = {row["student"]: float(row["score"]) for row in csv.DictReader(f)}
    assert totals == {"ada": 9.0, "bob": 0.0}
