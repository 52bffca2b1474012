"""`make site`: the course as an offline HTML book (course_publish/site.py), built once into a
temporary folder and read in a real browser (Debian's chromium, driven by Playwright), from
file:// and from a local HTTP server. Every request that is neither a file of the site nor
the local server is blocked and recorded; a screenshot of every page is kept in the test's
temporary folder (`site-screenshots*`) for a failure report."""

from __future__ import annotations

import functools
import glob
import http.server
import re
import shutil
import threading
import time
from pathlib import Path

import nbformat
import pytest
from conftest import ROOT
from markdown_it import MarkdownIt
from mdit_py_plugins.amsmath import amsmath_plugin
from mdit_py_plugins.dollarmath import dollarmath_plugin

from course_publish.edition import hidden_test_lines
from course_publish.site import build, guides, leaks, page_text, readme_section, units
from course_utils.units import UNITS as REGISTERED
from course_utils.units import Unit

UNITS = units()
LECTURES = [u.lecture for u in UNITS if u.lecture is not None]
EXERCISES = [u.exercise for u in UNITS if u.exercise is not None]
GUIDES = guides()
MATH_TOKENS = {"math_inline", "math_inline_double", "math_block", "math_block_label", "amsmath"}
# MyST's own markdown parser settings for `$` math (dollarmath and amsmath, as the site enables)
MARKDOWN = (MarkdownIt("commonmark").enable("table").use(dollarmath_plugin).use(amsmath_plugin))


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    start = time.perf_counter()
    out = build(tmp_path_factory.mktemp("site") / "site")
    print(f"site built in {time.perf_counter() - start:.1f} s")
    return out


def page_of(path: Path) -> str:
    """The site's page of a course file: lectures/X.ipynb -> lectures/X.html,
    course_publish/guides/X.md -> guides/X.html."""
    if path.parent == ROOT / "course_publish" / "guides":
        return f"guides/{path.stem}.html"
    return str(path.relative_to(ROOT).with_suffix(".html"))


def markdown_math(markdown: str) -> int:
    """How many formulas `$...$`, `$$...$$` and `\\begin{align}` blocks a markdown text holds,
    as MyST's parser reads it (no `$` inside code, no escaped `\\$`)."""
    tokens = MARKDOWN.parse(markdown)
    return sum(t.type in MATH_TOKENS for token in tokens for t in [token, *(token.children or [])])


def expected_math() -> dict[str, int]:
    """Formulas per page: the markdown cells of its notebook, its sections of the README, or
    its guide."""
    counts = {}
    for path in LECTURES + EXERCISES:
        cells = nbformat.read(path, as_version=4).cells
        counts[page_of(path)] = sum(markdown_math(c.source) for c in cells
                                    if c.cell_type == "markdown")
    readme = (ROOT / "README.md").read_text()
    counts["index.html"] = markdown_math(readme.split("\n## ", 1)[0]) + sum(
        markdown_math(readme_section(readme, title)) for title in ("Units", "Notation"))
    for path in GUIDES:
        counts[page_of(path)] = markdown_math(path.read_text())
    return counts


def site_pages(site: Path) -> list[str]:
    return sorted(str(p.relative_to(site)) for p in site.rglob("*.html")
                  if p.parent.name != "_static")


class Visitor:
    """One browser context for the site: requests to anything but the site's files (or the
    local server at `base`) are aborted and recorded in `outside`; failed local requests in
    `failed`."""

    def __init__(self, browser, base: str | None = None):
        self.outside: list[str] = []
        self.failed: list[str] = []
        self.context = browser.new_context(viewport={"width": 1280, "height": 900})
        allowed = ("file://", "data:", "blob:", "about:") + ((base,) if base else ())

        def route(route):
            if route.request.url.startswith(allowed):
                route.continue_()
            else:
                self.outside.append(route.request.url)
                route.abort()

        self.context.route("**/*", route)
        self.context.on("request", lambda r: None if r.url.startswith(allowed)
                        else self.outside.append(r.url))
        self.context.on("requestfailed", lambda r: None if r.url in self.outside
                        else self.failed.append(f"{r.url}: {r.failure}"))
        self.page = self.context.new_page()

    def open(self, url: str) -> dict:
        """Load `url`, let MathJax finish, and say what the page shows."""
        self.page.goto(url, wait_until="load", timeout=60_000)
        self.page.evaluate("async () => { if (window.MathJax && MathJax.startup) "
                           "await MathJax.startup.promise; }")
        return self.page.evaluate("""() => ({
            article: document.querySelectorAll('article mjx-container').length,
            rendered: document.querySelectorAll('mjx-container').length,
            unrendered: [...document.querySelectorAll('.math')]
                .filter(m => !m.querySelector('mjx-container')).length,
            errors: document.querySelectorAll('mjx-merror, merror, [data-mml-node="merror"]')
                .length,
            images: [...document.querySelectorAll('img')].map(i => ({
                src: i.getAttribute('src'), loaded: i.complete && i.naturalWidth > 0,
                alt: (i.getAttribute('alt') || '').trim()})),
        })""")

    def screenshot(self, path: Path) -> None:
        """The top of the page, and (if it has one) its first figure in view."""
        self.page.screenshot(path=str(path))
        if self.page.locator("article img").count():
            self.page.locator("article img").first.scroll_into_view_if_needed()
            self.page.screenshot(path=str(path.with_name(path.stem + "-figure.png")))

    def close(self):
        self.context.close()


