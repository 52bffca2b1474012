"""The course's explorers work for a person in JupyterLab, offline, with a mouse, a keyboard
and a screen reader: a notebook that shows `attention_explorer` (on a tiny random `Bert`, with
two kinds of maps) and `temperature_explorer` is opened in a real headless browser (Debian's
chromium, driven by Playwright, as in tests/course_grader/test_browser.py), run with "Run All
Cells" from JupyterLab's menu, and must show the live widgets (no "Error displaying widget").

* Mouse: choosing in a menu redraws the figure, and another sentence gives the query menu its
  tokens.
* Keyboard: every control is focused and sent real key presses (ArrowUp, ArrowDown,
  ArrowRight, a letter): its value changes, the figure is redrawn and described anew, the
  focus stays on the control, no cell of the notebook moves or changes type, and the page
  raises no error. (With ipywidgets' own menus, ArrowUp/Down ran JupyterLab's move-cursor
  commands instead and the value stayed.)
* Screen reader: every control has an accessible name, and the temperature slider announces
  (aria-valuetext, read from Chromium's accessibility tree) the tau its readout and its
  figure show, not log10 tau.
* The page fetches nothing from anywhere but the local Jupyter server (every other request is
  refused, so the widgets are shown to work without a network).

And the lectures as stored (lectures 04 and 08, opened in JupyterLab without running them):
every explorer's figure is an image with its text alternative, the one the notebook holds.
(JupyterLab 4 gives a plain PNG output no alt whatever its metadata says; the explorers'
outputs carry their image with its alt as text/markdown, which JupyterLab prefers.)
"""

from __future__ import annotations

import contextlib
import html
import re
import shutil
from pathlib import Path
from urllib.parse import urlsplit

import nbformat
import pytest
from conftest import ROOT, jupyter

TOKEN = "widget-browser-token"
NOTEBOOK = "explorers.ipynb"
LECTURES = ["04_attention_variants.ipynb", "08_bert_attention.ipynb"]  # those with explorers
LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
INLINE_SCHEMES = {"data", "blob", "about"}  # never leave the browser
TIMEOUT = 60_000  # ms: JupyterLab's first load and the kernel's import of torch on 2 cores

CELLS = [
    """\
import torch

from course_utils.bert import Bert, BertConfig
from course_utils.widgets import attention_explorer, temperature_explorer

torch.manual_seed(0)
model = Bert(BertConfig(vocab_size=30, d_model=16, n_layers=2, n_heads=2, d_ff=32,
                        n_positions=16)).eval()
ids = torch.tensor([[2, 5, 7, 9, 3, 0], [2, 11, 13, 17, 19, 3]])
with torch.no_grad():
    out = model(ids, attention_mask=ids != 0)
squared = [a ** 2 for a in out.attentions]
tokens = [["[CLS]", "the", "cat", "sat", "[SEP]"],
          ["[CLS]", "a", "dog", "ran", "home", "[SEP]"]]
print("attention maps:", len(out.attentions), tuple(out.attentions[0].shape))""",
    'attention_explorer({"raw": out.attentions, "squared": squared}, tokens)',
    """\
temperature_explorer(torch.tensor([[2.0, 0.5, -1.0], [0.0, 1.0, 3.0]]),
                     ["q0", "q1"], ["k0", "k1", "k2"])""",
]


def write_notebook(folder: Path) -> Path:
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3 (ipykernel)",
                                 "language": "python"}
    nb.metadata["language_info"] = {"name": "python"}
    path = folder / NOTEBOOK
    nbformat.write(nb, path)
    return path


