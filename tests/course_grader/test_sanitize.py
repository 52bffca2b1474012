"""course_grader.sanitize without a browser: what reaches a page from a submission's markdown,
and a notebook that nbconvert cannot render (test_browser.py opens the pages in chromium)."""

from __future__ import annotations

from html.parser import HTMLParser

import nbformat
import pytest
from nbconvert import HTMLExporter
from traitlets.config import Config

from course_grader.sanitize import SafeHTMLExporter, SanitizeNotebook, markdown_to_safe_html


def render(source: str, attachments: dict | None = None) -> str:
    cell = {"attachments": attachments or {}}
    return markdown_to_safe_html({"cell": cell}, source)


def links_and_images(html: str) -> list[tuple[str, dict]]:
    found = []

    class Collect(HTMLParser):
        def handle_starttag(self, tag, attrs):
            if tag in ("a", "img", "iframe", "script", "object", "embed"):
                found.append((tag, dict(attrs)))

    Collect().feed(html)
    return found


HOSTILE = [
    "[x](javascript:alert(1))",
    "[x](JaVaScRiPt:alert(1))",
    "[x]( javascript:alert(1))",
    "[x](vbscript:msgbox(1))",
    "[x](data:text/html;base64,PHNjcmlwdD5hbGVydCgxKTwvc2NyaXB0Pg==)",
    "[x][ref]\n\n[ref]: javascript:alert(1)",
    "<javascript:alert(1)>",
    "![x](/api/contents/secret.txt)",
    "![x](http://127.0.0.1:8888/api/contents/secret.txt)",
    "![x](https://example.org/pixel.png)",
    '<img src="x" onerror="alert(1)">',
    '<a href="javascript:alert(1)">x</a>',
    "<iframe src=\"javascript:alert(1)\"></iframe>",
    "<script>alert(1)</script>",
    "<svg onload=alert(1)></svg>",
]


@pytest.mark.parametrize("source", HOSTILE)
def test_no_link_or_image_can_run_script_or_fetch_anything(source):
    for tag, attrs in links_and_images(render(source)):
        assert tag in ("a", "img"), (tag, source)
        for name, value in attrs.items():
            assert not name.startswith("on"), (tag, name)
            if tag == "a" and name == "href":
                assert value.startswith(("http://", "https://", "mailto:")), value
            if tag == "img" and name == "src":
                assert value.startswith("data:image/"), value


def test_ordinary_markdown_is_kept():
    html = render("# Answer\n\nThe softmax of $x_i$ is **positive**; see "
                  "[the paper](https://arxiv.org/abs/1706.03762).\n\n$$\\sum_j a_j = 1$$")
    assert "<strong>positive</strong>" in html
    assert '<a href="https://arxiv.org/abs/1706.03762">the paper</a>' in html
    assert "$x_i$" in html and "\\sum_j a_j = 1" in html


def test_attachments_that_exist_are_shown_and_missing_ones_do_not_break_the_page():
    png = "iVBORw0KGgo="
    html = render("![fig](attachment:fig.png) ![gone](attachment:gone.png)",
                  {"fig.png": {"image/png": png}})
    assert f'src="data:image/png;base64,{png}"' in html
    assert "gone" in html   # its alt text stays; nothing raised


def test_tex_commands_that_make_links_or_load_code_are_taken_out():
    html = render("$\\href{javascript:alert(1)}{x}$ $\\require{html}$ $\\unicode{x41}$")
    for command in ("\\href", "\\require", "\\unicode"):
        assert command + "{" not in html


def test_the_sanitiser_points_a_missing_attachment_nowhere():
    nb = nbformat.v4.new_notebook()
    cell = nbformat.v4.new_markdown_cell("![a](attachment:there.png) ![b](attachment:gone.png)")
    cell.attachments = {"there.png": {"image/png": "iVBORw0KGgo="},
                        "script.svg": {"image/svg+xml": "<svg onload=alert(1)>"}}
    nb.cells = [cell]
    nb, _ = SanitizeNotebook().preprocess(nb, {})
    assert "attachment:there.png" in nb.cells[0].source
    assert "attachment:gone.png" not in nb.cells[0].source
    assert set(nb.cells[0].attachments) == {"there.png"}
    # and nbconvert renders it (a missing attachment used to raise and stop the page)
    html, _ = HTMLExporter().from_notebook_node(nb)
    assert "data:image/png;base64" in html


def test_a_notebook_that_cannot_be_rendered_gets_a_page_that_says_so():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("![b](attachment:gone.png)")]
    with pytest.raises(Exception, match="missing attachment"):
        HTMLExporter().from_notebook_node(nb)   # nbconvert alone
    html, resources = SafeHTMLExporter().from_notebook_node(
        nb, {"nbgrader": {"notebook": "00_attention_as_lookup"}})
    assert "could not be shown as a page" in html and "missing attachment" in html
    assert resources["output_extension"] == ".html"


def test_with_the_courses_filter_the_same_notebook_renders():
    config = Config()
    config.HTMLExporter.filters = {"markdown2html": markdown_to_safe_html}
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("Text [x](javascript:alert(1)) "
                                              "![b](attachment:gone.png)")]
    html, _ = HTMLExporter(config=config).from_notebook_node(nb)
    assert "Text" in html and 'href="javascript:' not in html.lower()
