"""Unit 05: a small self-attention model for the pointer task, with or without positions.

    x_t   = E(ids_t) (+ PE_t)                        (B, T, d_model)   T = length + 1
    layer: a = MultiHeadAttention(LN(x), LN(x), LN(x));  x = x + a
           x = x + W_2 relu(W_1 LN(x) + b_1) + b_2   position-wise, the same at every t
    logits = W_out LN(x_T) + b_out                   (B, n_symbols)    read at the pointer

`positions` chooses what tells the model where a token stands: "none" (nothing: the model is
permutation equivariant and cannot solve the task), "sinusoidal" (Vaswani et al.'s fixed
encoding, added) or "learned" (one trained vector per position, added). Everything else stays
the same, so that a comparison changes one thing. The config also chooses the attention of
every block (unit 09's variants, `multihead.MultiHeadAttention`): `n_kv_heads` shared
key/value heads, a symmetric `window` (|t - u| <= window) or linear attention's
`feature_map`; lecture 09 compares them on this task.

The model returns its attention weights with its logits, and `hit_rate` measures how often
the pointer's attention peaks on the position it names:

    hit_rate = #{i : argmax_j alpha_i[j] = target_i} / N

Notation: B batch, T sequence length (the symbols and the pointer), d_model width, n_heads
heads of d_k = d_model / n_heads, d_ff feed-forward width, n_vocab vocabulary size.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from course_utils._checks import (
    require_choice,
    require_float_tensor,
    require_heads,
    require_ids,
    require_int,
    require_positive_number,
    shape_str,
)
from course_utils.data.pointer import PointerData
from course_utils.multihead import MultiHeadAttention, check_variant, config_repr
from course_utils.positional import LearnedPositions, add_positions, sinusoidal_encoding
from course_utils.training import History, eval_mode, fit

__all__ = ["POSITIONS", "PointerBlock", "PointerConfig", "PointerModel", "accuracy",
           "config_for", "hit_rate", "pointer_loss", "pointer_weights", "train"]

POSITIONS = ("none", "sinusoidal", "learned")


@dataclass(frozen=True)
class PointerConfig:
    """The sizes of a `PointerModel`.

    vocab_size (n_vocab): symbols and pointer ids; n_symbols: the answer classes; n_positions: the
    longest sequence (symbols and pointer); d_model, n_heads (d_model divisible by it), d_ff,
    n_layers; positions: "none", "sinusoidal" or "learned"; the attention's variant:
    n_kv_heads (None: n_heads), window (None: every position; w: |t - u| <= w) and
    feature_map (None: softmax; phi: linear attention), as `multihead.MultiHeadAttention`
    takes them.
    """

    vocab_size: int
    n_symbols: int
    n_positions: int
    d_model: int = 32
    n_heads: int = 2
    d_ff: int = 64
    n_layers: int = 1
    positions: str = "sinusoidal"
    n_kv_heads: int | None = None
    window: int | None = None
    feature_map: Callable | None = None

    def __post_init__(self):
        require_int(self.vocab_size, "vocab_size", low=2)
        require_int(self.n_symbols, "n_symbols", low=2, high=self.vocab_size)
        require_int(self.n_positions, "n_positions")
        require_heads(self.d_model, self.n_heads)
        require_int(self.d_ff, "d_ff")
        require_int(self.n_layers, "n_layers")
        require_choice(self.positions, "positions", POSITIONS)
        check_variant(self.n_heads, self.n_kv_heads, self.window, self.feature_map)

    def __repr__(self) -> str:
        return config_repr(self)  # the variant's fields only where one is chosen


def config_for(data: PointerData, **fields) -> PointerConfig:
    """The config whose vocabulary, classes and length fit `data`; `fields` set the rest
    (d_model, n_heads, d_ff, n_layers, positions, n_kv_heads, window, feature_map)."""
    if not isinstance(data, PointerData):
        raise ValueError(f"data must be PointerData; got {type(data).__name__}")
    return PointerConfig(vocab_size=data.vocab_size, n_symbols=data.n_symbols,
                         n_positions=data.length + 1, **fields)


class PointerBlock(nn.Module):
    """Self-attention, then a position-wise feed-forward network, each added back to its input
    (residual) after a LayerNorm of that input (pre-LN).

    forward(x (B, T, d_model)) -> (x (B, T, d_model), weights (B, n_heads, T, T)).
    `n_kv_heads`, `window` and `feature_map` choose the attention's variant.
    """

    def __init__(self, d_model: int, n_heads: int, d_ff: int, *, n_kv_heads: int | None = None,
                 window: int | None = None, feature_map: Callable | None = None):
        super().__init__()
        self.attention = MultiHeadAttention(d_model, n_heads, n_kv_heads=n_kv_heads,
                                            window=window, feature_map=feature_map)
        self.norm_attention = nn.LayerNorm(d_model)
        self.norm_ff = nn.LayerNorm(d_model)
        self.ff = nn.Sequential(nn.Linear(d_model, d_ff), nn.ReLU(), nn.Linear(d_ff, d_model))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.norm_attention(x)  # (B, T, d_model)
        a, weights = self.attention(h, h, h)  # (B, T, d_model), (B, n_heads, T, T)
        x = x + a
        return x + self.ff(self.norm_ff(x)), weights  # the same network at every position


class PointerModel(nn.Module):
    """Embeddings (+ positions), `n_layers` PointerBlocks, a LayerNorm and a linear readout at
    the last position (the pointer).

    forward(ids (B, T) int64) -> (logits (B, n_symbols), weights (B, n_layers, n_heads, T, T)).
    `encode(ids)` gives the states of every position instead of the logits.
    """

    def __init__(self, config: PointerConfig):
        super().__init__()
        if not isinstance(config, PointerConfig):
            raise ValueError(f"config must be a PointerConfig; got {type(config).__name__}")
        self.config = c = config
        self.embedding = nn.Embedding(c.vocab_size, c.d_model)
        self.learned = LearnedPositions(c.n_positions, c.d_model) \
            if c.positions == "learned" else None
        if c.positions == "sinusoidal":
            self.register_buffer("pe", sinusoidal_encoding(c.n_positions, c.d_model),
                                 persistent=False)  # (n_positions, d_model), not trained
        else:
            self.pe = None
        self.blocks = nn.ModuleList(
            PointerBlock(c.d_model, c.n_heads, c.d_ff, n_kv_heads=c.n_kv_heads, window=c.window,
                         feature_map=c.feature_map) for _ in range(c.n_layers))
        self.norm = nn.LayerNorm(c.d_model)
        self.readout = nn.Linear(c.d_model, c.n_symbols)

    def embed(self, ids: torch.Tensor) -> torch.Tensor:
        """ids (B, T) -> E(ids) plus the chosen positional encoding, (B, T, d_model)."""
        require_ids(ids, "ids", "(B, T)", 2)
        c = self.config
        if ids.shape[1] > c.n_positions:
            raise ValueError(f"ids has T = {ids.shape[1]} positions; this model knows "
                             f"n_positions = {c.n_positions}")
        if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= c.vocab_size):
            raise ValueError(f"ids must lie in 0 .. vocab_size - 1 = {c.vocab_size - 1}; got "
                             f"{int(ids.min())} .. {int(ids.max())}")
        x = self.embedding(ids)  # (B, T, d_model)
        if self.pe is not None:
            x = add_positions(x, self.pe)
        elif self.learned is not None:
            x = add_positions(x, self.learned(ids.shape[1]))
        return x

    def encode(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """ids (B, T) -> (states (B, T, d_model), weights (B, n_layers, n_heads, T, T))."""
        x = self.embed(ids)
        weights = []
        for block in self.blocks:
            x, w = block(x)  # (B, T, d_model), (B, n_heads, T, T)
            weights.append(w)
        return self.norm(x), torch.stack(weights, dim=1)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        states, weights = self.encode(ids)
        return self.readout(states[:, -1]), weights  # (B, n_symbols), (B, L, n_heads, T, T)


def pointer_loss(model: PointerModel, batch: PointerData) -> torch.Tensor:
    """The mean cross-entropy of the answers: the loss that `train` minimises."""
    logits, _ = model(batch.ids)  # (B, n_symbols)
    return F.cross_entropy(logits, batch.answer)


def train(model: PointerModel, data: PointerData, *, n_steps: int, batch_size: int = 64,
          lr: float = 3e-3, generator: torch.Generator | None = None, desc: str = "training",
          progress: bool = True) -> History:
    """Train with `training.fit` (Adam, learning rate falling linearly) on `n_steps` batches of
    `batch_size` examples drawn from `data` in a random order, epoch after epoch (the order
    from `generator`). Returns the History."""
    if not isinstance(data, PointerData):
        raise ValueError(f"data must be PointerData; got {type(data).__name__}")
    n_steps = require_int(n_steps, "n_steps")
    batch_size = require_int(batch_size, "batch_size", high=len(data))
    require_positive_number(lr, "lr")
    per_epoch = len(data) // batch_size

    def batches():
        while True:
            order = torch.randperm(len(data), generator=generator)  # (N,)
            for k in range(per_epoch):
                yield data[order[k * batch_size:(k + 1) * batch_size]]

    return fit(model, pointer_loss, batches(), n_steps=n_steps, lr=lr, schedule="linear",
               steps_per_epoch=per_epoch, progress=progress, desc=desc)


def pointer_weights(weights: torch.Tensor, layer: int = -1, head: int = 0) -> torch.Tensor:
    """The attention of the pointer (the last query) over every position, itself included,
    in one layer and head: (B, n_layers, n_heads, T, T) -> (B, T)."""
    require_float_tensor(weights, "weights", "(B, n_layers, n_heads, T, T)", ndim=5)
    n_layers, n_heads = weights.shape[1:3]
    layer = require_int(layer, "layer", low=-n_layers, high=n_layers - 1)
    head = require_int(head, "head", low=-n_heads, high=n_heads - 1)
    return weights[:, layer, head, -1, :]  # (B, T)


def hit_rate(weights: torch.Tensor, target: torch.Tensor) -> float:
    """The share of rows whose largest weight falls on the target position:

        #{i : argmax_j weights[i, j] = target[i]} / N

    weights (N, T_k) float: one attention row per example (e.g. from `pointer_weights`);
    target (N,) int64 in 0 .. T_k - 1. A tie counts for the first of the largest weights.
    Returns a float in [0, 1].
    """
    require_float_tensor(weights, "weights", "(N, T_k)", ndim=2)
    require_ids(target, "target", "(N,)", 1)
    n, t_k = weights.shape
    if target.shape[0] != n:
        raise ValueError(f"target must have shape ({n},), one position per row of weights "
                         f"{shape_str(weights.shape)}; got {shape_str(target.shape)}")
    if n == 0:
        raise ValueError("weights has no rows: there is nothing to score")
    if int(target.min()) < 0 or int(target.max()) >= t_k:
        raise ValueError(f"target positions must lie in 0 .. T_k - 1 = {t_k - 1}; got "
                         f"{int(target.min())} .. {int(target.max())}")
    return (weights.argmax(dim=1) == target).float().mean().item()


@torch.no_grad()
def accuracy(model: PointerModel, data: PointerData) -> float:
    """The share of examples whose answer the model gets right (argmax of the logits)."""
    if not isinstance(data, PointerData):
        raise ValueError(f"data must be PointerData; got {type(data).__name__}")
    with eval_mode(model):
        logits, _ = model(data.ids)  # (N, n_symbols)
    return (logits.argmax(dim=1) == data.answer).float().mean().item()
