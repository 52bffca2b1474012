"""No script from a submission runs where the instructor or the student reads it: a malicious
submission is autograded, then opened in the formgrader (on the Jupyter server's origin, with
the instructor's token) and as feedback HTML in a real headless browser (Debian's chromium,
driven by Playwright). Every payload tries to mark the page and to write a file into the
course through the Jupyter API; none may succeed. A control first shows that the same
payloads do run in that browser when the notebook is rendered without sanitising."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import nbformat
import pytest
from conftest import BIN, jupyter, tool_env
from nbconvert import HTMLExporter
from nbgrader.api import Gradebook

from course_grader.corpus import NOTEBOOK, UNIT, released, solve, write

TOKEN = "browser-test-token"


def payload(name: str) -> str:
    """JavaScript that records that it ran and tries to write pwned-<name>.txt into the course
    through the Jupyter contents API, as the logged-in instructor."""
    return ("(function(){window.__pwned=(window.__pwned||[]).concat(['" + name + "']);"
            "var x=(document.cookie.match(/_xsrf=([^;]+)/)||[])[1]||'';"
            "fetch('/api/contents/pwned-" + name + ".txt',{method:'PUT',"
            "headers:{'Content-Type':'application/json','X-XSRFToken':x},"
            "body:JSON.stringify({type:'file',format:'text',content:'x'})});})()")


def on_error(name: str) -> str:
    return '<img src="x" onerror="' + payload(name) + '">'


def attack_cells() -> list:
    v4 = nbformat.v4
    svg = ('<svg xmlns="http://www.w3.org/2000/svg" onload="' + payload("svg")
           + '"><circle r="5"/></svg>')
    displays = [
        ("HTML", "<script>" + payload("html_script") + "</script>"),
        ("HTML", on_error("html_onerror")),
        ("Javascript", payload("javascript")),
        ("SVG", svg),
        ("Latex", "</script>" + on_error("latex")),
        ("Markdown", on_error("markdown_output")),
        ("HTML", '<iframe src="javascript:alert(1)"></iframe><form action="/api"></form>'),
    ]
    lines = ["from IPython.display import HTML, SVG, Javascript, Latex, Markdown, display"]
    lines += [f"display({kind}({text!r}))" for kind, text in displays]
    lines += [f"print({'<script>' + payload('stdout') + '</script>'!r})",
              f"raise ValueError({on_error('error')!r})"]
    raw = v4.new_raw_cell("<script>" + payload("raw_cell") + "</script>")
    raw.metadata["format"] = "text/html"
    return [
        v4.new_markdown_cell("My answer <script>" + payload("markdown_script") + "</script>\n\n"
                             + on_error("markdown_onerror") + "\n\n"
                             + '<a href="javascript:' + payload("link") + '">click</a>'),
        raw,
        v4.new_code_cell("\n".join(lines) + "\n"),
        # markdown syntax that nbconvert's renderer turns into a live link or a fetched image
        v4.new_markdown_cell("[click me](javascript:" + payload("markdown_link") + ")\n\n"
                             "[me too](JaVaScRiPt:" + payload("markdown_link_case") + ")\n\n"
                             "![leak](/api/contents/leak-image.txt)\n\n"
                             "![remote](http://127.0.0.1:9/leak.png)\n\n"
                             "A formula with a link in it: $\\href{javascript:alert(7)}{x^2}$"
                             " and one without: $a_i^2$.\n\n"
                             "[a fine link](https://example.org/)"),
        # an attachment that is not there: nbconvert refuses to render the whole notebook
        v4.new_markdown_cell("See my figure: ![figure](attachment:missing.png)"),
    ]


@pytest.fixture(scope="module")
def course(fresh_course, tmp_path_factory):
    course = tmp_path_factory.mktemp("browser")
    shutil.copytree(fresh_course, course, dirs_exist_ok=True)
    nb = solve(course, released(course))
    nb.cells[1:1] = attack_cells()
    write(nb, course / "submitted" / "mallory" / UNIT)
    proc = subprocess.run([sys.executable, "-m", "course_grader.autograde", UNIT],
                          cwd=course, env=tool_env(), capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    status = json.loads((course / "autograde_status" / f"{UNIT}.json").read_text())
    assert status["mallory"]["score"] == 9.0, status["mallory"]
    feedback = subprocess.run([str(BIN / "nbgrader"), "generate_feedback", UNIT, "--force"],
                              cwd=course, env=tool_env(), capture_output=True, text=True,
                              timeout=600)
    assert feedback.returncode == 0, feedback.stderr[-2000:]
    return course


@pytest.fixture(scope="module")
def server(course, tmp_path_factory):
    with jupyter("server", course, TOKEN, tmp_path_factory.mktemp("runtime")) as base:
        yield base


def visit(browser, url: str | None = None, html: str | None = None,
          click_links: bool = False) -> dict:
    """Open a page, give its scripts time to run, and (`click_links`) click every link of
    the notebook's cells; what ran, the dialogs it opened, every request it made, and how
    many formulas MathJax rendered."""
    page = browser.new_page()
    dialogs: list[str] = []
    requests: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.on("request", lambda r: requests.append(r.url))
    if url:
        page.goto(url, wait_until="load", timeout=60_000)
    else:
        page.set_content(html, wait_until="load", timeout=60_000)
    page.wait_for_timeout(2500)
    formulas = page.evaluate("document.querySelectorAll('.MathJax, .MathJax_Display, "
                             "mjx-container').length")
    errors = page.evaluate("document.querySelectorAll('.MathJax_Error, merror').length")
    text = page.inner_text("body")
    clicked = 0
    if click_links:
        # every link of the rendered cells but those to http(s) and mailto, which leave the
        # page and are allowed (clicking one would only show the browser's offline page)
        for link in page.query_selector_all(".text_cell_render a, .rendered_html a, "
                                            ".jp-RenderedHTMLCommon a, .MathJax a"):
            href = (link.get_attribute("href") or "").strip().lower()
            if href.startswith(("http://", "https://", "mailto:")):
                continue
            try:
                link.click(timeout=2000, no_wait_after=True)
                clicked += 1
            except Exception:  # noqa: BLE001 - a link without a box cannot be clicked
                continue
            page.wait_for_timeout(200)
        page.wait_for_timeout(1500)
    ran = page.evaluate("window.__pwned || []")
    page.close()
    return {"ran": ran, "dialogs": dialogs, "text": text, "requests": requests,
            "clicked": clicked, "formulas": formulas, "math_errors": errors}


def test_the_payloads_run_when_nothing_is_sanitised(course, browser):
    """The control: rendered by nbconvert as it is, the submission's script runs."""
    nb = nbformat.read(course / "submitted" / "mallory" / UNIT / NOTEBOOK, as_version=4)
    executed = nbformat.read(course / "autograded" / "mallory" / UNIT / NOTEBOOK, as_version=4)
    # the outputs as the kernel produced them: run the attack cell unsanitised
    from nbclient import NotebookClient

    probe = nbformat.v4.new_notebook(cells=[c for c in nb.cells[1:4]])
    NotebookClient(probe, timeout=60, allow_errors=True).execute()
    html, _ = HTMLExporter(template_name="basic").from_notebook_node(probe)
    seen = visit(browser, html=html)
    assert {"markdown_script", "markdown_onerror", "html_script", "html_onerror",
            "markdown_output"} <= set(
        seen["ran"]), seen["ran"]
    assert executed.cells  # the autograded notebook exists for the next tests


