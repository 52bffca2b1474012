"""Unit 05: positional encodings, the order that self-attention cannot see on its own.

Self-attention is permutation equivariant: shuffle the positions of its input and its output
is shuffled the same way. Three ways to tell it where each token is:

    index_encoding(T)                  the index t itself as one feature       (T, 1)
    LearnedPositions(n_positions, d_model)(T)   one trained vector per position  (T, d_model)
    sinusoidal_encoding(T, d_model)    Vaswani et al. (2017), section 3.5:     (T, d_model)

        PE[t, 2i]     = sin(t / base^(2i / d_model))
        PE[t, 2i + 1] = cos(t / base^(2i / d_model)),     i = 0, 1, ...,  base = 10000

and two ways to combine an encoding with the token embeddings x (B, T, d_model):
`add_positions` (x + PE, the paper's choice: the width stays d_model) and
`concat_positions` ([x; PE], the width grows by the encoding's).

A fourth way puts positions into the attention score itself instead of the input:

    rotary(x, positions)               Su et al. (2021), RoPE: rotate each pair   (..., T, d_k)
                                       of features of a query or key by t theta_i,
                                       theta_i = base^(-2i / d_k); then the score
                                       rotary(q)_t . rotary(k)_u depends on u - t only.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from course_utils._checks import (
    require_float_tensor,
    require_int,
    require_positive_number,
    shape_str,
)

__all__ = ["LearnedPositions", "add_positions", "concat_positions", "index_encoding", "rotary",
           "sinusoidal_encoding"]


def index_encoding(n_positions: int, normalize: bool = False,
                   dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The naive encoding: position t as the number t, (n_positions, 1). It grows without
    bound with the length (or, with `normalize`, t / (n_positions - 1) means a different thing
    in every length), which is why it is not used."""
    require_int(n_positions, "n_positions")
    t = torch.arange(n_positions, dtype=dtype)  # (T,)
    if normalize:
        t = t / max(n_positions - 1, 1)
    return t.unsqueeze(1)  # (T, 1)