def test_every_page_loads_from_file_with_its_math_rendered_and_every_figure_described(
        browser, site, tmp_path_factory):
    shots = tmp_path_factory.mktemp("site-screenshots")
    expected = expected_math()
    visitor = Visitor(browser)
    problems, formulas = [], {}
    try:
        for name in site_pages(site):
            seen = visitor.open((site / name).as_uri())
            visitor.screenshot(shots / (name.replace("/", "__") + ".png"))
            formulas[name] = seen["article"]
            if name in expected and seen["article"] != expected[name]:
                problems.append(f"{name}: {seen['article']} formulas rendered in the text, "
                                f"{expected[name]} in its markdown")
            if seen["unrendered"] or seen["errors"]:
                problems.append(f"{name}: {seen['unrendered']} formulas not rendered, "
                                f"{seen['errors']} MathJax errors")
            problems += [f"{name}: image {i['src']} does not load" for i in seen["images"]
                         if not i["loaded"]]
            problems += [f"{name}: image {i['src']} has no alt text" for i in seen["images"]
                         if not i["alt"]]
    finally:
        visitor.close()
    print("formulas rendered per page:", formulas, f"screenshots in {shots}")
    assert set(expected) <= set(formulas), f"pages missing: {set(expected) - set(formulas)}"
    assert not problems, "\n".join(problems)
    assert not visitor.outside, f"requests that leave the site: {visitor.outside}"
    assert not visitor.failed, f"requests that failed: {visitor.failed}"
    assert sum(formulas.values()) > 1000 and len(list(shots.glob("*.png"))) > len(formulas)


def test_every_lecture_figure_and_the_explorers_static_figures_show(browser, site):
    """The lectures' figures, the ipywidgets explorers' static fallbacks among them (lectures
    04 and 08), are on their pages: as many images as image outputs."""
    visitor = Visitor(browser)
    try:
        for lecture in LECTURES:
            cells = nbformat.read(lecture, as_version=4).cells
            outputs = sum("image/png" in o.get("data", {}) for c in cells
                          for o in c.get("outputs", []))
            images = visitor.open((site / page_of(lecture)).as_uri())["images"]
            assert len([i for i in images if i["loaded"] and i["alt"]]) == outputs, lecture
    finally:
        visitor.close()


@pytest.fixture(scope="module")
def server(site):
    """The site served by Python's http.server on a free local port."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                            functools.partial(Quiet, directory=str(site)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def test_pages_load_the_same_from_a_local_web_server(browser, site, server):
    expected = expected_math()
    names = ["index.html", page_of(LECTURES[-1]), page_of(EXERCISES[0]), page_of(GUIDES[0])]
    visitor = Visitor(browser, base=server)
    try:
        for name in names:
            seen = visitor.open(f"{server}/{name}")
            assert seen["article"] == expected[name] and not seen["errors"], name
            assert all(i["loaded"] and i["alt"] for i in seen["images"]), name
    finally:
        visitor.close()
    assert not visitor.outside and not visitor.failed, (visitor.outside, visitor.failed)


@pytest.mark.parametrize("how", ["file", "http"])
def test_search_finds_softmax_in_the_lectures(browser, site, server, how):
    base = site.as_uri() if how == "file" else server
    visitor = Visitor(browser, base=server)
    try:
        visitor.page.goto(f"{base}/search.html?q=softmax", wait_until="load")
        visitor.page.wait_for_selector("ul.search li", timeout=20_000)
        visitor.page.wait_for_timeout(500)
        results = visitor.page.eval_on_selector_all(
            "ul.search li a", "links => links.map(a => a.getAttribute('href'))")
    finally:
        visitor.close()
    assert any("lectures/00_attention_as_lookup" in r for r in results), results
    assert any("exercises/" in r for r in results), results
    assert not visitor.outside, visitor.outside


def hrefs(page: Path) -> set[str]:
    """Where a page's links lead, as paths relative to the site (anchors dropped)."""
    links = re.findall(r'href="([^"#?]+)', page.read_text())
    return {str((page.parent / link).resolve()) for link in links if "://" not in link}