def test_no_script_runs_in_the_formgrader(course, server, browser):
    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gb:
        submission = gb.find_submission_notebook(NOTEBOOK[: -len(".ipynb")], UNIT, "mallory")
        url = f"{server}/formgrader/submissions/{submission.id}/?token={TOKEN}"
    seen = visit(browser, url=url, click_links=True)
    assert "softmax" in seen["text"], "the formgrader did not show the submission"
    assert seen["ran"] == [] and seen["dialogs"] == [], seen
    assert not list(course.glob("pwned-*")), "a script wrote into the course"
    assert seen["clicked"] >= 1, "no link of the submission was clicked"
    # nothing fetched from outside the server, no image fetched with the instructor's
    # cookies, and MathJax from the server itself: formulas render offline
    outside = [u for u in seen["requests"] if not u.startswith(server)
               and not u.startswith(("data:", "about:"))]
    assert outside == [], outside
    assert not [u for u in seen["requests"] if "leak" in u], seen["requests"]
    assert any("/static/jupyter_server_mathjax/MathJax.js" in u for u in seen["requests"])
    assert seen["formulas"] > 0 and seen["math_errors"] == 0, seen
    assert "could not be rendered" not in seen["text"]


def test_no_script_runs_in_the_feedback(course, browser):
    html = (course / "feedback" / "mallory" / UNIT / f"{UNIT}.html").read_text()
    seen = visit(browser, url=(course / "feedback" / "mallory" / UNIT / f"{UNIT}.html")
                 .as_uri(), click_links=True)
    assert "softmax" in seen["text"]
    assert seen["ran"] == [] and seen["dialogs"] == [], seen
    assert not [u for u in seen["requests"] if "leak" in u or u.startswith("http")], \
        seen["requests"]
    assert 'href="javascript:' not in html.lower()
    # the payloads are in the page only as escaped text
    assert "<script>(function(){window.__pwned" not in html
    assert '<img src="x" onerror' not in html and "<svg" not in html


def test_the_autograded_notebook_keeps_only_inert_outputs(course):
    nb = nbformat.read(course / "autograded" / "mallory" / UNIT / NOTEBOOK, as_version=4)
    kinds = {key for cell in nb.cells for out in cell.get("outputs", [])
             for key in out.get("data", {})}
    assert kinds <= {"text/plain", "text/html", "image/png", "image/jpeg", "image/gif"}, kinds
    # markup that reaches a page as markup: markdown, raw cells, HTML outputs (streams and
    # errors are plain text, which nbconvert escapes)
    markup = [c.source for c in nb.cells if c.cell_type in ("markdown", "raw")]
    markup += [out["data"]["text/html"] for c in nb.cells for out in c.get("outputs", [])
               if "text/html" in out.get("data", {})]
    for text in markup:
        for tag, attrs in markup_in(text):
            assert tag in SAFE_TAGS, (tag, text[:200])
            for name, value in attrs:
                assert not name.startswith("on"), (tag, name)
                assert "javascript:" not in (value or "").lower(), (tag, name, value)


SAFE_TAGS = {"a", "b", "br", "code", "div", "em", "i", "img", "li", "ol", "p", "pre", "span",
             "strong", "table", "tbody", "td", "th", "thead", "tr", "ul", "h1", "h2", "h3"}


def markup_in(text: str) -> list[tuple[str, list]]:
    """The real tags of an HTML fragment (escaped ones are text, not tags)."""
    from html.parser import HTMLParser

    found = []

    class Collect(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.append((tag, attrs))

    Collect().feed(text)
    return found