class Watch:
    """What a page did: every request of its browser context (refusing those that would
    leave this machine), every websocket, its console errors and uncaught exceptions."""

    def __init__(self, page):
        self.requests: list[str] = []
        self.websockets: list[str] = []
        self.errors: list[str] = []
        self.uncaught: list[str] = []
        page.context.route("**/*", self._route)
        page.context.on("request", lambda r: self.requests.append(r.url))
        page.on("websocket", lambda ws: self.websockets.append(ws.url))
        page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        page.on("pageerror", self._uncaught)
        page.on("response", lambda r: r.status >= 400 and self.errors.append(
            f"HTTP {r.status} {urlsplit(r.url).path}"))

    def _uncaught(self, error) -> None:
        self.uncaught.append(str(error))
        self.errors.append(f"uncaught: {error}")

    @staticmethod
    def is_local(url: str) -> bool:
        parts = urlsplit(url)
        return parts.scheme in INLINE_SCHEMES or parts.hostname in LOCAL_HOSTS

    def _route(self, route):
        if self.is_local(route.request.url):
            route.continue_()
        else:
            route.abort("blockedbyclient")

    def remote(self) -> list[str]:
        return sorted({u for u in self.requests + self.websockets if not self.is_local(u)})

    def report(self) -> str:
        errors = "\n  ".join(self.errors[-20:]) or "none"
        remote = "\n  ".join(self.remote()) or "none"
        return f"browser console errors:\n  {errors}\nrequests refused (not local):\n  {remote}"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab serving the explorers' notebook and copies of the lectures with explorers
    (as stored: outputs and all); yields its base URL."""
    folder = tmp_path_factory.mktemp("notebooks")
    write_notebook(folder)
    for name in LECTURES:
        shutil.copy(ROOT / "lectures" / name, folder / name)
    with jupyter("lab", folder, TOKEN, tmp_path_factory.mktemp("runtime")) as base:
        yield base


@pytest.fixture
def page(browser):
    """A page of its own and its Watch."""
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT)
    try:
        yield page, Watch(page)
    finally:
        context.close()


@contextlib.contextmanager
def reported(page, watch: Watch, folder: Path):
    """At a failure: a screenshot of the page and what the browser said."""
    try:
        yield
    except BaseException:
        shot = folder / "failure.png"
        try:
            page.screenshot(path=shot, full_page=True)
            print(f"screenshot of the page at the failure: {shot}")
        except Exception as e:  # the page may be gone; the failure itself matters
            print(f"no screenshot: {e}")
        print(watch.report())
        raise


def output_of(page, cell: int):
    return page.locator(".jp-Notebook .jp-CodeCell").nth(cell).locator(".jp-Cell-outputArea")


def figure_of(area):
    return area.locator(".course-figure img").first


def wait_for_new_image(area, old: str, what: str, watch: Watch) -> str:
    """The figure the widget shows once it differs from `old` (the kernel redraws it)."""
    area.page.wait_for_function(
        "([el, old]) => { const img = el.querySelector('.course-figure img');"
        " return img && img.src && img.src !== old; }",
        arg=[area.element_handle(), old], timeout=TIMEOUT)
    new = figure_of(area).get_attribute("src")
    assert new != old, f"{what} did not redraw the figure\n{watch.report()}"
    return new


# the texts of a <select>'s options
OPTIONS = "s => [...s.options].map(o => o.text)"


def options(select) -> list[str]:
    return select.evaluate(OPTIONS)


def run_all_cells(page) -> None:
    """Run ▸ Run All Cells, from JupyterLab 4's menu bar."""
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-item:visible", has_text="Run All Cells").first.click()


def open_notebook(page, url: str, n_cells: int) -> None:
    """Open a notebook alone (`reset`: no tab that an earlier session left is restored)."""
    page.goto(f"{url}&reset", wait_until="domcontentloaded")
    page.locator(".jp-Notebook .jp-Cell").nth(n_cells - 1).wait_for(state="attached")
    # the kernel named in the notebook starts by itself; wait until the status bar shows it
    # idle (the notebook's execution indicator says "idle" once before the kernel exists)
    page.locator(".jp-StatusBar-TextItem").filter(
        has_text=re.compile(r"^Python 3.* \| Idle$")).first.wait_for()


