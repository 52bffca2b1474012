"""The dependency files agree: pyproject.toml, environment.yml and requirements.lock."""

import re
import tomllib
from pathlib import Path

import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
# conda-forge names that differ from the PyPI names
CONDA_TO_PYPI = {"pytorch-cpu": "torch", "pytorch": "torch"}


def pyproject_requirements() -> dict[str, SpecifierSet]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = project["dependencies"] + project["optional-dependencies"]["dev"]
    reqs = [Requirement(line) for line in lines]
    return {canonicalize_name(r.name): r.specifier for r in reqs}


def conda_requirements() -> dict[str, SpecifierSet]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    found = {}
    for dep in env["dependencies"]:
        if isinstance(dep, dict):  # the pip: section installs the course package itself
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


def test_lock_pins_every_dependency_within_its_range():
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, version = line.partition("==")
        assert version, f"requirements.lock line is not a pin: {line!r}"
        pins[canonicalize_name(name)] = Version(version)
    for name, spec in pyproject_requirements().items():
        assert name in pins, f"{name} is a dependency but requirements.lock does not pin it"
        pinned = pins[name]
        assert spec.contains(pinned, prereleases=True), f"{name}=={pinned} is outside '{spec}'"


def test_torch_range_tops_out_at_2_13():
    spec = pyproject_requirements()["torch"]
    assert spec.contains("2.13.0") and not spec.contains("2.14.0")
