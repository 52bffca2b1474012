"""The dependency files agree: pyproject.toml, environment.yml and requirements.lock; make
autograde releases what it grades; the Makefile's targets that install Debian packages share
one installer (.ci/apt-install)."""

import os
import re
import shutil
import subprocess
import time
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("course_utils", "course_grader", "course_publish")
# conda-forge names that differ from the PyPI names
CONDA_TO_PYPI = {"pytorch-cpu": "torch", "pytorch": "torch"}
# dependencies of pyproject.toml that conda-forge does not have: environment.yml's pip section
PYPI_ONLY = ("copydetect",)


def pyproject_requirements() -> dict[str, SpecifierSet]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = project["dependencies"] + [line for extra in project["optional-dependencies"].values()
                                       for line in extra]
    reqs = [Requirement(line) for line in lines]
    return {canonicalize_name(r.name): r.specifier for r in reqs}


def conda_requirements() -> dict[str, SpecifierSet]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    found = {}
    for dep in env["dependencies"]:
        if isinstance(dep, dict):  # the pip: section: the course package and PyPI-only ones
            for line in dep.get("pip", []):
                match = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*([<>=!,.\d\s*]*)", line)
                if match and match.group(1) in PYPI_ONLY:
                    found[canonicalize_name(match.group(1))] = SpecifierSet(match.group(2))
            continue
        match = re.fullmatch(r"([A-Za-z0-9_.\-]+)\s*([<>=!,.\d\s*]*)", dep)
        assert match, f"cannot parse conda dependency {dep!r}"
        name, spec = match.group(1), match.group(2).strip()
        if name in ("python", "pip"):
            continue
        found[canonicalize_name(CONDA_TO_PYPI.get(name, name))] = SpecifierSet(spec)
    return found


def test_environment_yml_matches_pyproject():
    pyproject, conda = pyproject_requirements(), conda_requirements()
    assert sorted(conda) == sorted(pyproject), (
        f"only in pyproject.toml: {sorted(set(pyproject) - set(conda))}; "
        f"only in environment.yml: {sorted(set(conda) - set(pyproject))}"
    )
    for name, spec in pyproject.items():
        assert conda[name] == spec, (
            f"{name}: pyproject.toml says '{spec}', environment.yml says '{conda[name]}'"
        )


def test_environment_yml_installs_the_course_package():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_sections = [d["pip"] for d in env["dependencies"] if isinstance(d, dict)]
    assert pip_sections and "--editable ." in pip_sections[0]


def lock_pins() -> dict[str, Version]:
    """requirements.lock as {canonical name: pinned version}."""
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, version = line.partition("==")
        assert version, f"requirements.lock line is not a pin: {line!r}"
        pins[canonicalize_name(name)] = Version(version)
    return pins


def test_lock_pins_every_dependency_within_its_range():
    pins = lock_pins()
    for name, spec in pyproject_requirements().items():
        assert name in pins, f"{name} is a dependency but requirements.lock does not pin it"
        pinned = pins[name]
        assert spec.contains(pinned, prereleases=True), f"{name}=={pinned} is outside '{spec}'"


def python_floor() -> Version:
    """The oldest Python that pyproject.toml's requires-python admits (">=3.11": 3.11.0)."""
    spec = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]
    (floor,) = [Version(s.version) for s in SpecifierSet(spec) if s.operator == ">="]
    return floor


def test_every_locked_package_installs_on_the_oldest_python_the_course_admits():
    """A pin whose release needs a newer Python than requires-python admits breaks `make setup`
    there with a bare "no matching distribution" (soupsieve 4.1.2 needs 3.11.5; Debian 12's
    python3 is 3.11.2). The installed distributions are the lock's pins (make setup installs
    exactly them); each one's Requires-Python must admit the floor."""
    from importlib.metadata import distribution

    floor = python_floor()
    too_new = []
    for name, version in lock_pins().items():
        dist = distribution(name)
        assert Version(dist.version).public == version.public, (
            f"{name}: installed {dist.version}, the lock pins {version}: run make setup")
        needs = dist.metadata.get("Requires-Python")
        if needs and not SpecifierSet(needs).contains(floor, prereleases=True):
            too_new.append(f"{name}=={version} (Requires-Python {needs})")
    assert not too_new, (f"requirements.lock pins releases that Python {floor} (pyproject's "
                         f"requires-python) cannot install: {too_new}; pin an older release")


