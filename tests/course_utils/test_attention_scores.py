"""course_utils.attention's score functions of unit 04: bilinear, additive and cosine scores,
checked against explicit loops, PyTorch's own functions and hand-derived values."""

import math

import pytest
import torch
import torch.nn.functional as F

from course_utils import attention as A


def randn(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed),
                       dtype=torch.float64)


# --------------------------------------------------------------------------- bilinear


def test_bilinear_scores_hand_example_and_the_orientation_of_w():
    q = torch.tensor([[1.0, 2.0]])  # (T_q, d_q) = (1, 2)
    k = torch.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])  # (T_k, d_k) = (2, 3)
    w = torch.tensor([[1.0, 0.0], [0.0, 0.0], [0.0, 3.0]])  # (d_k, d_q)
    # e_0 = k_0^T W q = [1, 0, 0] . [1, 0, 6] = 1;  e_1 = [0, 0, 1] . [1, 0, 6] = 6
    torch.testing.assert_close(A.bilinear_scores(q, k, w), torch.tensor([[1.0, 6.0]]))
    with pytest.raises(ValueError, match=r"w_e must have shape \(3, 2\)"):
        A.bilinear_scores(q, k, w.T)  # the transposed matrix names the widths the wrong way


def test_bilinear_scores_match_an_explicit_loop_with_batch_dims():
    q, k, w = randn(2, 3, 4, seed=1), randn(2, 5, 6, seed=2), randn(6, 4, seed=3)
    e = A.bilinear_scores(q, k, w)
    assert e.shape == (2, 3, 5)
    for b in range(2):
        for i in range(3):
            for j in range(5):
                assert math.isclose(float(e[b, i, j]), float(k[b, j] @ w @ q[b, i]),
                                    rel_tol=1e-12, abs_tol=1e-12)
    # keys shared by every batch element broadcast
    torch.testing.assert_close(A.bilinear_scores(q, k[0], w)[0], e[0])


def test_bilinear_with_the_identity_is_the_dot_product():
    q, k = randn(3, 4, 8, seed=1), randn(3, 6, 8, seed=2)
    torch.testing.assert_close(A.bilinear_scores(q, k, torch.eye(8, dtype=torch.float64)),
                               A.dot_scores(q, k))


def test_learned_key_and_query_maps_are_a_low_rank_bilinear_form():
    """h^T W_k^T W_q s = (W_k h) . (W_q s): the two forms agree, and W_e = W_k^T W_q has rank
    at most the width of the maps."""
    d_h, d_s, d = 10, 7, 3
    h, s = randn(5, d_h, seed=1), randn(4, d_s, seed=2)
    w_k, w_q = randn(d, d_h, seed=3), randn(d, d_s, seed=4)
    w_e = w_k.T @ w_q  # (d_h, d_s)
    torch.testing.assert_close(A.bilinear_scores(s, h, w_e), (s @ w_q.T) @ (h @ w_k.T).T)
    assert torch.linalg.matrix_rank(w_e) == d


# --------------------------------------------------------------------------- additive


def test_additive_scores_match_an_explicit_loop():
    q, k = randn(2, 3, 4, seed=1), randn(2, 5, 6, seed=2)
    w_q, w_k, w_a = randn(7, 4, seed=3), randn(7, 6, seed=4), randn(7, seed=5)
    e = A.additive_scores(q, k, w_q, w_k, w_a)
    assert e.shape == (2, 3, 5)
    for b in range(2):
        for i in range(3):
            for j in range(5):
                expected = w_a @ torch.tanh(w_q @ q[b, i] + w_k @ k[b, j])
                assert math.isclose(float(e[b, i, j]), float(expected), rel_tol=1e-12,
                                    abs_tol=1e-12)


def test_additive_scores_with_a_bias_match_an_explicit_loop():
    q, k = randn(3, 4, seed=1), randn(5, 2, seed=2)
    w_q, w_k, w_a, b = randn(6, 4, seed=3), randn(6, 2, seed=4), randn(6, seed=5), randn(6, seed=6)
    e = A.additive_scores(q, k, w_q, w_k, w_a, bias=b)
    expected = torch.tensor([[float(w_a @ torch.tanh(w_q @ q[i] + w_k @ k[j] + b))
                              for j in range(5)] for i in range(3)], dtype=torch.float64)
    torch.testing.assert_close(e, expected)
    with pytest.raises(ValueError, match=r"bias must have shape \(6,\)"):
        A.additive_scores(q, k, w_q, w_k, w_a, bias=torch.zeros(5, dtype=torch.float64))


def test_additive_scores_are_an_mlp_on_the_concatenation():
    q, k = randn(3, 4, seed=1), randn(5, 2, seed=2)
    w_q, w_k, w_a = randn(6, 4, seed=3), randn(6, 2, seed=4), randn(6, seed=5)
    mlp = torch.nn.Linear(6, 6, bias=False).double()
    with torch.no_grad():
        mlp.weight.copy_(torch.cat([w_q, w_k], dim=1))  # (d_a, d_q + d_k)
    pairs = torch.cat([q.unsqueeze(1).expand(3, 5, 4), k.unsqueeze(0).expand(3, 5, 2)], -1)
    torch.testing.assert_close(A.additive_scores(q, k, w_q, w_k, w_a),
                               torch.tanh(mlp(pairs)) @ w_a)


