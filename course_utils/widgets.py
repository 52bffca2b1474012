"""Interactive explorers (ipywidgets, anywidget) for the lectures. No model code: they take
tensors and draw them with `course_utils.viz` and `course_utils.attention`.

    temperature_explorer   a slider for the temperature tau of softmax(e / tau): the attention
                           heatmap and the entropy of every row, redrawn as tau moves
    attention_explorer     the attention maps of a stack of layers (BERT's output.attentions,
                           MiniLM's or our own models'): choose the layer, the head (or their
                           mean), the sentence and a query token, and see the map as a heatmap
                           and as lines from queries to keys (like bertviz's "head view", drawn
                           with matplotlib: nothing is fetched from the net)

Both work from the keyboard and with a screen reader in JupyterLab. Their controls (`Choice`)
are native HTML controls drawn by anywidget: a range input (a slider), a <select> (a menu) or
radio buttons, each named by its visible label, a slider announcing the label its readout shows
(tau as printed, 0.05, not log10 tau), and each marked so that JupyterLab leaves every key
pressed on it to it. ipywidgets' own controls can be given none of this from Python: their
slider handles have no accessible name, a FloatLogSlider announces log10 tau and a
SelectionSlider its position, and an arrow on their menus runs the notebook's commands. The
figure is an image with a text alternative that describes what it shows (`alt`), redrawn
with it.

Every explorer also works where no browser runs (nbconvert, nbval, CI): displaying it puts a
PNG of the current figure into the cell's output next to the widget view, so a notebook
executed headless and read statically (without widget state) still shows the picture; and the
same image with its text alternative as text/markdown, the form JupyterLab prefers to a PNG
(it renders a PNG with no alt, whatever the output's metadata says) and that the website
(myst-nb) and nbconvert rank below it. JupyterLab, which renders the widget, shows the live
view instead of either.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Mapping, Sequence

import anywidget
import ipywidgets
import numpy as np
import torch
import traitlets
from matplotlib.figure import Figure

from course_utils._checks import (
    require_finite,
    require_float_tensor,
    require_fraction,
    require_increasing_pair,
    require_int,
    require_labels,
    require_number_in,
    shape_str,
)
from course_utils.attention import masked_softmax
from course_utils.viz import attention_heatmap, attention_lines

__all__ = ["AttentionExplorer", "Choice", "FigureView", "TemperatureExplorer",
           "attention_explorer", "row_entropy", "temperature_explorer", "temperature_stops"]

_WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def row_entropy(weights: torch.Tensor) -> torch.Tensor:
    """Entropy of every row of attention weights, in nats:

        entropy_i = - sum_j alpha_ij log alpha_ij      (with 0 log 0 = 0)

    entropy_i = 0 when row i puts all its weight on one key, log(n) when it spreads it evenly over
    n keys; an all-zero (fully masked) row has entropy 0.
    weights: (..., T_q, T_k)  ->  (..., T_q)
    """
    require_float_tensor(weights, "weights", "(..., T_q, T_k)", min_ndim=1)
    require_finite(weights, "weights")
    terms = torch.where(weights > 0, weights * weights.clamp_min(1e-45).log(),
                        torch.zeros_like(weights))  # (..., T_q, T_k)
    return -terms.sum(dim=-1)  # (..., T_q)


def _png_base64(figure: Figure) -> str:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


# ----------------------------------------------------------------------------- controls

# The controls' view in the browser (anywidget imports this module). Every focusable element
# carries data-lm-suppress-shortcuts: JupyterLab (Lumino's CommandRegistry) then runs none of
# its shortcuts for a key pressed on it, and the key does what it does on any web page.
# Without it ArrowUp/Down run the notebook's move-cursor commands and letters edit cells.
# Lumino honours the attribute only between the focused element and the element a shortcut's
# selector matches; the notebook's selectors end in ":focus", the focused element itself, so
# the attribute must be on the control, not on a box around it.
_CONTROL_ESM = r"""
let made = 0;

function render({ model, el }) {
  const id = `course-control-${++made}-${Math.random().toString(36).slice(2)}`;
  const kind = model.get("kind");
  el.classList.add("course-control");
  const name = document.createElement(kind === "buttons" ? "span" : "label");
  name.className = "course-control-name";
  if (kind === "buttons") {
    name.id = `${id}-name`;
    el.setAttribute("role", "radiogroup");
    el.setAttribute("aria-labelledby", name.id);
  } else {
    name.htmlFor = id;
  }
  el.append(name);
  const draw = { slider, menu, buttons }[kind](model, el, id);
  const show = () => {
    name.textContent = model.get("description");
    draw(model.get("labels"), model.get("index"));
  };
  const events = ["change:labels", "change:index", "change:description"];
  events.forEach((event) => model.on(event, show));
  show();
  return () => events.forEach((event) => model.off(event, show));
}