def test_torch_range_tops_out_at_2_13():
    spec = pyproject_requirements()["torch"]
    assert spec.contains("2.13.0") and not spec.contains("2.14.0")


def test_a_built_wheel_installs_every_module_and_data_file(tmp_path):
    """`pip install .` (not editable) must give a working course_utils and course_grader: build
    the wheel, install it alone into a fresh virtual environment and import every module from
    there, with the dependencies taken from this environment's site-packages (which hold no
    copy of course_utils: the editable install is only a finder that a .pth file starts)."""
    import shutil
    import subprocess
    import sys
    import sysconfig
    import zipfile

    # Build from a copy: setuptools reuses a build/ folder left in the tree, which may hold
    # files that the current configuration would not package.
    source = tmp_path / "source"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source)
    for package in PACKAGES:
        shutil.copytree(ROOT / package, source / package,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "--disable-pip-version-check", "-w", str(wheels),
                    str(source)], check=True, capture_output=True, timeout=300)
    (wheel,) = wheels.glob("*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = subprocess.run(["git", "ls-files", *PACKAGES], cwd=ROOT, check=True,
                             capture_output=True, text=True).stdout.split()
    if tracked:  # a clone; in an exported tree, compare with the files on disk instead
        expected = set(tracked)
    else:
        expected = {str(p.relative_to(ROOT)) for package in PACKAGES
                    for p in (ROOT / package).rglob("*")
                    if p.is_file() and "__pycache__" not in p.parts}
    assert not sorted(expected - names), f"missing from the wheel: {sorted(expected - names)}"

    venv = tmp_path / "fresh"
    subprocess.run([sys._base_executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                   timeout=120)
    python = venv / "bin" / "python"
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet",
                    "--no-deps", "--disable-pip-version-check", str(wheel)],
                   check=True, capture_output=True, timeout=300)
    modules = sorted(n[:-3].replace("/", ".").removesuffix(".__init__")
                     for n in names if n.endswith(".py"))
    script = (
        "import importlib, pathlib, sys\n"
        f"for name in {modules!r}:\n"
        "    module = importlib.import_module(name)\n"
        f"    assert pathlib.Path(module.__file__).is_relative_to({str(venv)!r}), module.__file__\n"
        "import course_grader\n"
        "templates = pathlib.Path(course_grader.__file__).parent / 'feedback_templates'\n"
        "assert any(templates.rglob('*.j2')), 'feedback templates missing'\n"
        "from course_utils.shipped_tiny_bert import SHIPPED, shipped_metadata\n"
        f"assert SHIPPED.is_relative_to({str(venv)!r}), SHIPPED\n"
        "assert 'recipe' in shipped_metadata(), 'the tiny BERT weights are missing'\n"
        "print(len(sys.modules))\n"
    )
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "MPLBACKEND": "Agg",
           "PYTHONPATH": sysconfig.get_paths()["purelib"], "HOME": str(tmp_path)}
    proc = subprocess.run([str(python), "-c", script], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]