def test_every_lecture_and_exercise_has_a_page_and_they_link_to_each_other(site):
    pages = site_pages(site)
    assert {page_of(p) for p in LECTURES + EXERCISES} <= set(pages)
    assert len(LECTURES) >= 9 and len(EXERCISES) >= 9
    for unit in UNITS:
        if unit.lecture is not None and unit.exercise is not None:
            lecture, exercise = site / page_of(unit.lecture), site / page_of(unit.exercise)
            assert str(exercise.resolve()) in hrefs(lecture), unit
            assert str(lecture.resolve()) in hrefs(exercise), unit
    order = ["index.html"] + [page_of(p) for u in UNITS for p in (u.lecture, u.exercise) if p]
    for before, after in zip(order, order[1:], strict=False):
        text = (site / before).read_text()
        following = re.search(r'<a class="right-next"\s+href="([^"]+)"', text)
        assert following, f"{before} has no link to the next page"
        assert (site / before).parent.joinpath(following.group(1)).resolve() == \
            (site / after).resolve(), f"{before} leads to {following.group(1)}, not {after}"
        assert 'class="left-prev"' in (site / after).read_text(), after


def test_every_page_says_how_to_open_it_in_jupyterlab(site):
    for path in LECTURES + EXERCISES:
        text = page_text(site / page_of(path))
        assert "make lab" in text and str(path.relative_to(ROOT)) in text, path
    for path in GUIDES:
        text = page_text(site / page_of(path))
        assert "make lab" in text and str(path.relative_to(ROOT)) in text, path
    assert "make lab" in page_text(site / "index.html")


def test_the_home_page_has_the_introduction_the_unit_table_and_the_notation(site):
    text = (site / "index.html").read_text()
    assert "<table" in text and "Attention as a soft lookup" in text
    units_table = re.search(r"<table.*?</table>", text, flags=re.S).group(0)
    for lecture in LECTURES:
        assert f'href="{page_of(lecture)}"' in units_table, lecture
    assert "Notation" in text and "Everything runs" in page_text(site / "index.html")


def test_every_guide_has_a_page_under_guides_after_the_units(site):
    """Each file of course_publish/guides/ is a page, listed in the sidebar under "Guides",
    and the last unit's last page leads on to the first guide."""
    assert {p.name for p in GUIDES} >= {"instructors.md", "contributors.md", "data.md"}
    index = (site / "index.html").read_text()
    caption = re.search(r'<p aria-level="2" class="caption"[^>]*>\s*<span class="caption-text">'
                        r'Guides</span>.*?</ul>', index, flags=re.S)
    assert caption, "the sidebar has no caption 'Guides'"
    for path in GUIDES:
        page = site / page_of(path)
        title = next(line[2:] for line in path.read_text().splitlines() if line.startswith("# "))
        assert page.exists() and title in page_text(page).replace("’", "'"), path
        assert f'href="{page_of(path)}"' in caption.group(0), path
    assert "How a submission is graded" in page_text(site / "guides" / "instructors.html")
    last = UNITS[-1].exercise or UNITS[-1].lecture
    following = re.search(r'<a class="right-next"\s+href="([^"]+)"',
                          (site / page_of(last)).read_text())
    assert following and (site / page_of(last)).parent.joinpath(following.group(1)).resolve() \
        == (site / page_of(GUIDES[0])).resolve()


def trivial(line: str) -> bool:
    """A line that proves nothing when found: blank, short (`else:`, `break`), or a keyword."""
    return len(line) < 12 or line in {"pass", "continue", "return None", "raise"}


def test_the_site_shows_no_hidden_test_and_no_solution(site):
    """Every line of a hidden test (edition.hidden_test_lines) and every line of solution
    code in solutions/, unless trivial or also in what students get anyway (the release,
    which shares set-up and skeleton lines with the solutions, and the lectures, which show
    some of the same code), appears in no page's text, README's and the guides' included."""
    solutions = set()
    for path in glob.glob(str(ROOT / "solutions/*/*.ipynb")):
        for cell in nbformat.read(path, as_version=4).cells:
            for block in re.findall(r"### BEGIN SOLUTION\n(.*?)### END SOLUTION", cell.source,
                                    flags=re.S):
                solutions.update(line.strip() for line in block.splitlines())
    public = "\n".join(cell.source for path in EXERCISES + LECTURES
                       for cell in nbformat.read(path, as_version=4).cells)
    secrets = {line for line in hidden_test_lines() | solutions
               if not trivial(line) and line not in public}
    assert len(secrets) > 500
    texts = {name: page_text(site / name) for name in site_pages(site)}
    found = [f"{name}: {line!r}" for name, text in texts.items() for line in secrets
             if line in text]
    assert not found, "\n".join(found)
    assert not leaks(site)


