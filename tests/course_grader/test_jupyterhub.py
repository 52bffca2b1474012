"""The repository's jupyterhub_config.py, started for real: JupyterHub (from the venv) with
configurable-http-proxy (npm; `make hub-proxy`), PAM logins of throw-away Unix accounts with
passwords this test sets, each user's server started by the Hub as that account.

An instructor, a student and the grader account are made for the test (and removed after it).
The grader releases unit 00 from the course folder (its own, mode 0700) to the exchange; then,
through the Hub's HTTP interface only:

* a wrong password is refused, the right one logs in (PAM);
* the student's server starts, as the student; nbgrader's assignment list extension in it
  lists the released unit, and fetching it through the extension puts the notebook in the
  student's home;
* the course's formgrader service (/services/attention/, run as the grader account) answers
  the instructor with the course's assignments and refuses the student.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from pathlib import Path

import pytest
from conftest import BIN, ROOT, system_tool
from test_exchange import (
    COURSE_ID,
    NOTEBOOK,
    SETPRIV,
    UNIT,
    USERADD,
    USERDEL,
    User,
    _make_user,
    _open_ancestors,
    nbgrader_as,
)

requests = pytest.importorskip("requests")

PROXY = shutil.which("configurable-http-proxy")
CHPASSWD = system_tool("chpasswd")

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the Hub spawns servers as other Unix users "
                       "and checks PAM passwords: it runs as root"),
    pytest.mark.skipif(None in (USERADD, USERDEL, CHPASSWD, SETPRIV),
                       reason="useradd/userdel/chpasswd (passwd) and setpriv (util-linux) needed"),
    pytest.mark.skipif(not (BIN / "jupyterhub").exists(),
                       reason="jupyterhub is not installed in the venv (the dev extra)"),
    pytest.mark.skipif(PROXY is None, reason="configurable-http-proxy is not installed: "
                       "`make hub-proxy` installs it with npm"),
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _set_password(user: User) -> str:
    password = secrets.token_urlsafe(16)
    subprocess.run([CHPASSWD], input=f"{user.name}:{password}\n", text=True,
                   check=True, capture_output=True)
    return password


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)   # the Hub stops the servers, the service and the proxy
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


def _end_processes_of(uids: set[int]) -> None:
    """What the Hub started as the test's own accounts and left running (nothing, normally)."""
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if entry.stat().st_uid in uids:
                    os.kill(int(entry.name), signal.SIGKILL)
            except (FileNotFoundError, ProcessLookupError):
                pass


class Hub:
    def __init__(self, base: str, log: Path, proc: subprocess.Popen):
        self.base, self.log, self.proc = base, log, proc

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:]

    def login(self, name: str, password: str) -> requests.Session:
        """Log in through the Hub's login form, as a browser does; returns the session."""
        session = requests.Session()
        page = session.get(f"{self.base}/hub/login", timeout=30)
        xsrf = re.search(r'name="_xsrf" value="([^"]+)"', page.text)
        data = {"username": name, "password": password, **({"_xsrf": xsrf[1]} if xsrf else {})}
        session.reply = session.post(f"{self.base}/hub/login", data=data, timeout=60,
                                     allow_redirects=False)
        return session

    def token(self, session: requests.Session, name: str) -> str:
        """An API token of the logged-in user's own (their permissions, nothing more)."""
        reply = session.post(f"{self.base}/hub/api/users/{name}/tokens",
                             headers={"X-XSRFToken": session.cookies.get("_xsrf", "")},
                             json={"note": "test", "expires_in": 900}, timeout=30)
        assert reply.status_code in (200, 201), (reply.status_code, reply.text, self.tail())
        return reply.json()["token"]