def sinusoidal_encoding(n_positions: int, d_model: int, base: float = 10000.0,
                        dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """PE (n_positions, d_model): PE[t, 2i] = sin(t / base^(2i/d)), PE[t, 2i+1] = cos(same),
    i from 0; an odd d_model ends with a sine column. Row t . row t+k depends on k only."""
    require_int(n_positions, "n_positions")
    require_int(d_model, "d_model")
    require_positive_number(base, "base")
    if base <= 1:
        raise ValueError(f"base must be greater than 1 (the paper uses 10000); got {base}")
    t = torch.arange(n_positions, dtype=torch.float64).unsqueeze(1)  # (T, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # 2i: (ceil(d/2),)
    angle = t / base ** (two_i / d_model)  # (T, ceil(d/2))
    pe = torch.empty(n_positions, d_model, dtype=torch.float64)
    pe[:, 0::2] = torch.sin(angle)  # even columns
    pe[:, 1::2] = torch.cos(angle[:, : d_model // 2])  # odd columns
    return pe.to(dtype)


class LearnedPositions(nn.Module):
    """One trained vector per position, up to n_positions: forward(T) -> (T, d_model).
    It knows nothing about positions it was not trained on."""

    def __init__(self, n_positions: int, d_model: int):
        super().__init__()
        require_int(n_positions, "n_positions")
        require_int(d_model, "d_model")
        self.embedding = nn.Embedding(n_positions, d_model)
        nn.init.normal_(self.embedding.weight, std=1 / math.sqrt(d_model))

    def forward(self, length: int) -> torch.Tensor:
        n = self.embedding.num_embeddings
        require_int(length, "length")
        if length > n:
            raise ValueError(f"length = {length} is longer than the {n} positions learned")
        return self.embedding.weight[:length]  # (T, d_model)


def _require_pair(x: torch.Tensor, pe: torch.Tensor) -> None:
    require_float_tensor(x, "x", "(B, T, d_model)", ndim=3)
    require_float_tensor(pe, "pe", "(n_positions, d_pe)", ndim=2)
    if pe.shape[0] < x.shape[1]:
        raise ValueError(f"pe has {pe.shape[0]} positions; x needs T = {x.shape[1]}")


def add_positions(x: torch.Tensor, pe: torch.Tensor) -> torch.Tensor:
    """x (B, T, d_model) + pe[:T] (T, d_model) -> (B, T, d_model)."""
    _require_pair(x, pe)
    if pe.shape[1] != x.shape[2]:
        raise ValueError(f"to add them, pe must have the width of x, d_model = {x.shape[2]}; "
                         f"got pe of width {pe.shape[1]}")
    return x + pe[: x.shape[1]].to(x.dtype)  # (T, d_model) broadcasts over B


def concat_positions(x: torch.Tensor, pe: torch.Tensor) -> torch.Tensor:
    """[x; pe[:T]]: (B, T, d_model) and (T, d_pe) -> (B, T, d_model + d_pe)."""
    _require_pair(x, pe)
    batch, length, _ = x.shape
    positions = pe[:length].to(x.dtype).expand(batch, -1, -1)  # (B, T, d_pe)
    return torch.cat([x, positions], dim=-1)  # (B, T, d_model + d_pe)


def rotary(x: torch.Tensor, positions: torch.Tensor | None = None, base: float = 10000.0
           ) -> torch.Tensor:
    """Rotary position embedding (RoPE; Su et al., 2021, arXiv:2104.09864): rotate each pair
    of features (2i, 2i + 1) of the vector at position t by the angle t theta_i,

        theta_i = base^(-2i / d_k),   i = 0, 1, ..., d_k / 2 - 1   (the sinusoids' frequencies)
        y[2i]     = x[2i] cos(t theta_i) - x[2i + 1] sin(t theta_i)
        y[2i + 1] = x[2i] sin(t theta_i) + x[2i + 1] cos(t theta_i),

    or, with the pair as one complex number x[2i] + j x[2i + 1], a product with exp(j t theta_i).
    Applied to queries and keys (not values), with R_t the rotation at position t, a score
    becomes (R_t q)^T (R_u k) = q^T R_t^T R_u k = q^T R_(u - t) k: it sees the offset u - t only.

    x (..., T, d_k) with d_k even: queries or keys, e.g. (B, n_heads, T, d_k). positions: the
    position of each row, shape (T,) or broadcastable to x's (..., T); default 0, 1, ..., T - 1.
    Returns (..., T, d_k), in x's dtype (the angles are computed in float64); position 0 is
    left as it is, and every vector keeps its norm.
    """
    _require_rotary(x, positions, base)
    positions = torch.arange(x.shape[-2]) if positions is None else positions  # (T,) or (..., T)
    d_k = x.shape[-1]
    theta = base ** -(torch.arange(0, d_k, 2, dtype=torch.float64) / d_k)  # (d_k / 2,)
    angle = positions.to(torch.float64)[..., None] * theta  # (..., T, d_k / 2)
    cos, sin = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., T, d_k / 2) each: the pairs' two features
    rotated = torch.stack([even * cos - odd * sin, even * sin + odd * cos], dim=-1)
    return rotated.flatten(-2)  # (..., T, d_k / 2, 2) -> (..., T, d_k), pairs back in place


def _require_rotary(x, positions, base) -> None:
    require_float_tensor(x, "x", "(..., T, d_k) with d_k even", min_ndim=2)
    if x.shape[-1] % 2:
        raise ValueError(f"x must have shape (..., T, d_k) with d_k even (features are rotated "
                         f"in pairs); got shape {shape_str(x.shape)}, d_k = {x.shape[-1]}")
    require_positive_number(base, "base")
    if base <= 1:
        raise ValueError(f"base must be greater than 1 (the paper uses 10000); got {base}")
    if positions is None:
        return
    expected = f"(T,) = ({x.shape[-2]},), or broadcastable to {shape_str(x.shape[:-1])}"
    if not isinstance(positions, torch.Tensor) or positions.dtype == torch.bool \
            or positions.is_complex():
        raise ValueError(f"positions must be an int or float torch.Tensor of shape {expected}; "
                         f"got {getattr(positions, 'dtype', type(positions).__name__)}")
    try:
        fits = torch.broadcast_shapes(positions.shape, x.shape[:-1]) == x.shape[:-1]
    except RuntimeError:
        fits = False
    if not fits:
        raise ValueError(f"positions must have shape {expected} (one per row of x "
                         f"{shape_str(x.shape)}); got shape {shape_str(positions.shape)}")
