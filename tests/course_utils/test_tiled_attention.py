"""course_utils.tiled_attention: the online softmax against torch.softmax, and tiled attention
against torch.nn.functional.scaled_dot_product_attention.

Tolerances: float64 atol = 1e-12, rtol = 1e-10 (the two differ by rounding alone, ~1e-15);
float32 atol = 2e-6, rtol = 1e-5 (measured differences up to ~7e-7 on scores of size ~3);
float16 / bfloat16 against float32 at 1e-2 / 3e-2.
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from course_utils.tiled_attention import (
    combine,
    matrix_attention,
    online_softmax,
    softmax_state,
    tiled_attention,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # small tensors: one thread is faster

TOL = {torch.float64: {"atol": 1e-12, "rtol": 1e-10},
       torch.float32: {"atol": 2e-6, "rtol": 1e-5}}


def inputs(t_q, t_k, dtype=torch.float32, batch=2, n_heads=3, d_k=8, d_v=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, n_heads, t_q, d_k, generator=gen, dtype=dtype)
    k = torch.randn(batch, n_heads, t_k, d_k, generator=gen, dtype=dtype)
    v = torch.randn(batch, n_heads, t_k, d_v, generator=gen, dtype=dtype)
    return q, k, v


def padding(t_k, batch=2):
    lengths = torch.tensor([t_k, max(1, t_k - 3)][:batch])
    return torch.arange(t_k)[None, :] < lengths[:, None]  # (B, T_k), True = real key


def sdpa(q, k, v, causal, pad, scale=None):
    """PyTorch's attention, with the masks as its arguments take them."""
    if pad is None:
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=scale)
    mask = pad[:, None, None, :]  # (B, 1, 1, T_k)
    if causal:  # top-left, as is_causal
        mask = mask & torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale)


# ----------------------------------------------------------------------------- online softmax

def compositions(n):
    """Every way to cut n items into consecutive non-empty chunks (2^(n-1) of them)."""
    for cuts in itertools.product((False, True), repeat=n - 1):
        sizes, size = [], 1
        for cut in cuts:
            if cut:
                sizes.append(size)
                size = 0
            size += 1
        yield [*sizes, size]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_online_softmax_equals_softmax_on_every_split_of_a_row(dtype):
    x = torch.randn(3, 7, dtype=dtype, generator=torch.Generator().manual_seed(0)) * 3
    want = torch.softmax(x, dim=-1)
    splits = list(compositions(7))
    assert len(splits) == 64
    for sizes in splits:
        torch.testing.assert_close(online_softmax(x, sizes), want, **TOL[dtype])
    for block in range(1, 9):  # ints: chunks of that length, the last one shorter
        torch.testing.assert_close(online_softmax(x, block), want, **TOL[dtype])


def test_online_softmax_along_another_dim_and_at_scores_that_would_overflow_exp():
    x = torch.randn(4, 6, 5, generator=torch.Generator().manual_seed(1))
    torch.testing.assert_close(online_softmax(x, 2, dim=1), torch.softmax(x, dim=1))
    big = x * 1e4  # exp(1e4) is inf in any float; shifted by the running max it is not
    out = online_softmax(big, 2)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, torch.softmax(big, dim=-1))
    torch.testing.assert_close(online_softmax(big.double(), [1, 3, 1]),
                               torch.softmax(big.double(), dim=-1), atol=1e-12, rtol=1e-10)


def test_online_softmax_gives_masked_entries_zero_and_an_all_masked_row_zeros():
    x = torch.tensor([[0.0, float("-inf"), 1.0, float("-inf")],
                      [float("-inf")] * 4])
    out = online_softmax(x, 1)  # the first chunks of row 0 hold -inf only
    torch.testing.assert_close(out[0], torch.softmax(x[0], dim=-1))
    assert torch.equal(out[1], torch.zeros(4))  # torch.softmax would give NaN
    half = online_softmax(x[:1].half(), 3)
    assert half.dtype == torch.float16
    torch.testing.assert_close(half.float(), torch.softmax(x[:1], dim=-1), atol=1e-3, rtol=1e-3)


