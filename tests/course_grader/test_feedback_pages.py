"""Feedback a student can read (course_grader/feedback.py, feedback_templates/feedback/): a
graded submission's feedback page, opened in Chromium offline from disk (every request that
is not file:// blocked and recorded) and through JupyterLab, typesets its formulas with the
MathJax it carries, names every score line by its task, and makes no javascript: link of a
student's \\href. nbgrader's own page (the control, rendered from the same notebook) shows raw
TeX and "Test cell" lines."""

from __future__ import annotations

import base64
import gzip
import re
import shutil
from html.parser import HTMLParser
from importlib import metadata
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT, UNITS, jupyter, nbgrader_meta, read, run_nbgrader, solved

from course_grader import feedback
from course_grader.feedback import (
    FeedbackExporter,
    mathjax_payload,
    summary_tasks,
    tasks_of_test_cells,
)

UNIT = "00_attention_as_lookup"
NOTEBOOK = f"{UNIT}.ipynb"
STUDENT = "1234"
TOKEN = "feedback-pages-token"
PAGE = Path("feedback") / STUDENT / UNIT / f"{UNIT}.html"
BEFORE = Path("feedback_nbgrader") / STUDENT / UNIT / f"{UNIT}.html"
# the student solved part 1 (softmax) only
ROWS = ["softmax — softmax_basic (2 / 2)", "softmax — softmax_stable (1 / 1)",
        "weighted_average — weighted_average_single (0 / 1)",
        "weighted_average — weighted_average_batch (0 / 2)",
        "soft_lookup — soft_lookup_sharp (0 / 1)", "soft_lookup — soft_lookup_mean (0 / 2)"]
HOSTILE = ("My notes: $\\href{javascript:alert(7)}{x^2}$ links nowhere, and "
           "$\\alpha_j = \\mathrm{softmax}(e)_j$ is typeset.")


@pytest.fixture(scope="module")
def course(fresh_course, tmp_path_factory) -> Path:
    """Unit 00 graded for a student who solved part 1 and wrote a markdown cell with a hostile
    \\href; feedback made with the course's exporter and, as the control, nbgrader's page
    (SafeHTMLExporter with nbgrader's feedback template) in feedback_nbgrader/."""
    course = tmp_path_factory.mktemp("feedback-pages")
    shutil.copytree(fresh_course, course, dirs_exist_ok=True)
    nb = solved(course / "exercises" / UNIT / NOTEBOOK, UNIT, {"softmax_solution"})
    nb.cells.insert(1, nbformat.v4.new_markdown_cell(HOSTILE))
    (course / "submitted" / STUDENT / UNIT).mkdir(parents=True)
    nbformat.write(nb, course / "submitted" / STUDENT / UNIT / NOTEBOOK)
    run_nbgrader("autograde", UNIT, "--force", cwd=course)
    run_nbgrader("generate_feedback", UNIT, "--force", cwd=course)
    run_nbgrader("generate_feedback", UNIT, "--force",
                 "--GenerateFeedback.exporter_class=course_grader.sanitize.SafeHTMLExporter",
                 "--CourseDirectory.feedback_directory=feedback_nbgrader", cwd=course)
    return course


class _ScoreList(HTMLParser):
    """The text of each <li> of the page's score list (<ol id="toc"> or <div id="toc">)."""

    def __init__(self):
        super().__init__()
        self.rows: list[str] = []
        self._in_toc = self._in_row = False

    def handle_starttag(self, tag, attrs):
        if dict(attrs).get("id") == "toc":
            self._in_toc = True
        elif self._in_toc and tag == "li":
            self._in_row = True
            self.rows.append("")

    def handle_endtag(self, tag):
        if tag in ("ol", "div") and self._in_toc and not self._in_row:
            self._in_toc = False
        elif tag == "li":
            self._in_row = False

    def handle_data(self, data):
        if self._in_row:
            self.rows[-1] += data


def score_rows(html: str) -> list[str]:
    parser = _ScoreList()
    parser.feed(html)
    return [" ".join(row.split()) for row in parser.rows if "comment" not in row.lower()]


def test_each_score_line_names_its_task(course):
    assert score_rows((course / PAGE).read_text()) == ROWS
    # nbgrader's page: every line the same
    assert score_rows((course / BEFORE).read_text()) == ["Test cell (Score: 2.0 / 2.0)",
                                                         "Test cell (Score: 1.0 / 1.0)"] + [
        f"Test cell (Score: 0.0 / {p}.0)" for p in (1, 2, 1, 2)]