@pytest.fixture(scope="module")
def hub():
    with ExitStack() as stack:
        _open_ancestors([Path(sys.executable).resolve().parent, Path(sys.base_prefix).resolve(),
                         Path(sys.prefix).resolve(), ROOT], stack)
        tag = secrets.token_hex(3)
        grader = _make_user(f"crs-grader-{tag}", stack)
        instructor = _make_user(f"crs-instr-{tag}", stack)
        student = _make_user(f"crs-stud-{tag}", stack)
        passwords = {u.name: _set_password(u) for u in (instructor, student)}
        stack.callback(_end_processes_of, {grader.uid, instructor.uid, student.uid})

        base = Path(tempfile.mkdtemp(prefix="crs-hub-"))
        stack.callback(shutil.rmtree, base, ignore_errors=True)
        base.chmod(0o755)
        exchange = base / "exchange"
        exchange.mkdir()
        exchange.chmod(0o1777)
        shared = base / "nbgrader"            # the nbgrader settings every server reads
        shared.mkdir()
        (shared / "nbgrader_config.py").write_text(
            "c = get_config()  # noqa: F821\n"
            f"c.Exchange.root = {str(exchange)!r}\n"
            f"c.CourseDirectory.course_id = {COURSE_ID!r}\n")
        course = grader.home / COURSE_ID
        course.mkdir()
        shutil.copy(ROOT / "nbgrader_config.py", course)
        for folder in ("solutions", "exercises"):
            shutil.copytree(ROOT / folder, course / folder)
        for folder, _, files in os.walk(course):
            for name in (".", *files):
                os.chown(os.path.join(folder, name), grader.uid, grader.gid)
        course.chmod(0o700)
        config_path = {"JUPYTER_CONFIG_PATH": str(shared)}
        nbgrader_as(grader, "generate_assignment", UNIT, "--force", cwd=course, env=config_path)
        nbgrader_as(grader, "release_assignment", UNIT, cwd=course, env=config_path)

        state = base / "hub"                  # the Hub's own database and secrets: root's
        state.mkdir(mode=0o700)
        port = _free_port()
        env = {"PATH": f"{BIN}:{Path(PROXY).parent}:/usr/local/bin:/usr/bin:/bin",
               "LANG": "C.UTF-8", "HOME": str(state),
               "COURSE_HUB_INSTRUCTORS": instructor.name, "COURSE_HUB_STUDENTS": student.name,
               "COURSE_HUB_GRADER": grader.name, "COURSE_HUB_COURSE_DIR": str(course),
               "COURSE_HUB_NBGRADER_CONFIG_DIR": str(shared),
               "COURSE_HUB_SERVICE_PORT": str(_free_port())}
        log = state / "jupyterhub.log"
        with open(log, "w") as out:
            proc = subprocess.Popen(
                [str(BIN / "jupyterhub"), "-f", str(ROOT / "jupyterhub_config.py"),
                 f"--JupyterHub.bind_url=http://127.0.0.1:{port}",
                 f"--JupyterHub.hub_bind_url=http://127.0.0.1:{_free_port()}",
                 f"--ConfigurableHTTPProxy.api_url=http://127.0.0.1:{_free_port()}",
                 f"--ConfigurableHTTPProxy.pid_file={state / 'proxy.pid'}",
                 f"--JupyterHub.db_url=sqlite:///{state / 'jupyterhub.sqlite'}",
                 f"--JupyterHub.cookie_secret_file={state / 'cookie_secret'}",
                 f"--JupyterHub.pid_file={state / 'jupyterhub.pid'}"],
                cwd=state, env=env, stdout=out, stderr=subprocess.STDOUT)
        stack.callback(_stop, proc)
        running = Hub(f"http://127.0.0.1:{port}", log, proc)
        deadline = time.monotonic() + 90
        while True:
            try:
                if requests.get(f"{running.base}/hub/api/", timeout=5).status_code == 200:
                    break
            except requests.ConnectionError:
                pass
            assert proc.poll() is None, f"jupyterhub exited:\n{running.tail()}"
            assert time.monotonic() < deadline, f"jupyterhub did not answer:\n{running.tail()}"
            time.sleep(0.5)
        yield {"hub": running, "instructor": instructor, "student": student, "grader": grader,
               "passwords": passwords, "course": course}


