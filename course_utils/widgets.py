"""Interactive explorers (ipywidgets) for the lectures. No model code: they take tensors and
draw them with `course_utils.viz` and `course_utils.attention`.

    temperature_explorer   a slider for the temperature tau of softmax(e / tau): the attention
                           heatmap and the entropy of every row, redrawn as tau moves

Every explorer also works where no browser runs (nbconvert, nbval, CI): displaying it puts a
PNG of the current figure into the cell's output next to the widget view, so a notebook
executed headless and read statically (without widget state) still shows the picture.
JupyterLab, which renders the widget, shows the live view instead of the PNG.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Sequence

import ipywidgets
import numpy as np
import torch
from matplotlib.figure import Figure

from course_utils._checks import (
    require_finite,
    require_float_tensor,
    require_increasing_pair,
    require_labels,
    require_number_in,
)
from course_utils.attention import masked_softmax
from course_utils.viz import attention_heatmap

__all__ = ["TemperatureExplorer", "row_entropy", "temperature_explorer"]

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


class TemperatureExplorer:
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
        if self.title:
            self.figure.suptitle(self.title)
        self.figure.tight_layout()

    def __repr__(self) -> str:
        n_q, n_k = self.scores.shape
        return (f"TemperatureExplorer(tau={self.tau:.3g}, {n_q} queries x {n_k} keys, "
                f"range [{self.low:g}, {self.high:g}])")

    def _repr_mimebundle_(self, include=None, exclude=None):
        # The widget view for JupyterLab; the PNG of the current figure for everything that
        # cannot render widgets (nbconvert, GitHub, a notebook opened without its kernel).
        bundle = self.widget._repr_mimebundle_() or {}
        data = {"image/png": self._png, "text/plain": repr(self)}
        if _WIDGET_VIEW in bundle:
            data[_WIDGET_VIEW] = bundle[_WIDGET_VIEW]
        return data


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