def test_every_units_test_cells_are_named_by_their_tasks():
    """In every unit, each graded test cell reads at least one task of its summary cell; a
    cell that tests several (unit 02's training run) names them all."""
    for unit in UNITS:
        nb = read(ROOT / "solutions" / unit / f"{unit}.ipynb")
        tasks = summary_tasks(nb)
        assert tasks, f"{unit} has no grading.summary cell"
        named = tasks_of_test_cells(nb)
        test_cells = [nbgrader_meta(c)["grade_id"] for c in nb.cells
                      if nbgrader_meta(c).get("grade") and not nbgrader_meta(c).get("solution")]
        assert sorted(named) == sorted(test_cells), unit
        assert all(named[cell] for cell in test_cells), (unit, named)
    unit02 = read(ROOT / "solutions" / "02_seq2seq_rnn" / "02_seq2seq_rnn.ipynb")
    assert tasks_of_test_cells(unit02)["train_tiny_model"] == list(summary_tasks(unit02))


def test_a_notebook_without_a_summary_keeps_the_cell_ids_alone():
    nb = read(ROOT / "solutions" / UNIT / NOTEBOOK)
    nb.cells = [c for c in nb.cells if "grading.summary(" not in c.source]
    assert summary_tasks(nb) == ()
    named = tasks_of_test_cells(nb)
    assert named and all(tasks == [] for tasks in named.values()), named


def visit_offline(browser, url: str) -> dict:
    """Open `url` with the network off and every request that is not file:// (or the page's
    own data and blob) refused; what typeset, what the page asked for, its score list."""
    context = browser.new_context(offline=True)
    page = context.new_page()
    asked, refused, dialogs, errors = [], [], [], []

    def route(request_route):
        url = request_route.request.url
        asked.append(url)
        if url.startswith(("file://", "data:", "blob:")):
            request_route.continue_()
        else:
            refused.append(url)
            request_route.abort()

    page.route("**/*", route)
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url, wait_until="load", timeout=60_000)
    try:
        page.wait_for_function("document.querySelectorAll('mjx-container').length > 0",
                               timeout=30_000)
    except Exception:  # noqa: BLE001 - a page that typesets nothing is measured as such
        pass
    page.wait_for_timeout(1000)
    seen = page.evaluate("""() => ({
        formulas: document.querySelectorAll('mjx-container').length,
        math_errors: document.querySelectorAll('mjx-merror, [data-mjx-error]').length,
        raw_tex: Array.from(document.querySelectorAll('.text_cell_render'))
                      .map(e => e.innerText).filter(t => t.includes('$')),
        javascript_links: Array.from(document.querySelectorAll('a'))
            .map(a => (a.getAttribute('href') || a.getAttribute('xlink:href') || '').trim())
            .filter(h => /^javascript:/i.test(h)),
        probe_links: Array.from(document.querySelectorAll('#probe a'))
            .map(a => a.getAttribute('href') || a.getAttribute('xlink:href')),
    })""")
    for formula in page.query_selector_all(".text_cell_render mjx-container"):
        formula.click(timeout=5000)   # a live javascript: link would open its dialog
    page.wait_for_timeout(500)
    context.close()
    return seen | {"asked": asked, "refused": refused, "dialogs": dialogs, "errors": errors}


def test_formulas_are_typeset_offline_from_disk(course, browser):
    seen = visit_offline(browser, (course / PAGE).as_uri())
    assert seen["formulas"] >= 10 and seen["math_errors"] == 0, seen
    assert seen["raw_tex"] == [], seen["raw_tex"]
    assert seen["asked"] == [(course / PAGE).as_uri()] and seen["refused"] == [], seen
    assert seen["errors"] == [] and seen["dialogs"] == [], seen
    assert seen["javascript_links"] == []
    # nbgrader's page, the same notebook: nothing typeset, the TeX shown as it was written
    before = visit_offline(browser, (course / BEFORE).as_uri())
    submitted = read(course / "submitted" / STUDENT / UNIT / NOTEBOOK)
    with_math = [c for c in submitted.cells if c.cell_type == "markdown" and "$" in c.source]
    assert before["formulas"] == 0 and len(before["raw_tex"]) == len(with_math) > 0, before


