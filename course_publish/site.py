"""The course as a website: an offline HTML book of every lecture and exercise.

    python -m course_publish.site [--out site]

writes a static book that a browser reads from the folder itself (file://) or from any web
server, with nothing fetched from the network:

* a home page: the README's introduction, its unit table and its notation;
* one page per lecture, `lectures/NN_*.ipynb`, with its stored outputs (never executed);
* one page per exercise, `exercises/NN_*/*.ipynb`: the student release (task text and visible
  tests), never `solutions/`;
* one page per guide, `course_publish/guides/*.md` (instructors, contributors, data), under
  the heading "Guides".

Every page starts with a note on how to open it in JupyterLab (`make lab`, the file's path),
and a notebook page links to the unit's other page (lecture to exercise and back); the
sidebar, the previous/next links and the search come with the theme. The table of contents is
made from the registry of units (course_utils/units.py) and the guides' folder, so a new unit
(its entry there, `lectures/10_*.ipynb`, `exercises/10_*/`) or a new guide gets its pages
without editing anything here; a notebook of no registered unit stops the build.

The book is built with Sphinx, myst-nb and sphinx-book-theme, the stack that jupyter-book 1.x
drives, called directly: jupyter-book 1.x caps myst-parser below 3, which needs an older
markdown-it-py than the course pins. Formulas are rendered in the browser by MathJax 3 (SVG
output: no web fonts) copied from the installed package `sphinx-mathjax-offline`; the theme
bundles its own scripts, styles and icons. A figure's alt text is the description its lecture
cell carries in `{"mystnb": {"image": {"alt": "..."}}}`.

`leaks(site)` lists every hidden-test or solution line that the built pages show; the build
refuses to finish when it finds one (see tests/course_publish/test_site.py).
"""

from __future__ import annotations

import argparse
import html.parser
import importlib.metadata as metadata
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import nbformat

from course_publish.edition import MIN_SECRET_LINE, hidden_test_lines
from course_utils import units as registered

__all__ = ["GUIDES", "Unit", "build", "guides", "leaks", "main", "page_text", "readme_section",
           "secret_lines", "units", "write_sources"]

ROOT = Path(__file__).resolve().parents[1]
GUIDES = ROOT / "course_publish" / "guides"
TITLE = "Attention, from a bag of words to BERT"
MATHJAX = "sphinx-mathjax-offline/static/mathjax/tex-svg-full.js"  # in that distribution


@dataclass(frozen=True)
class Unit:
    """One unit's pages: its number ("00"), its lecture and its exercise notebook."""

    number: str
    lecture: Path
    exercise: Path


def units(lectures: Path = ROOT / "lectures", exercises: Path = ROOT / "exercises",
          registry: tuple[registered.Unit, ...] = registered.UNITS) -> list[Unit]:
    """Every unit of `registry` (course_utils/units.py), in its order, with its lecture in
    `lectures` and its exercise in `exercises`. A RuntimeError names every registered notebook
    that is missing and every notebook of no registered unit."""
    problems = (registered.mismatches(lectures, "lecture", registry)
                + registered.mismatches(exercises, "exercise", registry))
    if problems:
        raise RuntimeError("the site's notebooks and course_utils/units.py disagree:\n  "
                           + "\n  ".join(problems))
    return [Unit(unit.number, lectures / unit.lecture.name,
                 exercises / unit.exercise.relative_to("exercises")) for unit in registry]


def guides(folder: Path = GUIDES) -> list[Path]:
    """The guides in `folder` (`*.md`), in the order of their file names."""
    return sorted(folder.glob("*.md"))


def readme_section(text: str, title: str) -> str:
    """The README's section `## title`, up to the next section of the same level."""
    match = re.search(rf"^## {re.escape(title)}\n.*?(?=^## |\Z)", text, flags=re.M | re.S)
    if match is None:
        raise RuntimeError(f"README.md has no section '## {title}'")
    return match.group(0).strip()


def _title(path: Path) -> str:
    """A notebook's first `# ` heading (its page title), or its file name."""
    for cell in nbformat.read(path, as_version=4).cells:
        if cell.cell_type == "markdown":
            for line in cell.source.splitlines():
                if line.startswith("# "):
                    return line[2:].strip()
    return path.stem