def test_pam_refuses_a_wrong_password_and_accepts_the_right_one(hub):
    h, student = hub["hub"], hub["student"]
    wrong = h.login(student.name, "not-" + hub["passwords"][student.name])
    assert wrong.reply.status_code == 403 and "jupyterhub-session-id" not in wrong.cookies
    right = h.login(student.name, hub["passwords"][student.name])
    assert right.reply.status_code == 302, (right.reply.status_code, h.tail())
    assert right.get(f"{h.base}/hub/api/user", timeout=30,
                     headers={"X-XSRFToken": right.cookies.get("_xsrf", "")}
                     ).json()["name"] == student.name


def _headers(token: str) -> dict[str, str]:
    return {"Authorization": f"token {token}"}


def test_the_students_server_starts_and_lists_and_fetches_the_assignment(hub):
    h, student = hub["hub"], hub["student"]
    session = h.login(student.name, hub["passwords"][student.name])
    token = h.token(session, student.name)
    api = f"{h.base}/hub/api/users/{student.name}"
    started = requests.post(f"{api}/server", headers=_headers(token), timeout=60)
    assert started.status_code in (201, 202), (started.status_code, started.text, h.tail())
    deadline = time.monotonic() + 120
    while not requests.get(api, headers=_headers(token), timeout=30).json()["servers"] \
            .get("", {}).get("ready"):
        assert time.monotonic() < deadline, f"the student's server did not start:\n{h.tail()}"
        time.sleep(1)
    server = f"{h.base}/user/{student.name}"
    assert requests.get(f"{server}/api/status", headers=_headers(token), timeout=30).ok
    # the server runs as the student's own account
    pids = [p for p in Path("/proc").iterdir() if p.name.isdigit()]
    owners = {p.stat().st_uid for p in pids
              if b"jupyterhub-singleuser" in _cmdline(p) and f"/user/{student.name}/".encode()
              in _environ(p)}
    assert owners == {student.uid}, owners

    listed = requests.get(f"{server}/assignments", params={"course_id": COURSE_ID},
                          headers=_headers(token), timeout=60)
    assert listed.ok, (listed.status_code, listed.text)
    assignments = listed.json()["value"]
    assert [(a["course_id"], a["assignment_id"], a["status"]) for a in assignments] == \
        [(COURSE_ID, UNIT, "released")], assignments

    fetched = requests.post(f"{server}/assignments/fetch", headers=_headers(token), timeout=120,
                            data={"course_id": COURSE_ID, "assignment_id": UNIT})
    assert fetched.ok, (fetched.status_code, fetched.text)
    statuses = [a["status"] for a in fetched.json()["value"]]
    assert statuses == ["fetched"], fetched.json()
    notebook = student.home / UNIT / NOTEBOOK
    assert notebook.stat().st_uid == student.uid and "YOUR CODE HERE" in notebook.read_text()


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def _environ(proc: Path) -> bytes:
    try:
        return (proc / "environ").read_bytes()
    except OSError:
        return b""


def test_the_course_service_answers_the_instructor_and_refuses_the_student(hub):
    h, instructor, student = hub["hub"], hub["instructor"], hub["student"]
    service = f"{h.base}/services/{COURSE_ID}"
    teacher = h.token(h.login(instructor.name, hub["passwords"][instructor.name]),
                      instructor.name)
    deadline = time.monotonic() + 90
    while True:   # the Hub starts its services with it; the formgrader takes a moment
        reply = requests.get(f"{service}/formgrader/api/assignments", headers=_headers(teacher),
                             timeout=60)
        if reply.status_code not in (502, 503, 404) or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert reply.status_code == 200, (reply.status_code, reply.text[:500], h.tail())
    assert UNIT in [a["name"] for a in reply.json()], reply.json()

    pupil = h.token(h.login(student.name, hub["passwords"][student.name]), student.name)
    refused = requests.get(f"{service}/formgrader/api/assignments", headers=_headers(pupil),
                           timeout=60, allow_redirects=False)
    assert refused.status_code == 403, (refused.status_code, refused.text[:500])
    assert UNIT not in refused.text
    # nor without any login
    anonymous = requests.get(f"{service}/formgrader/api/assignments", timeout=60,
                             allow_redirects=False)
    assert anonymous.status_code in (302, 401, 403) and UNIT not in anonymous.text
