"""Feedback a student can read: formulas typeset with no network, a score line per task.

`nbgrader generate_feedback` (`make feedback`) renders each autograded notebook with
`FeedbackExporter` (set in nbgrader_config.py), nbgrader's feedback page with two changes:

* **Formulas.** The page carries its own MathJax 3 (the single-file TeX-to-SVG build, which
  needs no font files, from the installed `sphinx-mathjax-offline`, and its Safe extension),
  gzip-compressed and base64-encoded inside the page; the browser unpacks it
  (DecompressionStream) and typesets. Nothing is fetched from anywhere, so the page works the
  same wherever the student opens it: from disk, from JupyterLab (*Open in New Browser Tab*,
  or the HTML viewer once trusted), after nbgrader's exchange (which copies the HTML file
  alone) or from an LMS. It adds about 0.95 MB to each page. The Safe extension makes
  MathJax drop every link but http(s) and file ones (a student's `\\href{javascript:...}`),
  classes and ids not its own, and styles but a few harmless ones (colours, borders), behind
  course_grader.sanitize, which already takes such commands out of a submission's markdown.
* **Score lines named by task.** nbgrader labels every test cell's line "Test cell". An
  exercise's last cell lists its tasks, `grading.summary("softmax", "weighted_average", ...)`,
  the functions the student writes; a test cell's task is the one whose name its visible code
  reads (as Validate counts it, course_utils.grading.validation), so its line reads
  "softmax — softmax_basic (2 / 2)". A cell that reads several tasks names them all; one that
  reads none, or a notebook without a summary cell, shows the cell's id alone.

The page's template is `feedback_templates/feedback/by_task.html.j2` (it extends nbgrader's
feedback template and replaces only the score list at its top) and the MathJax macro beside it.
"""

from __future__ import annotations

import ast
import base64
import functools
import gzip
from importlib import metadata
from pathlib import Path

from nbformat import NotebookNode
from traitlets import default

from course_grader.nbgrader_hooks import hidden_line_numbers
from course_grader.sanitize import SafeHTMLExporter

__all__ = ["MATHJAX_FILES", "FeedbackExporter", "mathjax_payload", "summary_tasks",
           "tasks_of_test_cells"]

MATHJAX_PACKAGE = "sphinx-mathjax-offline"
# MathJax 3.2's TeX-to-SVG build with every TeX package, then its Safe extension (run in the
# same script, it joins the handler before MathJax starts)
MATHJAX_FILES = ("sphinx-mathjax-offline/static/mathjax/tex-svg-full.js",
                 "sphinx-mathjax-offline/static/mathjax/ui/safe.js")
HIDDEN = ("BEGIN HIDDEN TESTS", "END HIDDEN TESTS")


@functools.cache
def mathjax_payload() -> str:
    """MathJax and its Safe extension, one script gzip-compressed and base64-encoded (the
    same bytes on every call: no time in the gzip header)."""
    try:
        dist = metadata.distribution(MATHJAX_PACKAGE)
    except metadata.PackageNotFoundError:
        dist = None
    paths = [Path(dist.locate_file(name)) for name in MATHJAX_FILES] if dist else []
    if not paths or not all(path.is_file() for path in paths):
        raise RuntimeError(f"MathJax for feedback not found: install {MATHJAX_PACKAGE} (make "
                           "setup installs it from requirements.lock)")
    script = b"\n;\n".join(path.read_bytes() for path in paths)
    return base64.b64encode(gzip.compress(script, compresslevel=9, mtime=0)).decode("ascii")


def _parse(source: str) -> ast.Module | None:
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, TypeError, RecursionError, MemoryError):
        return None


def summary_tasks(nb: NotebookNode) -> tuple[str, ...]:
    """The tasks that the notebook's `grading.summary(...)` cell lists (() if none does)."""
    for cell in nb.get("cells", []):
        source = cell.get("source", "")
        if cell.get("cell_type") != "code" or "summary" not in source:
            continue
        for node in ast.walk(_parse(source) or ast.Module(body=[], type_ignores=[])):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "summary" and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "grading"):
                names = [arg.value for arg in node.args if isinstance(arg, ast.Constant)]
                return tuple(n for n in names if isinstance(n, str) and n.isidentifier())
    return ()


def tasks_of_test_cells(nb: NotebookNode) -> dict[str, list[str]]:
    """For each graded test cell (by grade id), the tasks whose names its visible code reads,
    in the summary's order."""
    tasks = summary_tasks(nb)
    found: dict[str, list[str]] = {}
    for cell in nb.get("cells", []):
        meta = cell.get("metadata", {}).get("nbgrader", {})
        source = cell.get("source", "")
        if cell.get("cell_type") != "code" or not meta.get("grade") or meta.get("solution"):
            continue
        hidden = hidden_line_numbers(source, *HIDDEN)
        visible = "\n".join(line for number, line in enumerate(source.splitlines(), 1)
                            if number not in hidden)
        tree = _parse(visible)
        read = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)} if tree else set()
        found[str(meta.get("grade_id"))] = [task for task in tasks if task in read]
    return found


class FeedbackExporter(SafeHTMLExporter):
    """nbgrader's feedback page with formulas typeset offline and score lines named by task
    (see the module docstring); a notebook that cannot be rendered still gets
    SafeHTMLExporter's page that says so."""

    @default("template_file")
    def _template_file_default(self):
        return "by_task.html.j2"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        mathjax_payload()   # a missing MathJax stops generate_feedback at once, saying why

    def _create_environment(self):
        environment = super()._create_environment()
        environment.globals["course_mathjax_payload"] = mathjax_payload
        return environment

    def from_notebook_node(self, nb, resources=None, **kw):
        resources = dict(resources or {})
        resources["course_tasks"] = tasks_of_test_cells(nb)
        return super().from_notebook_node(nb, resources, **kw)
