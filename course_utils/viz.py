"""Plots for the course: attention heatmaps and accuracy curves.

    attention_heatmap         one attention matrix, queries down the side, keys along the bottom
    attention_lines           the same matrix as lines from each query to the keys it attends
                              to (queries on the left, keys on the right; bertviz's "head view")
    head_heatmap              one number per (layer, head): layers down the side, heads along
                              the bottom (a statistic, an accuracy, the effect of switching a
                              head off)
    accuracy_by_length_plot   accuracy per length bucket, one line per model
    scaling_plot              how costs (bytes, seconds) grow with the sequence length T, on
                              log-log axes, with guide lines proportional to T and T^2 (unit 09)
    decoder_step_diagram      one step of Bahdanau's or Luong's attention decoder, as boxes
                              and arrows (unit 03)
    self_attention_diagram    Q = XW^Q, K = XW^K, V = XW^V and softmax(QK^T / sqrt(d_k)) V,
                              every matrix a rectangle of its shape (unit 05)
    multihead_diagram         the multi-head block: split into heads, attend per head,
                              concatenate, W^O (unit 05)
    split_heads_diagram       which cells of x (T, d_model) each head gets, and what a reshape
                              without the transpose gives instead (unit 05)
    transformer_diagram       the whole encoder-decoder Transformer: embeddings and positions,
                              L encoder and L decoder layers, linear and softmax (unit 06)
    bag_of_words_diagram      unit 01's attention bag: window, scores against the previous
                              word, softmax, the weighted bag, the output layer
    norm_decomposition_diagram  one query's attention output as the terms alpha_ij f(x_j)
                              added tip to tail, each to scale (Kobayashi et al., unit 08)

Plotting lives here and never inside model code: models return their attention weights,
and these functions draw them.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.colors import to_rgba
from matplotlib.patches import FancyBboxPatch
from matplotlib.ticker import PercentFormatter

from course_utils._checks import (
    require_choice,
    require_fraction,
    require_heads,
    require_int,
    require_labels,
    require_matrix,
)

__all__ = ["accuracy_by_length_plot", "attention_heatmap", "attention_lines",
           "bag_of_words_diagram", "decoder_step_diagram", "head_heatmap", "multihead_diagram",
           "norm_decomposition_diagram", "scaling_plot", "self_attention_diagram",
           "split_heads_diagram", "transformer_diagram"]


def attention_heatmap(
    weights,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    ax: plt.Axes | None = None,
    title: str | None = None,
    annotate: bool | None = None,
    cmap: str = "viridis",
    colorbar: bool = True,
) -> plt.Axes:
    """Draw an attention matrix with the query tokens down the side and the key tokens along
    the bottom, so that row i shows where query i looked.

    weights: (T_q, T_k) tensor or array; query_tokens: T_q labels; key_tokens: T_k labels.
    annotate: write each weight in its cell (default: when the matrix has at most 12x12 cells).
    Returns the Axes it drew on.
    """
    matrix = require_matrix(weights)
    n_q, n_k = matrix.shape
    query_tokens = require_labels(query_tokens, n_q, "query_tokens", "row", matrix.shape,
                                  owner="weights are")
    key_tokens = require_labels(key_tokens, n_k, "key_tokens", "column", matrix.shape,
                                owner="weights are")
    if ax is None:
        width = min(2.0 + 0.45 * n_k, 14.0)
        height = min(1.5 + 0.4 * n_q, 12.0)
        _, ax = plt.subplots(figsize=(width, height))
    vmax = max(float(matrix.max()), 1e-12)
    image = ax.imshow(matrix, cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto")
    ax.set_xticks(range(n_k), labels=[str(t) for t in key_tokens])
    ax.set_yticks(range(n_q), labels=[str(t) for t in query_tokens])
    plt.setp(ax.get_xticklabels(), rotation=45, ha="right", rotation_mode="anchor")
    ax.set_xlabel("keys (attended to)")
    ax.set_ylabel("queries")
    if title:
        ax.set_title(title)
    if annotate is None:
        annotate = n_q <= 12 and n_k <= 12
    if annotate:
        for i in range(n_q):
            for j in range(n_k):
                value = matrix[i, j]
                color = "black" if value > 0.6 * vmax else "white"
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=8, color=color)
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="attention weight")
    return ax


def attention_lines(
    weights,
    query_tokens: Sequence[str],
    key_tokens: Sequence[str],
    ax: plt.Axes | None = None,
    title: str | None = None,
    min_weight: float = 0.02,
    query: int | None = None,
    color: str = "tab:blue",
) -> plt.Axes:
    """Draw an attention matrix as lines: the query tokens in a column on the left, the key
    tokens in a column on the right, and a line from query i to key j whose opacity is
    sqrt(alpha_ij) (so that weights of 0.1-0.3 stay visible) and whose width grows with
    alpha_ij, as in the "head view" of bertviz (Vig, 2019). Lines of weight below
    `min_weight` are left out.

    weights: (T_q, T_k) tensor or array, rows = queries; query_tokens: T_q labels;
    key_tokens: T_k labels. query: draw only the lines of that query row (its label in bold),
    or None for every row. The lines are one LineCollection, `ax.collections[0]`, with one
    segment ((0, -i), (1, -j)) per line drawn. Returns the Axes.
    """
    matrix = require_matrix(weights)
    n_q, n_k = matrix.shape
    query_tokens = require_labels(query_tokens, n_q, "query_tokens", "row", matrix.shape,
                                  owner="weights are")
    key_tokens = require_labels(key_tokens, n_k, "key_tokens", "column", matrix.shape,
                                owner="weights are")
    min_weight = require_fraction(min_weight, "min_weight", what="a weight")
    if query is not None:
        query = require_int(query, "query", low=0, high=n_q - 1)
    if ax is None:
        _, ax = plt.subplots(figsize=(3.2, min(1.0 + 0.3 * max(n_q, n_k), 12.0)))
    rows = range(n_q) if query is None else [query]
    segments, colors, widths = [], [], []
    red, green, blue, _ = to_rgba(color)
    for i in rows:
        for j in range(n_k):
            w = float(matrix[i, j])
            if w >= min_weight and w > 0:
                segments.append(((0.0, -i), (1.0, -j)))
                colors.append((red, green, blue, min(w, 1.0) ** 0.5))
                widths.append(0.8 + 4.0 * min(w, 1.0))
    ax.add_collection(LineCollection(segments, colors=colors, linewidths=widths))
    for i, token in enumerate(query_tokens):
        ax.text(-0.04, -i, token, ha="right", va="center", fontsize=9,
                fontweight="bold" if i == query else "normal")
    for j, token in enumerate(key_tokens):
        ax.text(1.04, -j, token, ha="left", va="center", fontsize=9)
    ax.set_xlim(-0.6, 1.6)
    ax.set_ylim(-max(n_q, n_k) + 0.5, 0.5)
    ax.set_xticks([0, 1], labels=["queries", "keys"])
    ax.set_yticks([])
    for side in ("left", "right", "top", "bottom"):
        ax.spines[side].set_visible(False)
    if title:
        ax.set_title(title)
    return ax


def head_heatmap(
    values,
    ax: plt.Axes | None = None,
    title: str | None = None,
    label: str | None = None,
    fmt: str = ".2f",
    annotate: bool = True,
    cmap: str = "viridis",
    vmin: float | None = None,
    vmax: float | None = None,
    centre: bool = False,
    colorbar: bool = True,
) -> plt.Axes:
    """Draw one number per attention head: row l is layer l, column h is head h (both
    counted from 0, as the tensors index them).

    values: (L, n_heads) tensor or array, e.g. attention_to_tokens(...) or each_head_off(...).
    label: the colour bar's label; fmt: the format of the number written in each cell
    (annotate=False writes none); vmin, vmax: the ends of the colour scale (default: the
    smallest and largest value); centre=True: a diverging scale (blue below 0, red above)
    symmetric about 0, for changes. Returns the Axes.
    """
    matrix = require_matrix(values)
    n_layers, n_heads = matrix.shape
    if ax is None:
        _, ax = plt.subplots(figsize=(min(2.0 + 0.55 * n_heads, 14.0),
                                      min(1.2 + 0.42 * n_layers, 10.0)))
    if centre:
        bound = max(float(np.abs(matrix).max()), 1e-12)
        vmin, vmax, cmap = -bound if vmin is None else vmin, bound if vmax is None else vmax, \
            "RdBu_r" if cmap == "viridis" else cmap
    image = ax.imshow(matrix, cmap=cmap, vmin=vmin, vmax=vmax, aspect="auto")
    ax.set_xticks(range(n_heads))
    ax.set_yticks(range(n_layers))
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    if title:
        ax.set_title(title)
    if annotate:
        low, high = image.get_clim()
        for layer in range(n_layers):
            for head in range(n_heads):
                value = matrix[layer, head]
                share = (value - low) / (high - low) if high > low else 0.5
                dark = abs(share - 0.5) > 0.3 if centre else share < 0.6
                ax.text(head, layer, format(value, fmt), ha="center", va="center",
                        fontsize=7, color="white" if dark else "black")
    if colorbar:
        ax.figure.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label=label or "")
    return ax


def _accuracy_and_count(value, model: str, bucket: str) -> tuple[float, int | None]:
    """(accuracy, count or None) from a float or an (accuracy, count) pair; checked."""
    name = f"results[{model!r}][{bucket!r}]"
    count = None
    if isinstance(value, tuple | list):
        if len(value) != 2:
            raise ValueError(f"{name} must be an accuracy or an (accuracy, count) pair; "
                             f"got {value!r}")
        value, count = value
        count = require_int(count, f"the count of {name}", low=0)
    return require_fraction(value, name, what="an accuracy"), count


def accuracy_by_length_plot(
    results: Mapping[str, Mapping[str, object]],
    ax: plt.Axes | None = None,
    title: str | None = None,
    ylabel: str = "exact match",
    xlabel: str = "source length (words)",
) -> plt.Axes:
    """Draw accuracy against length bucket, one line (with markers) per model.

    results: {model name: {bucket label: accuracy or (accuracy, count)}}, accuracies in
    [0, 1], e.g. `{"forward": training.accuracy_by_bucket(correct, labels), ...}`.
    The buckets run along x in the order the models list them (the first model's order,
    then any bucket only a later model has); a bucket a model lacks is a gap in its line.
    When every model gives the same count for a bucket, the tick label shows it ("5-10",
    "n=152" below). The y axis shows percentages from 0 to 100. Returns the Axes.
    """
    if not isinstance(results, Mapping) or not results:
        raise ValueError("results must be a non-empty mapping {model name: {bucket: accuracy}}; "
                         f"got {results!r}")
    table: dict[str, dict[str, tuple[float, int | None]]] = {}
    for model, buckets in results.items():
        if not isinstance(buckets, Mapping) or not buckets:
            raise ValueError(f"results[{model!r}] must be a non-empty mapping "
                             f"{{bucket: accuracy}}; got {buckets!r}")
        table[str(model)] = {str(b): _accuracy_and_count(v, model, b) for b, v in buckets.items()}
    order = list(dict.fromkeys(b for buckets in table.values() for b in buckets))
    if ax is None:
        _, ax = plt.subplots(figsize=(max(4.5, 1.1 * len(order) + 2.0), 3.6))
    x = np.arange(len(order))  # (n_buckets,)
    for model, buckets in table.items():
        y = [buckets[b][0] if b in buckets else np.nan for b in order]  # (n_buckets,)
        ax.plot(x, y, marker="o", label=model)
    tick_labels = []
    for b in order:
        counts = {buckets[b][1] for buckets in table.values() if b in buckets}
        count = counts.pop() if len(counts) == 1 else None
        tick_labels.append(b if count is None else f"{b}\nn={count}")
    ax.set_xticks(x, labels=tick_labels)
    ax.set_ylim(-0.02, 1.02)
    ax.yaxis.set_major_formatter(PercentFormatter(xmax=1.0))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, alpha=0.3)
    ax.legend()
    if title:
        ax.set_title(title)
    return ax



def scaling_plot(
    lengths: Sequence[int],
    series: Mapping[str, Sequence[float]],
    ax: plt.Axes | None = None,
    title: str | None = None,
    ylabel: str = "cost",
    xlabel: str = "sequence length T",
    guides: Sequence[int] = (1, 2),
) -> plt.Axes:
    """Draw how costs grow with the sequence length, on log-log axes: one line per entry of
    `series` ({name: one positive value per length, NaN where not measured}), and a grey guide
    proportional to T^p for each p in `guides` (dotted, dashed, ...; in the legend), through
    the last point of the first series. A line parallel to the T^2 guide grows quadratically,
    one parallel to T linearly. The lengths are ticked as they are (powers of two read best).
    Returns the Axes."""
    lengths = [require_int(t, "each length in lengths") for t in lengths]
    if not lengths:
        raise ValueError("lengths must hold at least one sequence length")
    if not isinstance(series, Mapping) or not series:
        raise ValueError(f"series must be a non-empty mapping {{name: values}}; got {series!r}")
    table = {}
    for name, values in series.items():
        values = np.asarray(values, dtype=np.float64)
        if values.shape != (len(lengths),) or np.any(values[~np.isnan(values)] <= 0):
            raise ValueError(f"series[{name!r}] must hold {len(lengths)} positive values (NaN "
                             f"where not measured), one per length; got {values.tolist()}")
        table[str(name)] = values
    if ax is None:
        _, ax = plt.subplots(figsize=(5.5, 3.8))
    x = np.asarray(lengths, dtype=np.float64)
    for name, values in table.items():
        ax.plot(x, values, "o-", markersize=4, label=name)
    first = next(iter(table.values()))
    measured = np.flatnonzero(~np.isnan(first))
    if len(measured):
        anchor_x, anchor_y = x[measured[-1]], first[measured[-1]]
        for power, style in zip(guides, itertools.cycle([":", "--", "-."])):
            power = require_int(power, "each power in guides")
            ax.plot(x, anchor_y * (x / anchor_x) ** power, style, color="grey", linewidth=1,
                    label=f"$\\propto T^{power}$" if power > 1 else "$\\propto T$")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xticks(x, labels=[f"{t:,}" for t in lengths])
    ax.minorticks_off()
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    return ax

# Bahdanau et al.'s and Luong et al.'s decoder steps (unit 03): node -> (x, y, label), and the
# edges (from, to, label, dashed) between them; `decoder_step_diagram` draws one.
_STEP_DIAGRAMS = {
    "bahdanau": {
        "title": "Bahdanau et al. (2014): attend with $s_{t'-1}$, context into the GRU",
        "nodes": {
            "y_prev": (0.9, 5.0, "$y_{t'-1}$"),
            "s_prev": (0.9, 3.4, "$s_{t'-1}$"),
            "h": (3.6, 0.5, "$h_1, \\dots, h_S$"),
            "attention": (3.6, 2.1, "attention\n$e_{t'j} = \\mathrm{score}(s_{t'-1}, h_j)$"),
            "c": (6.0, 2.1, "$c_{t'}$"),
            "gru": (6.0, 4.2, "GRU\n(context in every gate)"),
            "s": (8.4, 4.2, "$s_{t'}$"),
            "output": (8.4, 5.7, "softmax$(W_o s_{t'} + b_o)$"),
            "y": (10.6, 5.7, "$y_{t'}$"),
            "next": (10.6, 4.2, "step $t'+1$"),
        },
        "edges": [
            ("s_prev", "attention", "query", False), ("h", "attention", "keys, values", False),
            ("attention", "c", "", False), ("c", "gru", "", False),
            ("y_prev", "gru", "", False), ("s_prev", "gru", "", False),
            ("gru", "s", "", False), ("s", "output", "", False), ("output", "y", "", False),
            ("s", "next", "", False),
        ],
    },
    "luong": {
        "title": "Luong et al. (2015): attend with $s_{t'}$, context after the GRU",
        "nodes": {
            "y_prev": (0.9, 5.6, "$y_{t'-1}$"),
            "s_tilde_prev": (0.9, 4.4, "$\\tilde s_{t'-1}$"),
            "s_prev": (0.9, 3.0, "$s_{t'-1}$"),
            "gru": (3.0, 4.2, "GRU"),
            "s": (4.8, 4.2, "$s_{t'}$"),
            "h": (4.8, 0.5, "$h_1, \\dots, h_S$"),
            "attention": (4.8, 2.1, "attention\n$e_{t'j} = h_j^\\top W_e\\, s_{t'}$"),
            "c": (7.0, 2.1, "$c_{t'}$"),
            "combine": (7.6, 4.2, "$\\tanh(W_c[c_{t'}; s_{t'}])$"),
            "s_tilde": (10.0, 4.2, "$\\tilde s_{t'}$"),
            "output": (10.0, 5.7, "softmax$(W_o \\tilde s_{t'} + b_o)$"),
            "y": (10.0, 6.7, "$y_{t'}$"),
            "next": (10.0, 2.6, "step $t'+1$"),
        },
        "edges": [
            ("y_prev", "gru", "", False), ("s_tilde_prev", "gru", "input feeding", True),
            ("s_prev", "gru", "", False), ("gru", "s", "", False),
            ("s", "attention", "query", False), ("h", "attention", "keys, values", False),
            ("attention", "c", "", False), ("c", "combine", "", False),
            ("s", "combine", "", False), ("combine", "s_tilde", "", False),
            ("s_tilde", "output", "", False), ("output", "y", "", False),
            ("s_tilde", "next", "input feeding", True),
        ],
    },
}
_DIAGRAM_VALUES = ("h", "y_prev", "s_prev", "s_tilde_prev", "y", "next", "c", "s", "s_tilde")


def decoder_step_diagram(kind: str, ax: plt.Axes | None = None, title: str | None = None
                         ) -> plt.Axes:
    """Draw one step t' of an attention decoder (unit 03) as boxes and arrows.

    kind="bahdanau": the query is the previous state s_{t'-1}; the context c_{t'} enters the
    GRU (in every gate) next to y_{t'-1}, and the output layer reads the new state s_{t'}.
    kind="luong": the GRU steps first, from y_{t'-1}, s_{t'-1} and (input feeding, dashed)
    the last attentional state s~_{t'-1}; the new state s_{t'} is the query; the context meets
    it after the GRU in s~_{t'} = tanh(W_c [c_{t'}; s_{t'}]), which the output layer reads and
    the next step is fed. Vectors are white boxes, computations blue ones; each box is a text
    of `ax.texts` (its label in mathtext), each arrow an annotation with an empty text.
    title: default the kind's own. Returns the Axes.
    """
    require_choice(kind, "kind", tuple(_STEP_DIAGRAMS))
    spec = _STEP_DIAGRAMS[kind]
    if ax is None:
        _, ax = plt.subplots(figsize=(7.5, 4.6))
    nodes = spec["nodes"]
    boxes = {}
    for name, (x, y, label) in nodes.items():
        value = name in _DIAGRAM_VALUES
        boxes[name] = ax.text(
            x, y, label, ha="center", va="center", fontsize=9, zorder=3,
            bbox=dict(boxstyle="round,pad=0.35", linewidth=0.8 if value else 1.2,
                      facecolor="white" if value else "#dbe9f6",
                      edgecolor="0.5" if value else "tab:blue"))
    for start, end, label, dashed in spec["edges"]:
        ax.annotate("", xy=nodes[end][:2], xytext=nodes[start][:2],
                    arrowprops=dict(arrowstyle="-|>", color="tab:orange" if dashed else "0.25",
                                    linestyle="--" if dashed else "-", linewidth=1.1,
                                    shrinkA=14, shrinkB=14, patchA=boxes[start],
                                    patchB=boxes[end]), zorder=2)
        if label:
            (x0, y0), (x1, y1) = nodes[start][:2], nodes[end][:2]
            vertical = abs(x1 - x0) < 0.1  # label to the right of the arrow, else above it
            ax.text((x0 + x1) / 2 + (0.15 if vertical else 0), (y0 + y1) / 2 + (0 if vertical
                    else 0.22), label, ha="left" if vertical else "center",
                    va="center" if vertical else "bottom", fontsize=8, style="italic",
                    color="tab:orange" if dashed else "0.3")
    ax.set_xlim(-0.2, 11.6)
    ax.set_ylim(-0.1, 7.3)
    ax.axis("off")
    ax.set_title(spec["title"] if title is None else title, fontsize=10)
    return ax


# Unit 05's pictures: matrices drawn as rectangles, one `_UNIT` of side per entry, so that the
# shapes can be compared by eye; each matrix is a text of `ax.texts` (its name in mathtext),
# with its shape, symbolic and in numbers, written under it.
_UNIT = 0.3
_HEAD_COLOURS = ("#8ecae6", "#ffb703", "#90be6d", "#f4a3a8", "#b8a9e3", "#cdb48c")


def _matrix(ax: plt.Axes, x: float, y: float, shape: tuple[int, int], name: str,
            dims: str | None = None, colours: Sequence[str] = ("0.85",)) -> float:
    """A (rows, cols) matrix as a rectangle from x rightwards, centred on height y, split into
    equal column blocks of the given colours (one per head); `dims`, e.g. "T, d_k", is written
    under it with the numbers. Returns the x of its right edge."""
    rows, cols = shape
    width, height = cols * _UNIT, rows * _UNIT
    for i, colour in enumerate(colours):
        ax.add_patch(plt.Rectangle((x + i * width / len(colours), y - height / 2),
                                   width / len(colours), height, facecolor=colour,
                                   edgecolor="none"))
    ax.add_patch(plt.Rectangle((x, y - height / 2), width, height, facecolor="none",
                               edgecolor="0.25", linewidth=1.0))
    ax.text(x + width / 2, y, name, ha="center", va="center", fontsize=11)
    if dims is not None:
        ax.text(x + width / 2, y - height / 2 - 0.12, f"({dims})\n({rows}, {cols})",
                ha="center", va="top", fontsize=7.5, color="0.25", linespacing=1.1)
    return x + width


def _sign(ax: plt.Axes, x: float, y: float, text: str, fontsize: float = 12) -> None:
    ax.text(x, y, text, ha="center", va="center", fontsize=fontsize)


def _arrow(ax: plt.Axes, start: tuple[float, float], end: tuple[float, float],
           colour: str = "0.3") -> None:
    ax.annotate("", xy=end, xytext=start,
                arrowprops=dict(arrowstyle="-|>", color=colour, linewidth=1.1))


def self_attention_diagram(n_positions: int = 6, d_model: int = 8, d_k: int = 4, d_v: int = 4,
                           ax: plt.Axes | None = None, title: str | None = None) -> plt.Axes:
    """Self-attention in matrix form (unit 05), every matrix a rectangle of its shape:
    on the left Q = X W^Q, K = X W^K, V = X W^V, one product per line; on the right
    alpha = softmax(Q K^T / sqrt(d_k)) (T, T), then Z = alpha V (T, d_v).

    n_positions: T; d_model, d_k, d_v: the widths. Each matrix's name is a text of `ax.texts`
    ("$X$", "$W^Q$", "$K^\\top$", "$\\alpha$", ...), its shape under it ("(T, d_k)\\n(6, 4)").
    Returns the Axes.
    """
    length = require_int(n_positions, "n_positions")
    d_model, d_k, d_v = (require_int(d, name) for d, name in
                         ((d_model, "d_model"), (d_k, "d_k"), (d_v, "d_v")))
    if ax is None:
        _, ax = plt.subplots(figsize=(11.5, 5.2))
    colours = {"Q": "#8ecae6", "K": "#ffb703", "V": "#90be6d"}
    width = {"Q": "d_k", "K": "d_k", "V": "d_v"}
    size = {"d_k": d_k, "d_v": d_v}
    row_height = _UNIT * max(length, d_model) + 1.0
    for row, name in enumerate("QKV"):
        y = -row * row_height
        x = _matrix(ax, 0.0, y, (length, d_model), "$X$", "T, d_model")
        _sign(ax, x + 0.3, y, "$\\times$")
        x = _matrix(ax, x + 0.6, y, (d_model, size[width[name]]), f"$W^{name}$",
                    f"d_model, {width[name]}", [colours[name]])
        _sign(ax, x + 0.3, y, "$=$")
        _matrix(ax, x + 0.6, y, (length, size[width[name]]), f"${name}$", f"T, {width[name]}",
                [colours[name]])
    left = _UNIT * (d_model + 2 * max(d_k, d_v)) + 2.0  # where the attention part starts
    ax.axvline(left - 0.4, color="0.8", linewidth=0.8)
    y = -0.5 * row_height  # alpha = softmax(Q K^T / sqrt(d_k))
    ax.text(left + 2.15, y, "softmax(", ha="right", va="center", fontsize=12)
    x = _matrix(ax, left + 2.2, y, (length, d_k), "$Q$", None, [colours["Q"]])
    x = _matrix(ax, x + 0.15, y, (d_k, length), "$K^\\top$", "d_k, T", [colours["K"]])
    ax.text(x + 0.1, y, "$/ \\sqrt{d_k}$ )", ha="left", va="center", fontsize=12)
    _sign(ax, x + 1.75, y, "$=$")
    right = _matrix(ax, x + 2.05, y, (length, length), "$\\alpha$", "T_q, T_k", ["#d8c8ee"])
    ax.text(x + 2.05, y + _UNIT * length / 2 + 0.1, "each row sums to 1", fontsize=7.5,
            color="0.25", va="bottom")
    y = -1.6 * row_height  # Z = alpha V
    x = _matrix(ax, left + 2.2, y, (length, length), "$\\alpha$", None, ["#d8c8ee"])
    _sign(ax, x + 0.3, y, "$\\times$")
    x = _matrix(ax, x + 0.6, y, (length, d_v), "$V$", None, [colours["V"]])
    _sign(ax, x + 0.3, y, "$=$")
    x = _matrix(ax, x + 0.6, y, (length, d_v), "$Z$", "T, d_v", ["#c7e6b8"])
    ax.set_xlim(-0.3, max(x, right) + 0.6)
    ax.set_ylim(-2 * row_height - _UNIT * max(length, d_model) / 2 - 0.3,
                _UNIT * max(length, d_model) / 2 + 0.3)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title("Self-attention: $Q = XW^Q$, $K = XW^K$, $V = XW^V$, then "
                 "$Z = \\mathrm{softmax}(QK^\\top/\\sqrt{d_k})\\,V$" if title is None else title,
                 fontsize=11)
    return ax


def multihead_diagram(n_positions: int = 4, d_model: int = 6, n_heads: int = 2,
                      ax: plt.Axes | None = None, title: str | None = None) -> plt.Axes:
    """The multi-head block (unit 05): X (T, d_model) is projected to Q, K, V (T, d_model),
    each split by columns into n_heads slices of d_k = d_model / n_heads (one colour per
    head); head i attends with its own slices, softmax(Q_i K_i^T / sqrt(d_k)) V_i (T, d_k);
    the heads are concatenated side by side (T, d_model) and multiplied by W^O.

    Each matrix's name and each head's attention box is a text of `ax.texts` ("$Q$",
    "$W^O$", "head 0", ...). Returns the Axes.
    """
    length = require_int(n_positions, "n_positions")
    n_heads = require_int(n_heads, "n_heads", high=len(_HEAD_COLOURS))
    d_k = require_heads(d_model, n_heads)
    colours = [_HEAD_COLOURS[i] for i in range(n_heads)]
    if ax is None:
        _, ax = plt.subplots(figsize=(13.5, 1.6 + 1.5 * max(n_heads, 2.6)))
    height = _UNIT * length
    x_end = _matrix(ax, 0.0, 0.0, (length, d_model), "$X$", "T, d_model")
    projected = x_end + 2.4  # Q, K, V one above the other
    gap = max(height + 1.0, 2.0)
    for row, name in enumerate("QKV"):
        y = (1 - row) * gap
        _arrow(ax, (x_end + 0.1, 0.0), (projected - 0.1, y))
        below = name == "V"  # clear of the arrow that comes from above
        ax.text(projected - 0.15, y - 0.12 if below else y + 0.12, f"$\\times W^{name}$",
                ha="right", va="top" if below else "bottom", fontsize=8.5)
        _matrix(ax, projected, y, (length, d_model), f"${name}$", None, colours)
    ax.text(projected + _UNIT * d_model / 2, -gap - height / 2 - 0.12,
            f"(T, d_model) = ({length}, {d_model})\neach split into {n_heads} heads of d_k = {d_k}",
            ha="center", va="top", fontsize=7.5, color="0.25")
    qkv_end = projected + _UNIT * d_model
    step = max(3.0, 2 * gap / max(n_heads - 1, 1)) if n_heads > 1 else 0.0
    heads_x, out_x = qkv_end + 3.6, qkv_end + 7.6
    concat_x = out_x + _UNIT * d_k + 1.6
    for i in range(n_heads):
        y = ((n_heads - 1) / 2 - i) * step
        for row in range(3):
            _arrow(ax, (qkv_end + 0.1, (1 - row) * gap), (heads_x - 1.45, y), colours[i])
        ax.text(heads_x, y, f"head {i}\n"
                f"softmax$(Q_{{{i}}} K_{{{i}}}^\\top / \\sqrt{{d_k}})\\, V_{{{i}}}$",
                ha="center", va="center", fontsize=8.5,
                bbox=dict(boxstyle="round,pad=0.4", facecolor=colours[i], edgecolor="0.4"))
        _arrow(ax, (heads_x + 1.45, y), (out_x - 0.1, y))
        end = _matrix(ax, out_x, y, (length, d_k), "", "T, d_k" if i == n_heads - 1 else None,
                      [colours[i]])
        ax.text((out_x + end) / 2, y + height / 2 + 0.08, f"$\\mathrm{{head}}_{{{i}}}$",
                ha="center", va="bottom", fontsize=10)
        _arrow(ax, (end + 0.1, y), (concat_x - 0.1, 0.0))
    x = _matrix(ax, concat_x, 0.0, (length, d_model), "concat", "T, n_heads d_k", colours)
    _sign(ax, x + 0.3, 0.0, "$\\times$")
    x = _matrix(ax, x + 0.6, 0.0, (d_model, d_model), "$W^O$", "d_model, d_model")
    _sign(ax, x + 0.3, 0.0, "$=$")
    x = _matrix(ax, x + 0.6, 0.0, (length, d_model), "output", "T, d_model")
    reach = max(gap + height / 2, (n_heads - 1) / 2 * step + 0.8)
    ax.set_xlim(-0.3, x + 0.3)
    ax.set_ylim(-reach - 1.0, reach + 0.4)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"Multi-head attention, n_heads = {n_heads}: split, attend per head, "
                 "concatenate, $W^O$" if title is None else title, fontsize=11)
    return ax


def split_heads_diagram(n_positions: int = 4, d_model: int = 6, n_heads: int = 2,
                        wrong: bool = False, ax: plt.Axes | None = None,
                        title: str | None = None) -> plt.Axes:
    """How `split_heads` cuts x (T, d_model) into heads (unit 05): every cell is labelled
    "t,j" (position t, feature j) and coloured by the head its feature j belongs to. Right
    (wrong=False): head i gets columns i d_k ... (i + 1) d_k - 1 of every position. Wrong
    (wrong=True): `x.reshape(B, n_heads, T, d_k)` without the transpose cuts the flattened
    matrix into consecutive pieces, so a "head" holds all features of some positions.
    Each cell's label is a text of `ax.texts`. Returns the Axes.
    """
    length = require_int(n_positions, "n_positions")
    n_heads = require_int(n_heads, "n_heads", high=len(_HEAD_COLOURS))
    d_k = require_heads(d_model, n_heads)
    if ax is None:
        _, ax = plt.subplots(figsize=(2.0 + 0.5 * (d_model + n_heads * (d_k + 1.4)),
                                      1.0 + 0.5 * length))

    def grid(x0: float, cells: list[list[tuple[int, int]]], label: str) -> None:
        # one matrix of (t, j) cells, row 0 on top, its label above it
        for r, row in enumerate(cells):
            for c, (t, j) in enumerate(row):
                ax.add_patch(plt.Rectangle((x0 + c, -r - 1), 1, 1, edgecolor="white",
                                           facecolor=_HEAD_COLOURS[j // d_k], linewidth=1.5))
                ax.text(x0 + c + 0.5, -r - 0.5, f"{t},{j}", ha="center", va="center",
                        fontsize=8)
        ax.text(x0 + len(cells[0]) / 2, 0.35, label, ha="center", va="bottom", fontsize=9)

    cells = [[(t, j) for j in range(d_model)] for t in range(length)]  # (T, d_model)
    grid(0, cells, "x (T, d_model)")
    start = d_model + 2.6
    ax.annotate("", xy=(start - 0.3, -length / 2), xytext=(d_model + 0.4, -length / 2),
                arrowprops={"arrowstyle": "->", "lw": 1.5})
    ax.text(d_model + 1.35, -length / 2 + 0.35, "reshape" if wrong else "split",
            ha="center", fontsize=9)
    flat = [cell for row in cells for cell in row]
    for i in range(n_heads):
        if wrong:  # consecutive pieces of the flattened matrix
            piece = flat[i * length * d_k:(i + 1) * length * d_k]
            block = [piece[r * d_k:(r + 1) * d_k] for r in range(length)]
        else:  # columns i d_k ... (i + 1) d_k - 1 of every position
            block = [row[i * d_k:(i + 1) * d_k] for row in cells]
        quote = "'" if wrong else ""  # a "head" that is not one
        grid(start + (d_k + 1.4) * i, block, f"{quote}head {i}{quote} (T, d_k)")
    ax.set_xlim(-0.3, start + (d_k + 1.4) * n_heads)
    ax.set_ylim(-length - 0.4, 1.3)
    ax.set_aspect("equal")
    ax.axis("off")
    if title is None:
        title = ("WRONG: x.reshape(B, n_heads, T, d_k) mixes positions and heads" if wrong else
                 "split_heads: (B, T, d_model) -> (B, T, n_heads, d_k) -> (B, n_heads, T, d_k)")
    ax.set_title(title, fontsize=10)
    return ax


# Unit 06's picture of the whole Transformer: boxes from the bottom (the ids) to the top (the
# output probabilities), one column for the encoder and one for the decoder.
_TF_FILL = {"attention": "#f6d8a8", "cross": "#f3b8b0", "ff": "#bcdcf2", "norm": "#e4e4e4",
            "embed": "#d5e8d4", "position": "#fff2cc", "out": "#dcd3ec", "io": "white"}
_TF_WIDTH = 3.8  # width of a box


def _tf_box(ax: plt.Axes, x: float, y: float, text: str, kind: str, height: float = 0.6
            ) -> None:
    """A rounded box of `_TF_WIDTH` centred on (x, y), filled by its kind; its text is one of
    `ax.texts`."""
    ax.add_patch(FancyBboxPatch((x - _TF_WIDTH / 2, y - height / 2), _TF_WIDTH, height,
                                boxstyle="round,pad=0.02,rounding_size=0.12",
                                facecolor=_TF_FILL[kind], edgecolor="black"))
    ax.text(x, y, text, ha="center", va="center", fontsize=9)


def _tf_arrow(ax: plt.Axes, start: tuple[float, float], end: tuple[float, float],
              colour: str = "black") -> None:
    ax.annotate("", xy=end, xytext=start, arrowprops={
        "arrowstyle": "-|>", "color": colour, "lw": 1.2, "shrinkA": 0, "shrinkB": 0})


def _tf_stack(ax: plt.Axes, x: float, below: float, sublayers, side: str
              ) -> tuple[float, dict[str, float]]:
    """One post-LN layer from `below` (the top edge of the box under it) upwards: each
    (text, kind, note) is a sub-layer and an add & LayerNorm box, with the residual
    connection (green) around the sub-layer; a frame around the layer, "× L" on `side`.
    Returns the top edge of the layer and the height of each kind of sub-layer."""
    bottom, heights = below, {}
    for text, kind, note in sublayers:
        fork = below + 0.3  # where the residual branch leaves the main path
        y_sub, y_norm = fork + 0.75, fork + 1.75
        _tf_arrow(ax, (x, below), (x, y_sub - 0.3))
        _tf_box(ax, x, y_sub, text, kind)
        heights[kind] = y_sub
        if note:  # outside the frame, on the left
            ax.text(x - _TF_WIDTH / 2 - 0.45, y_sub, note, ha="right", va="center",
                    fontsize=8, color="dimgray")
        _tf_arrow(ax, (x, y_sub + 0.3), (x, y_norm - 0.22))
        _tf_box(ax, x, y_norm, "add & LayerNorm", "norm", height=0.44)
        right = x + _TF_WIDTH / 2 + 0.35
        ax.plot([x, right, right], [fork, fork, y_norm], color="tab:green", lw=1.3)
        _tf_arrow(ax, (right, y_norm), (x + _TF_WIDTH / 2, y_norm), colour="tab:green")
        below = y_norm + 0.22
    left, width = x - _TF_WIDTH / 2 - 0.3, _TF_WIDTH + 0.95
    ax.add_patch(plt.Rectangle((left, bottom + 0.12), width, below - bottom, facecolor="none",
                               edgecolor="0.45", linestyle="--", linewidth=1.0))
    outside = left - 2.1 if side == "left" else left + width + 0.15  # left: past the notes
    ax.text(outside, (bottom + below) / 2, "× L", ha="right" if side == "left" else "left",
            va="center", fontsize=12, weight="bold")
    return below + 0.12, heights


def transformer_diagram(ax: plt.Axes | None = None, title: str | None = None) -> plt.Axes:
    """The whole encoder-decoder Transformer (unit 06; Vaswani et al. 2017, Figure 1), from
    the ids at the bottom to the output probabilities at the top.

    Encoder (left): source ids (B, S) -> embedding x sqrt(d_model) -> + positional encoding ->
    L x [multi-head self-attention, add & LayerNorm, feed-forward, add & LayerNorm] -> the
    memory (B, S, d_model). Decoder (right): target ids shifted right, <start> y_1 .. (B, T) ->
    embedding x sqrt(d_model) -> + positional encoding -> L x [masked self-attention,
    cross-attention (keys and values from the memory, red), feed-forward, each followed by add &
    LayerNorm] -> linear d_model -> n_vocab -> softmax -> p(y_{t+1} | y_<=t, x) (B, T, n_vocab).
    Residual connections are green, each layer is framed with "× L" beside it; the order is
    the paper's (post-LN). Every box's label is a text of `ax.texts`. Returns the Axes.
    """
    if ax is None:
        _, ax = plt.subplots(figsize=(12, 10.5))
    x_enc, x_dec = 0.0, 9.0
    inputs = {x_enc: ("source ids  (B, S)", "input embedding × √d_model"),
              x_dec: ("target ids, shifted right:\n<start> $y_1 \\dots y_{T-1}$  (B, T)",
                      "output embedding × √d_model")}
    for x, (ids, embedding) in inputs.items():
        _tf_box(ax, x, 0.0, ids, "io", height=0.7)
        _tf_arrow(ax, (x, 0.35), (x, 0.9))
        _tf_box(ax, x, 1.15, embedding, "embed", height=0.5)
        _tf_arrow(ax, (x, 1.4), (x, 1.88))
        _tf_box(ax, x, 2.1, "+ positional encoding", "position", height=0.44)
    enc_top, _ = _tf_stack(ax, x_enc, 2.32, [
        ("multi-head self-attention", "attention", "q, k, v all\nfrom the source"),
        ("position-wise feed-forward", "ff", "each position\non its own")], side="left")
    _tf_arrow(ax, (x_enc, enc_top), (x_enc, enc_top + 0.5))
    y_memory = enc_top + 0.8
    _tf_box(ax, x_enc, y_memory, "memory  (B, S, d_model)", "io", height=0.6)
    dec_top, heights = _tf_stack(ax, x_dec, 2.32, [
        ("masked multi-head\nself-attention", "attention", "causal mask:\nno later positions"),
        ("multi-head\ncross-attention", "cross", ""),
        ("position-wise feed-forward", "ff", "")], side="right")
    y_cross = heights["cross"]  # the memory feeds every decoder layer's cross-attention
    bend = (x_enc + x_dec) / 2 - 0.6
    ax.plot([x_enc + _TF_WIDTH / 2, bend, bend], [y_memory, y_memory, y_cross],
            color="tab:red", lw=1.3)
    _tf_arrow(ax, (bend, y_cross), (x_dec - _TF_WIDTH / 2 - 0.3, y_cross), colour="tab:red")
    ax.text(bend + 0.15, (y_memory + y_cross) / 2, "the memory: keys and\n"
            "values of every decoder\nlayer's cross-attention", ha="left", va="center",
            fontsize=8, color="tab:red")
    y = dec_top
    for text, height in (("linear  d_model → n_vocab", 0.5), ("softmax", 0.5)):
        _tf_arrow(ax, (x_dec, y), (x_dec, y + 0.45))
        _tf_box(ax, x_dec, y + 0.45 + height / 2, text, "out", height=height)
        y += 0.45 + height
    _tf_arrow(ax, (x_dec, y), (x_dec, y + 0.45))
    _tf_box(ax, x_dec, y + 0.8, "$p(y_{t+1} \\mid y_1 \\dots y_t, x)$  (B, T, n_vocab)", "io",
            height=0.7)
    top = y + 1.15
    for x, name in ((x_enc, "encoder"), (x_dec, "decoder")):
        ax.text(x, -0.75, name, ha="center", va="top", fontsize=11, weight="bold")
    ax.text((x_enc + x_dec) / 2, top + 0.35, "green: residual connections, x + sublayer(x), "
            "each followed by LayerNorm (post-LN, as in the paper)", ha="center", fontsize=9,
            color="tab:green")
    ax.set_xlim(x_enc - _TF_WIDTH / 2 - 3.0, x_dec + _TF_WIDTH / 2 + 1.4)
    ax.set_ylim(-1.3, top + 0.8)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title("The Transformer: embeddings and positions, L encoder and L decoder layers, "
                 "linear and softmax" if title is None else title, fontsize=11)
    return ax


def bag_of_words_diagram(n_ctx: int = 4, positions: bool = True, ax: plt.Axes | None = None,
                         title: str | None = None) -> plt.Axes:
    """Unit 01's attention bag, predicting w_i from the words before it:

        query q = E(w_{i-1});  keys k_j = E(w_j) (+ P_j with positions), values E(w_j)
        e_j = score(k_j, q);  alpha = softmax(e) over the real words of the window
        A = sum_j alpha_j E(w_j);  p(w_i | ...) = softmax(W_o [E(w_{i-1}); A] + b_o)

    drawn for a window of `n_ctx` earlier words (slot n_ctx is the word just before
    w_{i-1}). Every label is a text of `ax.texts`. Returns the Axes."""
    require_int(n_ctx, "n_ctx", low=1, high=8)
    if ax is None:
        _, ax = plt.subplots(figsize=(11, 6.2))
    xs = [1.6 * j for j in range(n_ctx)]
    x_prev = xs[-1] + 2.4
    for j, x in enumerate(xs):
        ax.text(x, 0.0, f"$w_{{i-{n_ctx + 1 - j}}}$", ha="center", va="center", fontsize=11)
        _bow_box(ax, x, 1.0, "$E(w)$" + (f"\n$+ P_{{{j + 1}}}$" if positions else ""),
                 "#bcdcf2")
        _arrow(ax, (x, 0.25), (x, 0.68))
        _bow_box(ax, x, 2.4, f"$e_{j + 1}$", "#f6d8a8", width=0.9)
        _arrow(ax, (x, 1.33), (x, 2.15))
        _arrow(ax, (x_prev - 0.7, 1.0), (x + 0.45, 2.3), colour="tab:orange")
    ax.text(x_prev, 0.0, "$w_{i-1}$", ha="center", va="center", fontsize=11)
    _bow_box(ax, x_prev, 1.0, "$q = E(w_{i-1})$", "#bcdcf2", width=1.5)
    _arrow(ax, (x_prev, 0.25), (x_prev, 0.68))
    ax.text(x_prev + 0.1, 1.75, "query: scores every\nearlier word", fontsize=8,
            color="tab:orange", ha="left")
    x_mid = (xs[0] + xs[-1]) / 2
    _bow_box(ax, x_mid, 3.55, r"$\alpha = \mathrm{softmax}(e)$ over the real words",
             "#e4e4e4", width=max(3.2, xs[-1] - xs[0] + 1.0))
    for x in xs:
        _arrow(ax, (x, 2.65), (x, 3.3))
    _bow_box(ax, x_mid, 4.7, r"$A = \sum_j \alpha_j\, E(w_j)$" + "\n(values: the words alone)",
             "#cfe8c8", width=max(3.2, xs[-1] - xs[0] + 1.0))
    _arrow(ax, (x_mid, 3.8), (x_mid, 4.35))
    x_out = (x_mid + x_prev) / 2
    _bow_box(ax, x_out, 5.95, r"$\mathrm{softmax}(W_o\,[E(w_{i-1});\, A] + b_o)$"
             + r" $\to p(w_i \mid w_{<i})$", "white", width=4.6)
    _arrow(ax, (x_mid, 5.05), (x_out - 0.8, 5.65))
    _arrow(ax, (x_prev, 1.33), (x_out + 0.8, 5.65))
    ax.set_xlim(xs[0] - 1.2, x_prev + 2.2)
    ax.set_ylim(-0.5, 6.6)
    ax.axis("off")
    ax.set_title(title or f"The attention bag of unit 01 (a window of {n_ctx} earlier words)")
    return ax


def _bow_box(ax: plt.Axes, x: float, y: float, text: str, colour: str,
             width: float = 1.3, height: float = 0.62) -> None:
    ax.add_patch(FancyBboxPatch((x - width / 2, y - height / 2), width, height,
                                boxstyle="round,pad=0.02,rounding_size=0.08", fc=colour,
                                ec="black", lw=0.8))
    ax.text(x, y, text, ha="center", va="center", fontsize=9)


def norm_decomposition_diagram(weights, lengths, directions, tokens: Sequence[str],
                               ax: plt.Axes | None = None, title: str | None = None
                               ) -> plt.Axes:
    """Kobayashi et al.'s decomposition of one query's attention output (unit 08),

        y_i = sum_j alpha_ij f(x_j) + b_O,   ||alpha_ij f(x_j)|| = alpha_ij ||f(x_j)||,

    drawn as the terms alpha_ij f(x_j) added tip to tail, each arrow exactly as long as the
    term (`weights` alpha_ij (T,) times `lengths` ||f(x_j)|| (T,)), in the direction
    `directions` (T, 2) (e.g. f(x_j) projected on two axes), with the weight alpha_ij written
    beside it: a large weight on a short vector adds almost nothing. Given every term, the
    path ends at y_i - b_O; given some, at their sum. Returns the Axes."""
    weights = np.asarray(weights, dtype=float)
    lengths = np.asarray(lengths, dtype=float)
    directions = np.asarray(directions, dtype=float)
    n = len(tokens)
    if weights.shape != (n,) or lengths.shape != (n,) or directions.shape != (n, 2):
        raise ValueError(f"weights and lengths must have shape (T,) = ({n},) and directions "
                         f"(T, 2) = ({n}, 2), one per token; got {weights.shape}, "
                         f"{lengths.shape} and {directions.shape}")
    if not (np.isfinite(weights).all() and np.isfinite(lengths).all()
            and np.isfinite(directions).all()) or (lengths < 0).any() or (weights < 0).any():
        raise ValueError("weights and lengths must be finite and >= 0, directions finite")
    if ax is None:
        _, ax = plt.subplots(figsize=(7, 6))
    norms = np.linalg.norm(directions, axis=1, keepdims=True)
    unit = np.divide(directions, norms, out=np.zeros_like(directions), where=norms > 0)
    terms = unit * (weights * lengths)[:, None]  # (T, 2): each alpha_ij f(x_j), to scale
    colours = plt.get_cmap("tab10")
    tip, points = np.zeros(2), [np.zeros(2)]
    for j in np.argsort(-weights):
        end = tip + terms[j]
        ax.annotate("", xy=end, xytext=tip,
                    arrowprops={"arrowstyle": "-|>", "color": colours(j % 10), "lw": 1.6})
        middle = (tip + end) / 2
        ax.text(middle[0], middle[1], f" {tokens[j]} (α={weights[j]:.2f})", fontsize=8,
                color=colours(j % 10), clip_on=True)
        tip = end
        points.append(tip)
    ax.plot(*tip, "ko", ms=4)
    ax.text(tip[0], tip[1], "  their sum", fontsize=10, clip_on=True)  # y_i - b_O if all
    points = np.array(points)  # (T + 1, 2): the path of the sum
    low, high = points.min(0), points.max(0)
    pad = 0.15 * max(float((high - low).max()), 1e-9)
    ax.set_xlim(low[0] - pad, high[0] + 3 * pad)
    ax.set_ylim(low[1] - pad, high[1] + pad)
    ax.set_aspect("equal", adjustable="box")
    ax.grid(alpha=0.3)
    ax.set_title(title or r"$y_i$ as the sum of $\alpha_{ij} f(x_j)$, each arrow to scale")
    return ax