def cells_state(page) -> list[str]:
    """Each cell's type and whether it is the active one: what JupyterLab's notebook
    commands (move the cursor, cut, change to Markdown) would change."""
    return page.locator(".jp-Notebook .jp-Cell").evaluate_all(
        "cells => cells.map(c => [...c.classList].filter(k => "
        "['jp-CodeCell', 'jp-MarkdownCell', 'jp-RawCell', 'jp-mod-active'].includes(k))"
        ".join(' '))")


# ----------------------------------------------------------------------------- live explorers

def test_explorers_work_with_mouse_keyboard_and_screen_reader_in_jupyterlab_offline(
        lab, page, tmp_path):
    page, watch = page
    with reported(page, watch, tmp_path):
        check_explorers(page, f"{lab}/lab/tree/{NOTEBOOK}?token={TOKEN}", watch)
    remote = watch.remote()
    assert not remote, ("the page fetched from outside this machine (the explorers must work "
                        "offline, without a CDN):\n  " + "\n  ".join(remote))
    assert watch.requests, "no request was recorded: the watch does not work"
    assert any(urlsplit(u).path.startswith("/api/kernels/") for u in watch.websockets), \
        f"no kernel websocket was recorded: {watch.websockets}"


def check_explorers(page, url: str, watch: Watch) -> None:
    open_notebook(page, url, len(CELLS))
    run_all_cells(page)
    first = output_of(page, 0)
    failed = first.locator("[data-mime-type='application/vnd.jupyter.error']")
    first.get_by_text("attention maps: 2").or_(failed).first.wait_for()
    assert not failed.count(), f"the first cell failed:\n{first.inner_text()}"
    attention, temperature = output_of(page, 1), output_of(page, 2)
    check_rendered(attention, "attention_explorer", watch)
    check_rendered(temperature, "temperature_explorer", watch)

    check_names(attention, temperature)
    check_mouse(attention, watch)
    check_keyboard(page, attention, temperature, watch)
    check_announced_temperature(page, temperature, watch)

    for area, name in ((attention, "attention_explorer"), (temperature, "temperature_explorer")):
        text = area.inner_text()
        assert "Error displaying widget" not in text and "Traceback" not in text, \
            f"{name} after the interaction: {text}"
    assert not watch.uncaught, f"the page raised errors:\n{watch.report()}"


def check_rendered(area, name: str, watch: Watch) -> None:
    """The live widget, with its figure and the figure's text alternative, in place of the
    explorer's static outputs."""
    error = area.get_by_text("Error displaying widget")
    try:  # the widget, or JupyterLab's error in its place (no need to wait it out)
        figure_of(area).or_(error).first.wait_for()
    except Exception as e:
        raise AssertionError(f"{name}: the widget did not render; its output shows:\n"
                             f"{area.inner_text()}\n{watch.report()}") from e
    assert not error.count(), \
        f"{name}: JupyterLab shows an error instead of the widget:\n" \
        f"{area.inner_text()}\n{watch.report()}"
    assert "Traceback" not in area.inner_text(), f"{name}: {area.inner_text()}"
    src = figure_of(area).get_attribute("src") or ""
    assert src.startswith("data:image/png;base64,") and len(src) > 1000, \
        f"{name}: the widget shows no figure (img src {src[:80]!r})"
    assert area.locator("img").count() == 1, \
        f"{name}: {area.locator('img').count()} images, not only the widget's figure"
    assert len(figure_of(area).get_attribute("alt") or "") > 50, \
        f"{name}: the figure has no text alternative"


CONTROL_ROLES = ("slider", "combobox", "radio", "button", "textbox", "spinbutton", "checkbox")


def check_names(attention, temperature) -> None:
    """Every control in the explorers' outputs has an accessible name, each the one shown."""
    from playwright.sync_api import expect

    named = {}
    for area in (attention, temperature):
        for role in CONTROL_ROLES:
            controls = area.get_by_role(role)
            for i in range(controls.count()):
                expect(controls.nth(i)).to_have_accessible_name(re.compile(r"\S"))
                named.setdefault(role, []).append(controls.nth(i).evaluate(
                    "e => e.labels && e.labels.length ? e.labels[0].textContent : e.id"))
    assert named == {"slider": ["layer", "τ (temperature)"],
                     "combobox": ["head", "query", "sentence"],
                     "radio": ["raw", "squared"]}, named
    expect(attention.get_by_role("radiogroup")).to_have_accessible_name("maps")


