"""Unit 09: attention without the T_q x T_k matrix: the online softmax and tiled attention.

A softmax needs two numbers per row, its maximum and its sum of exponentials. Both can be
built chunk by chunk (Milakov & Gimelshein 2018, "Online normalizer calculation for softmax",
arXiv:1805.02867). A chunk's *state* (the lecture's running maximum `m` and running sum ℓ) is

    row_max = max_u e_u,   row_sum = sum_u exp(e_u - row_max)

and two states merge exactly (`combine`):

    new_max = max(max_a, max_b)
    new_sum = sum_a exp(max_a - new_max) + sum_b exp(max_b - new_max)

since exp(e_u - new_max) = exp(e_u - max_a) exp(max_a - new_max). Every exponent is <= 0, so
nothing overflows, whatever the chunks and their order.

Tiled attention (the forward pass of FlashAttention, Dao et al. 2022, arXiv:2205.14135, in
the form FlashAttention-2 gave it, Dao 2023, arXiv:2307.08691: the accumulator is divided by
row_sum once, after the last block, and the query blocks are the outer loop) carries the same
state through the weighted sum of the values. For each block of keys and values (K_j, V_j, b =
`block_size` rows), against a block of queries Q_i:

    e       = Q_i K_j^T * scale                          (B, n_heads, T_q block, block_size)
    new_max = max(row_max, max over the block of e)
    p       = exp(e - new_max)                           unnormalised weights of the block
    fix     = exp(row_max - new_max)                     <= 1: rescales what came before
    row_sum = row_sum * fix + sum over the block of p
    acc     = acc * fix + p V_j                          unnormalised output (..., d_v)
    row_max = new_max
    output  = acc / row_sum                              after the last block

Only a block of scores exists at any time, so the memory beyond q, k, v and the output is
B n_heads (query block) (block_size) scores plus the state: linear in T, where the matrix form
(`matrix_attention`, unit 04's) holds B n_heads T_q T_k scores at once. The arithmetic is the
same; a fused kernel wins by keeping the block in fast memory (SRAM, a CPU's cache) instead of
writing the T_q x T_k matrix out and reading it back. This module is PyTorch with Python
loops: it shows the memory, not the speed.

Conventions, the same as `torch.nn.functional.scaled_dot_product_attention`'s:
`causal=True` lets query i attend to keys j <= i, counted from the first query and first key
("top-left", also when T_q != T_k); `key_padding_mask` (B, T_k) bool is True at a real key
(the course's convention: True = may attend). A query whose every key is masked gets a zero
output (as SDPA gives), never NaN. `scale` defaults to 1 / sqrt(d_k). float16 and bfloat16
inputs are computed in float32 and returned in their own dtype.

Autograd runs through the loop, but it keeps every block's weights for the backward pass (as
much memory as the matrix form); FlashAttention's backward instead recomputes each block's
weights from q, k and the saved statistics: row_max and row_sum in the first FlashAttention,
one number per query in FlashAttention-2, lse = row_max + log(row_sum). Measure the forward
under `torch.no_grad()`.
"""

from __future__ import annotations

import math

import torch

from course_utils._checks import (
    check_dim,
    require_bool,
    require_float_tensor,
    require_heads_qkv,
    require_int,
    require_mask,
    require_no_nan,
    require_positive_number,
)
from course_utils.attention import masked_softmax_unchecked

__all__ = ["combine", "matrix_attention", "online_softmax", "softmax_state", "tiled_attention"]

_LOW_PRECISION = (torch.float16, torch.bfloat16)


# ----------------------------------------------------------------------------- online softmax

def softmax_state(x: torch.Tensor, dim: int = -1) -> tuple[torch.Tensor, torch.Tensor]:
    """The softmax state of one chunk along `dim`: (row_max, row_sum), both with `dim` kept at
    size 1, row_sum = sum_j exp(x_j - row_max). A chunk that is all -inf has row_max = -inf
    and row_sum = 0 (it adds nothing when combined).

    x: (...) floating-point, no NaN or +inf (-inf is a masked entry)."""
    require_float_tensor(x, "x", "(..., n)")
    dim = check_dim(dim, x.dim())
    require_no_nan(x, "x")
    return _state(x, dim)


