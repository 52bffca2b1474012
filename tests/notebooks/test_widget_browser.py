"""The course's ipywidgets explorers work for a person in JupyterLab, offline: a notebook that
shows `attention_explorer` (on a tiny random `Bert`) and `temperature_explorer` is opened in a
real headless browser (Debian's chromium, driven by Playwright, as in
tests/course_grader/test_browser.py), run with "Run All Cells" from JupyterLab's menu, and
must show the live widgets (no "Error displaying widget"); moving a control must redraw the
figure; and the page must fetch nothing from anywhere but the local Jupyter server (every
other request is refused, so the widgets are shown to work without a network)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import nbformat
from conftest import jupyter

TOKEN = "widget-browser-token"
NOTEBOOK = "explorers.ipynb"
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
tokens = [["[CLS]", "the", "cat", "sat", "[SEP]"],
          ["[CLS]", "a", "dog", "ran", "home", "[SEP]"]]
print("attention maps:", len(out.attentions), tuple(out.attentions[0].shape))""",
    "attention_explorer(out.attentions, tokens)",
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
        page.context.route("**/*", self._route)
        page.context.on("request", lambda r: self.requests.append(r.url))
        page.on("websocket", lambda ws: self.websockets.append(ws.url))
        page.on("console", lambda m: m.type == "error" and self.errors.append(m.text))
        page.on("pageerror", lambda e: self.errors.append(f"uncaught: {e}"))
        page.on("response", lambda r: r.status >= 400 and self.errors.append(
            f"HTTP {r.status} {urlsplit(r.url).path}"))

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


def output_of(page, cell: int):
    return page.locator(".jp-Notebook .jp-CodeCell").nth(cell).locator(".jp-Cell-outputArea")


def image_src(area) -> str:
    return area.locator(".widget-output img").first.get_attribute("src") or ""


def wait_for_new_image(area, old: str, what: str, watch: Watch) -> str:
    """The figure the widget shows once it differs from `old` (the kernel redraws it)."""
    area.page.wait_for_function(
        "([el, old]) => { const img = el.querySelector('.widget-output img');"
        " return img && img.src && img.src !== old; }",
        arg=[area.element_handle(), old], timeout=TIMEOUT)
    new = image_src(area)
    assert new != old, f"{what} did not redraw the figure\n{watch.report()}"
    return new


# the texts of a <select>'s options (ipywidgets writes their spaces as no-break spaces)
OPTIONS = "s => [...s.options].map(o => o.text.replace(/\\u00a0/g, ' '))"


def options(select) -> list[str]:
    return select.evaluate(OPTIONS)


def run_all_cells(page) -> None:
    """Run ▸ Run All Cells, from JupyterLab 4's menu bar."""
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-item:visible", has_text="Run All Cells").first.click()


def test_explorers_render_and_redraw_in_jupyterlab_offline(tmp_path, browser):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    write_notebook(folder)
    with jupyter("lab", folder, TOKEN, tmp_path / "runtime") as base:
        context = browser.new_context(viewport={"width": 1400, "height": 1000})
        page = context.new_page()
        page.set_default_timeout(TIMEOUT)
        watch = Watch(page)
        try:
            check_explorers(page, f"{base}/lab/tree/{NOTEBOOK}?token={TOKEN}", watch)
        except BaseException:
            shot = tmp_path / "failure.png"
            try:
                page.screenshot(path=shot, full_page=True)
                print(f"screenshot of the page at the failure: {shot}")
            except Exception as e:  # the page may be gone; the failure itself matters
                print(f"no screenshot: {e}")
            print(watch.report())
            raise
        finally:
            context.close()
    remote = watch.remote()
    assert not remote, ("the page fetched from outside this machine (the explorers must work "
                        "offline, without a CDN):\n  " + "\n  ".join(remote))
    assert watch.requests, "no request was recorded: the watch does not work"
    assert any(urlsplit(u).path.startswith("/api/kernels/") for u in watch.websockets), \
        f"no kernel websocket was recorded: {watch.websockets}"