def test_the_request_check_blocks_and_records_what_would_leave_the_site(browser, tmp_path):
    """A control: a page that asks for a script, a stylesheet and a font from the network is
    caught (and nothing reaches the network), so zero recorded above means zero asked for."""
    page = tmp_path / "outside.html"
    page.write_text('<link rel="stylesheet" href="https://cdn.example.invalid/x.css">'
                    '<script src="https://cdn.example.invalid/x.js"></script>'
                    '<style>@font-face {font-family: f; src: url(http://fonts.example.invalid/f'
                    '.woff2)} p {font-family: f}</style><p>text</p>')
    visitor = Visitor(browser)
    try:
        visitor.open(page.as_uri())
        visitor.page.wait_for_timeout(300)
    finally:
        visitor.close()
    assert {"https://cdn.example.invalid/x.css", "https://cdn.example.invalid/x.js",
            "http://fonts.example.invalid/f.woff2"} <= set(visitor.outside), visitor.outside


def test_the_leak_check_finds_a_hidden_test_line_on_a_page(site, tmp_path):
    line = sorted(hidden_test_lines())[0]
    page = tmp_path / "page.html"
    page.write_text((site / page_of(EXERCISES[0])).read_text().replace(
        "</article>", f"<pre>{line}</pre></article>"))
    assert leaks(tmp_path) == [f"page.html: {line!r}"]


def fake_unit(folder: Path, number: str) -> Unit:
    """A lecture and an exercise of a new unit `number`, as a course adds one; its entry in
    the registry of units."""
    name = f"{number}_a_unit_added_later"
    python = {"language_info": {"name": "python"}}
    lecture = nbformat.v4.new_notebook(metadata=python, cells=[
        nbformat.v4.new_markdown_cell(f"# Unit {number} — A unit added later\n\nWith $x^2$."),
        nbformat.v4.new_code_cell("print(1)")])
    exercise = nbformat.v4.new_notebook(metadata=python, cells=[
        nbformat.v4.new_markdown_cell(f"# Exercise {number} — A unit added later")])
    (folder / "lectures").mkdir(parents=True, exist_ok=True)
    (folder / "exercises" / name).mkdir(parents=True)
    nbformat.write(lecture, folder / "lectures" / f"{name}.ipynb")
    nbformat.write(exercise, folder / "exercises" / name / f"{name}.ipynb")
    return Unit(number, "a_unit_added_later", "A unit added later")


def test_a_unit_added_later_gets_its_pages_from_its_registry_entry(tmp_path):
    """Unit 00 as it is and a new unit 01, in folders of their own: the builder finds both
    from their entries in the registry of units and links them (no table of contents or
    configuration to edit)."""
    course = tmp_path / "course"
    (course / "lectures").mkdir(parents=True)
    shutil.copy(ROOT / "lectures" / "00_attention_as_lookup.ipynb", course / "lectures")
    shutil.copytree(ROOT / "exercises" / "00_attention_as_lookup",
                    course / "exercises" / "00_attention_as_lookup")
    added = fake_unit(course, "01")
    out = build(tmp_path / "site", lectures=course / "lectures",
                exercises=course / "exercises", registry=(REGISTERED[0], added))
    lecture = out / "lectures" / "01_a_unit_added_later.html"
    exercise = out / "exercises" / "01_a_unit_added_later" / "01_a_unit_added_later.html"
    assert lecture.exists() and exercise.exists()
    assert str(lecture.resolve()) in hrefs(out / "index.html")
    assert str(exercise.resolve()) in hrefs(lecture)
    assert str(lecture.resolve()) in hrefs(out / "exercises" / "00_attention_as_lookup" /
                                           "00_attention_as_lookup.html")   # "next"
    assert "Unit 01 — A unit added later" in page_text(out / "index.html")


def test_a_guide_that_shows_a_hidden_test_line_stops_the_build(tmp_path):
    """The guides are pages like the others: one that quotes a line of a hidden test makes
    the build refuse to finish, naming the page."""
    course = tmp_path / "course"
    added = fake_unit(course, "00")
    folder = tmp_path / "guides"
    folder.mkdir()
    line = sorted(hidden_test_lines())[0]
    (folder / "a_guide.md").write_text(f"# A guide\n\n```python\n{line}\n```\n")
    with pytest.raises(RuntimeError, match=r"the site would give away:\s+guides/a_guide.html"):
        build(tmp_path / "site", lectures=course / "lectures", exercises=course / "exercises",
              guides_folder=folder, registry=(added,))
    assert not (tmp_path / "site").exists()