def _state(x: torch.Tensor, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    row_max = x.amax(dim=dim, keepdim=True)
    return row_max, (x - _finite(row_max)).exp().sum(dim=dim, keepdim=True)


def _finite(row_max: torch.Tensor) -> torch.Tensor:
    """The shift to subtract: row_max, or 0 where it is -inf (all masked so far), so that
    exp(-inf - shift) = 0 instead of exp(-inf + inf) = NaN."""
    return row_max.masked_fill(torch.isneginf(row_max), 0.0)


def combine(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor]
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """Merge the softmax states (row_max, row_sum) of two chunks of the same rows:

        new_max = max(max_a, max_b)
        new_sum = sum_a exp(max_a - new_max) + sum_b exp(max_b - new_max)

    Exact, associative and commutative: any split of a row, combined in any order, gives the
    state of the whole row. Shapes broadcast (states keep the chunked dim at size 1)."""
    (max_a, sum_a), (max_b, sum_b) = a, b
    new_max = torch.maximum(max_a, max_b)
    shift = _finite(new_max)
    return new_max, sum_a * (max_a - shift).exp() + sum_b * (max_b - shift).exp()


def online_softmax(x: torch.Tensor, block_size, dim: int = -1) -> torch.Tensor:
    """softmax(x) along `dim`, computed over chunks: one pass builds the state (row_max,
    row_sum) chunk by chunk with `combine`, a second writes exp(x - row_max) / row_sum chunk
    by chunk. Equal to torch.softmax for finite x; a slice that is all -inf gets zero weights
    (torch.softmax gives NaN).

    x: (...) floating-point, no NaN or +inf. block_size: an int (chunks of that length, the
    last one shorter) or a list of chunk lengths that add up to x.shape[dim], as `torch.split`
    takes them. Returns the shape of x.
    """
    require_float_tensor(x, "x", "(..., n)")
    dim = check_dim(dim, x.dim())
    require_no_nan(x, "x")
    n = x.shape[dim]
    if isinstance(block_size, list | tuple):
        sizes = [require_int(size, "each chunk length in block_size") for size in block_size]
        if sum(sizes) != n:
            raise ValueError(f"the chunk lengths in block_size must add up to x.shape[{dim}] = "
                             f"{n}; got {list(sizes)}, which add up to {sum(sizes)}")
    else:
        sizes = require_int(block_size, "block_size")
    if n == 0:
        return x.clone()
    work = x.float() if x.dtype in _LOW_PRECISION else x
    chunks = torch.split(work, sizes, dim=dim)
    state = _state(chunks[0], dim)
    for chunk in chunks[1:]:  # pass 1: the running max and the running sum
        state = combine(state, _state(chunk, dim))
    row_max, row_sum = state
    shift, row_sum = _finite(row_max), row_sum.clamp_min(torch.finfo(work.dtype).tiny)
    out = [(chunk - shift).exp() / row_sum for chunk in chunks]  # pass 2: normalise
    return torch.cat(out, dim=dim).to(x.dtype)


# ----------------------------------------------------------------------------- attention

def _check(q, k, v, causal, key_padding_mask, scale) -> float:
    """Every argument of the attention functions; -> the scale to use."""
    require_heads_qkv(q, k, v)
    require_bool(causal, "causal")
    if key_padding_mask is not None:
        require_mask(key_padding_mask, "key_padding_mask", (q.shape[0], k.shape[-2]),
                     meaning="True = a real key")
    if scale is None:
        return 1.0 / math.sqrt(q.shape[-1])
    return require_positive_number(scale, "scale")


def _block_mask(q_start: int, q_end: int, k_start: int, k_end: int, causal: bool,
                key_padding_mask: torch.Tensor | None, device) -> torch.Tensor | None:
    """The mask of one tile: True = may attend, broadcastable to
    (B, n_heads, q_end - q_start, k_end - k_start); None when every key of the tile is allowed."""
    mask = None
    if causal and k_end - 1 > q_start:  # some key of the tile lies after some query
        rows = torch.arange(q_start, q_end, device=device)  # query positions
        cols = torch.arange(k_start, k_end, device=device)  # key positions
        mask = cols[None, :] <= rows[:, None]  # (T_q block, block_size), top-left aligned
    if key_padding_mask is not None:
        keep = key_padding_mask[:, None, None, k_start:k_end]  # (B, 1, 1, block_size)
        mask = keep if mask is None else keep & mask  # (B, 1, T_q block, block_size)
    return mask


def tiled_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, block_size: int = 64,
                    causal: bool = False, key_padding_mask: torch.Tensor | None = None,
                    scale: float | None = None, q_block_size: int | None = None
                    ) -> torch.Tensor:
    """softmax(q k^T * scale, mask) v, one tile of scores at a time (FlashAttention's forward).

    q: (B, n_heads, T_q, d_k), k: (B, n_heads, T_k, d_k), v: (B, n_heads, T_k, d_v);
    block_size: keys per block; q_block_size: queries per block (None: all at once);
    causal: query i attends to keys j <= i (top-left, as SDPA's is_causal);
    key_padding_mask: (B, T_k) bool, True = a real key; scale: default 1 / sqrt(d_k).
    Returns (B, n_heads, T_q, d_v); a query with no key to attend to gets zeros.

    Per tile: new_max = max(row_max, rowmax(e)), fix = exp(row_max - new_max),
    row_sum = row_sum * fix + rowsum(exp(e - new_max)), acc = acc * fix + exp(e - new_max) V_j.
    Tiles that a causal mask hides entirely are skipped.
    """
    scale = _check(q, k, v, causal, key_padding_mask, scale)
    block_size = require_int(block_size, "block_size")
    T_q, T_k = q.shape[-2], k.shape[-2]
    if q_block_size is None:
        q_block_size = max(T_q, 1)  # every query at once
    q_block_size = require_int(q_block_size, "q_block_size")
    given, dtype = q.dtype, torch.float32 if q.dtype in _LOW_PRECISION else q.dtype
    q, k, v = q.to(dtype) * scale, k.to(dtype), v.to(dtype)  # scaling q: T_q d_k products
    out = q.new_empty(*q.shape[:-1], v.shape[-1])  # (B, n_heads, T_q, d_v)
    for q_start in range(0, T_q, q_block_size):
        q_end = min(q_start + q_block_size, T_q)
        q_i = q[:, :, q_start:q_end]  # (B, n_heads, T_q block, d_k)
        row_max = q_i.new_full((*q_i.shape[:-1], 1), float("-inf"))  # (B, n_heads, T_q block, 1)
        row_sum = q_i.new_zeros(row_max.shape)  # (B, n_heads, T_q block, 1)
        acc = q_i.new_zeros(*q_i.shape[:-1], v.shape[-1])  # (B, n_heads, T_q block, d_v)
        last_key = min(T_k, q_end) if causal else T_k  # later keys are masked for every query
        for k_start in range(0, last_key, block_size):
            k_end = min(k_start + block_size, T_k)
            e = q_i @ k[:, :, k_start:k_end].transpose(-2, -1)  # (B, n_heads, T_q block, block)
            mask = _block_mask(q_start, q_end, k_start, k_end, causal, key_padding_mask, q.device)
            if mask is not None:
                e = e.masked_fill(~mask, float("-inf"))
            new_max = torch.maximum(row_max, e.amax(dim=-1, keepdim=True))  # (..., T_q block, 1)
            shift = _finite(new_max)
            p = (e - shift).exp()  # (B, n_heads, T_q block, block_size), masked entries 0
            fix = (row_max - shift).exp()  # (B, n_heads, T_q block, 1), <= 1
            row_sum = row_sum * fix + p.sum(dim=-1, keepdim=True)
            acc = acc * fix + p @ v[:, :, k_start:k_end]  # (B, n_heads, T_q block, d_v)
            row_max = new_max
        # a query that saw no key has acc = 0 and row_sum = 0: output 0
        out[:, :, q_start:q_end] = acc / row_sum.clamp_min(torch.finfo(dtype).tiny)
    return out.to(given)


def matrix_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool = False,
                     key_padding_mask: torch.Tensor | None = None, scale: float | None = None
                     ) -> torch.Tensor:
    """The same attention in matrix form, the (B, n_heads, T_q, T_k) scores held at once:

        output = masked_softmax(q k^T * scale, mask) v

    Arguments and conventions as `tiled_attention` (without the blocks). Returns
    (B, n_heads, T_q, d_v); a query with no key to attend to gets zeros."""
    scale = _check(q, k, v, causal, key_padding_mask, scale)
    scores = (q * scale) @ k.transpose(-2, -1)  # (B, n_heads, T_q, T_k)
    mask = _block_mask(0, q.shape[-2], 0, k.shape[-2], causal, key_padding_mask, q.device)
    return masked_softmax_unchecked(scores, mask) @ v  # (B, n_heads, T_q, d_v)