function choose(model, index) {
  if (index !== model.get("index")) {
    model.set("index", index);
    model.save_changes();
  }
}

function control(tag, id) {
  const element = document.createElement(tag);
  element.id = id;
  element.setAttribute("data-lm-suppress-shortcuts", "true");
  return element;
}

// A range input over the choices (arrows, Page Up/Down, Home, End): it announces the choice's
// label, the text of its readout. The kernel hears of a move when it ends (a key press, or
// the mouse let go), as with ipywidgets' continuous_update=False.
function slider(model, el, id) {
  const input = control("input", id);
  Object.assign(input, { type: "range", min: "0", step: "1" });
  const readout = document.createElement("output");
  readout.setAttribute("for", id);
  readout.setAttribute("aria-hidden", "true");  // the slider says it already
  el.append(input, readout);
  const say = (labels, index) => {
    input.setAttribute("aria-valuetext", labels[index]);
    readout.textContent = labels[index];
  };
  input.addEventListener("input", () => say(model.get("labels"), Number(input.value)));
  input.addEventListener("change", () => choose(model, Number(input.value)));
  return (labels, index) => {
    input.max = String(labels.length - 1);
    input.value = String(index);
    say(labels, index);
  };
}

// A <select>: arrows move the choice, a letter jumps to it.
function menu(model, el, id) {
  const select = control("select", id);
  el.append(select);
  select.addEventListener("change", () => choose(model, select.selectedIndex));
  let shown = null;
  return (labels, index) => {
    if (shown !== labels) {
      select.replaceChildren(...labels.map((label) => new Option(label)));
      shown = labels;
    }
    select.selectedIndex = index;
  };
}

// Radio buttons drawn as toggle buttons: Tab reaches the chosen one, arrows choose another.
function buttons(model, el, id) {
  const group = document.createElement("span");
  group.className = "course-control-buttons";
  el.append(group);
  let inputs = [];
  let shown = null;
  return (labels, index) => {
    if (shown !== labels) {
      inputs = labels.map((_, i) => {
        const input = control("input", `${id}-${i}`);
        Object.assign(input, { type: "radio", name: id });
        input.addEventListener("change", () => input.checked && choose(model, i));
        return input;
      });
      group.replaceChildren(...inputs.flatMap((input, i) => {
        const label = document.createElement("label");
        label.htmlFor = input.id;
        label.textContent = labels[i];
        return [input, label];
      }));
      shown = labels;
    }
    inputs.forEach((input, i) => { input.checked = i === index; });
  };
}

export default { render };
"""

_CONTROL_CSS = """
.course-control { display: flex; align-items: center; gap: 6px; margin: 2px 14px 2px 0;
  font-size: var(--jp-widgets-font-size, 13px); color: var(--jp-widgets-color, inherit); }
.course-control-name { white-space: nowrap; }
.course-control input[type="range"] { width: 320px; }
.course-control output { min-width: 3em; }
.course-control-buttons { display: inline-flex; position: relative; }
.course-control-buttons input { position: absolute; opacity: 0; width: 1px; height: 1px;
  margin: 0; }