def _note(heading: str, body: str) -> str:
    return f"```{{admonition}} {heading}\n:class: tip\n\n{body}\n```\n"


def _lecture_note(unit: Unit) -> str:
    body = (f"Run `make lab` in the course folder, then open `lectures/{unit.lecture.name}`: "
            "it is stored with its outputs, so you can read it first and run it after "
            "(*Run → Run All Cells*).")
    link = f"../exercises/{unit.exercise.parent.name}/{unit.exercise.name}"
    body += f"\n\nThe exercise of this unit: [{_title(unit.exercise)}]({link})."
    return _note("Open this lecture in JupyterLab", body)


def _exercise_note(unit: Unit) -> str:
    path = f"exercises/{unit.exercise.parent.name}/{unit.exercise.name}"
    body = (f"Run `make lab` in the course folder, then open `{path}`. Fill in the cells marked "
            "`YOUR CODE HERE` and run the test cell under each; *Kernel → Restart Kernel and "
            "Run All Cells* runs them all.")
    body += (f"\n\nThe lecture of this unit: [{_title(unit.lecture)}]"
             f"(../../lectures/{unit.lecture.name}).")
    return _note("Work on this exercise in JupyterLab", body)


def _with_note(source: Path, note: str) -> nbformat.NotebookNode:
    """The notebook with `note` as a markdown cell right under its title (the `# ` line;
    the cell that holds it is split there), or first if it has none. The copy only."""
    nb = nbformat.read(source, as_version=4)
    for at, cell in enumerate(nb.cells):
        lines = cell.source.splitlines() if cell.cell_type == "markdown" else []
        title = next((i for i, line in enumerate(lines) if line.startswith("# ")), None)
        if title is not None:
            cell.source = "\n".join(lines[:title + 1])
            rest = "\n".join(lines[title + 1:]).strip("\n")
            after = [nbformat.v4.new_markdown_cell(rest)] if rest else []
            nb.cells[at + 1:at + 1] = [nbformat.v4.new_markdown_cell(note), *after]
            return nb
    nb.cells.insert(0, nbformat.v4.new_markdown_cell(note))
    return nb


def _unit_table(readme: str, found: list[Unit]) -> str:
    """The README's section "Units", each row's exercise column with a link to its page."""
    exercises = {unit.number: unit.exercise for unit in found}

    def link(row: re.Match) -> str:
        cells = row.group(0).split("|")
        path = exercises.get(cells[1].strip())
        if path is not None and len(cells) > 3:
            page = f"exercises/{path.parent.name}/{path.name}"
            cells[3] = f"{cells[3].rstrip()} ([exercise]({page})) "
        return "|".join(cells)

    return re.sub(r"^\| *\d+ *\|.*$", link, readme_section(readme, "Units"), flags=re.M)


def _home_page(readme: str, found: list[Unit]) -> str:
    intro = readme.split("\n## ", 1)[0].strip()
    note = _note("Open the course in JupyterLab",
                 "Run `make lab` in the course folder (the first time it sets everything up). "
                 "The lectures are in `lectures/`, the exercises in `exercises/<unit>/`, and "
                 "this page is `README.md`.")
    return "\n\n".join([intro, note, _unit_table(readme, found),
                        readme_section(readme, "Notation")]) + "\n"


def _guide_page(path: Path) -> str:
    """A guide's markdown with a note under its title (its first `# ` line) naming its file."""
    try:
        shown = path.resolve().relative_to(ROOT)
    except ValueError:
        shown = path
    note = _note("Open this guide in JupyterLab",
                 f"Run `make lab` in the course folder and open `{shown}` (right-click, "
                 "*Open With → Markdown Preview*, to read it formatted).")
    lines = path.read_text().splitlines()
    title = next((i for i, line in enumerate(lines) if line.startswith("# ")), None)
    if title is None:
        raise RuntimeError(f"{path} has no title (a first line '# ...')")
    return "\n".join([*lines[:title + 1], "", note, *lines[title + 1:]]) + "\n"


