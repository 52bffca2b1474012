"""Plots for the course: attention heatmaps and accuracy curves.

    attention_heatmap         one attention matrix, queries down the side, keys along the bottom
    attention_lines           the same matrix as lines from each query to the keys it attends
                              to (queries on the left, keys on the right; bertviz's "head view")
    head_heatmap              one number per (layer, head): layers down the side, heads along
                              the bottom (a statistic, an accuracy, the effect of switching a
                              head off)
    accuracy_by_length_plot   accuracy per length bucket, one line per model

Plotting lives here and never inside model code: models return their attention weights,
and these functions draw them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.colors import to_rgba
from matplotlib.ticker import PercentFormatter

from course_utils._checks import require_fraction, require_int, require_labels, require_matrix

__all__ = ["accuracy_by_length_plot", "attention_heatmap", "attention_lines", "head_heatmap"]


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