.course-control-buttons label { padding: 2px 10px; cursor: pointer;
  border: 1px solid var(--jp-border-color1, #999); }
.course-control-buttons input:checked + label { background: var(--jp-brand-color1, #1976d2);
  color: white; }
.course-control-buttons input:focus-visible + label {
  outline: 2px solid var(--jp-brand-color1, #1976d2); outline-offset: 1px; }
"""


class Choice(anywidget.AnyWidget):
    """A labelled control over a list of choices that a keyboard and a screen reader can use
    in JupyterLab: kind "slider" (a range input: arrows, Page Up/Down, Home, End; it announces
    the chosen label, the text its readout shows), "menu" (a <select>) or "buttons" (radio
    buttons drawn as toggle buttons). Each is named by `description`, and keys pressed on it
    never reach JupyterLab's shortcuts.

    options: (label, value) pairs; `value` is the chosen one's value (set it to choose; one
    that is not among the choices is refused), `index` its position (what the browser sets).
    """

    _esm = _CONTROL_ESM
    _css = _CONTROL_CSS
    description = traitlets.Unicode().tag(sync=True)
    kind = traitlets.Enum(("slider", "menu", "buttons")).tag(sync=True)
    labels = traitlets.List(traitlets.Unicode()).tag(sync=True)
    index = traitlets.Int(0).tag(sync=True)
    value = traitlets.Any()

    def __init__(self, description: str, options: Sequence[tuple[str, object]], value,
                 kind: str = "menu"):
        self._values: list = []
        super().__init__(description=description, kind=kind)
        self.choose(options, value)

    @property
    def options(self) -> list[tuple[str, object]]:
        return list(zip(self.labels, self._values, strict=True))

    def choose(self, options: Sequence[tuple[str, object]], value) -> None:
        """Replace the choices by `options` and choose `value`, one of theirs."""
        values = [v for _, v in options]
        index = self._position(value, values)
        with self.hold_sync():
            self._values = values
            self.labels = [str(label) for label, _ in options]
            self.index = index
        self.value = value

    def _position(self, value, values: list) -> int:
        for i, known in enumerate(values):
            if known == value:
                return i
        raise ValueError(f"{self.description} must be one of {values}; got {value!r}")

    @traitlets.validate("index")
    def _index_in_range(self, proposal) -> int:
        if not 0 <= proposal["value"] < max(len(self.labels), 1):
            raise traitlets.TraitError(f"{self.description}: choice {proposal['value']} of "
                                       f"{len(self.labels)}")
        return proposal["value"]

    @traitlets.observe("index")
    def _index_moved(self, change) -> None:
        if self._values:
            self.value = self._values[change["new"]]

    @traitlets.validate("value")
    def _value_known(self, proposal):
        self._position(proposal["value"], self._values)
        return proposal["value"]

    @traitlets.observe("value")
    def _value_set(self, change) -> None:
        self.index = self._position(change["new"], self._values)


_FIGURE_ESM = r"""
function render({ model, el }) {
  el.classList.add("course-figure");
  const img = document.createElement("img");
  el.append(img);
  const show = () => {
    img.src = `data:image/png;base64,${model.get("png")}`;
    img.alt = model.get("alt");
  };
  model.on("change:png", show);
  model.on("change:alt", show);
  show();
  return () => {
    model.off("change:png", show);
    model.off("change:alt", show);
  };
}

export default { render };
"""


class FigureView(anywidget.AnyWidget):
    """A PNG (base64 `png`) shown as an image whose text alternative is `alt`."""

    _esm = _FIGURE_ESM
    _css = ".course-figure img { max-width: 100%; height: auto; }"
    png = traitlets.Unicode().tag(sync=True)
    alt = traitlets.Unicode().tag(sync=True)


class _Explorer:
    """What the explorers share: a figure's last touches, its display in the live view with
    its text alternative, and the explorer's display — the live view for JupyterLab, the
    figure with its text alternative (text/markdown) for JupyterLab without the widget's state,
    the PNG for everything else (nbconvert, the website, GitHub)."""

    figure: Figure
    figure_view: FigureView
    title: str | None

    def _finish_figure(self) -> None:
        if self.title:
            self.figure.suptitle(self.title)
        self.figure.tight_layout()

    def _show_figure(self) -> None:
        """Draw the figure (the explorer's _draw) and show it, described by _alt()."""
        self._draw()
        self._png = _png_base64(self.figure)
        self.alt = self._alt()
        with self.figure_view.hold_sync():
            self.figure_view.png = self._png
            self.figure_view.alt = self.alt

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = self.widget._repr_mimebundle_() or {}
        image = (f'<img alt="{html.escape(self.alt)}" '
                 f'src="data:image/png;base64,{self._png}">')
        data = {"image/png": self._png, "text/markdown": image, "text/plain": repr(self)}
        if _WIDGET_VIEW in bundle:
            data[_WIDGET_VIEW] = bundle[_WIDGET_VIEW]
        return data


# about ten stops a decade, each about a quarter above the last: even steps on a log scale
_ROUND_MANTISSAS = (1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0)


def temperature_stops(low: float, high: float) -> list[float]:
    """The temperatures a slider over [low, high] stops at, in increasing order: the round
    numbers 1, 1.2, 1.5, 2, 2.5, 3, 4, 5, 6 and 8 times a power of ten between the two, and
    the ends themselves. (0.05, 20) -> [0.05, 0.06, 0.08, 0.1, 0.12, ..., 15, 20]."""
    low, high = require_increasing_pair((low, high), "temperatures", example="(0.05, 20.0)")
    stops = {low, high}
    for exponent in range(math.floor(math.log10(low)), math.ceil(math.log10(high)) + 1):
        for mantissa in _ROUND_MANTISSAS:
            tau = float(f"{mantissa}e{exponent}")  # the decimal itself: 0.06, not 6 * 0.01
            if low <= tau <= high:
                stops.add(tau)
    return sorted(stops)


class TemperatureExplorer(_Explorer):
    """Attention weights alpha = masked_softmax(e / tau, mask) for a temperature tau set by a
    slider over round temperatures evenly spaced on a log scale (`temperature_stops`); draws
    the heatmap of alpha and the entropy of each row.

    Attributes after every update: `tau`, `weights` (T_q, T_k), `entropy` (T_q,) in nats,
    `figure` (a matplotlib Figure) with `heatmap_ax` (the heatmap of alpha) and `entropy_ax`
    (one bar per query row), `alt` (the figure in words), `slider` (a Choice whose value is
    tau, labelled as the figure prints it: 0.05) and `widget` (the box to display).
    Moving the slider calls `update(tau)`; tests and code may call it directly, with any tau in
    the range (the slider then stops there too).
    """

    def __init__(self, scores: torch.Tensor, query_tokens: Sequence[str],
                 key_tokens: Sequence[str], mask: torch.Tensor | None = None,
                 temperatures: tuple[float, float] = (0.05, 20.0), tau: float = 1.0,
                 title: str | None = None):
        require_float_tensor(scores, "scores", "(T_q, T_k)", ndim=2)
        require_finite(scores, "scores")
        self.scores = scores.detach().to("cpu", torch.float64)  # (T_q, T_k)
        n_q, n_k = self.scores.shape
        self.query_tokens = require_labels(query_tokens, n_q, "query_tokens", "query (row)",
                                           scores.shape, owner="scores are")
        self.key_tokens = require_labels(key_tokens, n_k, "key_tokens", "key (column)",
                                         scores.shape, owner="scores are")
        masked_softmax(self.scores, mask)  # validates the mask: bool, broadcastable to (T_q, T_k)
        self.mask = None if mask is None else mask.detach().cpu()
        self.low, self.high = require_increasing_pair(temperatures, "temperatures",
                                                      example="(0.05, 20.0)")
        self.stops = temperature_stops(self.low, self.high)
        self.title = title
        self.figure = Figure(figsize=(min(4.0 + 0.5 * n_k, 13.0), min(1.8 + 0.4 * n_q, 8.0)))
        self.figure_view = FigureView()
        start = self._in_range(tau)
        self.slider = Choice("τ (temperature)", self._slider_options(start), start,
                             kind="slider")
        self.widget = ipywidgets.VBox([self.slider, self.figure_view])
        self.update(start)
        self.slider.observe(self._on_slider, names="value")

    def _on_slider(self, change) -> None:
        if change["new"] != self.tau:
            self.update(change["new"])

    def _slider_options(self, tau: float) -> list[tuple[str, float]]:
        """The stops and tau among them, each labelled as the figure prints it."""
        return [(f"{t:.3g}", t) for t in sorted({*self.stops, tau})]

    def _in_range(self, tau) -> float:
        return require_number_in(tau, "tau", self.low, self.high,
                                 what="a positive temperature in the explorer's range")

    def update(self, tau: float) -> None:
        """Recompute alpha = masked_softmax(e / tau, mask) and the row entropies; redraw."""
        self.tau = self._in_range(tau)
        options = self._slider_options(self.tau)
        if self.slider.options != options or self.slider.value != self.tau:
            self.slider.choose(options, self.tau)  # called from code: move the slider too
        self.weights = masked_softmax(self.scores / self.tau, self.mask)  # (T_q, T_k)
        self.entropy = row_entropy(self.weights)  # (T_q,)
        self._show_figure()

    def _uniform_entropy(self) -> torch.Tensor:
        """log n for each row, n its visible keys: the entropy of a uniform row. (T_q,)"""
        if self.mask is None:
            visible = torch.full((len(self.query_tokens),), len(self.key_tokens))
        else:
            visible = self.mask.expand(self.scores.shape).sum(dim=-1)  # (T_q,)
        return torch.log(visible.clamp_min(1).double())

    def _draw(self) -> None:
        self.figure.clear()
        self.heatmap_ax, self.entropy_ax = heat_ax, entropy_ax = self.figure.subplots(
            1, 2, gridspec_kw={"width_ratios": [max(len(self.key_tokens), 3), 3]})
        attention_heatmap(self.weights, self.query_tokens, self.key_tokens, ax=heat_ax,
                          title=f"α = softmax(e / τ),  τ = {self.tau:.3g}")
        heat_ax.images[0].set_clim(0.0, 1.0)  # the same colours for every tau
        uniform = self._uniform_entropy()  # (T_q,)
        rows = np.arange(len(self.query_tokens))
        entropy_ax.barh(rows, self.entropy.numpy(), color="tab:orange")
        entropy_ax.scatter(uniform.numpy(), rows, marker="|", s=200, color="black")
        entropy_ax.set_yticks(rows, labels=self.query_tokens)
        entropy_ax.set_ylim(len(rows) - 0.5, -0.5)  # first query on top, as in the heatmap
        entropy_ax.set_xlim(0, max(float(uniform.max()), 1e-3) * 1.1)
        entropy_ax.set_xlabel("entropy of α_i, nats\n(| marks log n: uniform)")
        entropy_ax.set_title("entropy of each row")
        self._finish_figure()

    def _alt(self) -> str:
        """The figure in words: tau, then each row's largest weight and its entropy."""
        uniform = self._uniform_entropy()
        rows = []
        for i, query in enumerate(self.query_tokens):
            row = self.weights[i]
            j = int(row.argmax())
            rows.append(f"{query} sees no key" if row[j] == 0 else
                        f"{query} most on {self.key_tokens[j]} ({float(row[j]):.2f}), entropy "
                        f"{float(self.entropy[i]):.2f} of at most {float(uniform[i]):.2f}")
        title = f"{self.title}. " if self.title else ""
        return (f"{title}Heatmap of the weights α = softmax(e / τ) at τ = {self.tau:.3g} of "
                f"the queries {', '.join(self.query_tokens)} over the keys "
                f"{', '.join(self.key_tokens)}, and bars of each row's entropy in nats "
                f"(0: all on one key; log n: uniform). " + "; ".join(rows) + ".")

    def __repr__(self) -> str:
        n_q, n_k = self.scores.shape
        return (f"TemperatureExplorer(tau={self.tau:.3g}, {n_q} queries x {n_k} keys, "
                f"range [{self.low:g}, {self.high:g}])")



def temperature_explorer(scores: torch.Tensor, query_tokens: Sequence[str],
                         key_tokens: Sequence[str], mask: torch.Tensor | None = None,
                         temperatures: tuple[float, float] = (0.05, 20.0), tau: float = 1.0,
                         title: str | None = None) -> TemperatureExplorer:
    """An explorer of softmax temperature: a log-scale slider for tau in `temperatures`
    that redraws the heatmap of alpha = masked_softmax(scores / tau, mask) and the entropy
    of each row (0 = all weight on one key, log n = uniform over n visible keys).

    scores: (T_q, T_k) raw scores e; query_tokens: T_q labels; key_tokens: T_k labels;
    mask: bool, broadcastable to (T_q, T_k), True = may attend; temperatures: (lowest,
    highest) with 0 < lowest < highest; tau: the starting temperature, inside that range.
    Returns a TemperatureExplorer; make it the last expression of a cell (or `display` it)
    to show the slider and the figure.
    """
    return TemperatureExplorer(scores, query_tokens, key_tokens, mask=mask,
                               temperatures=temperatures, tau=tau, title=title)


# ----------------------------------------------------------------------------- attention maps

MEAN = "mean"  # the head "number" that shows the mean of a layer's heads
_EVERY = -1    # the query menu's value for "every query"


def _require_stack(attentions, name: str) -> list[torch.Tensor]:
    """L tensors (B, n_heads, T_q, T_k) of one shape, or one such tensor (L = 1): checked,
    detached, float64 on the CPU."""
    if isinstance(attentions, torch.Tensor):
        attentions = [attentions]
    if isinstance(attentions, str | Mapping) or not isinstance(attentions, Sequence) \
            or not len(attentions):
        raise ValueError(f"{name} must be a tuple or list of L tensors (B, n_heads, T_q, T_k) "
                         f"(a model's output.attentions), or one such tensor; got "
                         f"{type(attentions).__name__}"
                         f"{' of length 0' if isinstance(attentions, Sequence) else ''}")
    first = attentions[0]
    require_float_tensor(first, f"{name}[0]", "(B, n_heads, T_q, T_k)", ndim=4)
    maps = []
    for i, a in enumerate(attentions):
        require_float_tensor(a, f"{name}[{i}]", "(B, n_heads, T_q, T_k)", ndim=4)
        if a.shape != first.shape:
            raise ValueError(f"{name}[{i}] must have the shape of {name}[0], "
                             f"{shape_str(first.shape)} (B, n_heads, T_q, T_k); got "
                             f"{shape_str(a.shape)}")
        require_finite(a, f"{name}[{i}]")
        maps.append(a.detach().to("cpu", torch.float64))
    return maps


def _require_token_lists(tokens, name: str, B: int, T: int, what: str) -> list[list[str]]:
    """B lists of at most T labels (a single list of labels when B = 1)."""
    if isinstance(tokens, str) or not isinstance(tokens, Sequence):
        raise ValueError(f"{name} must be a list of B = {B} lists of tokens, one per sentence; "
                         f"got {type(tokens).__name__}")
    if B == 1 and len(tokens) and all(isinstance(t, str) for t in tokens):
        tokens = [tokens]  # one sentence: a plain list of tokens will do
    if len(tokens) != B:
        raise ValueError(f"{name} must hold B = {B} lists of tokens, one per sentence of the "
                         f"attention maps; got {len(tokens)}")
    checked = []
    for b, sentence in enumerate(tokens):
        if isinstance(sentence, str) or not isinstance(sentence, Sequence):
            raise ValueError(f"{name}[{b}] must be a list of tokens (str); got "
                             f"{type(sentence).__name__}")
        if not 1 <= len(sentence) <= T:
            raise ValueError(f"{name}[{b}] must hold 1 to {T} tokens, one per {what} of the "
                             f"maps (T = {T}; padding left out); got {len(sentence)}")
        checked.append([str(t) for t in sentence])
    return checked


class AttentionExplorer(_Explorer):
    """The attention maps of a stack of layers, one head of one layer on one sentence at a
    time: a heatmap of alpha (rows = queries) and the same weights as lines from each query
    (left) to the keys (right). Controls: layer, head (or the mean of the layer's heads),
    sentence, one query token (or all) and, when several kinds of maps are given, which one.

    Attributes after every update: `layer`, `head` (an int, or "mean"), `sentence`, `query`
    (an int or None), `view` (the name of the maps shown), `weights` ((T_q, T_k) float64, the
    map shown, cut to the sentence's tokens), `figure` with `heatmap_ax` and `lines_ax`,
    `alt` (the figure in words), the controls (each a Choice) `layer_slider`, `head_menu`,
    `sentence_menu`, `query_menu`, `view_buttons` (None with one kind of maps), and `widget`
    (the box to display).
    Moving a control calls `update(...)`; tests and code may call it directly.
    """

    def __init__(self, attentions, tokens, key_tokens=None, names: Sequence[str] | None = None,
                 layer: int = 0, head: int | str = 0, sentence: int = 0,
                 query: int | None = None, view: str | None = None,
                 min_weight: float = 0.02, title: str | None = None):
        # Long on purpose: the explorer's widgets, built in the order they are displayed.
        if isinstance(attentions, Mapping):
            if not attentions:
                raise ValueError("attentions as a mapping must hold at least one kind of maps, "
                                 "{name: L tensors (B, n_heads, T_q, T_k)}; got an empty one")
            views = {str(k): _require_stack(v, f"attentions[{k!r}]")
                     for k, v in attentions.items()}
        else:
            views = {"attention": _require_stack(attentions, "attentions")}
        shapes = {name: maps[0].shape for name, maps in views.items()}
        first = next(iter(views))
        for name, shape in shapes.items():
            if shape != shapes[first] or len(views[name]) != len(views[first]):
                raise ValueError(f"every kind of maps must have the same number of layers and "
                                 f"shape: {first!r} has {len(views[first])} x "
                                 f"{shape_str(shapes[first])}, {name!r} "
                                 f"{len(views[name])} x {shape_str(shape)}")
        self.views = views
        self.n_layers = len(views[first])
        B, self.n_heads, T_q, T_k = shapes[first]
        self.tokens = _require_token_lists(tokens, "tokens", B, T_q, "query (row)")
        if key_tokens is None:
            if T_q != T_k:
                raise ValueError(f"the maps are not square (T_q = {T_q}, T_k = {T_k}): pass "
                                 f"key_tokens, the tokens of the keys")
            self.key_tokens = self.tokens
        else:
            self.key_tokens = _require_token_lists(key_tokens, "key_tokens", B, T_k,
                                                   "key (column)")
        if names is None:
            names = [_shorten(" ".join(t)) for t in self.tokens]
        self.names = require_labels(names, B, "names", "sentence", (B,),
                                    owner="the batch of the maps is")
        self.min_weight = require_fraction(min_weight, "min_weight", what="a weight")
        self.title = title
        self.figure = Figure()
        self.figure_view = FigureView()
        self._quiet = False  # True while update() moves the controls itself
        self.layer_slider = Choice("layer", [(str(i), i) for i in range(self.n_layers)], 0,
                                   kind="slider")
        self.head_menu = Choice(
            "head", [(str(h), h) for h in range(self.n_heads)] + [("mean of heads", MEAN)], 0)
        self.sentence_menu = Choice(
            "sentence", [(f"{b}: {name}", b) for b, name in enumerate(self.names)], 0)
        self.query_menu = Choice("query", self._query_options(0), _EVERY)
        self.view_buttons = None
        rows = [ipywidgets.HBox([self.layer_slider, self.head_menu, self.query_menu]),
                self.sentence_menu]
        if len(views) > 1:
            self.view_buttons = Choice("maps", [(name, name) for name in views], first,
                                       kind="buttons")
            rows.append(self.view_buttons)
        self.widget = ipywidgets.VBox([*rows, self.figure_view])
        self.layer, self.head, self.sentence, self.query, self.view = 0, 0, 0, None, first
        self.update(layer=layer, head=head, sentence=sentence, query=query,
                    view=first if view is None else view)
        for control, key in ((self.layer_slider, "layer"), (self.head_menu, "head"),
                             (self.sentence_menu, "sentence"), (self.query_menu, "query"),
                             (self.view_buttons, "view")):
            if control is not None:
                control.observe(lambda change, key=key: self._on_control(key, change),
                                names="value")

    # ------------------------------------------------------------------------- state

    def _query_options(self, sentence: int) -> list[tuple[str, int]]:
        # -1 stands for "every query" in the menu (a menu entry whose value is None shows
        # as an empty selection)
        return [("every query", _EVERY)] + [(f"{i}: {t}", i)
                                            for i, t in enumerate(self.tokens[sentence])]

    def _on_control(self, key: str, change) -> None:
        new = None if key == "query" and change["new"] == _EVERY else change["new"]
        if not self._quiet and new != getattr(self, key):
            self.update(**{key: new})

    def update(self, layer: int | None = None, head: int | str | None = None,
               sentence: int | None = None, query: int | None | str = "keep",
               view: str | None = None) -> None:
        """Show another layer, head (an int or "mean"), sentence, query (an int, or None for
        every query; a new sentence resets it to None) or kind of maps; what is not given
        stays. Checks everything before changing anything; redraws."""
        layer = self.layer if layer is None else require_int(layer, "layer", 0,
                                                             self.n_layers - 1)
        if head is None:
            head = self.head
        elif head != MEAN:
            head = require_int(head, "head (or \"mean\")", 0, self.n_heads - 1)
        new_sentence = sentence is not None and sentence != self.sentence
        sentence = self.sentence if sentence is None else require_int(
            sentence, "sentence", 0, len(self.tokens) - 1)
        if query == "keep":
            query = None if new_sentence else self.query
        elif query is not None:
            query = require_int(query, "query", 0, len(self.tokens[sentence]) - 1)
        if view is None:
            view = self.view
        elif view not in self.views:
            raise ValueError(f"view must be one of {tuple(self.views)}; got {view!r}")
        self.layer, self.head, self.sentence, self.query, self.view = \
            layer, head, sentence, query, view
        n_q, n_k = len(self.tokens[sentence]), len(self.key_tokens[sentence])
        maps = self.views[view][layer][sentence, :, :n_q, :n_k]  # (n_heads, n_q, n_k)
        self.weights = maps.mean(0) if head == MEAN else maps[head]  # (n_q, n_k)
        self._sync_controls()
        self._show_figure()

    def _sync_controls(self) -> None:
        self._quiet = True
        try:
            self.layer_slider.value = self.layer
            self.head_menu.value = self.head
            self.sentence_menu.value = self.sentence
            self.query_menu.choose(self._query_options(self.sentence),
                                   _EVERY if self.query is None else self.query)
            if self.view_buttons is not None:
                self.view_buttons.value = self.view
        finally:
            self._quiet = False

    # ------------------------------------------------------------------------- drawing

    def _draw(self) -> None:
        queries = self.tokens[self.sentence]
        keys = self.key_tokens[self.sentence]
        n_q, n_k = len(queries), len(keys)
        self.figure.clear()
        self.figure.set_size_inches(min(4.5 + 0.55 * n_k, 16.0), min(2.2 + 0.3 * n_q, 11.0))
        self.heatmap_ax, self.lines_ax = self.figure.subplots(
            1, 2, gridspec_kw={"width_ratios": [max(n_k, 3), 0.3 * max(n_k, 3) + 3.0]})
        head = "mean of heads" if self.head == MEAN else f"head {self.head}"
        where = f"layer {self.layer}, {head}"
        label = "" if len(self.views) == 1 else f"{self.view}: "
        attention_heatmap(self.weights, queries, keys, ax=self.heatmap_ax, annotate=False,
                          title=f"{label}{where}")
        if self.query is not None:  # frame the chosen query's row
            self.heatmap_ax.axhspan(self.query - 0.5, self.query + 0.5, fill=False,
                                    edgecolor="red", linewidth=2)
        attention_lines(self.weights, queries, keys, ax=self.lines_ax, query=self.query,
                        min_weight=self.min_weight,
                        title=f"lines: weight ≥ {self.min_weight:g}")
        self._finish_figure()

    def _alt(self) -> str:
        """The figure in words: which map, then the chosen query's drawn lines, strongest
        first, or the largest weight of every query."""
        queries = self.tokens[self.sentence]
        keys = self.key_tokens[self.sentence]
        head = "the mean of its heads" if self.head == MEAN else f"head {self.head}"
        view = f"{self.view}, " if len(self.views) > 1 else ""
        title = f"{self.title}. " if self.title else ""
        shown = (f"{title}{view}layer {self.layer}, {head}, sentence {self.sentence} "
                 f"({' '.join(queries)}): a heatmap of the weights of its {len(queries)} "
                 f"queries (rows) over its {len(keys)} keys")
        if self.query is None:
            strongest = "; ".join(f"{q} on {keys[int(row.argmax())]} ({float(row.max()):.2f})"
                                  for q, row in zip(queries, self.weights, strict=True))
            return (f"{shown}, and lines from every query to each key it gives at least "
                    f"{self.min_weight:g}. The largest weight of each query: {strongest}.")
        row = self.weights[self.query]
        order = torch.argsort(row, descending=True, stable=True).tolist()
        lines = ", ".join(f"{keys[j]} ({float(row[j]):.2f})" for j in order
                          if row[j] >= self.min_weight)
        return (f"{shown}, the row of query {self.query} ({queries[self.query]}) framed, and "
                f"lines from it to each key it gives at least {self.min_weight:g}: "
                f"{lines or 'none'}.")

    def __repr__(self) -> str:
        head = "mean" if self.head == MEAN else self.head
        view = "" if len(self.views) == 1 else f", view={self.view!r}"
        return (f"AttentionExplorer(layer={self.layer}, head={head}, sentence={self.sentence}, "
                f"query={self.query}{view}; {self.n_layers} layers x {self.n_heads} heads, "
                f"{len(self.tokens)} sentences)")



def _shorten(text: str, width: int = 70) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def attention_explorer(attentions, tokens, key_tokens=None, names: Sequence[str] | None = None,
                       layer: int = 0, head: int | str = 0, sentence: int = 0,
                       query: int | None = None, view: str | None = None,
                       min_weight: float = 0.02, title: str | None = None) -> AttentionExplorer:
    """An explorer of the attention maps of a stack of layers, offline (ipywidgets and
    matplotlib only): a slider for the layer, drop-downs for the head (or the mean of the
    heads), the sentence and one query token, and the chosen map drawn as a heatmap and as
    lines from the queries (left) to the keys (right), one line per weight >= min_weight.

    attentions: L tensors (B, n_heads, T_q, T_k), e.g. a BERT's `output.attentions` (layer 0
    is the first; rows = queries), or one such tensor (L = 1); or a dict {name: such a
    sequence} of several kinds of maps of one shape (say raw weights and norm-weighted ones),
    with buttons to switch between them. tokens: per sentence, the list of its tokens, T_b of
    them (T_b <= T_q: the maps are cut to the first T_b rows, so padding at the end is left
    out); one plain list of tokens when B = 1. key_tokens: the same for the keys (default:
    tokens; needed when the maps are not square, e.g. cross-attention). names: B labels for
    the sentence menu (default: the tokens joined). layer, head ("mean" for the mean of the
    heads), sentence, query (None = every query), view: where to start.
    Returns an AttentionExplorer; make it the last expression of a cell (or `display` it).
    Executed without a browser, it leaves a PNG of the starting view in the cell's output.
    """
    return AttentionExplorer(attentions, tokens, key_tokens=key_tokens, names=names,
                             layer=layer, head=head, sentence=sentence, query=query, view=view,
                             min_weight=min_weight, title=title)