def _toc(pages: list[str], guide_pages: list[str]) -> str:
    return "\n".join(["```{toctree}", ":hidden:", ":maxdepth: 1", ":caption: Units", "",
                      *pages, "```", "", "```{toctree}", ":hidden:", ":maxdepth: 1",
                      ":caption: Guides", "", *guide_pages, "```", ""])


def _conf(static: Path) -> str:
    options = {"home_page_in_toc": True, "show_navbar_depth": 1, "show_toc_level": 2,
               "use_download_button": False, "use_fullscreen_button": False,
               "use_repository_button": False, "navigation_with_keys": False}
    settings = {
        "project": TITLE, "html_title": TITLE, "author": "the course",
        "extensions": ["myst_nb"], "html_theme": "sphinx_book_theme",
        "html_theme_options": options, "html_static_path": [str(static)],
        "mathjax_path": "mathjax/tex-svg-full.js", "nb_execution_mode": "off",
        "myst_enable_extensions": ["dollarmath", "amsmath"], "myst_heading_anchors": 3,
        "html_copy_source": False, "html_show_sourcelink": False, "language": "en",
        "exclude_patterns": ["**.ipynb_checkpoints"],
        # a figure is an output of its cell; "image" and "mime" would flag every ipywidgets
        # fallback and the few outputs that have no text form
        "suppress_warnings": ["mystnb.unknown_mime_type"],
    }
    return "".join(f"{name} = {value!r}\n" for name, value in settings.items())


def _mathjax() -> Path:
    """MathJax 3's single-file TeX-to-SVG build, from the installed sphinx-mathjax-offline."""
    try:
        path = Path(metadata.distribution("sphinx-mathjax-offline").locate_file(MATHJAX))
    except metadata.PackageNotFoundError:
        path = None
    if path is None or not path.is_file():
        raise RuntimeError("MathJax not found: install sphinx-mathjax-offline (make setup "
                           "installs it from requirements.lock)")
    return path


def write_sources(src: Path, found: list[Unit], readme: str, guide_files: list[Path]
                  ) -> list[str]:
    """The book's sources in `src`: conf.py, index.md (with the table of contents, from
    `found` and `guide_files`), a copy of every notebook and of every guide with its note.
    Returns the pages in reading order, as Sphinx names them."""
    pages = []
    for unit in found:
        (src / "lectures").mkdir(parents=True, exist_ok=True)
        nbformat.write(_with_note(unit.lecture, _lecture_note(unit)),
                       src / "lectures" / unit.lecture.name)
        pages.append(f"lectures/{unit.lecture.stem}")
        folder = src / "exercises" / unit.exercise.parent.name
        folder.mkdir(parents=True, exist_ok=True)
        nbformat.write(_with_note(unit.exercise, _exercise_note(unit)),
                       folder / unit.exercise.name)
        pages.append(f"exercises/{unit.exercise.parent.name}/{unit.exercise.stem}")
    guide_pages = []
    for path in guide_files:
        (src / "guides").mkdir(exist_ok=True)
        (src / "guides" / path.name).write_text(_guide_page(path))
        guide_pages.append(f"guides/{path.stem}")
    (src / "index.md").write_text(_home_page(readme, found) + "\n" + _toc(pages, guide_pages))
    mathjax = _mathjax()
    (src / "_mathjax" / "mathjax").mkdir(parents=True)
    shutil.copy2(mathjax, src / "_mathjax" / "mathjax" / mathjax.name)
    (src / "conf.py").write_text(_conf(src / "_mathjax"))
    return ["index", *pages, *guide_pages]