def test_additive_scores_are_bounded_by_the_norm_of_v():
    q, k = randn(4, 3, seed=1) * 1e3, randn(6, 3, seed=2) * 1e3
    w_a = randn(5, seed=3)
    e = A.additive_scores(q, k, randn(5, 3, seed=4), randn(5, 3, seed=5), w_a)
    assert float(e.abs().max()) <= float(w_a.abs().sum()) + 1e-9  # tanh saturates, never overflows


def test_additive_scores_reject_mismatched_parameters():
    q, k = torch.zeros(3, 4), torch.zeros(5, 6)
    with pytest.raises(ValueError, match=r"w_q must have shape \(7, 4\)"):
        A.additive_scores(q, k, torch.zeros(7, 6), torch.zeros(7, 6), torch.zeros(7))
    with pytest.raises(ValueError, match=r"w_k must have shape \(7, 6\)"):
        A.additive_scores(q, k, torch.zeros(7, 4), torch.zeros(6, 7), torch.zeros(7))
    with pytest.raises(ValueError, match=r"w_a must have 1 dimension"):
        A.additive_scores(q, k, torch.zeros(7, 4), torch.zeros(7, 6), torch.zeros(7, 1))


# --------------------------------------------------------------------------- cosine


def test_cosine_scores_match_pytorch_cosine_similarity():
    q, k = randn(2, 3, 5, seed=1), randn(2, 4, 5, seed=2)
    expected = F.cosine_similarity(q.unsqueeze(-2), k.unsqueeze(-3), dim=-1)  # (2, 3, 4)
    torch.testing.assert_close(A.cosine_scores(q, k), expected)


def test_cosine_scores_ignore_length_and_handle_zero_vectors():
    q = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
    k = torch.tensor([[6.0, 8.0], [-4.0, 3.0], [-1.0, 0.0]])
    e = A.cosine_scores(q, k)
    torch.testing.assert_close(e[0], torch.tensor([1.0, 0.0, -0.6]))
    torch.testing.assert_close(e[1], torch.zeros(3))  # a zero query scores 0, not NaN
    torch.testing.assert_close(A.cosine_scores(q * 1e3, k), e)
    with pytest.raises(ValueError, match="eps must be a positive float"):
        A.cosine_scores(q, k, eps=0.0)


# --------------------------------------------------------------------------- one convention


SCORES = {
    "dot": lambda q, k: A.dot_scores(q, k),
    "scaled dot": lambda q, k: A.scaled_dot_scores(q, k),
    "bilinear": lambda q, k: A.bilinear_scores(q, k, randn(k.shape[-1], q.shape[-1], seed=9)),
    "additive": lambda q, k: A.additive_scores(q, k, randn(6, q.shape[-1], seed=7),
                                               randn(6, k.shape[-1], seed=8), randn(6, seed=9)),
    "cosine": lambda q, k: A.cosine_scores(q, k),
}


@pytest.mark.parametrize("name", SCORES)
def test_every_score_has_one_shape_convention_and_works_with_masked_softmax(name):
    """Scores (..., T_q, T_k) from queries (..., T_q, d) and keys (..., T_k, d); a padding mask
    (..., 1, T_k) gives padded keys zero weight; the output is PyTorch's SDPA with the same
    weights."""
    q, k, v = randn(2, 3, 4, seed=1), randn(2, 5, 4, seed=2), randn(2, 5, 3, seed=3)
    e = SCORES[name](q, k)
    assert e.shape == (2, 3, 5) and e.dtype == torch.float64
    mask = torch.tensor([[True] * 5, [True, True, True, False, False]]).unsqueeze(1)  # (2, 1, 5)
    alpha = A.masked_softmax(e, mask)
    assert float(alpha[1, :, 3:].abs().max()) == 0.0
    torch.testing.assert_close(alpha.sum(-1), torch.ones(2, 3, dtype=torch.float64))
    # SDPA with q' = e, k' = I and scale 1 has weights softmax(e) masked the same way
    eye = torch.eye(5, dtype=torch.float64).expand(2, 5, 5)
    expected = F.scaled_dot_product_attention(e, eye, v, attn_mask=mask, scale=1.0)
    torch.testing.assert_close(alpha @ v, expected)


@pytest.mark.parametrize("name", ["bilinear", "additive", "cosine"])
def test_scores_reject_bad_inputs_naming_the_expected_shape(name):
    with pytest.raises(ValueError, match=r"\(\.\.\., T_q, d"):
        SCORES[name](torch.zeros(4, dtype=torch.float64), torch.zeros(5, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="contains NaN"):
        SCORES[name](torch.full((2, 4), float("nan"), dtype=torch.float64),
                     torch.zeros(5, 4, dtype=torch.float64))
    with pytest.raises(ValueError, match="do not broadcast"):
        SCORES[name](torch.zeros(2, 3, 4, dtype=torch.float64),
                     torch.zeros(3, 5, 4, dtype=torch.float64))
