"""Interactive explorers (ipywidgets) for the lectures. No model code: they take tensors and
draw them with `course_utils.viz` and `course_utils.attention`.

    temperature_explorer   a slider for the temperature tau of softmax(e / tau): the attention
                           heatmap and the entropy of every row, redrawn as tau moves
    attention_explorer     the attention maps of a stack of layers (BERT's output.attentions,
                           MiniLM's or our own models'): choose the layer, the head (or their
                           mean), the sentence and a query token, and see the map as a heatmap
                           and as lines from queries to keys (like bertviz's "head view", drawn
                           with matplotlib: nothing is fetched from the net)

Every explorer also works where no browser runs (nbconvert, nbval, CI): displaying it puts a
PNG of the current figure into the cell's output next to the widget view, so a notebook
executed headless and read statically (without widget state) still shows the picture.
JupyterLab, which renders the widget, shows the live view instead of the PNG.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Mapping, Sequence

import ipywidgets
import numpy as np
import torch
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

__all__ = ["AttentionExplorer", "TemperatureExplorer", "attention_explorer", "row_entropy",
           "temperature_explorer"]

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


class _Explorer:
    """What the explorers share: a figure's last touches, and their display — the live
    ipywidgets view for JupyterLab, the PNG of the current figure for everything that cannot
    render widgets (nbconvert, GitHub, a notebook opened without its kernel)."""

    figure: Figure
    title: str | None

    def _finish_figure(self) -> None:
        if self.title:
            self.figure.suptitle(self.title)
        self.figure.tight_layout()

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = self.widget._repr_mimebundle_() or {}
        data = {"image/png": self._png, "text/plain": repr(self)}
        if _WIDGET_VIEW in bundle:
            data[_WIDGET_VIEW] = bundle[_WIDGET_VIEW]
        return data


class TemperatureExplorer(_Explorer):
    """Attention weights alpha = masked_softmax(e / tau, mask) for a temperature tau set by a
    log-scale slider; draws the heatmap of alpha and the entropy of each row.

    Attributes after every update: `tau`, `weights` (T_q, T_k), `entropy` (T_q,) in nats,
    `figure` (a matplotlib Figure) with `heatmap_ax` (the heatmap of alpha) and `entropy_ax`
    (one bar per query row),
    `slider` (the FloatLogSlider) and `widget` (the ipywidgets box to display).
    Moving the slider calls `update(tau)`; tests and code may call it directly.
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
        self.title = title
        self.figure = Figure(figsize=(min(4.0 + 0.5 * n_k, 13.0), min(1.8 + 0.4 * n_q, 8.0)))
        self._output = ipywidgets.Output()
        self.slider = ipywidgets.FloatLogSlider(
            value=self._in_range(tau), base=10, min=math.log10(self.low),
            max=math.log10(self.high), step=0.02, description="τ (temperature)",
            readout_format=".3g", continuous_update=False,
            style={"description_width": "initial"},
            layout=ipywidgets.Layout(width="520px"))
        self.widget = ipywidgets.VBox([self.slider, self._output])
        self.update(self.slider.value)
        self.slider.observe(self._on_slider, names="value")

    def _on_slider(self, change) -> None:
        if not math.isclose(change["new"], self.tau, rel_tol=1e-12):
            self.update(change["new"])

    def _in_range(self, tau) -> float:
        return require_number_in(tau, "tau", self.low, self.high,
                                 what="a positive temperature in the explorer's range",
                                 rel_tol=1e-9)

    def update(self, tau: float) -> None:
        """Recompute alpha = masked_softmax(e / tau, mask) and the row entropies; redraw."""
        self.tau = self._in_range(tau)
        if not math.isclose(self.slider.value, self.tau, rel_tol=1e-12):
            self.slider.value = self.tau  # called from code: move the slider too (no redraw)
        self.weights = masked_softmax(self.scores / self.tau, self.mask)  # (T_q, T_k)
        self.entropy = row_entropy(self.weights)  # (T_q,)
        self._draw()
        self._png = _png_base64(self.figure)
        self._output.outputs = ({"output_type": "display_data",
                                 "data": {"image/png": self._png, "text/plain": repr(self)},
                                 "metadata": {}},)

    def _draw(self) -> None:
        self.figure.clear()
        self.heatmap_ax, self.entropy_ax = heat_ax, entropy_ax = self.figure.subplots(
            1, 2, gridspec_kw={"width_ratios": [max(len(self.key_tokens), 3), 3]})
        attention_heatmap(self.weights, self.query_tokens, self.key_tokens, ax=heat_ax,
                          title=f"α = softmax(e / τ),  τ = {self.tau:.3g}")
        heat_ax.images[0].set_clim(0.0, 1.0)  # the same colours for every tau
        if self.mask is None:
            visible = torch.full((len(self.query_tokens),), len(self.key_tokens))
        else:
            visible = self.mask.expand(self.scores.shape).sum(dim=-1)  # (T_q,)
        uniform = torch.log(visible.clamp_min(1).double())  # (T_q,) entropy of a uniform row
        rows = np.arange(len(self.query_tokens))
        entropy_ax.barh(rows, self.entropy.numpy(), color="tab:orange")
        entropy_ax.scatter(uniform.numpy(), rows, marker="|", s=200, color="black")
        entropy_ax.set_yticks(rows, labels=self.query_tokens)
        entropy_ax.set_ylim(len(rows) - 0.5, -0.5)  # first query on top, as in the heatmap
        entropy_ax.set_xlim(0, max(float(uniform.max()), 1e-3) * 1.1)
        entropy_ax.set_xlabel("entropy of α_i, nats\n(| marks log n: uniform)")
        entropy_ax.set_title("entropy of each row")
        self._finish_figure()

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
    the controls `layer_slider`, `head_dropdown`, `sentence_dropdown`, `query_dropdown`,
    `view_buttons` (None with one kind of maps), and `widget` (the box to display).
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
        self._output = ipywidgets.Output()
        self._quiet = False  # True while update() moves the controls itself
        layout = {"style": {"description_width": "initial"}}
        self.layer_slider = ipywidgets.IntSlider(
            value=0, min=0, max=self.n_layers - 1, description="layer",
            continuous_update=False, **layout)
        self.head_dropdown = ipywidgets.Dropdown(
            options=[(str(h), h) for h in range(self.n_heads)] + [("mean of heads", MEAN)],
            value=0, description="head", layout=ipywidgets.Layout(width="170px"), **layout)
        self.sentence_dropdown = ipywidgets.Dropdown(
            options=[(f"{b}: {name}", b) for b, name in enumerate(self.names)], value=0,
            description="sentence", layout=ipywidgets.Layout(width="520px"), **layout)
        self.query_dropdown = ipywidgets.Dropdown(
            options=self._query_options(0), value=_EVERY, description="query",
            layout=ipywidgets.Layout(width="220px"), **layout)
        self.view_buttons = None
        controls = [self.layer_slider, self.head_dropdown, self.query_dropdown]
        if len(views) > 1:
            self.view_buttons = ipywidgets.ToggleButtons(
                options=list(views), value=first, description="maps",
                style={"description_width": "initial", "button_width": "auto"})
        rows = [ipywidgets.HBox(controls), self.sentence_dropdown]
        if self.view_buttons is not None:
            rows.append(self.view_buttons)
        self.widget = ipywidgets.VBox([*rows, self._output])
        self.layer, self.head, self.sentence, self.query, self.view = 0, 0, 0, None, first
        self.update(layer=layer, head=head, sentence=sentence, query=query,
                    view=first if view is None else view)
        for control, key in ((self.layer_slider, "layer"), (self.head_dropdown, "head"),
                             (self.sentence_dropdown, "sentence"),
                             (self.query_dropdown, "query"), (self.view_buttons, "view")):
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
        self._draw()
        self._png = _png_base64(self.figure)
        self._output.outputs = ({"output_type": "display_data",
                                 "data": {"image/png": self._png, "text/plain": repr(self)},
                                 "metadata": {}},)

    def _sync_controls(self) -> None:
        self._quiet = True
        try:
            self.layer_slider.value = self.layer
            self.head_dropdown.value = self.head
            if self.sentence_dropdown.value != self.sentence:
                self.sentence_dropdown.value = self.sentence
            options = self._query_options(self.sentence)
            if list(self.query_dropdown.options) != options:
                self.query_dropdown.options = options
            self.query_dropdown.value = _EVERY if self.query is None else self.query
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