class _Text(html.parser.HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self.skip = 0

    def handle_starttag(self, tag, attrs):
        self.skip += tag in ("script", "style")

    def handle_endtag(self, tag):
        self.skip -= tag in ("script", "style") and self.skip > 0

    def handle_data(self, data):
        if not self.skip:
            self.parts.append(data)


def page_text(path: Path) -> str:
    """What a reader sees of an HTML page: its text, without tags, scripts and styles."""
    parser = _Text()
    parser.feed(path.read_text(errors="replace"))
    return "".join(parser.parts)


def _public_text() -> str:
    """Everything a student may read anyway: the lectures (sources and outputs) and the
    release. Not README nor the guides: they are pages of the site, checked like the rest."""
    texts = []
    for path in sorted(ROOT.glob("lectures/*.ipynb")) + sorted(ROOT.glob("exercises/*/*.ipynb")):
        texts.append(path.read_text())   # JSON: the sources and every output, escaped
        texts += [cell.source for cell in nbformat.read(path, as_version=4).cells]
    return "\n".join(texts)


def secret_lines(solutions: Path = ROOT / "solutions") -> set[str]:
    """The lines a page must never show: every hidden-test line (edition.hidden_test_lines)
    and every line of solution code between BEGIN and END SOLUTION, at least 16 characters
    long and found nowhere in what students read anyway (a solution may share a line with
    its lecture)."""
    lines = set(hidden_test_lines(solutions))
    for path in sorted(solutions.glob("*/*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            for block in re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", cell.source,
                                    flags=re.S):
                lines.update(line.strip() for line in block.splitlines())
    public = _public_text()
    return {line for line in lines if len(line) >= MIN_SECRET_LINE and line not in public}


def leaks(site: Path, secrets: set[str] | None = None) -> list[str]:
    """Every secret line (`secret_lines()`) that a page of `site` shows, as
    "page: line"; empty when the site is fit for students."""
    secrets = secret_lines() if secrets is None else secrets
    found = []
    for path in sorted(site.rglob("*.html")):
        text = page_text(path)
        found += [f"{path.relative_to(site)}: {line!r}" for line in sorted(secrets)
                  if line in text]
    return found


def build(out: Path, lectures: Path = ROOT / "lectures", exercises: Path = ROOT / "exercises",
          readme: Path = ROOT / "README.md", guides_folder: Path = GUIDES,
          registry: tuple[registered.Unit, ...] = registered.UNITS) -> Path:
    """Build the book of the units of `registry`, from their notebooks in `lectures` and
    `exercises`, and of the guides in `guides_folder`, into `out` (replaced if it exists) and
    return it. Refuses to finish if a page shows a secret line."""
    out = Path(out)
    found = units(lectures, exercises, registry)
    if not found:
        raise RuntimeError("course_utils/units.py lists no unit")
    with tempfile.TemporaryDirectory(prefix="course-site-") as work:
        src, html_dir = Path(work) / "src", Path(work) / "html"
        src.mkdir()
        write_sources(src, found, readme.read_text(), guides(guides_folder))
        proc = subprocess.run([sys.executable, "-m", "sphinx", "-b", "html", "-q", str(src),
                               str(html_dir)], capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            raise RuntimeError(f"sphinx-build failed:\n{proc.stdout}\n{proc.stderr}")
        if proc.stderr.strip():
            print(proc.stderr.strip().replace(str(src) + "/", ""), file=sys.stderr)
        problems = leaks(html_dir)
        if problems:
            raise RuntimeError("the site would give away:\n  " + "\n  ".join(problems))
        shutil.rmtree(html_dir / ".doctrees", ignore_errors=True)
        if (html_dir / "_sources").is_dir() and not any((html_dir / "_sources").iterdir()):
            (html_dir / "_sources").rmdir()   # html_copy_source is off: Sphinx leaves it empty
        (html_dir / ".buildinfo").unlink(missing_ok=True)
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(html_dir, out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m course_publish.site",
                                     description="Build the course as an offline HTML book.")
    parser.add_argument("--out", default=str(ROOT / "site"),
                        help="where to write the book (default: site/)")
    opts = parser.parse_args(argv)
    start = time.perf_counter()
    out = build(Path(opts.out))
    files = [p for p in out.rglob("*") if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    pages = len([p for p in files if p.suffix == ".html" and "_static" not in p.parts])
    print(f"site in {out}: {pages} pages, {len(files)} files, {size / 1e6:.1f} MB, "
          f"built in {time.perf_counter() - start:.1f} s; open {out / 'index.html'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
