"""The student edition (`make student-edition`, course_publish.edition): what it holds, what it
must never hold, and that it installs and runs on its own in a fresh virtual environment."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT, UNITS, nbgrader_meta, read, solved

from course_publish import edition

LECTURE = "00_attention_as_lookup"


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("edition") / "student"
    edition.build(out)
    return out


def test_it_holds_what_a_student_needs(built):
    assert sorted(p.name for p in (built / "lectures").glob("*.ipynb")) == \
        [f"{unit}.ipynb" for unit in UNITS]
    for unit in UNITS:
        assert (built / "exercises" / unit / f"{unit}.ipynb").is_file()
    assert (built / "course_utils" / "data" / "tiny_bert.safetensors").is_file()
    for name in ("README.md", "Makefile", "pyproject.toml", "requirements.lock",
                 "nbgrader_config.py"):
        assert (built / name).is_file(), name
    lock = (built / "requirements.lock").read_text()
    for package in ("torch==", "nbgrader==", "jupyterlab==", "ipywidgets==", "setuptools=="):
        assert f"\n{package}" in lock, package
    assert "transformers" not in lock and "pytest" not in lock and "playwright" not in lock
    readme = (built / "README.md").read_text()
    assert "make lab" in readme and "## Units" in readme and "{units}" not in readme
    assert "solutions/" not in readme and "make autograde" not in readme
    # the Makefile's set-up is this repository's, copied between the marks
    setup = re.search(r"^\$\(STAMP\):.*?^\t@touch \$@", (ROOT / "Makefile").read_text(),
                      flags=re.M | re.S).group(0)
    assert setup in (built / "Makefile").read_text()


def test_it_holds_nothing_of_the_graders(built):
    names = {p.name for p in built.rglob("*")}
    for secret in ("solutions", "course_grader", "course_publish", "tests", "gradebook.db", ".ci",
                   "jupyterhub_config.py", "environment.yml"):
        assert secret not in names, secret
    config = (built / "nbgrader_config.py").read_text()
    assert "course_grader" not in config and "SafeExecute" not in config
    assert edition.leaks(built, public=(built / "course_utils",)) == []
    # the release's notebooks are not the solution notebooks of the same name
    for unit in UNITS:
        nb = read(built / "exercises" / unit / f"{unit}.ipynb")
        assert not any("BEGIN SOLUTION" in c.source or "BEGIN HIDDEN" in c.source
                       for c in nb.cells)
        assert any(nbgrader_meta(c).get("solution") for c in nb.cells)


def test_the_leak_check_finds_a_hidden_line_and_a_solution_notebook(built, tmp_path):
    hidden = sorted(edition.hidden_test_lines())
    assert len(hidden) > 300, "every unit's hidden tests are checked"
    copy = tmp_path / "copy"
    shutil.copytree(built, copy, ignore=shutil.ignore_patterns(".venv"))
    lecture = copy / "lectures" / f"{LECTURE}.ipynb"
    nb = read(lecture)
    nb.cells.append(nbformat.v4.new_code_cell("x = 1\n    " + hidden[len(hidden) // 2] + "\n"))
    nbformat.write(nb, lecture)
    shutil.copy(ROOT / "solutions" / "05_self_attention" / "05_self_attention.ipynb",
                copy / "exercises" / "05_self_attention.ipynb")
    found = edition.leaks(copy, public=(copy / "course_utils",))
    assert any("lectures/" in f and "hidden-test line" in f for f in found), found
    assert any("05_self_attention.ipynb: a solution notebook" in f for f in found), found


def test_its_dependencies_are_the_instructors(built):
    with open(ROOT / "pyproject.toml", "rb") as f:
        instructor = set(tomllib.load(f)["project"]["dependencies"])
    with open(built / "pyproject.toml", "rb") as f:
        student = tomllib.load(f)["project"]
    assert set(student["dependencies"]) <= instructor
    assert student["name"] == "course-utils"


def test_make_student_edition_writes_the_folder_and_a_zip(tmp_path):
    out = tmp_path / "student"
    proc = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), "-m", "course_publish.edition",
                           "--out", str(out), "--zip"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "student edition in" in proc.stdout
    with zipfile.ZipFile(tmp_path / "student.zip") as archive:
        zipped = {n for n in archive.namelist() if not n.endswith("/")}
    assert zipped == {f"student/{p.relative_to(out)}" for p in out.rglob("*") if p.is_file()}
    # the size the instructors' guide quotes, within a quarter
    guide = (ROOT / "course_publish" / "guides" / "instructors.md").read_text()
    quoted = re.search(r"`dist/student\.zip` \(about ([\d.]+) MB\)", guide)
    assert quoted, "the instructors' guide no longer says how large the zip is"
    megabytes = (tmp_path / "student.zip").stat().st_size / 1e6
    assert abs(megabytes - float(quoted.group(1))) <= float(quoted.group(1)) / 4, \
        f"the zip has {megabytes:.1f} MB; the guide says {quoted.group(0)}"


def _run_notebook(python: Path, path: Path) -> nbformat.NotebookNode:
    """Execute `path` in place with the edition's own Jupyter, errors kept in the outputs."""
    proc = subprocess.run([str(python.parent / "jupyter"), "nbconvert", "--to", "notebook",
                           "--execute", "--inplace", "--allow-errors",
                           "--ExecutePreprocessor.timeout=600", str(path)],
                          cwd=path.parent, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return read(path)


def _errors(nb) -> dict[str, str]:
    return {nbgrader_meta(c).get("grade_id", str(i)): o.evalue
            for i, c in enumerate(nb.cells) for o in c.get("outputs", [])
            if o.output_type == "error"}


def test_it_installs_in_a_fresh_venv_and_runs_a_lecture_and_an_exercise(built):
    """`make setup` in the edition alone (its own .venv, from its requirements.lock); then a
    lecture runs there without error, the exercise solved passes its visible tests, and the
    exercise as released fails them. The set-up starts from a half-made venv, one without pip
    (what Debian's python3 leaves when python3-venv is missing), which it must make again."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(built / ".venv")],
                   check=True, timeout=120)
    proc = subprocess.run(["make", "setup"], cwd=built, capture_output=True, text=True,
                          timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    python = built / ".venv" / "bin" / "python"
    where = subprocess.run([str(python), "-c", "import course_utils; print(course_utils.__file__)"],
                           capture_output=True, text=True, cwd="/")
    assert where.stdout.startswith(str(built / "course_utils")), where
    imports = subprocess.run([str(python), "-c", "import course_grader"], capture_output=True,
                             text=True, cwd="/")
    assert imports.returncode != 0, "the grader's package is installed in the student edition"
    extensions = subprocess.run([str(built / ".venv" / "bin" / "jupyter"), "labextension",
                                 "list"], capture_output=True, text=True)
    assert re.search(r"Disabled extensions:.*@jupyter/nbgrader:formgrader",
                     extensions.stdout + extensions.stderr, flags=re.S)

    lecture = _run_notebook(python, built / "lectures" / f"{LECTURE}.ipynb")
    assert _errors(lecture) == {}

    folder = built / "exercises" / LECTURE
    released = folder / f"{LECTURE}.ipynb"
    answer = solved(released, LECTURE)
    nbformat.write(answer, folder / "solved.ipynb")
    graded = [nbgrader_meta(c)["grade_id"] for c in answer.cells
              if nbgrader_meta(c).get("grade") and c.cell_type == "code"]
    assert _errors(_run_notebook(python, folder / "solved.ipynb")) == {}
    untouched = _errors(_run_notebook(python, released))
    assert set(graded) <= set(untouched), "the unsolved release passed a visible test"
