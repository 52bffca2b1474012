"""Attention as soft addressing: softmax, masks, score functions, scaled dot-product attention.

Shape convention (the same in every unit of the course):

    queries  q : (..., T_q, d_k)
    keys     k : (..., T_k, d_k)
    values   v : (..., T_k, d_v)
    scores   e : (..., T_q, T_k)     e[..., i, j] = similarity of query i and key j
    weights  alpha : (..., T_q, T_k) each row sums to 1 (or is all 0 if fully masked)
    output     : (..., T_q, d_v)     row i = sum_j alpha[i, j] v[j]

`...` is any number of batch dimensions (batch, heads, ...); they broadcast.

Mask convention (as in `torch.nn.functional.scaled_dot_product_attention` with a boolean
`attn_mask`): a bool tensor broadcastable to the scores, True = "query i may attend to key j".
A query whose row is fully masked gets all-zero weights, so its output is the zero vector;
never NaN, and never a uniform average over keys it was told not to look at.
"""

from __future__ import annotations

import math

import torch

from course_utils._checks import (
    broadcast_batch,
    check_dim,
    require_finite,
    require_float_tensor,
    require_mask,
    require_no_nan,
    require_queries_keys,
    require_query_keys_any_width,
    require_weight,
    shape_str,
)

__all__ = [
    "softmax",
    "masked_softmax",
    "dot_scores",
    "scaled_dot_scores",
    "bilinear_scores",
    "additive_scores",
    "cosine_scores",
    "weighted_average",
    "soft_lookup",
    "scaled_dot_product_attention",
    "masked_softmax_unchecked",
    "attention_unchecked",
]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Numerically stable softmax along `dim`.

        softmax(x)_i = exp(x_i - x_max) / sum_j exp(x_j - x_max),   x_max = max_j x_j

    Subtracting the maximum changes nothing mathematically but keeps `exp` from
    overflowing: the largest exponent is exp(0) = 1. Entries equal to -inf get weight 0;
    a slice that is all -inf gets all-zero weights (torch.softmax would return NaN).
    float16/bfloat16 inputs are computed in float32 and returned in their own dtype.

    x: (...) floating-point tensor without NaN or +inf.  Returns the same shape.
    """
    return _softmax(x, dim, "x")


def _softmax(x: torch.Tensor, dim: int, name: str) -> torch.Tensor:
    require_float_tensor(x, name, "(..., n)")
    dim = check_dim(dim, x.dim())
    if x.shape[dim] == 0:  # nothing to normalise
        return x.clone()
    work = x.float() if x.dtype in _LOW_PRECISION else x
    # The row maximum is NaN if the row holds a NaN and +inf if it holds +inf, so one pass
    # both validates the input and gives the shift.
    m = work.detach().amax(dim=dim, keepdim=True)
    if not bool(torch.isfinite(m).all()):
        require_no_nan(m, name)
    return _shifted_softmax(work, m, dim).to(x.dtype)


def _shifted_softmax(x: torch.Tensor, m: torch.Tensor, dim: int) -> torch.Tensor:
    """softmax(x) along `dim`, shifted by the row maxima `m` (no NaN or +inf among them); a row
    that is all -inf is shifted by 0 and gets all-zero weights."""
    return _StableSoftmax.apply(x, m.masked_fill(torch.isneginf(m), 0.0), dim)


def masked_softmax_unchecked(scores: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """`masked_softmax` over the last axis for scores already known to be free of NaN and
    +inf (computed from checked inputs): no validation pass over the (..., T_q, T_k) scores."""
    if scores.dtype in _LOW_PRECISION:
        return masked_softmax(scores, mask)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return _shifted_softmax(scores, scores.detach().amax(dim=-1, keepdim=True), -1)


class _StableSoftmax(torch.autograd.Function):
    """exp(x - x_max) / sum exp(x - x_max), with the softmax's own backward

        dL/dx_i = y_i (g_i - sum_j g_j y_j),   y = softmax(x), g = dL/dy,

    in fewer passes over the (..., T_q, T_k) scores than autograd through the forward's ops."""

    @staticmethod
    def forward(ctx, x, m, dim):
        y = (x - m).exp_()
        y /= y.sum(dim=dim, keepdim=True).clamp_min(torch.finfo(y.dtype).tiny)  # empty row: 0
        ctx.save_for_backward(y)
        ctx.dim = dim
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        gy = g * y
        return gy.sub_(y * gy.sum(dim=ctx.dim, keepdim=True)), None, None


