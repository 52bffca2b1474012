"""Unit 09: attention for long inputs: a sliding window, and linear attention.

**Sliding-window attention** (window width w = `window`) lets query t attend only to keys u
at most w positions away, a band of the T x T mask:

    causal      0 <= t - u <= w        (w + 1 keys: itself and the w before it)
    symmetric   |t - u| <= w           (2 w + 1 keys)

One layer sees w positions back; L stacked layers pass information on, so the output at
position t can depend on positions t - L w .. t (and as far ahead when symmetric):
`receptive_field` counts them (Longformer, Beltagy et al. 2020, arXiv:2004.05150; Mistral 7B
uses window 4096). `multihead.MultiHeadAttention(..., window=w)` applies the band as a mask to
the full score matrix, which shows what the model can see, not the saving: a kernel that
computes only the band needs T (2 w + 1) scores.

**Linear attention** (Katharopoulos et al. 2020, "Transformers are RNNs", arXiv:2006.16236)
replaces exp(q . k) by a product of features phi(q) . phi(k), phi(x) = elu(x) + 1 > 0:

    c_t = phi(q_t)^T U / (phi(q_t)^T z + eps),  U = sum_u phi(k_u) v_u^T,  z = sum_u phi(k_u)

The state U, a (d_k, d_v) matrix, and the normaliser z, a (d_k,) vector, are computed once per
head, so no T_q x T_k matrix is formed: O(T) time and memory. The causal form keeps running
sums U_t and z_t over u <= t; `linear_attention` adds them up chunk by chunk (a chunk's own
keys by a small masked product, the earlier ones by the carried sums).
`linear_attention_weights` gives the same attention in its quadratic form, the weights
phi(q_t) . phi(k_u) normalised over u, to check it and to look at it. The price is in those
weights: a sum of positive products of d_k features is flatter than a softmax can be (lecture
09 measures how much, on unit 05's pointer task). `multihead.MultiHeadAttention(...,
feature_map=phi)` is a layer of it.

Causal forms read the T_q queries as the last T_q of the T_k positions (query i stands at
T_k - T_q + i): T_q = T_k in self-attention, and a decoder's newest queries against every
cached key get the same band, or the same sums, as the whole sequence.

These are functions of tensors, below the layers that use them: the attention of unit 05's
pointer model and of unit 06's Transformer is chosen by their configs (`window`,
`feature_map`; `pointer_model.PointerConfig`, `transformer.TransformerConfig`), and lecture
09 compares full attention, a window and linear attention on unit 05's pointer task, where
pointers that name a position farther away than the window reaches
(`data.pointer.make_pointer_data(..., min_distance=...)`) tell them apart.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from course_utils._checks import (
    require_bool,
    require_heads_qkv,
    require_int,
    require_mask,
    require_positive_number,
    shape_str,
)

__all__ = ["elu_feature_map", "linear_attention", "linear_attention_weights",
           "receptive_field", "sliding_window_mask"]


# ----------------------------------------------------------------------------- the window

def sliding_window_mask(T: int, window: int, causal: bool = True,
                        device: torch.device | str | None = None) -> torch.Tensor:
    """(T, T) bool, True where query t may attend to key u: 0 <= t - u <= window (causal) or
    |t - u| <= window (symmetric). window = 0 is the diagonal alone; window >= T - 1 is the
    causal mask (or no mask at all)."""
    require_int(T, "T")
    require_int(window, "window", low=0)
    require_bool(causal, "causal")
    t = torch.arange(T, device=device)[:, None]  # query positions (T_q, 1)
    u = torch.arange(T, device=device)[None, :]  # key positions (1, T_k)
    if causal:
        return (t - u >= 0) & (t - u <= window)  # (T_q, T_k)
    return (t - u).abs() <= window  # (T_q, T_k)


def receptive_field(window: int, n_layers: int, causal: bool = True) -> int:
    """How many positions the output of one query can depend on after `n_layers` layers of
    sliding-window attention (in a long enough input): each layer reaches `window` further,

        L w + 1 (causal),   2 L w + 1 (symmetric), w = window."""
    require_int(window, "window", low=0)
    require_int(n_layers, "n_layers")
    require_bool(causal, "causal")
    return (1 if causal else 2) * n_layers * window + 1


# ----------------------------------------------------------------------------- linear attention

def elu_feature_map(x: torch.Tensor) -> torch.Tensor:
    """phi(x) = elu(x) + 1, positive everywhere (Katharopoulos et al.'s feature map)."""
    return F.elu(x) + 1


def _features(q, k, v, causal, key_padding_mask, feature_map, eps):
    """Checks; -> phi(q), phi(k) with padded keys zeroed."""
    require_heads_qkv(q, k, v)
    require_bool(causal, "causal")
    if causal and q.shape[-2] > k.shape[-2]:
        raise ValueError(f"causal linear attention reads the queries as the last T_q of the T_k "
                         f"positions: T_q must not exceed T_k; got q {shape_str(q.shape)} and "
                         f"k {shape_str(k.shape)}")
    if not callable(feature_map):
        raise ValueError(f"feature_map must be a function of a tensor, such as "
                         f"elu_feature_map; got {type(feature_map).__name__}")
    require_positive_number(eps, "eps")
    phi_q, phi_k = feature_map(q), feature_map(k)  # (B, n_heads, T_q, d_k), (.., T_k, d_k)
    if phi_q.shape != q.shape or phi_k.shape != k.shape:
        raise ValueError(f"feature_map must keep the shape of its input; it turned "
                         f"{shape_str(q.shape)} into {shape_str(phi_q.shape)}")
    if key_padding_mask is not None:
        require_mask(key_padding_mask, "key_padding_mask", (q.shape[0], k.shape[-2]),
                     meaning="True = a real key")
        phi_k = phi_k * key_padding_mask[:, None, :, None]  # (B, 1, T_k, 1): padded keys 0
    return phi_q, phi_k


def linear_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                     key_padding_mask: torch.Tensor | None = None,
                     feature_map: Callable = elu_feature_map, chunk_size: int = 64,
                     eps: float = 1e-6) -> torch.Tensor:
    """Linear attention, without a T_q x T_k matrix:

        c_t = phi(q_t)^T sum_u phi(k_u) v_u^T / (phi(q_t)^T sum_u phi(k_u) + eps)

    over all keys u, or u <= t with `causal`: query i stands at t = T_k - T_q + i (T_q <= T_k;
    the keys before the first query enter the sums at once, then `chunk_size` queries at a
    time: the earlier chunks through the running sums, the chunk itself through a masked
    (chunk_size, chunk_size) product). q: (B, n_heads, T_q, d_k), k: (B, n_heads, T_k, d_k),
    v: (B, n_heads, T_k, d_v); key_padding_mask (B, T_k) bool, True = a real key.
    Returns (B, n_heads, T_q, d_v); a query with no key gets zeros."""
    phi_q, phi_k = _features(q, k, v, causal, key_padding_mask, feature_map, eps)
    if not causal:
        kv = phi_k.transpose(-2, -1) @ v  # (B, n_heads, d_k, d_v): U = sum_u phi(k_u) v_u^T
        z = phi_k.sum(dim=-2, keepdim=True).transpose(-2, -1)  # (B, n_heads, d_k, 1): z
        return (phi_q @ kv) / (phi_q @ z + eps)  # (B, n_heads, T_q, d_v)
    chunk_size = require_int(chunk_size, "chunk_size")
    before = k.shape[-2] - q.shape[-2]  # keys before the first query: in every query's sums
    k_b, v_b = phi_k[..., :before, :], v[..., :before, :]
    kv = k_b.transpose(-2, -1) @ v_b  # (B, n_heads, d_k, d_v): U over them (zeros if none)
    z = k_b.sum(dim=-2, keepdim=True).transpose(-2, -1)  # (B, n_heads, d_k, 1): z over them
    out = []
    for start in range(0, q.shape[-2], chunk_size):
        end = start + chunk_size
        q_c = phi_q[..., start:end, :]
        keys = slice(before + start, before + end)  # the chunk's own keys
        k_c, v_c = phi_k[..., keys, :], v[..., keys, :]
        within = (q_c @ k_c.transpose(-2, -1)).tril()  # (B, n_heads, chunk, chunk), u <= t
        numerator = q_c @ kv + within @ v_c  # (B, n_heads, chunk, d_v)
        denominator = q_c @ z + within.sum(dim=-1, keepdim=True)  # (B, n_heads, chunk, 1)
        out.append(numerator / (denominator + eps))
        kv = kv + k_c.transpose(-2, -1) @ v_c  # the chunk's keys join the running sums
        z = z + k_c.sum(dim=-2, keepdim=True).transpose(-2, -1)
    return torch.cat(out, dim=-2)  # (B, n_heads, T_q, d_v)