def test_combine_is_exact_whatever_the_split_and_the_order():
    x = torch.randn(2, 9, dtype=torch.float64) * 5
    whole = softmax_state(x)
    a, b, c = softmax_state(x[:, :2]), softmax_state(x[:, 2:7]), softmax_state(x[:, 7:])
    for merged in (combine(combine(a, b), c), combine(a, combine(b, c)),
                   combine(c, combine(b, a))):
        torch.testing.assert_close(merged[0], whole[0], atol=0, rtol=0)  # the max is exact
        torch.testing.assert_close(merged[1], whole[1], atol=1e-12, rtol=1e-12)
    row_max, row_sum = whole
    assert row_max.shape == row_sum.shape == (2, 1)
    torch.testing.assert_close(row_max + row_sum.log(), torch.logsumexp(x, -1, keepdim=True))
    # a chunk that is all -inf adds nothing
    empty = softmax_state(torch.full((2, 3), float("-inf"), dtype=torch.float64))
    assert torch.equal(empty[1], torch.zeros(2, 1, dtype=torch.float64))
    merged = combine(empty, whole)
    assert torch.equal(merged[0], whole[0]) and torch.equal(merged[1], whole[1])


def test_a_running_sum_not_rescaled_when_the_max_grows_is_wrong():
    """What `combine` guards against: adding the sums without the factor exp(old - new)."""
    x = torch.tensor([[0.0, 1.0, 5.0, 2.0]])
    (max_a, sum_a), (max_b, sum_b) = softmax_state(x[:, :2]), softmax_state(x[:, 2:])
    wrong = sum_a + sum_b  # each chunk's sum relative to its own max
    right = combine((max_a, sum_a), (max_b, sum_b))[1]
    torch.testing.assert_close(right, softmax_state(x)[1])
    assert not torch.allclose(wrong, right)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: online_softmax(torch.ones(2, 5), 0), r"^block_size must be a positive int"),
    (lambda: online_softmax(torch.ones(2, 5), [2, 2]), r"must add up to x.shape\[1\] = 5"),
    (lambda: online_softmax(torch.ones(2, 5), [2, 0, 3]), r"each chunk length in block_size"),
    (lambda: online_softmax(torch.tensor([1.0, float("nan")]), 1), r"x contains NaN"),
    (lambda: online_softmax(torch.ones(5, dtype=torch.long), 2), r"floating-point tensor"),
    (lambda: online_softmax(torch.ones(5), 2, dim=1), r"dim must be in \[-1, 0\]"),
])
def test_online_softmax_rejects_bad_input_by_name(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ----------------------------------------------------------------------------- tiled attention

SHAPES = [(1, 1), (5, 5), (17, 17), (33, 33), (5, 17), (17, 5), (40, 7)]  # (T_q, T_k)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("t_q, t_k", SHAPES)
@pytest.mark.parametrize("masking", ["none", "causal", "padding", "both"])
def test_tiled_attention_equals_pytorchs_for_every_block_size(dtype, t_q, t_k, masking):
    q, k, v = inputs(t_q, t_k, dtype)
    causal = masking in ("causal", "both")
    pad = padding(t_k) if masking in ("padding", "both") else None
    want = sdpa(q, k, v, causal, pad)
    # block 1, blocks that do and do not divide T_k, one block larger than T_k; queries at
    # once or in blocks of 3 (the causal mask then crosses both kinds of block boundary)
    for block, q_block in itertools.product([1, 4, 16, 64], [None, 3]):
        out = tiled_attention(q, k, v, block, causal=causal, key_padding_mask=pad,
                              q_block_size=q_block)
        assert out.shape == (2, 3, t_q, 5) and out.dtype == dtype
        torch.testing.assert_close(out, want, **TOL[dtype],
                                   msg=lambda m, b=block, qb=q_block: f"block {b}, q {qb}: {m}")
    torch.testing.assert_close(matrix_attention(q, k, v, causal, pad), want, **TOL[dtype])


def test_tiled_attention_takes_a_scale_and_handles_scores_that_would_overflow_exp():
    q, k, v = inputs(20, 20, torch.float64)
    for scale in (0.05, 1.0, 3.0):
        torch.testing.assert_close(tiled_attention(q, k, v, 6, scale=scale),
                                   sdpa(q, k, v, False, None, scale=scale), **TOL[torch.float64])
    big_q = q * 300  # scores in the thousands: exp overflows without the running max
    out = tiled_attention(big_q.float(), k.float(), v.float(), 7, causal=True)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.double(), sdpa(big_q, k, v, True, None), atol=1e-4, rtol=1e-4)


