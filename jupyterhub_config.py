"""JupyterHub configuration for the course run as a class: `jupyterhub -f jupyterhub_config.py`.

It follows nbgrader's "Using nbgrader with JupyterHub" (one class, several graders):

* every person logs in with their own Unix account (PAM, JupyterHub's default authenticator)
  and gets their own Jupyter server, started as that account (JupyterHub's local spawner:
  the Hub runs as root, configurable-http-proxy in front of it);
* the course folder (this repository's nbgrader_config.py, solutions/, exercises/, the
  gradebook) belongs to a shared grader account, `grader-attention`, mode 0700. Its Jupyter
  server runs as a JupyterHub *service* named after the course, `attention`, in that folder:
  the formgrader, at /services/attention/. Only the group `formgrade-attention` (the
  instructors) may open it; the group `nbgrader-attention` (students and instructors) may
  see that it exists. Autograding from the formgrader runs as the grader account, so in
  course_grader's bubblewrap sandbox as an ordinary user;
* assignments and submissions go through nbgrader's exchange, a folder every account can
  write to (mode 1777: nbgrader requires it world-writable, the sticky bit stops anyone but
  its owner renaming the course's folder in it). Every server reads the nbgrader settings
  that say where it is, `c.Exchange.root` and `c.CourseDirectory.course_id = "attention"`,
  from `nbgrader_config.py` in COURSE_HUB_NBGRADER_CONFIG_DIR (put on JUPYTER_CONFIG_PATH).

Set-up, as root, before the first start (names are the defaults below):

    useradd -m grader-attention            # and an account per instructor and student
    mkdir -p -m 1777 /srv/nbgrader/exchange
    mkdir -p /srv/nbgrader/attention && cat > /srv/nbgrader/attention/nbgrader_config.py <<EOF
    c = get_config()
    c.Exchange.root = "/srv/nbgrader/exchange"
    c.CourseDirectory.course_id = "attention"
    EOF
    # the course, owned by the grader, readable by no one else (homes 0700 too)
    cp -r nbgrader_config.py solutions exercises ~grader-attention/attention
    chown -R grader-attention: ~grader-attention/attention && chmod 0700 ~grader-attention/attention
    export COURSE_HUB_INSTRUCTORS=ada COURSE_HUB_STUDENTS=bob,cyd
    .venv/bin/jupyterhub -f jupyterhub_config.py

The Python of this repository's .venv must be usable by every account (not inside a private
home such as /root). `tests/course_grader/test_jupyterhub.py` starts this configuration for
real with throw-away accounts. Settings come from the environment (COURSE_HUB_*), with the
defaults below.
"""

import os
import sys
from pathlib import Path

c = get_config()  # noqa: F821 (provided by traitlets when it loads this file)

COURSE = "attention"


def _names(variable: str) -> list[str]:
    return [n.strip() for n in os.environ.get(variable, "").split(",") if n.strip()]


INSTRUCTORS = _names("COURSE_HUB_INSTRUCTORS")
STUDENTS = _names("COURSE_HUB_STUDENTS")
GRADER = os.environ.get("COURSE_HUB_GRADER", f"grader-{COURSE}")
COURSE_DIR = os.environ.get("COURSE_HUB_COURSE_DIR", f"/home/{GRADER}/{COURSE}")
NBGRADER_CONFIG_DIR = os.environ.get("COURSE_HUB_NBGRADER_CONFIG_DIR", f"/srv/nbgrader/{COURSE}")
SERVICE_PORT = int(os.environ.get("COURSE_HUB_SERVICE_PORT", "9999"))

# The venv JupyterHub runs from: every server (and nbgrader, which calls `alembic` by name)
# uses its programs.
BIN = Path(sys.executable).parent
PATH = f"{BIN}:/usr/local/bin:/usr/bin:/bin"
ENVIRONMENT = {"PATH": PATH, "JUPYTER_CONFIG_PATH": NBGRADER_CONFIG_DIR, "MPLBACKEND": "Agg",
               "LANG": "C.UTF-8"}

# Who may log in (PAM: their Unix password). JupyterHub lets no one in unless listed.
c.JupyterHub.authenticator_class = "pam"
c.Authenticator.allowed_users = set(INSTRUCTORS + STUDENTS)

# Each user's own server: JupyterLab from the venv, as their Unix account, in their home.
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [str(BIN / "jupyterhub-singleuser")]
c.Spawner.default_url = "/lab"
c.Spawner.environment = ENVIRONMENT
c.Spawner.start_timeout = 120
c.Spawner.http_timeout = 120

# nbgrader's groups: formgrade-<course> may use the course's formgrader service,
# nbgrader-<course> takes the course (nbgrader's assignment list).
c.JupyterHub.load_groups = {
    f"formgrade-{COURSE}": {"users": INSTRUCTORS},
    f"nbgrader-{COURSE}": {"users": STUDENTS + INSTRUCTORS},
}
c.JupyterHub.load_roles = [
    {
        "name": f"formgrade-{COURSE}",
        "groups": [f"formgrade-{COURSE}"],
        "scopes": [f"access:services!service={COURSE}", "list:services",
                   f"read:services!service={COURSE}"],
    },
    {
        "name": f"nbgrader-{COURSE}",
        "groups": [f"nbgrader-{COURSE}"],
        "scopes": ["list:services", f"read:services!service={COURSE}"],
    },
    # nbgrader's course list (in an instructor's own server) asks the Hub which course
    # services its user may open, with the server's token: that token gets its owner's
    # permissions (as in nbgrader's demos), never more.
    {"name": "server", "scopes": ["inherit"]},
]

# The formgrader: a Jupyter server run by the Hub as the grader account, in the course folder
# (so it reads the course's nbgrader_config.py, which puts grading in the sandbox). The
# service's name MUST be the course id.
c.JupyterHub.services = [
    {
        "name": COURSE,
        "url": f"http://127.0.0.1:{SERVICE_PORT}",
        "command": [str(BIN / "jupyterhub-singleuser"), f"--ServerApp.root_dir={COURSE_DIR}"],
        "user": GRADER,
        "cwd": COURSE_DIR,
        "environment": {**ENVIRONMENT, "JUPYTERHUB_DEFAULT_URL": "/lab"},
        "oauth_no_confirm": True,
    },
]
