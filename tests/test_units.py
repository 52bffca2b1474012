"""The registry of units (course_utils/units.py) against every place that lists a unit: each
check below says how one place and the registry disagree (a unit missing there, or a unit
there that the registry does not list), and each is shown to catch a unit removed from the
registry and a unit 10 added to it. The contributors' guide's "Adding a unit" names every one
of these places."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT
from conftest import UNITS as TESTED_UNITS

from course_publish import edition, site
from course_utils.units import UNITS, Unit, mismatches, named, require_sequence

Check = Callable[[Path, tuple[Unit, ...]], list[str]]
SHIPPED_NAME = r"""["']([\w.-]+\.safetensors)["']"""
UNIT_NUMBERS = r"\bunits? (\d\d)(?:[-–](\d\d))?"   # "unit 05", "units 02-06", "units 05–09"
OWNERS = r"^units? (\d\d)(?:[-–](\d\d))?\b"        # a map entry that begins so is theirs


def numbers_named(text: str) -> set[str]:
    """Every unit number that `text` names, the ends of a range included."""
    return {n for pair in re.findall(UNIT_NUMBERS, text) for n in pair if n}


def first_heading(path: Path) -> str | None:
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line
    return None


def disagreement(place: str, found: list, expected: list) -> list[str]:
    """What `place` lacks of `expected` (the registry's) and holds besides, or that it holds
    them in another order; empty when the two lists are equal."""
    if found == expected:
        return []
    missing = [str(x) for x in expected if x not in found]
    extra = [str(x) for x in found if x not in expected]
    return ([f"{place} lack {missing}"] if missing else []) + (
        [f"{place} hold {extra}, which course_utils/units.py does not list"] if extra else []
    ) or [f"{place} are not in course_utils/units.py's order"]


# ----------------------------------------------------------------------------- the places

def lectures_folder(root: Path, units: tuple[Unit, ...]) -> list[str]:
    """lectures/ holds one notebook per unit, and its first heading is `# Unit NN — title`."""
    problems = mismatches(root / "lectures", "lecture", units)
    for unit in units:
        path = root / unit.lecture
        expected = f"# Unit {unit.number} — {unit.title}"
        if path.exists() and first_heading(path) != expected:
            problems.append(f"{unit.lecture}'s first heading is {first_heading(path)!r}, "
                            f"not {expected!r}")
    return problems


def notebook_folder(kind: str) -> Check:
    """exercises/ or solutions/ holds NN_slug/NN_slug.ipynb per unit, headed `# Exercise NN`."""
    def check(root: Path, units: tuple[Unit, ...]) -> list[str]:
        problems = mismatches(root / f"{kind}s", kind, units)
        for unit in units:
            path = root / getattr(unit, kind)
            heading = first_heading(path) if path.exists() else None
            if heading is not None and not heading.startswith(f"# Exercise {unit.number} — "):
                problems.append(f"{getattr(unit, kind)}'s first heading is {heading!r}, not "
                                f"'# Exercise {unit.number} — ...'")
        return problems
    return check


def readme(root: Path, units: tuple[Unit, ...]) -> list[str]:
    """README's Units table has one row per unit, in order, its link the unit's title and
    lecture; its Notation table names no unit that is not registered."""
    text = (root / "README.md").read_text()
    rows = re.findall(r"^\| *(\d+) *\|(.*)$", site.readme_section(text, "Units"), flags=re.M)
    expected = [unit.number for unit in units]
    problems = disagreement("README.md's Units table's rows", [n for n, _ in rows], expected)
    for number, rest in rows:
        link = re.match(r" *\[([^\]]+)\]\(([^)]+)\)", rest)
        unit = next((u for u in units if u.number == number), None)
        if unit is not None and (link is None or link.groups() != (unit.title, str(unit.lecture))):
            problems.append(f"README.md's row {number} links {link and link.group(0).strip()!r},"
                            f" not '[{unit.title}]({unit.lecture})'")
    unknown = numbers_named(site.readme_section(text, "Notation")) - set(expected)
    if unknown:
        problems.append(f"README.md's Notation table names units {sorted(unknown)}, which "
                        "course_utils/units.py does not list")
    return problems


def site_pages(root: Path, units: tuple[Unit, ...]) -> list[str]:
    """The website's units (course_publish.site.units): every unit's lecture and exercise."""
    try:
        found = [(u.number, u.lecture, u.exercise) for u in site.units()]
    except RuntimeError as error:
        return [f"course_publish.site.units(): {error}"]
    expected = [(u.number, root / u.lecture, root / u.exercise) for u in units]
    return disagreement("the units of course_publish.site.units()",
                        [n for n, *_ in found], [n for n, *_ in expected]) or disagreement(
        "the notebooks of course_publish.site.units()", found, expected)


def student_edition(root: Path, units: tuple[Unit, ...]) -> list[str]:
    """What the student edition copies of the units (course_publish.edition.unit_files)."""
    try:
        found = edition.unit_files()
    except RuntimeError as error:
        return [f"course_publish.edition.unit_files(): {error}"]
    expected = [path for unit in units for path in (unit.lecture, unit.exercise.parent)]
    return disagreement("the files of course_publish.edition.unit_files()", found, expected)


def make_units(root: Path) -> list[str]:
    """The Makefile's UNITS, as make expands them in `root`."""
    env = {k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MAKELEVEL", "MFLAGS")}
    proc = subprocess.run(["make", "-s", "--no-print-directory", "--eval",
                           "print-units: ; @echo $(UNITS)", "print-units"],
                          cwd=root, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def makefile(root: Path, units: tuple[Unit, ...]) -> list[str]:
    """The Makefile's UNITS (make release, autograde, feedback) are the units' names."""
    return disagreement("the Makefile's UNITS", make_units(root), [unit.name for unit in units])


def conftest_units(root: Path, units: tuple[Unit, ...]) -> list[str]:
    """tests/conftest.py's UNITS (test_release, test_validate, test_autograde, test_lab)."""
    return disagreement("tests/conftest.py's UNITS", TESTED_UNITS, [unit.name for unit in units])


def lecture_specs(root: Path, units: tuple[Unit, ...]) -> list[str]:
    """tests/notebooks/lecture_specs/ holds one module per unit, named as the unit's `spec`."""
    folder = root / "tests" / "notebooks" / "lecture_specs"
    found = {p.stem for p in folder.glob("*.py") if p.name != "__init__.py"}
    expected = {unit.spec.split(".")[-1] for unit in units}
    return ([f"tests/notebooks/lecture_specs/{name}.py is missing (unit {name[-2:]} in "
             "course_utils/units.py)" for name in sorted(expected - found)]
            + [f"tests/notebooks/lecture_specs/{name}.py belongs to no unit of "
               "course_utils/units.py" for name in sorted(found - expected)])


def owners(entry: str) -> list[str]:
    """The units a map entry gives its module to: "unit 05: ..." -> 05, "units 02-06" -> 02
    to 06; none if it begins otherwise."""
    found = re.match(OWNERS, entry)
    if found is None:
        return []
    first, last = found.groups()
    return [f"{n:02d}" for n in range(int(first), int(last or first) + 1)]


def module_map(root: Path, units: tuple[Unit, ...]) -> list[str]:
    """course_utils/__init__.py's map: each of a unit's modules has an entry that begins with
    the unit's number ("unit 05:", "units 02-06"), an entry that begins so is in that unit's
    `modules`, and every unit number the map names is registered."""
    doc = ast.get_docstring(ast.parse((root / "course_utils" / "__init__.py").read_text()))
    entries = dict(re.findall(r"^    (\w+) +(\S.*)$", doc, flags=re.M))
    by_number = {unit.number: unit for unit in units}
    problems = [f"course_utils/__init__.py's map has no entry for {module} that begins 'unit "
                f"{unit.number}' (its module in course_utils/units.py)"
                for unit in units for module in unit.modules
                if unit.number not in owners(entries.get(module, ""))]
    problems += [f"course_utils/__init__.py's map gives {module} to unit {number}, whose "
                 "`modules` in course_utils/units.py lack it"
                 for module, entry in entries.items() for number in owners(entry)
                 if number in by_number and module not in by_number[number].modules]
    unknown = numbers_named(doc) - set(by_number)
    if unknown:
        problems.append(f"course_utils/__init__.py's map names units {sorted(unknown)}, which "
                        "course_utils/units.py does not list")
    return problems


def lecture_imports(path: Path) -> set[str]:
    """The course_utils modules (top level) that a lecture's code cells import."""
    found = set()
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type != "code":
            continue
        source = "\n".join(line for line in cell.source.splitlines()
                           if not line.lstrip().startswith(("%", "!")))
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.ImportFrom) and node.module == "course_utils":
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
                    "course_utils."):
                found.add(node.module.split(".")[1])
            elif isinstance(node, ast.Import):
                found |= {a.name.split(".")[1] for a in node.names
                          if a.name.startswith("course_utils.")}
    return found


def shipped_files(root: Path, units: tuple[Unit, ...]) -> list[str]:
    """course_utils/data/: every shipped file is a unit's, every unit's file is there, and a
    unit's lecture imports a module that names each of its files (and, of each module it
    imports that names shipped files, reads at least one)."""
    data = root / "course_utils" / "data"
    listed = {file for unit in units for file in unit.shipped}
    present = {path.name for path in data.glob("*.safetensors")}
    problems = [f"course_utils/data/{name} belongs to no unit of course_utils/units.py"
                for name in sorted(present - listed)]
    for unit in units:
        problems += [f"course_utils/data/{file} is missing (unit {unit.number} reads it)"
                     for file in unit.shipped if not (data / file).exists()]
        if not (root / unit.lecture).exists():
            continue
        names = {}   # module the lecture imports -> the shipped files its source names
        for module in lecture_imports(root / unit.lecture):
            source = root / "course_utils" / f"{module}.py"
            if source.exists():
                # a name of course_utils/data/ (bert.py names MiniLM's model.safetensors)
                names[module] = set(re.findall(SHIPPED_NAME, source.read_text())) & (
                    present | listed)
        for file in unit.shipped:
            if not any(file in files for files in names.values()):
                problems.append(f"{unit.lecture} imports no module that reads {file}")
        for module, files in names.items():
            if files and not files & set(unit.shipped):
                problems.append(f"{unit.lecture} imports {module}, which reads {sorted(files)}: "
                                f"none is in unit {unit.number}'s `shipped`")
    return problems


# the place as the guide names it -> how it and the registry disagree
PLACES: dict[str, Check] = {
    "lectures/": lectures_folder,
    "solutions/": notebook_folder("solution"),
    "exercises/": notebook_folder("exercise"),
    "README.md": readme,
    "course_publish/site.py": site_pages,
    "course_publish/edition.py": student_edition,
    "Makefile": makefile,
    "tests/conftest.py": conftest_units,
    "tests/notebooks/lecture_specs/": lecture_specs,
    "course_utils/__init__.py": module_map,
    "course_utils/data/": shipped_files,
}

UNIT_10 = Unit("10", "retrieval", "Retrieval and attention", modules=("retrieval",),
               shipped=("retrieval.safetensors",))


@pytest.mark.parametrize("place", PLACES)
def test_the_place_lists_every_unit_of_the_registry_and_no_other(place):
    problems = PLACES[place](ROOT, UNITS)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("place", PLACES)
@pytest.mark.parametrize("change", ["unit 09 removed", "unit 10 added"])
def test_each_check_catches_a_unit_removed_from_or_added_to_the_registry(place, change):
    """A control: against a registry without unit 09 (which has modules and shipped files),
    or with a unit 10 that exists nowhere, every place disagrees, and says so."""
    changed = UNITS[:-1] if change == "unit 09 removed" else (*UNITS, UNIT_10)
    new = set(PLACES[place](ROOT, changed)) - set(PLACES[place](ROOT, UNITS))
    assert new, f"{place} did not notice {change}"


@pytest.mark.parametrize(("place", "units", "expected"), [
    ("lectures/", (*UNITS[:4], replace(UNITS[4], title="Score functions"), *UNITS[5:]),
     "04_attention_variants.ipynb's first heading"),
    ("README.md", (*UNITS[:4], replace(UNITS[4], title="Score functions"), *UNITS[5:]),
     "row 04 links"),
    ("course_utils/__init__.py",
     (*UNITS[:6], replace(UNITS[6], modules=("transformer", "translator")), *UNITS[7:]),
     "gives decoding to unit 06"),
    ("course_utils/__init__.py",
     (*UNITS[:2], replace(UNITS[2], modules=(*UNITS[2].modules, "bow")), *UNITS[3:]),
     "no entry for bow that begins 'unit 02'"),
    ("course_utils/data/",
     (*UNITS[:5], replace(UNITS[5], shipped=("score_functions.safetensors",)), *UNITS[6:]),
     "05_self_attention.ipynb imports no module that reads score_functions"),
    ("course_utils/data/",
     (*UNITS[:9], replace(UNITS[9], shipped=("grouped_query.safetensors",))),
     "long_inputs.safetensors belongs to no unit"),
    ("course_utils/data/", (UNITS[0], replace(UNITS[1], shipped=()), *UNITS[2:]),
     "imports shipped_bow, which reads ['bow_positions.safetensors']"),
])
def test_a_check_names_what_disagrees(place, units, expected):
    """Controls on one entry: a title, a module or a shipped file changed in the registry."""
    problems = PLACES[place](ROOT, units)
    assert any(expected in problem for problem in problems), problems


def test_the_makefile_reads_the_registry_not_the_folders(tmp_path):
    """A copy of the Makefile beside a copy of the registry from which unit 09 is dropped, and
    no lectures/, exercises/ or solutions/ at all: make's UNITS follow the registry."""
    shutil.copy(ROOT / "Makefile", tmp_path / "Makefile")
    (tmp_path / "course_utils").mkdir()
    source = (ROOT / "course_utils" / "units.py").read_text()
    assert source.count("\ndef main(") == 1
    (tmp_path / "course_utils" / "units.py").write_text(
        source.replace("\ndef main(", "\nUNITS = UNITS[:-1]\n\n\ndef main("))
    assert make_units(tmp_path) == [unit.name for unit in UNITS[:-1]]
    assert makefile(tmp_path, UNITS) == ["the Makefile's UNITS lack ['09_attention_at_scale']"]


def test_the_site_and_the_edition_refuse_a_notebook_of_no_unit(tmp_path, monkeypatch):
    """A lecture that is no registered unit's, or a registered unit without its exercise,
    stops the site and the edition with the file named."""
    shutil.copytree(ROOT / "lectures", tmp_path / "lectures",
                    ignore=shutil.ignore_patterns("0[1-9]_*"))
    shutil.copytree(ROOT / "exercises" / "00_attention_as_lookup",
                    tmp_path / "exercises" / "00_attention_as_lookup")
    one = UNITS[:1]
    assert [u.number for u in site.units(tmp_path / "lectures", tmp_path / "exercises", one)] \
        == ["00"]
    monkeypatch.setattr(edition, "ROOT", tmp_path)
    assert edition.unit_files(one) == [one[0].lecture, one[0].exercise.parent]
    stray = tmp_path / "lectures" / "10_retrieval.ipynb"
    shutil.copy(tmp_path / "lectures" / "00_attention_as_lookup.ipynb", stray)
    refused = "lectures/10_retrieval.ipynb belongs to no unit of course_utils/units.py"
    with pytest.raises(RuntimeError, match=re.escape(refused)):
        site.units(tmp_path / "lectures", tmp_path / "exercises", one)
    with pytest.raises(RuntimeError, match=re.escape(refused)):
        edition.unit_files(one)
    stray.unlink()
    two = (*one, replace(UNIT_10, number="01"))   # registered, but no notebook of it
    missing = "exercises/01_retrieval/01_retrieval.ipynb is missing (unit 01 in"
    with pytest.raises(RuntimeError, match=re.escape(missing)):
        site.units(tmp_path / "lectures", tmp_path / "exercises", two)
    with pytest.raises(RuntimeError, match=re.escape(missing)):
        edition.unit_files(two)


def test_a_bad_entry_is_refused_with_what_was_expected():
    with pytest.raises(ValueError, match="two digits"):
        Unit("1", "retrieval", "Retrieval")
    with pytest.raises(ValueError, match="lowercase letters"):
        Unit("10", "Retrieval", "Retrieval")
    with pytest.raises(ValueError, match="course_utils/data"):
        Unit("10", "retrieval", "Retrieval", shipped=("data/retrieval.safetensors",))
    with pytest.raises(ValueError, match="expected 09 at position 9, found unit 10"):
        require_sequence((*UNITS[:-1], UNIT_10))
    with pytest.raises(ValueError, match=r"shared: \['bert'\]"):
        require_sequence((*UNITS, replace(UNITS[7], number="10")))
    assert named("03") is named("03_attention_seq2seq") is UNITS[3]
    with pytest.raises(ValueError, match="no unit '10'"):
        named("10")


def guide_section() -> str:
    text = (ROOT / "course_publish" / "guides" / "contributors.md").read_text()
    return site.readme_section(text, "Adding a unit")


def test_adding_a_unit_names_every_place_the_registry_is_checked_against():
    section = guide_section()
    assert "`course_utils/units.py`" in section and "`tests/test_units.py`" in section
    missing = [place for place in PLACES if place not in section]
    assert not missing, f"the guide's 'Adding a unit' does not name {missing}"


def test_each_step_of_adding_a_unit_names_its_file():
    steps = re.findall(r"^\d+\. (.*?)(?=^\d+\. |^$)", guide_section(), flags=re.M | re.S)
    assert len(steps) >= 8
    path = r"`[^`\s]*(?:/|\.py|\.ipynb|\.md)[^`\s]*`"
    for step in steps:
        assert re.search(path, step), f"a step names no file: {step!r}"
    with_the_registry = ["lectures/", "solutions/", "exercises/", "README.md",
                         "tests/notebooks/lecture_specs/", "course_utils/__init__.py",
                         "course_utils/data/", "course_utils/units.py"]
    for place in with_the_registry:   # what a contributor edits, each in a numbered step
        assert any(place in step for step in steps), place