def linear_attention_weights(q: torch.Tensor, k: torch.Tensor, causal: bool = False,
                             key_padding_mask: torch.Tensor | None = None,
                             feature_map: Callable = elu_feature_map, eps: float = 1e-6,
                             mask: torch.Tensor | None = None) -> torch.Tensor:
    """The weights that linear attention gives, in the quadratic form:

        alpha_tu = phi(q_t) . phi(k_u) / (sum_u' phi(q_t) . phi(k_u') + eps)

    (over u <= t with `causal`, query i standing at t = T_k - T_q + i as in
    `linear_attention`), so that linear_attention(q, k, v) = alpha v. `mask`, bool
    broadcastable to (B, n_heads, T_q, T_k), True = may attend, leaves out any other pairs
    (their products are zeroed before the sum): the one form that takes any mask. Builds the
    (B, n_heads, T_q, T_k) matrix: for checking, looking and masks, not for long inputs."""
    phi_q, phi_k = _features(q, k, k, causal, key_padding_mask, feature_map, eps)
    scores = phi_q @ phi_k.transpose(-2, -1)  # (B, n_heads, T_q, T_k), all >= 0
    if causal:
        scores = scores.tril(diagonal=k.shape[-2] - q.shape[-2])
    if mask is not None:
        require_mask(mask, "mask", scores.shape, broadcast=True)
        scores = scores.masked_fill(~mask, 0.0)
    return scores / (scores.sum(dim=-1, keepdim=True) + eps)  # (B, n_heads, T_q, T_k)