def check_explorers(page, url: str, watch: Watch) -> None:
    page.goto(url, wait_until="domcontentloaded")
    page.locator(".jp-Notebook .jp-CodeCell").nth(len(CELLS) - 1).wait_for()
    # the kernel named in the notebook starts by itself; run once the status bar shows it
    # idle (the notebook's execution indicator says "idle" once before the kernel exists)
    page.locator(".jp-StatusBar-TextItem").filter(
        has_text=re.compile(r"^Python 3.* \| Idle$")).first.wait_for()
    run_all_cells(page)

    first = output_of(page, 0)
    failed = first.locator("[data-mime-type='application/vnd.jupyter.error']")
    first.get_by_text("attention maps: 2").or_(failed).first.wait_for()
    assert not failed.count(), f"the first cell failed:\n{first.inner_text()}"

    attention, temperature = output_of(page, 1), output_of(page, 2)
    for area, name in ((attention, "attention_explorer"), (temperature, "temperature_explorer")):
        error = area.get_by_text("Error displaying widget")
        try:  # the widget, or JupyterLab's error in its place (no need to wait it out)
            area.locator(".jupyter-widgets.widget-slider").or_(error).first.wait_for()
            if not error.count():
                area.locator(".widget-output img").first.wait_for()
        except Exception as e:
            raise AssertionError(f"{name}: the widget did not render; its output shows:\n"
                                 f"{area.inner_text()}\n{watch.report()}") from e
        assert not error.count(), \
            f"{name}: JupyterLab shows an error instead of the widget:\n" \
            f"{area.inner_text()}\n{watch.report()}"
        text = area.inner_text()
        assert "Traceback" not in text, f"{name}: {text}"
        src = image_src(area)
        assert src.startswith("data:image/png;base64,") and len(src) > 1000, \
            f"{name}: the widget shows no figure (img src {src[:80]!r})"
        # the live view replaces the static PNG that the explorer also puts in the output
        assert area.locator("img").count() == 1, \
            f"{name}: {area.locator('img').count()} images, not only the widget's figure"

    # attention_explorer: the controls are there, with the explorer's values
    layer = attention.locator(".widget-slider", has_text="layer")
    assert layer.locator(".widget-readout").inner_text().strip() == "0"
    head = attention.locator(".widget-dropdown", has_text="head").locator("select")
    assert options(head) == ["0", "1", "mean of heads"], options(head)
    sentence = attention.locator(".widget-dropdown", has_text="sentence").locator("select")
    assert sentence.evaluate("s => s.options.length") == 2
    query = attention.locator(".widget-dropdown", has_text="query").locator("select")

    before = image_src(attention)
    head.select_option(label="1")
    after_head = wait_for_new_image(attention, before, "choosing head 1", watch)

    # the layer slider, by keyboard as a person may move it (continuous_update=False: the
    # kernel hears of it when the move ends)
    layer.locator(".noUi-handle").first.focus()
    page.keyboard.press("ArrowRight")
    after_layer = wait_for_new_image(attention, after_head, "moving the layer slider to 1",
                                     watch)
    assert layer.locator(".widget-readout").inner_text().strip() == "1"

    # another sentence: the query menu gets that sentence's tokens
    sentence.select_option(index=1)
    wait_for_new_image(attention, after_layer, "choosing sentence 1", watch)
    page.wait_for_function(f"s => ({OPTIONS})(s).includes('4: home')",
                           arg=query.element_handle(), timeout=TIMEOUT)
    assert options(query) == ["every query", "0: [CLS]", "1: a", "2: dog", "3: ran", "4: home",
                              "5: [SEP]"], options(query)

    # temperature_explorer: its slider's readout is editable text
    before = image_src(temperature)
    readout = temperature.locator(".widget-readout").first
    readout.click()
    page.keyboard.press("Control+A")
    page.keyboard.type("5")
    page.keyboard.press("Enter")
    wait_for_new_image(temperature, before, "setting tau to 5", watch)
    assert float(readout.inner_text()) == 5.0, readout.inner_text()

    for area, name in ((attention, "attention_explorer"), (temperature, "temperature_explorer")):
        text = area.inner_text()
        assert "Error displaying widget" not in text and "Traceback" not in text, \
            f"{name} after the interaction: {text}"