def make_env() -> dict[str, str]:
    """This environment without what a make that runs these tests passes to its children
    (its flags and command-line variables)."""
    return {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL")}


# -- make autograde releases the units it grades, and only them

def autograde(course: Path, *args: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """`make autograde ARGS` in `course` (the Makefile, two units u1 and u2 in a stand-in
    registry, a submission of u2), its set-up taken as done and its nbgrader and python
    stand-ins that record their arguments; (the run, what they were called with)."""
    shutil.copy(ROOT / "Makefile", course)
    venv = course / "venv"
    (venv / "bin").mkdir(parents=True, exist_ok=True)
    (venv / ".setup-done").touch()
    for unit in ("u1", "u2"):
        (course / "solutions" / unit).mkdir(parents=True, exist_ok=True)
        (course / "solutions" / unit / f"{unit}.ipynb").touch()
    registry = course / "course_utils" / "units.py"   # what make reads the units from
    registry.parent.mkdir(exist_ok=True)
    registry.write_text('print("u1 u2")\n')
    (course / "submitted" / "alice" / "u2").mkdir(parents=True, exist_ok=True)
    for tool in ("nbgrader", "python"):
        (venv / "bin" / tool).write_text(f'#!/bin/sh\necho "{tool} $*" >> calls\n')
        (venv / "bin" / tool).chmod(0o755)
    (course / "calls").write_text("")
    proc = subprocess.run(["make", "--no-print-directory", "-s", "VENV=venv", "-o",
                           "venv/.setup-done", "autograde", *args], cwd=course,
                          capture_output=True, text=True, timeout=60, env=make_env())
    return proc, (course / "calls").read_text().splitlines()


def test_autograde_releases_only_the_units_it_grades(tmp_path):
    proc, calls = autograde(tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert calls == ["nbgrader generate_assignment u2 --force --log-level=WARN",
                     "python -m course_grader.autograde"]
    proc, calls = autograde(tmp_path, "UNIT=u1", "JOBS=2")
    assert proc.returncode == 0, proc.stderr
    assert calls == ["nbgrader generate_assignment u1 --force --log-level=WARN",
                     "python -m course_grader.autograde u1 --jobs 2"]


def test_autograde_of_an_unknown_unit_names_the_known_ones(tmp_path):
    proc, calls = autograde(tmp_path, "UNIT=u3")
    assert proc.returncode == 2 and calls == []
    assert proc.stdout == "unknown unit 'u3'; units: u1 u2\n"


# -- the Debian packages that make test installs (.ci/apt-install), against a stand-in apt-get

INSTALLERS = {"sandbox": "bubblewrap", "browser": "chromium", "postgres": "postgresql",
              "hub-proxy": "npm"}
# Answers as FAKE_APT_INSTALL says: "lock" (another process holds dpkg's lock: apt-get waits,
# then gives up), "unknown" (no such package in the lists), "ok" (puts a `bwrap` on PATH).
FAKE_APT_GET = r"""#!/bin/bash
echo "$*" >> "$FAKE_APT_CALLS"
case " $* " in *" update "*) echo "Reading package lists..."; exit 0 ;; esac
package=${@: -1}
case $FAKE_APT_INSTALL in
lock)
    for _ in 1 2; do
        echo "Waiting for cache lock: Could not get lock /var/lib/dpkg/lock-frontend." \
            "It is held by process 4242 (unattended-upgr)..."
    done
    echo "E: Unable to acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), is another" \
        "process using it?" >&2
    exit 100 ;;
unknown)
    echo "Reading package lists..."; echo "E: Unable to locate package $package" >&2; exit 100 ;;
ok)
    printf '#!/bin/bash\necho "bubblewrap 0.0 (stand-in)"\n' > "$(dirname "$0")/bwrap"
    chmod +x "$(dirname "$0")/bwrap" ;;
esac
"""
# What the Makefile and the installer run besides apt-get: nothing else of the system's
# (its bwrap, chromium, npm, apt-get and sudo are not on this PATH).
TOOLS = ("bash", "env", "id", "mktemp", "rm", "grep", "touch", "sleep", "dirname", "chmod")


def run_make(tmp_path: Path, target: str, user_id: int | None = None,
             **env: str) -> tuple[subprocess.CompletedProcess, list[str]]:
    """`make TARGET` with a PATH of the stand-in apt-get, a stand-in sudo (which runs its
    command as this user, or with FAKE_SUDO=deny refuses as if it wanted a password), an `id`
    that says `user_id` if given, and TOOLS alone; (the run, the stand-in's calls)."""
    fake, tools = tmp_path / "fake-bin", tmp_path / "tools"
    fake.mkdir(exist_ok=True)
    tools.mkdir(exist_ok=True)
    (fake / "apt-get").write_text(FAKE_APT_GET)
    (fake / "sudo").write_text('#!/bin/bash\n[ "${FAKE_SUDO:-}" = deny ] && exit 1\n'
                               '[ "$1" = -n ] && shift\nexec "$@"\n')
    if user_id is not None:
        (fake / "id").write_text(f"#!/bin/bash\necho {user_id}\n")
        (fake / "id").chmod(0o755)
    for script in ("apt-get", "sudo"):
        (fake / script).chmod(0o755)
    for tool in TOOLS:
        if not (tools / tool).exists():
            (tools / tool).symlink_to(shutil.which(tool))
    calls = tmp_path / "calls"
    calls.write_text("")
    proc = subprocess.run([shutil.which("make"), "--no-print-directory", "-f", "Makefile",
                           target], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={"PATH": f"{fake}:{tools}", "HOME": str(tmp_path),
                               "FAKE_APT_CALLS": str(calls), **env})
    return proc, calls.read_text().splitlines()


def apt_calls(calls: list[str]) -> list[tuple[int, str]]:
    """The stand-in's calls as (the lock timeout passed, in seconds; the rest)."""
    found = [re.fullmatch(r"-q -o DPkg::Lock::Timeout=(\d+) (.*)", call) for call in calls]
    assert all(found), calls
    return [(int(m.group(1)), m.group(2)) for m in found]


def own_lines(text: str) -> list[str]:
    """The lines of `text` but make's own ("make: *** [...] Error 1")."""
    return [line for line in text.splitlines() if not line.startswith("make: ")]


def test_the_four_installer_targets_share_one_install_step():
    proc = subprocess.run(["make", "-n", *INSTALLERS], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env=make_env())
    assert proc.returncode == 0, proc.stderr
    for package in INSTALLERS.values():
        assert f".ci/apt-install {package} " in proc.stdout, proc.stdout
    assert "apt-get " not in proc.stdout, "a target calls apt-get itself"


@pytest.mark.parametrize("target", ["sandbox", "browser", "hub-proxy"])
def test_a_failed_install_is_one_line_naming_what_failed_and_how_by_hand(tmp_path, target):
    """apt does not know the package even after `apt-get update`: one line says which
    apt-get command failed with apt's error, and what to run by hand; apt waits for dpkg's
    lock (120 s)."""
    package = INSTALLERS[target]
    proc, calls = run_make(tmp_path, target, FAKE_APT_INSTALL="unknown")
    assert proc.returncode != 0
    assert own_lines(proc.stdout) == []
    assert own_lines(proc.stderr) == [
        f"could not install {package}: `apt-get install -y {package}` failed (E: Unable to "
        f"locate package {package}); install it by hand: sudo apt-get install {package}"]
    # what is left of the 120 s bound (whole seconds of the shell's clock)
    assert [step for _, step in apt_calls(calls)] == [f"install -y {package}", "update",
                                                     f"install -y {package}"]
    assert all(115 <= timeout <= 120 for timeout, _ in apt_calls(calls)), calls


def test_a_lock_held_by_another_process_is_waited_for_then_named(tmp_path):
    """Another process holds dpkg's lock throughout: one line says that the install waits
    and for whom, then one line that it failed on the lock; no `apt-get update` meanwhile.
    (APT_LOCK_WAIT=2: the bound, 120 s unless told.)"""
    start = time.monotonic()
    proc, calls = run_make(tmp_path, "browser", FAKE_APT_INSTALL="lock", APT_LOCK_WAIT="2")
    assert proc.returncode != 0
    assert own_lines(proc.stdout) == [
        "waiting up to 2 s for apt's lock, held by process 4242 (unattended-upgr), to "
        "install chromium"]
    assert own_lines(proc.stderr) == [
        "could not install chromium: `apt-get install -y chromium` failed (E: Unable to "
        "acquire the dpkg frontend lock (/var/lib/dpkg/lock-frontend), is another process "
        "using it?); install it by hand: sudo apt-get install chromium"]
    assert calls and {step for _, step in apt_calls(calls)} == {"install -y chromium"}
    assert 1 <= apt_calls(calls)[0][0] <= 2, calls
    assert 1 <= time.monotonic() - start < 30


def test_an_installed_package_is_reported_by_its_own_command(tmp_path):
    proc, calls = run_make(tmp_path, "sandbox", FAKE_APT_INSTALL="ok")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout == "bubblewrap 0.0 (stand-in)\n" and proc.stderr == ""
    [(timeout, step)] = apt_calls(calls)
    assert step == "install -y bubblewrap" and 115 <= timeout <= 120


def test_without_root_or_sudo_it_says_how_to_install_by_hand(tmp_path):
    proc, calls = run_make(tmp_path, "sandbox", user_id=1000, FAKE_SUDO="deny",
                           FAKE_APT_INSTALL="ok")
    assert proc.returncode != 0 and calls == []
    assert own_lines(proc.stdout) == []
    assert own_lines(proc.stderr) == [
        "bubblewrap is missing: install it (sudo apt-get install bubblewrap) to autograde"]
