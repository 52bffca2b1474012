"""Tests for course_utils.attention, checked against PyTorch's own implementations and
against values derived by hand."""

import math

import pytest
import torch
import torch.nn.functional as F

from course_utils import attention as A
from course_utils import grading

LOW_PRECISION_TOL = {torch.float16: 2e-3, torch.bfloat16: 1e-2}
LOW_PRECISION_ATTN_TOL = {torch.float16: 1e-2, torch.bfloat16: 5e-2}


def randn(*shape, dtype=torch.float32, seed=0, scale=1.0):
    """Deterministic random tensor that does not touch the global RNG."""
    gen = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(*shape, generator=gen, dtype=torch.float64)).to(dtype)


def rand_mask(*shape, seed=0, p=0.6):
    gen = torch.Generator().manual_seed(seed)
    return torch.rand(*shape, generator=gen) < p


def causal_mask(t_q, t_k):
    """True on and below the diagonal: query i may attend to keys 0..i."""
    return torch.tril(torch.ones(t_q, t_k, dtype=torch.bool))


def explicit_attention(q, k, v, mask=None):
    """Attention written out term by term, independent of the library code."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


def not_fully_masked(mask, shape):
    """Bool (..., T_q) telling which query rows have at least one key they may attend to."""
    return mask.expand(shape).any(dim=-1)


# --------------------------------------------------------------------------- softmax


def test_softmax_of_log_1_2_3_is_one_two_three_sixths():
    x = torch.tensor([0.0, math.log(2), math.log(3)], dtype=torch.float64)
    expected = torch.tensor([1 / 6, 2 / 6, 3 / 6], dtype=torch.float64)
    torch.testing.assert_close(A.softmax(x), expected, rtol=0, atol=1e-12)


def test_softmax_of_equal_logits_is_uniform():
    torch.testing.assert_close(A.softmax(torch.full((4,), 7.5)), torch.full((4,), 0.25))


@pytest.mark.parametrize(
    ("shape", "dim"),
    [((5,), 0), ((3, 4), -1), ((3, 4), 0), ((2, 3, 4), 1), ((2, 3, 4), -3), ((2, 2, 3, 5), -1)],
)
def test_softmax_matches_torch_softmax(shape, dim):
    x = randn(*shape, scale=3.0)
    torch.testing.assert_close(A.softmax(x, dim=dim), torch.softmax(x, dim=dim))


def test_softmax_default_dim_is_last():
    x = randn(3, 4)
    torch.testing.assert_close(A.softmax(x), torch.softmax(x, dim=-1))


def test_softmax_float64_matches_torch_tightly():
    x = randn(4, 6, dtype=torch.float64, scale=5.0)
    out = A.softmax(x)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, torch.softmax(x, dim=-1), rtol=1e-12, atol=1e-14)


def test_softmax_of_plus_minus_1e4_logits_does_not_overflow():
    x = torch.tensor([[1e4, -1e4, 0.0], [1e4, 1e4, -1e4], [-1e4, -1e4, -1e4]])
    out = A.softmax(x)
    assert torch.isfinite(out).all()
    expected = torch.tensor([[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [1 / 3, 1 / 3, 1 / 3]])
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(out, torch.softmax(x, dim=-1))


def test_softmax_of_random_1e4_scale_logits_matches_torch():
    x = randn(8, 16, scale=1e4)
    out = A.softmax(x)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out, torch.softmax(x, dim=-1))


def test_softmax_is_invariant_to_a_large_shift():
    x = torch.tensor([0.0, math.log(2), math.log(3)], dtype=torch.float64)
    expected = torch.tensor([1 / 6, 2 / 6, 3 / 6], dtype=torch.float64)
    torch.testing.assert_close(A.softmax(x + 1e4), expected, rtol=0, atol=1e-9)
    torch.testing.assert_close(A.softmax(x - 1e4), expected, rtol=0, atol=1e-9)


def test_softmax_gives_neg_inf_entries_zero_weight():
    x = torch.tensor([0.0, float("-inf"), 0.0, float("-inf")])
    out = A.softmax(x)
    assert torch.equal(out, torch.tensor([0.5, 0.0, 0.5, 0.0]))


def test_softmax_row_of_all_neg_inf_gives_zeros_and_leaves_other_rows_alone():
    x = randn(3, 4)
    x[1] = float("-inf")
    out = A.softmax(x)
    assert not torch.isnan(out).any()
    assert torch.equal(out[1], torch.zeros(4))
    torch.testing.assert_close(out[[0, 2]], torch.softmax(x[[0, 2]], dim=-1))


def test_softmax_along_dim0_with_all_neg_inf_column_gives_zeros():
    x = randn(3, 4)
    x[:, 2] = float("-inf")
    out = A.softmax(x, dim=0)
    assert torch.equal(out[:, 2], torch.zeros(3))
    torch.testing.assert_close(out[:, [0, 1, 3]], torch.softmax(x[:, [0, 1, 3]], dim=0))


def test_softmax_of_single_element_is_exactly_one():
    assert torch.equal(A.softmax(torch.tensor([-123.0])), torch.tensor([1.0]))
    assert torch.equal(A.softmax(randn(4, 1)), torch.ones(4, 1))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_softmax_low_precision_keeps_dtype_and_matches_float32(dtype):
    x = randn(4, 7, dtype=dtype, scale=4.0)
    out = A.softmax(x)
    assert out.dtype == dtype
    expected = torch.softmax(x.float(), dim=-1)
    tol = LOW_PRECISION_TOL[dtype]
    torch.testing.assert_close(out.float(), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_softmax_low_precision_handles_1e4_logits(dtype):
    x = torch.tensor([1e4, -1e4, 0.0], dtype=dtype)
    assert torch.equal(A.softmax(x), torch.tensor([1.0, 0.0, 0.0], dtype=dtype))


def test_softmax_float16_long_row_does_not_overflow_the_sum():
    # 70000 ones add up to more than float16's largest value (65504).
    n = 70_000
    out = A.softmax(torch.zeros(n, dtype=torch.float16))
    assert torch.isfinite(out).all()
    torch.testing.assert_close(out.float().sum(), torch.tensor(1.0), rtol=0, atol=1e-2)
    torch.testing.assert_close(out.float(), torch.full((n,), 1 / n), rtol=1e-2, atol=0)


def test_softmax_does_not_modify_its_input():
    x = randn(3, 4)
    before = x.clone()
    A.softmax(x)
    assert torch.equal(x, before)


@pytest.mark.parametrize("dim", [0, 1, -1])
def test_softmax_passes_gradcheck(dim):
    x = randn(3, 4, dtype=torch.float64).requires_grad_()
    assert torch.autograd.gradcheck(lambda t: A.softmax(t, dim=dim), (x,))


def test_softmax_gradient_matches_torch_softmax_gradient():
    x1 = randn(3, 5, dtype=torch.float64).requires_grad_()
    x2 = x1.detach().clone().requires_grad_()
    upstream = randn(3, 5, dtype=torch.float64, seed=1)
    (A.softmax(x1) * upstream).sum().backward()
    (torch.softmax(x2, dim=-1) * upstream).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad)


def test_softmax_gradient_is_zero_and_finite_at_neg_inf_entries():
    x = randn(2, 4, dtype=torch.float64)
    x[0, 1] = float("-inf")
    x[1] = float("-inf")
    x.requires_grad_()
    (A.softmax(x) * randn(2, 4, dtype=torch.float64, seed=1)).sum().backward()
    assert torch.isfinite(x.grad).all()
    assert x.grad[0, 1] == 0
    assert torch.equal(x.grad[1], torch.zeros(4, dtype=torch.float64))


def test_reference_softmax_does_not_delegate_to_torch_softmax():
    x = randn(3, 4)
    expected = torch.softmax(x, dim=-1)
    names = ("torch.softmax", "torch.Tensor.softmax", "torch.nn.functional.softmax")
    with grading.forbidden(*names, reason="test"):
        out = A.softmax(x)
    torch.testing.assert_close(out, expected)


# ------------------------------------------------------------------------ masked_softmax


def test_masked_softmax_without_mask_equals_torch_softmax():
    s = randn(2, 3, 5)
    torch.testing.assert_close(A.masked_softmax(s), torch.softmax(s, dim=-1))
    torch.testing.assert_close(A.masked_softmax(s, None), torch.softmax(s, dim=-1))


def test_masked_softmax_with_all_true_mask_equals_no_mask():
    s = randn(3, 5)
    out = A.masked_softmax(s, torch.ones(3, 5, dtype=torch.bool))
    torch.testing.assert_close(out, torch.softmax(s, dim=-1))


def test_masked_softmax_hand_example():
    # keys 0 and 2 allowed with scores 0 and ln 3: weights 1/4 and 3/4.
    s = torch.tensor([[0.0, 100.0, math.log(3)]], dtype=torch.float64)
    mask = torch.tensor([[True, False, True]])
    expected = torch.tensor([[0.25, 0.0, 0.75]], dtype=torch.float64)
    torch.testing.assert_close(A.masked_softmax(s, mask), expected, rtol=0, atol=1e-12)


MASK_CASES = {
    # name: (scores shape, mask builder)
    "full-shape": ((2, 3, 4, 6), lambda: rand_mask(2, 3, 4, 6, seed=3)),
    "padding-B11Tk": ((2, 3, 4, 6), lambda: rand_mask(2, 1, 1, 6, seed=4)),
    "causal-tril": ((2, 3, 5, 5), lambda: causal_mask(5, 5)),
    "causal-rect": ((2, 4, 6), lambda: causal_mask(4, 6)),
    "key-vector": ((3, 6), lambda: torch.tensor([True, False, True, True, False, True])),
}


@pytest.mark.parametrize("case", list(MASK_CASES))
def test_masked_softmax_matches_torch_softmax_on_rows_with_an_allowed_key(case):
    shape, make_mask = MASK_CASES[case]
    s, mask = randn(*shape, scale=2.0), make_mask()
    out = A.masked_softmax(s, mask)
    assert out.shape == s.shape
    rows = not_fully_masked(mask, shape)
    expected = torch.softmax(s.masked_fill(~mask, float("-inf")), dim=-1)
    torch.testing.assert_close(out[rows], expected[rows])
    # independent formula: exp(s) * mask / sum(exp(s) * mask)
    e = torch.exp(s) * mask
    torch.testing.assert_close(out[rows], (e / e.sum(-1, keepdim=True))[rows])


@pytest.mark.parametrize("case", list(MASK_CASES))
def test_masked_softmax_gives_masked_positions_exactly_zero(case):
    shape, make_mask = MASK_CASES[case]
    s, mask = randn(*shape), make_mask()
    out = A.masked_softmax(s, mask)
    assert torch.equal(out[~mask.expand(shape)], torch.zeros_like(out[~mask.expand(shape)]))


def test_masked_softmax_fully_masked_row_is_all_zero_not_nan_or_uniform():
    s = randn(3, 4)
    mask = torch.tensor([[True, True, False, True], [False] * 4, [True, False, False, False]])
    out = A.masked_softmax(s, mask)
    assert not torch.isnan(out).any()
    assert torch.equal(out[1], torch.zeros(4))
    torch.testing.assert_close(out[0].sum(), torch.tensor(1.0))
    assert torch.equal(out[2], torch.tensor([1.0, 0.0, 0.0, 0.0]))


def test_masked_softmax_all_false_mask_gives_all_zeros():
    out = A.masked_softmax(randn(2, 3, 4), torch.zeros(4, dtype=torch.bool))
    assert torch.equal(out, torch.zeros(2, 3, 4))


def test_masked_softmax_ignores_huge_scores_at_masked_positions():
    s = torch.tensor([[1e4, 0.0, 0.0]])
    out = A.masked_softmax(s, torch.tensor([False, True, True]))
    assert torch.equal(out, torch.tensor([[0.0, 0.5, 0.5]]))


def test_masked_softmax_does_not_modify_its_inputs():
    s, mask = randn(3, 4), rand_mask(3, 4)
    s_before, mask_before = s.clone(), mask.clone()
    A.masked_softmax(s, mask)
    assert torch.equal(s, s_before) and torch.equal(mask, mask_before)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_masked_softmax_keeps_dtype_and_matches_float32(dtype):
    s, mask = randn(2, 4, 5, dtype=dtype, scale=3.0), rand_mask(2, 1, 5, seed=7)
    out = A.masked_softmax(s, mask)
    assert out.dtype == dtype
    rows = not_fully_masked(mask, s.shape)
    expected = torch.softmax(s.float().masked_fill(~mask, float("-inf")), dim=-1)
    tol = LOW_PRECISION_TOL.get(dtype, 1e-6)
    torch.testing.assert_close(out.float()[rows], expected[rows], rtol=tol, atol=tol)


def test_masked_softmax_passes_gradcheck_including_a_fully_masked_row():
    s = randn(3, 4, dtype=torch.float64).requires_grad_()
    mask = torch.tensor([[True, False, True, True], [False] * 4, [True] * 4])
    assert torch.autograd.gradcheck(lambda t: A.masked_softmax(t, mask), (s,))


def test_masked_softmax_gives_masked_positions_zero_gradient():
    s = randn(2, 3, 5, dtype=torch.float64).requires_grad_()
    mask = rand_mask(2, 3, 5, seed=2)
    mask[0, 1] = False  # one fully masked row too
    upstream = randn(2, 3, 5, dtype=torch.float64, seed=9)
    (A.masked_softmax(s, mask) * upstream).sum().backward()
    assert torch.isfinite(s.grad).all()
    assert torch.equal(s.grad[~mask], torch.zeros_like(s.grad[~mask]))
    assert s.grad[mask].abs().sum() > 0


# ------------------------------------------------------------------- dot / scaled scores


def test_dot_scores_hand_example():
    q = torch.tensor([[1.0, 2.0], [0.0, -1.0]])
    k = torch.tensor([[3.0, 4.0], [1.0, 0.0], [2.0, 2.0]])
    expected = torch.tensor([[11.0, 1.0, 6.0], [-4.0, 0.0, -2.0]])
    assert torch.equal(A.dot_scores(q, k), expected)


def test_scaled_dot_scores_with_d_k_16_divides_by_4():
    q = torch.ones(1, 16)
    k = torch.stack([torch.ones(16), torch.full((16,), 0.5), torch.zeros(16)])
    # q.k = 16, 8, 0; sqrt(16) = 4
    assert torch.equal(A.dot_scores(q, k), torch.tensor([[16.0, 8.0, 0.0]]))
    assert torch.equal(A.scaled_dot_scores(q, k), torch.tensor([[4.0, 2.0, 0.0]]))


@pytest.mark.parametrize("d_k", [1, 3, 16, 64])
def test_scaled_dot_scores_equals_dot_scores_over_sqrt_d_k(d_k):
    q, k = randn(2, 3, d_k, seed=1), randn(2, 5, d_k, seed=2)
    torch.testing.assert_close(A.scaled_dot_scores(q, k), A.dot_scores(q, k) / math.sqrt(d_k))


@pytest.mark.parametrize(
    ("q_shape", "k_shape", "out_shape"),
    [
        ((3, 4), (5, 4), (3, 5)),
        ((2, 3, 3, 4), (2, 3, 5, 4), (2, 3, 3, 5)),
        ((2, 3, 1, 4), (2, 1, 5, 4), (2, 3, 1, 5)),  # heads broadcast, T_q = 1
        ((2, 3, 4), (5, 4), (2, 3, 5)),  # shared keys
    ],
)
def test_dot_scores_match_einsum_with_batch_dims(q_shape, k_shape, out_shape):
    q, k = randn(*q_shape, seed=1), randn(*k_shape, seed=2)
    expected = torch.einsum("...id,...jd->...ij", q, k)
    out = A.dot_scores(q, k)
    assert out.shape == out_shape
    torch.testing.assert_close(out, expected)
    torch.testing.assert_close(A.scaled_dot_scores(q, k), expected / math.sqrt(q_shape[-1]))


def test_scaled_dot_scores_have_variance_near_one_for_wide_vectors():
    d_k = 256
    q, k = randn(64, d_k, seed=1), randn(64, d_k, seed=2)
    assert 0.8 < A.scaled_dot_scores(q, k).var().item() < 1.2
    assert 0.8 * d_k < A.dot_scores(q, k).var().item() < 1.2 * d_k


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_scores_keep_dtype(dtype):
    q, k = randn(3, 8, dtype=dtype, seed=1), randn(4, 8, dtype=dtype, seed=2)
    assert A.dot_scores(q, k).dtype == dtype
    out = A.scaled_dot_scores(q, k)
    assert out.dtype == dtype
    expected = q.double() @ k.double().T / math.sqrt(8)
    tol = LOW_PRECISION_ATTN_TOL.get(dtype, 1e-12)
    torch.testing.assert_close(out.double(), expected, rtol=tol, atol=tol)


# ----------------------------------------------------------------------- weighted_average


def test_weighted_average_single_query_hand_example():
    weights = torch.tensor([0.25, 0.75])
    values = torch.tensor([[0.0, 4.0], [8.0, 0.0]])
    out = A.weighted_average(weights, values)
    assert out.shape == (2,)
    assert torch.equal(out, torch.tensor([6.0, 1.0]))


def test_weighted_average_one_hot_weights_pick_rows():
    values = randn(4, 3)
    weights = torch.eye(4)[[2, 0, 3]]  # (3 queries, 4 keys)
    assert torch.equal(A.weighted_average(weights, values), values[[2, 0, 3]])


def test_weighted_average_does_not_renormalise():
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert torch.equal(A.weighted_average(torch.ones(2), values), torch.tensor([4.0, 6.0]))


@pytest.mark.parametrize(
    ("w_shape", "v_shape", "out_shape"),
    [
        ((3, 5), (5, 2), (3, 2)),
        ((2, 4, 3, 5), (2, 4, 5, 7), (2, 4, 3, 7)),
        ((2, 4, 3, 5), (2, 1, 5, 7), (2, 4, 3, 7)),  # values shared across heads
        ((5,), (5, 7), (7,)),
    ],
)
def test_weighted_average_matches_einsum(w_shape, v_shape, out_shape):
    w, v = torch.softmax(randn(*w_shape, seed=1), -1), randn(*v_shape, seed=2)
    out = A.weighted_average(w, v)
    assert out.shape == out_shape
    if len(w_shape) == 1:
        expected = torch.einsum("j,jd->d", w, v)
    else:
        expected = torch.einsum("...ij,...jd->...id", w, v)
    torch.testing.assert_close(out, expected)


# ---------------------------------------------------------------------------- soft_lookup


def test_soft_lookup_query_equal_to_a_key_returns_roughly_its_value():
    keys = 10.0 * torch.eye(4)
    values = torch.tensor([[1.0, 0.0], [2.0, 5.0], [-3.0, 1.0], [0.0, 9.0]])
    result, alpha = A.soft_lookup(keys[1], keys, values)
    # scores are 100 for key 1 and 0 for the others: alpha_1 = 1 / (1 + 3 e^-100)
    torch.testing.assert_close(result, values[1])
    torch.testing.assert_close(alpha, torch.tensor([0.0, 1.0, 0.0, 0.0]))


def test_soft_lookup_with_equal_scores_returns_the_plain_mean():
    keys, values = randn(5, 3, seed=1), randn(5, 4, seed=2)
    result, alpha = A.soft_lookup(torch.zeros(3), keys, values)
    torch.testing.assert_close(alpha, torch.full((5,), 0.2))
    torch.testing.assert_close(result, values.mean(dim=0))


def test_soft_lookup_matches_explicit_computation():
    query, keys, values = randn(4, seed=1), randn(6, 4, seed=2), randn(6, 3, seed=3)
    result, alpha = A.soft_lookup(query, keys, values)
    expected_alpha = torch.softmax(keys @ query, dim=0)
    assert result.shape == (3,) and alpha.shape == (6,)
    torch.testing.assert_close(alpha, expected_alpha)
    torch.testing.assert_close(result, expected_alpha @ values)


def test_soft_lookup_with_one_key_returns_its_value():
    values = torch.tensor([[3.0, -1.0]])
    result, alpha = A.soft_lookup(randn(2), randn(1, 2, seed=4), values)
    assert torch.equal(alpha, torch.tensor([1.0]))
    assert torch.equal(result, values[0])


# ------------------------------------------------------------- scaled_dot_product_attention

SDPA_SHAPES = {
    # name: (q shape, k shape, v shape)
    "2d-rect": ((3, 4), (5, 4), (5, 6)),
    "BHTD": ((2, 3, 4, 8), (2, 3, 6, 8), (2, 3, 6, 5)),
    "T_q=1": ((2, 3, 1, 8), (2, 3, 6, 8), (2, 3, 6, 5)),
    "T_k=1": ((2, 3, 4, 8), (2, 3, 1, 8), (2, 3, 1, 5)),
    "shared-kv-heads": ((2, 3, 4, 8), (2, 1, 6, 8), (2, 1, 6, 5)),
}


def sdpa_inputs(name, dtype=torch.float32):
    q_shape, k_shape, v_shape = SDPA_SHAPES[name]
    return (
        randn(*q_shape, dtype=dtype, seed=1),
        randn(*k_shape, dtype=dtype, seed=2),
        randn(*v_shape, dtype=dtype, seed=3),
    )


@pytest.mark.parametrize("name", list(SDPA_SHAPES))
def test_sdpa_output_matches_torch_sdpa(name):
    q, k, v = sdpa_inputs(name)
    out, weights = A.scaled_dot_product_attention(q, k, v)
    expected = F.scaled_dot_product_attention(q, k, v)
    assert out.shape == expected.shape
    assert weights.shape == (*expected.shape[:-1], k.shape[-2])
    torch.testing.assert_close(out, expected)


@pytest.mark.parametrize("name", list(SDPA_SHAPES))
def test_sdpa_weights_match_explicit_softmax_of_scaled_scores(name):
    q, k, v = sdpa_inputs(name)
    _, weights = A.scaled_dot_product_attention(q, k, v)
    expected = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), dim=-1)
    torch.testing.assert_close(weights, expected)
    torch.testing.assert_close(weights.sum(-1), torch.ones(weights.shape[:-1]))


def test_sdpa_float64_matches_torch_sdpa_tightly():
    q, k, v = sdpa_inputs("BHTD", dtype=torch.float64)
    out, _ = A.scaled_dot_product_attention(q, k, v)
    assert out.dtype == torch.float64
    expected = F.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, expected, rtol=1e-10, atol=1e-12)


def padding_mask():
    """(B, 1, 1, T_k): batch 0 sees all 6 keys, batch 1 only the first 4."""
    return torch.tensor([[True] * 6, [True] * 4 + [False] * 2]).view(2, 1, 1, 6)


def random_mask_with_diagonal():
    return rand_mask(2, 3, 4, 6, seed=5) | torch.eye(4, 6, dtype=torch.bool)


SDPA_MASKS = {
    # name: (shape case, mask builder); no query row is fully masked in these
    "padding-B11Tk": ("BHTD", padding_mask),
    "causal-tril-rect": ("BHTD", lambda: causal_mask(4, 6)),
    "causal-2d": ("2d-rect", lambda: causal_mask(3, 5)),
    "random-shared-kv-heads": ("shared-kv-heads", random_mask_with_diagonal),
}


@pytest.mark.parametrize("case", list(SDPA_MASKS))
def test_sdpa_with_mask_matches_torch_sdpa(case):
    name, make_mask = SDPA_MASKS[case]
    q, k, v = sdpa_inputs(name)
    mask = make_mask()
    out, weights = A.scaled_dot_product_attention(q, k, v, mask)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
    expected_out, expected_weights = explicit_attention(q, k, v, mask)
    torch.testing.assert_close(weights, expected_weights)
    torch.testing.assert_close(out, expected_out)


def test_sdpa_fully_masked_query_gets_zero_weights_and_zero_output():
    q, k, v = sdpa_inputs("BHTD")
    mask = random_mask_with_diagonal()
    mask[1, 2, 3] = False  # batch 1, head 2, query 3 may attend to nothing
    out, weights = A.scaled_dot_product_attention(q, k, v, mask)
    assert not torch.isnan(out).any() and not torch.isnan(weights).any()
    assert torch.equal(weights[1, 2, 3], torch.zeros(6))
    assert torch.equal(out[1, 2, 3], torch.zeros(5))
    rows = not_fully_masked(mask, weights.shape)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out[rows], expected[rows])


def test_sdpa_with_zero_queries_averages_values_equally():
    k, v = randn(5, 3, seed=1), randn(5, 4, seed=2)
    out, weights = A.scaled_dot_product_attention(torch.zeros(2, 3), k, v)
    torch.testing.assert_close(weights, torch.full((2, 5), 0.2))
    torch.testing.assert_close(out, v.mean(0).expand(2, 4))


def test_sdpa_causal_with_equal_scores_gives_running_mean():
    t = 4
    v = randn(t, 3)
    mask = causal_mask(t, t)
    out, weights = A.scaled_dot_product_attention(torch.zeros(t, 2), randn(t, 2), v, mask)
    expected_weights = mask.float() / torch.arange(1, t + 1).unsqueeze(1)
    torch.testing.assert_close(weights, expected_weights)
    torch.testing.assert_close(out, v.cumsum(0) / torch.arange(1, t + 1).unsqueeze(1))
    assert torch.equal(out[0], v[0])


def test_sdpa_with_a_single_key_gives_weight_exactly_one():
    q, k, v = sdpa_inputs("T_k=1")
    out, weights = A.scaled_dot_product_attention(q, k, v)
    assert torch.equal(weights, torch.ones(2, 3, 4, 1))
    assert torch.equal(out, v.expand(2, 3, 4, 5))


def test_sdpa_with_a_single_query_has_one_output_row():
    q, k, v = sdpa_inputs("T_q=1")
    out, weights = A.scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 3, 1, 5) and weights.shape == (2, 3, 1, 6)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))


def test_sdpa_is_unchanged_by_permuting_keys_and_values_together():
    q, k, v = sdpa_inputs("2d-rect")
    perm = torch.tensor([3, 0, 4, 1, 2])
    out, weights = A.scaled_dot_product_attention(q, k, v)
    out_p, weights_p = A.scaled_dot_product_attention(q, k[perm], v[perm])
    torch.testing.assert_close(out_p, out)
    torch.testing.assert_close(weights_p, weights[:, perm])


def test_sdpa_with_1e4_scale_queries_is_finite_and_matches_explicit():
    q, k, v = sdpa_inputs("2d-rect", dtype=torch.float64)
    out, weights = A.scaled_dot_product_attention(1e4 * q, k, v)
    assert torch.isfinite(out).all()
    expected_out, expected_weights = explicit_attention(1e4 * q, k, v)
    torch.testing.assert_close(weights, expected_weights)
    torch.testing.assert_close(out, expected_out)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_sdpa_low_precision_keeps_dtype_and_matches_float32(dtype):
    q, k, v = sdpa_inputs("BHTD", dtype=dtype)
    mask = causal_mask(4, 6)
    out, weights = A.scaled_dot_product_attention(q, k, v, mask)
    assert out.dtype == dtype and weights.dtype == dtype
    expected_out, expected_weights = explicit_attention(q.float(), k.float(), v.float(), mask)
    tol = LOW_PRECISION_ATTN_TOL[dtype]
    torch.testing.assert_close(weights.float(), expected_weights, rtol=tol, atol=tol)
    torch.testing.assert_close(out.float(), expected_out, rtol=tol, atol=tol)


@pytest.mark.parametrize("masked", [False, True])
def test_sdpa_passes_gradcheck(masked):
    q = randn(2, 3, 4, dtype=torch.float64, seed=1).requires_grad_()
    k = randn(2, 5, 4, dtype=torch.float64, seed=2).requires_grad_()
    v = randn(2, 5, 3, dtype=torch.float64, seed=3).requires_grad_()
    mask = rand_mask(2, 3, 5, seed=6) if masked else None
    if masked:
        mask[0, 0] = False  # a fully masked row must not break the gradient
    assert torch.autograd.gradcheck(
        lambda a, b, c: A.scaled_dot_product_attention(a, b, c, mask), (q, k, v)
    )


def test_sdpa_padded_keys_and_values_get_zero_gradient():
    q = randn(2, 3, 4, dtype=torch.float64, seed=1).requires_grad_()
    k = randn(2, 5, 4, dtype=torch.float64, seed=2).requires_grad_()
    v = randn(2, 5, 3, dtype=torch.float64, seed=3).requires_grad_()
    valid = torch.tensor([[True, True, True, False, False], [True] * 5])
    out, _ = A.scaled_dot_product_attention(q, k, v, valid.view(2, 1, 5))
    (out * randn(2, 3, 3, dtype=torch.float64, seed=4)).sum().backward()
    for grad in (k.grad, v.grad):
        assert torch.isfinite(grad).all()
        assert torch.equal(grad[0, 3:], torch.zeros_like(grad[0, 3:]))
        assert grad[0, :3].abs().sum() > 0 and grad[1].abs().sum() > 0
    assert torch.isfinite(q.grad).all() and q.grad.abs().sum() > 0


def test_sdpa_gradients_match_torch_sdpa():
    inputs = [t.double().requires_grad_() for t in sdpa_inputs("BHTD")]
    twins = [t.detach().clone().requires_grad_() for t in inputs]
    mask = causal_mask(4, 6)
    upstream = randn(2, 3, 4, 5, dtype=torch.float64, seed=8)
    (A.scaled_dot_product_attention(*inputs, mask)[0] * upstream).sum().backward()
    (F.scaled_dot_product_attention(*twins, attn_mask=mask) * upstream).sum().backward()
    for mine, theirs in zip(inputs, twins, strict=True):
        torch.testing.assert_close(mine.grad, theirs.grad)


# ------------------------------------------------------------------------------ bad input

Q, K, V = randn(3, 4, seed=1), randn(5, 4, seed=2), randn(5, 6, seed=3)
S, M = randn(3, 5, seed=4), rand_mask(3, 5, seed=5)


def with_value(t, index, value):
    t = t.clone()
    t[index] = value
    return t


NAN, INF = float("nan"), float("inf")

BAD_INPUT = [
    # softmax
    pytest.param(lambda: A.softmax([1.0, 2.0]), r"x must be a torch\.Tensor.*got list",
                 id="softmax-list"),
    pytest.param(lambda: A.softmax(torch.tensor([1, 2])),
                 r"x must be a floating-point tensor.*got dtype torch\.int64", id="softmax-int"),
    pytest.param(lambda: A.softmax(torch.tensor([True, False])),
                 r"floating-point.*got dtype torch\.bool", id="softmax-bool-tensor"),
    pytest.param(lambda: A.softmax(torch.tensor(1.0)),
                 r"at least 1 dimension.*\(\.\.\., n\); got shape \(\)", id="softmax-0d"),
    pytest.param(lambda: A.softmax(with_value(S, (0, 1), NAN)), "NaN", id="softmax-nan"),
    pytest.param(lambda: A.softmax(with_value(S, (0, 1), INF)), r"\+inf", id="softmax-posinf"),
    pytest.param(lambda: A.softmax(S, dim=2), r"dim must be in \[-2, 1\] for a 2-d tensor; got 2",
                 id="softmax-dim-too-big"),
    pytest.param(lambda: A.softmax(S, dim=-3), r"dim must be in \[-2, 1\].*got -3",
                 id="softmax-dim-too-small"),
    pytest.param(lambda: A.softmax(S, dim=1.0), r"dim must be an int in \[-2, 1\]; got 1\.0",
                 id="softmax-dim-float"),
    pytest.param(lambda: A.softmax(S, dim="1"), r"dim must be an int", id="softmax-dim-str"),
    pytest.param(lambda: A.softmax(S, dim=True), r"dim must be an int", id="softmax-dim-bool"),
    pytest.param(lambda: A.softmax(S, dim=None), r"dim must be an int", id="softmax-dim-none"),
    # masked_softmax
    pytest.param(lambda: A.masked_softmax(S.tolist(), M), r"scores must be a torch\.Tensor",
                 id="masked-scores-list"),
    pytest.param(lambda: A.masked_softmax(S.long(), M),
                 r"scores must be a floating-point.*torch\.int64", id="masked-scores-int"),
    pytest.param(lambda: A.masked_softmax(S, M.float()),
                 r"mask must have dtype torch\.bool.*\(3, 5\); got dtype torch\.float32",
                 id="masked-float-mask"),
    pytest.param(lambda: A.masked_softmax(S, M.long()),
                 r"mask must have dtype torch\.bool.*got dtype torch\.int64", id="masked-int-mask"),
    pytest.param(lambda: A.masked_softmax(S, M.to(torch.uint8)),
                 r"mask must have dtype torch\.bool.*got dtype torch\.uint8",
                 id="masked-uint8-mask"),
    pytest.param(lambda: A.masked_softmax(S, M.tolist()),
                 r"mask must be a bool torch\.Tensor.*\(3, 5\); got list", id="masked-list-mask"),
    pytest.param(lambda: A.masked_softmax(S, torch.ones(4, dtype=torch.bool)),
                 r"mask of shape \(4,\) does not broadcast to the scores \(3, 5\)",
                 id="masked-mask-wrong-Tk"),
    pytest.param(lambda: A.masked_softmax(S, torch.ones(5, 3, dtype=torch.bool)),
                 r"mask of shape \(5, 3\) does not broadcast to the scores \(3, 5\)",
                 id="masked-mask-transposed"),
    pytest.param(lambda: A.masked_softmax(S, torch.ones(2, 3, 5, dtype=torch.bool)),
                 r"mask of shape \(2, 3, 5\) does not broadcast to the scores \(3, 5\)",
                 id="masked-mask-extra-batch"),
    pytest.param(lambda: A.masked_softmax(with_value(S, (1, 1), NAN), M), "NaN",
                 id="masked-nan"),
    pytest.param(lambda: A.masked_softmax(with_value(S, (1, 1), NAN)), "NaN",
                 id="masked-nan-no-mask"),
    pytest.param(lambda: A.masked_softmax(with_value(S, (1, 1), INF), M), r"\+inf",
                 id="masked-posinf"),
    # dot_scores and scaled_dot_scores: see test_score_functions_reject_bad_input
    # weighted_average
    pytest.param(lambda: A.weighted_average(S, randn(5)),
                 r"values must have at least 2 dimension.*\(\.\.\., T_k, d_v\); got shape \(5,\)",
                 id="wavg-values-1d"),
    pytest.param(lambda: A.weighted_average(randn(3, 4), V),
                 r"expected weights \(\.\.\., T_q, 5\) for values \(5, 6\); got weights \(3, 4\)",
                 id="wavg-count-mismatch"),
    pytest.param(lambda: A.weighted_average(randn(4), V),
                 r"expected weights \(\.\.\., T_q, 5\).*got weights \(4,\)",
                 id="wavg-single-count-mismatch"),
    pytest.param(lambda: A.weighted_average(S.double(), V),
                 r"same dtype; got torch\.float64 and torch\.float32", id="wavg-dtype-mismatch"),
    pytest.param(lambda: A.weighted_average(S.long(), V),
                 r"weights must be a floating-point.*torch\.int64", id="wavg-int-weights"),
    pytest.param(lambda: A.weighted_average(S, V.int()),
                 r"values must be a floating-point.*torch\.int32", id="wavg-int-values"),
    pytest.param(lambda: A.weighted_average(S.numpy(), V),
                 r"weights must be a torch\.Tensor.*got ndarray", id="wavg-numpy-weights"),
    pytest.param(lambda: A.weighted_average(randn(2, 3, 5), randn(3, 5, 6)),
                 r"batch dimensions \(2,\) and \(3,\) do not broadcast", id="wavg-batch-mismatch"),
    # soft_lookup
    pytest.param(lambda: A.soft_lookup(Q[:1], K, V),
                 r"query must have 1 dimension\(s\), shape \(d_k,\); got shape \(1, 4\)",
                 id="lookup-query-2d"),
    pytest.param(lambda: A.soft_lookup(Q[0], K[0], V),
                 r"keys must have 2 dimension\(s\), shape \(T_k, d_k\); got shape \(4,\)",
                 id="lookup-keys-1d"),
    pytest.param(lambda: A.soft_lookup(Q[0], K, V[None]),
                 r"values must have 2 dimension\(s\), shape \(T_k, d_v\); got shape \(1, 5, 6\)",
                 id="lookup-values-3d"),
    pytest.param(lambda: A.soft_lookup(Q[0], K, V[:4]),
                 r"keys \(5, 4\) expects values \(5, d_v\); got values \(4, 6\)",
                 id="lookup-count-mismatch"),
    pytest.param(lambda: A.soft_lookup(Q[0, :3], K, V),
                 r"same width d_k.*got keys \(5, 4\)", id="lookup-width-mismatch"),
    pytest.param(lambda: A.soft_lookup(Q[0].long(), K, V),
                 r"query must be a floating-point.*torch\.int64", id="lookup-int-query"),
    pytest.param(lambda: A.soft_lookup(Q[0].tolist(), K, V),
                 r"query must be a torch\.Tensor of shape \(d_k,\)", id="lookup-list-query"),
    pytest.param(lambda: A.soft_lookup(with_value(Q[0], 2, NAN), K, V), "NaN",
                 id="lookup-nan-query"),
    pytest.param(lambda: A.soft_lookup(Q[0], with_value(K, (1, 1), INF), V), r"inf",
                 id="lookup-inf-key"),
    # scaled_dot_product_attention
    pytest.param(lambda: A.scaled_dot_product_attention(Q[0], K, V),
                 r"q \(queries\) must have at least 2 dimension.*\(\.\.\., T_q, d_k\)",
                 id="sdpa-q-1d"),
    pytest.param(lambda: A.scaled_dot_product_attention(Q, K[0], V),
                 r"k \(keys\) must have at least 2 dimension.*\(\.\.\., T_k, d_k\)",
                 id="sdpa-k-1d"),
    pytest.param(lambda: A.scaled_dot_product_attention(Q, K, V[0]),
                 r"v \(values\) must have at least 2 dimension.*\(\.\.\., T_k, d_v\)",
                 id="sdpa-v-1d"),
    pytest.param(lambda: A.scaled_dot_product_attention(Q, randn(5, 3), V),
                 r"k must be \(\.\.\., T_k, 4\); got k \(5, 3\)", id="sdpa-width-mismatch"),
    pytest.param(lambda: A.scaled_dot_product_attention(Q, K, V[:4]),
                 r"v must be \(\.\.\., 5, d_v\); got v \(4, 6\)", id="sdpa-kv-count-mismatch"),
    pytest.param(lambda: A.scaled_dot_product_attention(Q, K.double(), V),
                 r"same dtype; got torch\.float32 and torch\.float64", id="sdpa-qk-dtype"),
    pytest.param(lambda: A.scaled_dot_product_attention(Q, K, V.double()),
                 r"v must have the dtype of q and k \(torch\.float32\); got torch\.float64",
                 id="sdpa-v-dtype"),
    pytest.param(lambda: A.scaled_dot_product_attention(Q.long(), K, V),
                 r"q \(queries\) must be a floating-point.*torch\.int64", id="sdpa-int-q"),
    pytest.param(lambda: A.scaled_dot_product_attention(Q, K, V.int()),
                 r"v \(values\) must be a floating-point.*torch\.int32", id="sdpa-int-v"),
    pytest.param(lambda: A.scaled_dot_product_attention(Q, K.numpy(), V),
                 r"k \(keys\) must be a torch\.Tensor", id="sdpa-numpy-k"),
    pytest.param(lambda: A.scaled_dot_product_attention(Q, K, V, M.float()),
                 r"mask must have dtype torch\.bool.*got dtype torch\.float32",
                 id="sdpa-float-mask"),
    pytest.param(lambda: A.scaled_dot_product_attention(Q, K, V, M.int()),
                 r"mask must have dtype torch\.bool.*got dtype torch\.int32", id="sdpa-int-mask"),
    pytest.param(lambda: A.scaled_dot_product_attention(Q, K, V, torch.ones(3, 4).bool()),
                 r"mask of shape \(3, 4\) does not broadcast to the scores \(3, 5\)",
                 id="sdpa-mask-shape"),
    pytest.param(lambda: A.scaled_dot_product_attention(randn(2, 3, 4), randn(3, 5, 4), V),
                 r"batch dimensions \(2,\) and \(3,\) do not broadcast", id="sdpa-qk-batch"),
    pytest.param(lambda: A.scaled_dot_product_attention(with_value(Q, (0, 0), NAN), K, V),
                 "NaN", id="sdpa-nan-q"),
    pytest.param(lambda: A.scaled_dot_product_attention(Q, with_value(K, (0, 0), NAN), V, M),
                 "NaN", id="sdpa-nan-k-masked"),
    pytest.param(
        lambda: A.scaled_dot_product_attention(Q.abs(), with_value(K.abs(), (0, 0), INF), V),
        r"k \(keys\) contains inf",
        id="sdpa-posinf-k",
    ),
]


@pytest.mark.parametrize(("call", "message"), BAD_INPUT)
def test_bad_input_raises_value_error_naming_what_was_expected(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("score_fn", [A.dot_scores, A.scaled_dot_scores])
@pytest.mark.parametrize(
    ("q", "k", "message"),
    [
        pytest.param(Q[0], K, r"q \(queries\) must have at least 2 dimension.*\(4,\)", id="q-1d"),
        pytest.param(Q, K[0], r"k \(keys\) must have at least 2 dimension.*\(4,\)", id="k-1d"),
        pytest.param(Q, randn(5, 3),
                     r"same width d_k: q is \(3, 4\), "
                     r"so k must be \(\.\.\., T_k, 4\); got k \(5, 3\)",
                     id="width-mismatch"),
        pytest.param(Q, K.double(), r"same dtype; got torch\.float32 and torch\.float64",
                     id="dtype-mismatch"),
        pytest.param(Q.int(), K, r"q \(queries\) must be a floating-point.*torch\.int32",
                     id="int-q"),
        pytest.param(Q, K.tolist(), r"k \(keys\) must be a torch\.Tensor.*got list", id="list-k"),
        pytest.param(randn(2, 3, 4), randn(3, 5, 4),
                     r"q and k: batch dimensions \(2,\) and \(3,\) do not broadcast",
                     id="batch-mismatch"),
    ],
)
def test_score_functions_reject_bad_input(score_fn, q, k, message):
    with pytest.raises(ValueError, match=message):
        score_fn(q, k)


def test_sdpa_rejects_values_whose_batch_dims_do_not_broadcast():
    with pytest.raises(ValueError, match=r"do not broadcast"):
        A.scaled_dot_product_attention(randn(2, 3, 4), randn(2, 5, 4), randn(3, 5, 6))


@pytest.mark.parametrize(
    "call",
    [
        pytest.param(lambda: A.dot_scores(with_value(Q, (0, 0), NAN), K), id="dot_scores-nan-q"),
        pytest.param(lambda: A.scaled_dot_scores(Q, with_value(K, (0, 0), INF)),
                     id="scaled_dot_scores-inf-k"),
        pytest.param(lambda: A.weighted_average(with_value(S, (0, 0), NAN), V),
                     id="weighted_average-nan-weights"),
        pytest.param(lambda: A.weighted_average(S, with_value(V, (0, 0), NAN)),
                     id="weighted_average-nan-values"),
        pytest.param(lambda: A.soft_lookup(Q[0], K, with_value(V, (0, 0), NAN)),
                     id="soft_lookup-nan-values"),
        pytest.param(lambda: A.scaled_dot_product_attention(Q, K, with_value(V, (0, 0), NAN)),
                     id="sdpa-nan-v"),
    ],
)
def test_nan_or_inf_inputs_are_rejected_everywhere(call):
    with pytest.raises(ValueError, match=r"NaN|inf"):
        call()


def test_softmax_over_an_empty_dimension_returns_an_empty_tensor():
    out = A.softmax(torch.empty(3, 0))
    assert out.shape == (3, 0)


def test_nan_errors_name_the_argument_the_caller_passed():
    with pytest.raises(ValueError, match=r"q \(queries\) contains NaN"):
        A.scaled_dot_product_attention(with_value(Q, (0, 0), NAN), K, V)
    with pytest.raises(ValueError, match=r"scores contains NaN"):
        A.masked_softmax(with_value(S, (0, 0), NAN))
    with pytest.raises(ValueError, match=r"keys must be \(T_k, 4\); got keys \(5, 3\)"):
        A.soft_lookup(Q[0], randn(5, 3), V)