def masked_softmax(scores: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dimension (the keys) that gives masked positions zero weight.

        alpha[..., i, j] = exp(e_ij) / sum_{l: mask_il} exp(e_il)   if mask_ij, else 0

    scores: (..., T_q, T_k).  mask: bool, broadcastable to scores, True = may attend;
    None means every key may be attended.  Returns (..., T_q, T_k); a fully masked row
    is all zeros.
    """
    require_float_tensor(scores, "scores", "(..., T_q, T_k)")
    if mask is None:
        return _softmax(scores, -1, "scores")
    require_mask(mask, "mask", scores.shape, broadcast=True)
    require_no_nan(scores, "scores")  # before masking hides a NaN
    return _softmax(scores.masked_fill(~mask, float("-inf")), -1, "scores")


def dot_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Dot-product scores e_ij = q_i . k_j.

    q: (..., T_q, d_k), k: (..., T_k, d_k)  ->  (..., T_q, T_k)
    """
    require_queries_keys(q, k)
    return q @ k.transpose(-2, -1)  # (..., T_q, d_k) @ (..., d_k, T_k) -> (..., T_q, T_k)


def scaled_dot_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Scaled dot-product scores e_ij = q_i . k_j / sqrt(d_k).

    Dividing by sqrt(d_k) keeps the variance of the scores near 1 whatever the width,
    so the softmax does not saturate (unit 04 measures this).
    q: (..., T_q, d_k), k: (..., T_k, d_k)  ->  (..., T_q, T_k)
    """
    require_queries_keys(q, k)
    return _scaled_scores(q, k)


def _scaled_scores(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    # (..., T_q, d_k) @ (..., d_k, T_k) -> (..., T_q, T_k); scaling q is cheaper than the scores
    return (q * (1.0 / math.sqrt(q.shape[-1]))) @ k.transpose(-2, -1)


def bilinear_scores(q: torch.Tensor, k: torch.Tensor, w_e: torch.Tensor) -> torch.Tensor:
    """Multiplicative (bilinear, Luong's "general") scores e_ij = k_j^T W_e q_i.

    With learned maps of keys and queries, k(h) = W_k h and q(s) = W_q s, the dot product
    k(h) . q(s) = h^T W_k^T W_q s is this form with W_e = W_k^T W_q (of rank at most the
    width of the maps). W_e = I gives the plain dot product.
    q: (..., T_q, d_q), k: (..., T_k, d_k), w_e: (d_k, d_q)  ->  (..., T_q, T_k)
    """
    require_query_keys_any_width(q, k)
    require_weight(w_e, "w_e", (k.shape[-1], q.shape[-1]), q.dtype)
    projected = q @ w_e.T  # (..., T_q, d_q) @ (d_q, d_k) -> (..., T_q, d_k) = (W_e q_i)^T
    return projected @ k.transpose(-2, -1)  # (..., T_q, d_k) @ (..., d_k, T_k) -> (..., T_q, T_k)


def additive_scores(q: torch.Tensor, k: torch.Tensor, w_q: torch.Tensor, w_k: torch.Tensor,
                    w_a: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Additive (Bahdanau, "MLP") scores e_ij = w_a . tanh(W_q q_i + W_k k_j + b).

    Equivalent to a one-hidden-layer network on the concatenation [q_i; k_j] with weight
    [W_q | W_k] and bias b (None: no bias), read out by the vector w_a. Unit 01's
    feed-forward score is this form. Builds a (..., T_q, T_k, d_a) tensor: memory grows
    with T_q * T_k * d_a.
    q: (..., T_q, d_q), k: (..., T_k, d_k), w_q: (d_a, d_q), w_k: (d_a, d_k), w_a: (d_a,),
    bias: (d_a,) or None  ->  (..., T_q, T_k)
    """
    require_query_keys_any_width(q, k)
    require_float_tensor(w_a, "w_a", "(d_a,)", ndim=1)
    d_a = w_a.shape[0]
    require_weight(w_a, "w_a", (d_a,), q.dtype)
    require_weight(w_q, "w_q", (d_a, q.shape[-1]), q.dtype)
    require_weight(w_k, "w_k", (d_a, k.shape[-1]), q.dtype)
    from_q = (q @ w_q.T).unsqueeze(-2)  # (..., T_q, d_a) -> (..., T_q, 1, d_a)
    from_k = (k @ w_k.T).unsqueeze(-3)  # (..., T_k, d_a) -> (..., 1, T_k, d_a)
    pre = from_q + from_k  # (..., T_q, T_k, d_a)
    if bias is not None:
        require_weight(bias, "bias", (d_a,), q.dtype)
        pre = pre + bias
    return torch.tanh(pre) @ w_a  # (..., T_q, T_k, d_a) @ (d_a,) -> (..., T_q, T_k)


def cosine_scores(q: torch.Tensor, k: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """Cosine-similarity scores e_ij = q_i . k_j / (|q_i| |k_j|), in [-1, 1].

    Blind to the lengths of the vectors, so the scores cannot grow and the softmax over them
    stays soft (multiply by a temperature to sharpen it). A zero vector (norm below `eps`)
    scores 0 against everything instead of NaN.
    q: (..., T_q, d_k), k: (..., T_k, d_k)  ->  (..., T_q, T_k)
    """
    require_queries_keys(q, k)
    if not isinstance(eps, float) or not eps > 0:
        raise ValueError(f"eps must be a positive float; got {eps!r}")
    q_unit = q / q.norm(dim=-1, keepdim=True).clamp_min(eps)  # (..., T_q, d_k)
    k_unit = k / k.norm(dim=-1, keepdim=True).clamp_min(eps)  # (..., T_k, d_k)
    return q_unit @ k_unit.transpose(-2, -1)  # (..., T_q, T_k)


def weighted_average(weights: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """Mix the values with the weights: out_i = sum_j weights_ij v_j.

    weights: (..., T_q, T_k) or (..., T_k) for a single query
    values:  (..., T_k, d_v)
    returns: (..., T_q, d_v), or (..., d_v) for a single query
    The weights are used as given (they are not renormalised).
    """
    require_float_tensor(weights, "weights", "(..., T_q, T_k) or (T_k,)")
    require_float_tensor(values, "values", "(..., T_k, d_v)", min_ndim=2)
    single = weights.dim() == 1
    w = weights.unsqueeze(0) if single else weights  # (T_k,) -> (1, T_k)
    if w.shape[-1] != values.shape[-2]:
        raise ValueError(
            f"weights have {w.shape[-1]} entries per query but there are {values.shape[-2]} "
            f"values: expected weights (..., T_q, {values.shape[-2]}) for values "
            f"{shape_str(values.shape)}; got weights {shape_str(weights.shape)}"
        )
    if w.dtype != values.dtype:
        raise ValueError(
            f"weights and values must have the same dtype; got {w.dtype} and {values.dtype}"
        )
    broadcast_batch(w.shape[:-2], values.shape[:-2], "weights and values")
    require_finite(weights, "weights")
    require_finite(values, "values")
    out = w @ values  # (..., T_q, T_k) @ (..., T_k, d_v) -> (..., T_q, d_v)
    return out.squeeze(-2) if single else out


def soft_lookup(
    query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Look a query up in a key-value memory, softly.

    A Python dict returns the value of the one key equal to the query. A soft lookup
    returns a mix of *all* values, weighted by how similar each key is to the query:

        e_j = query . k_j,   alpha = softmax(e),   result = sum_j alpha_j v_j

    query: (d_k,), keys: (T_k, d_k), values: (T_k, d_v)  ->  (result (d_v,), alpha (T_k,))
    """
    require_float_tensor(query, "query", "(d_k,)", ndim=1)
    require_float_tensor(keys, "keys", "(T_k, d_k)", ndim=2)
    require_float_tensor(values, "values", "(T_k, d_v)", ndim=2)
    if keys.shape[0] != values.shape[0]:
        raise ValueError(
            f"every key needs a value: keys {shape_str(keys.shape)} expects values "
            f"({keys.shape[0]}, d_v); got values {shape_str(values.shape)}"
        )
    if keys.shape[1] != query.shape[0]:
        raise ValueError(
            f"query and keys must have the same width d_k: query is {shape_str(query.shape)}, "
            f"so keys must be (T_k, {query.shape[0]}); got keys {shape_str(keys.shape)}"
        )
    require_finite(query, "query")
    require_finite(keys, "keys")
    scores = keys @ query  # (T_k, d_k) @ (d_k,) -> (n,)
    alpha = _softmax(scores, -1, "scores")  # (n,)
    return weighted_average(alpha, values), alpha


def scaled_dot_product_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Scaled dot-product attention, returning the weights as well as the output.

        alpha = masked_softmax(q k^T / sqrt(d_k), mask),   output = alpha v

    q: (..., T_q, d_k), k: (..., T_k, d_k), v: (..., T_k, d_v)
    mask: bool, broadcastable to (..., T_q, T_k), True = may attend (as in
    `torch.nn.functional.scaled_dot_product_attention`).
    Returns (output (..., T_q, d_v), weights (..., T_q, T_k)). A fully masked query row
    gets zero weights and a zero output.
    """
    require_float_tensor(v, "v (values)", "(..., T_k, d_v)", min_ndim=2)
    scores = scaled_dot_scores(q, k)  # (..., T_q, T_k)
    if v.shape[-2] != k.shape[-2]:
        raise ValueError(
            f"every key needs a value: k is {shape_str(k.shape)}, so v must be "
            f"(..., {k.shape[-2]}, d_v); got v {shape_str(v.shape)}"
        )
    if v.dtype != q.dtype:
        raise ValueError(f"v must have the dtype of q and k ({q.dtype}); got {v.dtype}")
    broadcast_batch(scores.shape[:-2], v.shape[:-2], "q/k and v")
    require_finite(v, "v (values)")
    weights = masked_softmax(scores, mask)  # (..., T_q, T_k)
    output = weights @ v  # (..., T_q, T_k) @ (..., T_k, d_v) -> (..., T_q, d_v)
    return output, weights


def attention_unchecked(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                        mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """`scaled_dot_product_attention` for inputs whose shapes, dtypes, mask and finiteness the
    caller has checked already (`multihead.MultiHeadAttention` checks its inputs once)."""
    weights = masked_softmax_unchecked(_scaled_scores(q, k), mask)  # (..., T_q, T_k)
    return weights @ v, weights  # (..., T_q, d_v), (..., T_q, T_k)