def check_mouse(attention, watch: Watch) -> None:
    head = attention.get_by_role("combobox", name="head")
    assert options(head) == ["0", "1", "mean of heads"], options(head)
    sentence = attention.get_by_role("combobox", name="sentence")
    query = attention.get_by_role("combobox", name="query")
    before = figure_of(attention).get_attribute("src")
    head.select_option(label="1")
    after_head = wait_for_new_image(attention, before, "choosing head 1", watch)
    # another sentence: the query menu gets that sentence's tokens
    sentence.select_option(index=1)
    wait_for_new_image(attention, after_head, "choosing sentence 1", watch)
    attention.page.wait_for_function(f"s => ({OPTIONS})(s).includes('4: home')",
                                     arg=query.element_handle(), timeout=TIMEOUT)
    assert options(query) == ["every query", "0: [CLS]", "1: a", "2: dog", "3: ran", "4: home",
                              "5: [SEP]"], options(query)


def selected(control) -> str:
    """What a control shows as chosen: a slider's announced value, a menu's option, the
    checked radio button's label."""
    return control.evaluate(
        "e => e.type === 'range' ? e.getAttribute('aria-valuetext')"
        " : e.type === 'radio' ? [...document.getElementsByName(e.name)]"
        ".find(r => r.checked).labels[0].textContent"
        " : e.options[e.selectedIndex].text")


# control, keys, the choice after each key, and what the figure's description then says
KEY_PRESSES = [
    ("attention", "slider", "layer", [("ArrowRight", "0", "1", "layer 1,"),
                                      ("ArrowDown", "1", "0", "layer 0,")]),
    ("attention", "combobox", "head", [("ArrowDown", "1", "mean of heads", "mean of its heads"),
                                       ("ArrowUp", "mean of heads", "1", "head 1,"),
                                       ("m", "1", "mean of heads", "mean of its heads")]),
    ("attention", "combobox", "query", [("ArrowDown", "every query", "0: [CLS]", "query 0"),
                                        ("ArrowRight", "0: [CLS]", "1: a", "query 1 (a)")]),
    ("attention", "combobox", "sentence", [("ArrowUp", "1: [CLS] a dog ran home [SEP]",
                                            "0: [CLS] the cat sat [SEP]", "sentence 0")]),
    ("attention", "radio", "squared", [("ArrowRight", "squared", "raw", "raw, layer"),
                                       ("ArrowLeft", "raw", "squared", "squared, layer")]),
    ("temperature", "slider", "τ (temperature)", [("ArrowRight", "1", "1.2", "τ = 1.2 "),
                                                  ("ArrowUp", "1.2", "1.5", "τ = 1.5 "),
                                                  ("ArrowDown", "1.5", "1.2", "τ = 1.2 ")]),
]


