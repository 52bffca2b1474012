"""Plots for the course: attention heatmaps (curves come with later units).

Plotting lives here and never inside model code: models return their attention weights,
and these functions draw them.
"""

from __future__ import annotations

from collections.abc import Sequence

import matplotlib.pyplot as plt
import numpy as np
import torch

from course_utils._checks import shape_str

__all__ = ["attention_heatmap"]


def _as_matrix(weights) -> np.ndarray:
    if isinstance(weights, torch.Tensor):
        weights = weights.detach().to("cpu", torch.float32).numpy()
    array = np.asarray(weights, dtype=np.float64)
    if array.ndim != 2:
        raise ValueError(
            f"weights must be a 2-d matrix of shape (T_q, T_k), one row per query; got shape "
            f"{shape_str(array.shape)} (select one example and one head first, e.g. w[0, h])"
        )
    if array.size == 0:
        raise ValueError(
            f"weights must be a non-empty (T_q, T_k) matrix; got shape {shape_str(array.shape)}"
        )
    if not np.isfinite(array).all():
        raise ValueError("weights contain NaN or inf; expected finite attention weights")
    return array


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
    matrix = _as_matrix(weights)
    n_q, n_k = matrix.shape
    query_tokens, key_tokens = list(query_tokens), list(key_tokens)
    if len(query_tokens) != n_q:
        raise ValueError(
            f"query_tokens must have one label per row: weights are {shape_str(matrix.shape)}, "
            f"so expected {n_q} labels; got {len(query_tokens)}"
        )
    if len(key_tokens) != n_k:
        raise ValueError(
            f"key_tokens must have one label per column: weights are {shape_str(matrix.shape)}, "
            f"so expected {n_k} labels; got {len(key_tokens)}"
        )
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