def test_the_page_carries_its_mathjax_in_under_a_megabyte(course):
    page, before = ((course / path).read_text() for path in (PAGE, BEFORE))
    assert mathjax_payload() in page
    assert len(page) - len(before) < 1_000_000
    assert len(page) < 1_500_000   # test_adversarial's bound for any feedback page
    assert not re.search(r"<script[^>]*\bsrc=", page), "the page loads a script"
    unpacked = gzip.decompress(base64.b64decode(mathjax_payload()))
    assert unpacked.startswith(b"(function(){") and b'"ui/safe"' in unpacked


def test_a_students_href_to_javascript_is_no_live_link(course, browser, tmp_path):
    """End to end the sanitizer already writes a submission's \\href as text; behind it,
    MathJax's Safe extension drops a javascript: link from a formula that reaches it. Shown on
    the feedback page with a probe of raw TeX (past the sanitizer), with and, as the control,
    without the Safe extension in the page's MathJax."""
    html = (course / PAGE).read_text()
    assert "\\backslash href" in html, "the sanitizer let the student's \\href through"
    seen = visit_offline(browser, (course / PAGE).as_uri())
    assert seen["javascript_links"] == [] and seen["dialogs"] == [], seen

    probe = ('<p id="probe">$\\href{javascript:alert(9)}{y}$ and '
             '$\\href{https://example.org/}{z}$</p>')
    probed = tmp_path / "probed.html"
    probed.write_text(html.replace("<body>", "<body>" + probe, 1))
    seen = visit_offline(browser, probed.as_uri())
    assert seen["probe_links"] == ["https://example.org/"], seen   # \href works; javascript: not
    assert seen["javascript_links"] == [] and seen["dialogs"] == [], seen

    mathjax_alone = metadata.distribution(feedback.MATHJAX_PACKAGE).locate_file(
        feedback.MATHJAX_FILES[0])
    unsafe = base64.b64encode(gzip.compress(Path(mathjax_alone).read_bytes(), mtime=0)).decode()
    control = tmp_path / "without_safe.html"
    control.write_text(probed.read_text().replace(mathjax_payload(), unsafe))
    seen = visit_offline(browser, control.as_uri())
    assert "javascript:alert(9)" in seen["probe_links"], seen


def test_it_reads_the_same_through_jupyterlab(course, browser, tmp_path):
    """Opened from JupyterLab's file browser in a tab of its own (the server's /files/), it
    typesets with nothing asked of any other host; in JupyterLab's HTML viewer, which runs no
    script until the student trusts the page, it typesets once trusted."""
    with jupyter("lab", course, TOKEN, tmp_path / "runtime") as base:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        asked = []
        page.on("request", lambda r: asked.append(r.url))
        page.goto(f"{base}/files/{PAGE.as_posix()}?token={TOKEN}", wait_until="load",
                  timeout=60_000)
        page.wait_for_function("document.querySelectorAll('mjx-container').length >= 10",
                               timeout=30_000)
        rows = [" ".join(t.split()) for t in page.locator("#toc li").all_inner_texts()]
        assert [r for r in rows if "comment" not in r] == ROWS
        assert [u for u in asked if not u.startswith(base)] == []

        page.goto(f"{base}/lab/tree/{PAGE.as_posix()}?token={TOKEN}&reset", wait_until="load",
                  timeout=120_000)
        trust = page.get_by_text("Trust HTML")
        trust.wait_for(timeout=120_000)
        viewer = page.frame_locator("iframe").first
        viewer.locator("#toc").wait_for(timeout=60_000)
        assert viewer.locator("mjx-container").count() == 0   # untrusted: no script runs
        trust.click()
        page.frame_locator("iframe").first.locator("mjx-container").first.wait_for(
            timeout=60_000)
        page.close()


def test_without_mathjax_installed_feedback_stops_saying_what_to_install(monkeypatch):
    monkeypatch.setattr(feedback, "MATHJAX_PACKAGE", "no-such-mathjax-package")
    mathjax_payload.cache_clear()
    try:
        with pytest.raises(RuntimeError, match="install no-such-mathjax-package"):
            FeedbackExporter()
    finally:
        mathjax_payload.cache_clear()