def check_keyboard(page, attention, temperature, watch: Watch) -> None:
    """Each control, focused and sent real key presses, changes its value, the figure and
    its description, and nothing else: the focus stays, no cell moves or changes."""
    areas = {"attention": attention, "temperature": temperature}
    attention.get_by_text("squared", exact=True).click()  # start on the second kind of maps
    attention.page.wait_for_function("img => img.alt.startsWith('squared')",
                                     arg=figure_of(attention).element_handle())
    for area_name, role, name, presses in KEY_PRESSES:
        area = areas[area_name]
        control = area.get_by_role(role, name=name, exact=True)
        control.focus()  # makes its cell the active one
        cells = cells_state(page)
        for key, before, after, described in presses:
            if role == "radio":  # arrows move the focus with the choice
                control = area.get_by_role(role, checked=True)
            assert selected(control) == before, (name, key, selected(control))
            src = figure_of(area).get_attribute("src")
            page.keyboard.press(key)
            what = f"{key} on {name} ({before} -> {after})"
            wait_for_new_image(area, src, what, watch)
            page.wait_for_function("([img, text]) => img.alt.includes(text)",
                                   arg=[figure_of(area).element_handle(), described])
            control = area.get_by_role(role, checked=True) if role == "radio" else control
            assert selected(control) == after, f"{what}: it shows {selected(control)}"
            assert control.evaluate("e => e === document.activeElement"), \
                f"{what}: the focus left the control"
            assert cells_state(page) == cells, \
                f"{what}: the notebook's cells changed: {cells_state(page)} (were {cells})"
            assert not watch.uncaught, f"{what}: the page raised errors\n{watch.report()}"


def check_announced_temperature(page, temperature, watch: Watch) -> None:
    """What a screen reader hears for the temperature slider (aria-valuetext in Chromium's
    accessibility tree) is the tau its readout and its figure show, at every stop visited."""
    slider = temperature.get_by_role("slider", name="τ (temperature)")
    readout = temperature.locator(".course-control output")
    cdp = page.context.new_cdp_session(page)
    slider.focus()
    for key in ("Home", "PageUp", "End"):
        src = figure_of(temperature).get_attribute("src")
        page.keyboard.press(key)
        wait_for_new_image(temperature, src, f"{key} on the temperature slider", watch)
        shown = readout.inner_text().strip()
        page.wait_for_function("([img, tau]) => img.alt.includes(`τ = ${tau} `)",
                               arg=[figure_of(temperature).element_handle(), shown])
        nodes = cdp.send("Accessibility.getFullAXTree")["nodes"]
        sliders = [n for n in nodes if n.get("role", {}).get("value") == "slider"
                   and n.get("name", {}).get("value") == "τ (temperature)"]
        assert len(sliders) == 1, sliders
        properties = {p["name"]: p["value"].get("value") for p in sliders[0]["properties"]}
        assert properties.get("valuetext") == shown, (key, properties, shown)
        assert float(shown) > 0, f"{key}: the slider shows {shown}, not a temperature"
    assert shown == "20", f"End should reach the highest temperature; it shows {shown}"


# ----------------------------------------------------------------------------- lectures as stored

def stored_alts(path: Path) -> list[str]:
    """The text alternatives of the figures the explorers left in a lecture's outputs."""
    alts = []
    for cell in nbformat.read(path, as_version=4).cells:
        for output in cell.get("outputs", []):
            image = output.get("data", {}).get("text/markdown", "")
            found = re.match(r'<img alt="([^"]*)" src="data:image/png;base64,', image)
            if found:
                alts.append(html.unescape(found[1]))
    return alts


@pytest.mark.parametrize("lecture", LECTURES)
def test_the_lectures_explorer_figures_carry_their_alt_text_in_jupyterlab(
        lab, page, lecture, tmp_path):
    page, watch = page
    cells = nbformat.read(ROOT / "lectures" / lecture, as_version=4).cells
    alts = stored_alts(ROOT / "lectures" / lecture)
    explorers = sum("_explorer(" in c.source for c in cells if c.cell_type == "code")
    assert explorers and len(alts) == explorers, \
        f"{lecture}: {explorers} explorers, {len(alts)} figures with a text alternative"
    with reported(page, watch, tmp_path):
        open_notebook(page, f"{lab}/lab/tree/{lecture}?token={TOKEN}", len(cells))
        for alt in alts:
            image = page.get_by_role("img", name=alt, exact=True)
            image.scroll_into_view_if_needed()
            loaded = image.evaluate("img => img.complete && img.naturalWidth > 0 "
                                    "&& img.src.startsWith('data:image/png;base64,')")
            assert loaded, f"{lecture}: the explorer's figure ({alt[:60]}...) is not shown"
    assert not watch.uncaught, watch.report()