def test_a_query_with_no_key_gets_zeros_as_in_pytorch_never_nan():
    q, k, v = inputs(6, 6, torch.float64)
    pad = torch.zeros(2, 6, dtype=torch.bool)
    pad[0, 4:] = True  # row 0: only keys 4 and 5 are real; row 1: no real key at all
    out = tiled_attention(q, k, v, 2, causal=True, key_padding_mask=pad)
    assert not torch.isnan(out).any()
    assert torch.equal(out[0, :, :4], torch.zeros(3, 4, 5, dtype=torch.float64))  # keys <= i fake
    assert torch.equal(out[1], torch.zeros(3, 6, 5, dtype=torch.float64))
    torch.testing.assert_close(out, sdpa(q, k, v, True, pad), **TOL[torch.float64])
    torch.testing.assert_close(matrix_attention(q, k, v, True, pad), out, **TOL[torch.float64])


def test_the_causal_mask_is_exact_at_every_block_boundary():
    """Each output row changes when a key it may see changes, and never otherwise."""
    q, k, v = inputs(12, 12, torch.float64, batch=1, n_heads=1)
    base = tiled_attention(q, k, v, 4, causal=True, q_block_size=4)
    for j in range(12):
        v2 = v.clone()
        v2[..., j, :] += 1.0  # change value j only
        changed = (tiled_attention(q, k, v2, 4, causal=True, q_block_size=4) - base
                   ).abs().amax(dim=-1)[0, 0] > 0  # (T_q,)
        assert changed.tolist() == [i >= j for i in range(12)], f"key {j}"


def test_low_precision_inputs_are_computed_in_float32_and_returned_in_their_dtype():
    q, k, v = inputs(9, 9)
    want = sdpa(q, k, v, True, None)
    for dtype, tol in ((torch.float16, 1e-2), (torch.bfloat16, 3e-2)):
        out = tiled_attention(q.to(dtype), k.to(dtype), v.to(dtype), 4, causal=True)
        assert out.dtype == dtype
        torch.testing.assert_close(out.float(), want, atol=tol, rtol=tol)


def test_gradients_through_the_tiles_equal_pytorchs():
    q, k, v = (x.requires_grad_() for x in inputs(10, 10, torch.float64))
    tiled_attention(q, k, v, 3, causal=True).square().sum().backward()
    mine = [x.grad.clone() for x in (q, k, v)]
    for x in (q, k, v):
        x.grad = None
    sdpa(q, k, v, True, None).square().sum().backward()
    for a, x in zip(mine, (q, k, v), strict=True):
        torch.testing.assert_close(a, x.grad, **TOL[torch.float64])


@pytest.mark.parametrize(("call", "message"), [
    (lambda q, k, v: tiled_attention(q[0], k, v), r"q \(queries\) must have 4 dimension"),
    (lambda q, k, v: tiled_attention(q, k[:, :2], v), r"same B and n_heads"),
    (lambda q, k, v: tiled_attention(q, k[..., :4], v), r"the same width d_k"),
    (lambda q, k, v: tiled_attention(q, k, v[:, :, :3]), r"every key needs a value"),
    (lambda q, k, v: tiled_attention(q, k, v.double()), r"one dtype"),
    (lambda q, k, v: tiled_attention(q, k, v, 0), r"^block_size must be a positive int"),
    (lambda q, k, v: tiled_attention(q, k, v, q_block_size=0), r"^q_block_size must be"),
    (lambda q, k, v: tiled_attention(q, k, v, scale=-1.0), r"^scale must be a positive"),
    (lambda q, k, v: tiled_attention(q, k, v, causal=1), r"^causal must be a bool"),
    (lambda q, k, v: tiled_attention(q, k, v, key_padding_mask=torch.ones(2, 5, dtype=torch.bool)),
     r"key_padding_mask must have shape \(2, 6\) \(True = a real key\)"),
    (lambda q, k, v: tiled_attention(q, k, v, key_padding_mask=torch.ones(2, 6)),
     r"key_padding_mask must have dtype torch.bool"),
    (lambda q, k, v: matrix_attention(q * float("inf"), k, v), r"q \(queries\) contains inf"),
])
def test_bad_arguments_fail_with_a_message_naming_what_was_expected(call, message):
    q, k, v = inputs(4, 6)
    with pytest.raises(ValueError, match=message):
        call(q, k, v)
