"""course_utils.positional: the paper's sinusoid entry by entry, what the encodings promise."""

from __future__ import annotations

import math

import pytest
import torch

from course_utils.multihead import MultiHeadAttention
from course_utils.positional import (
    LearnedPositions,
    add_positions,
    concat_positions,
    index_encoding,
    rotary,
    sinusoidal_encoding,
)


@pytest.mark.parametrize("d_model", [8, 7, 1])
def test_sinusoidal_encoding_is_the_papers_formula_with_i_from_zero(d_model):
    pe = sinusoidal_encoding(50, d_model)
    assert pe.shape == (50, d_model) and pe.dtype == torch.float32
    for t in (0, 1, 17, 49):
        for col in range(d_model):
            i = col // 2
            angle = t / 10000.0 ** (2 * i / d_model)
            want = math.sin(angle) if col % 2 == 0 else math.cos(angle)
            assert pe[t, col].item() == pytest.approx(want, abs=1e-6)
    assert torch.equal(pe[0, 0::2], torch.zeros(len(range(0, d_model, 2))))   # sin 0
    assert torch.equal(pe[0, 1::2], torch.ones(d_model // 2))                 # cos 0


def test_another_base_changes_the_wavelengths_and_column_zero_is_the_fastest():
    paper, other = sinusoidal_encoding(20, 8), sinusoidal_encoding(20, 8, base=1000.0)
    assert torch.equal(paper[:, :2], other[:, :2])      # i = 0: base^0 = 1 in both
    assert not torch.allclose(paper[:, 2:], other[:, 2:])
    # the wavelength 2 pi base^(2i/d) grows with i: column 0 changes fastest
    assert (paper[1:, 0] - paper[:-1, 0]).abs().mean() > (paper[1:, 6] - paper[:-1, 6]).abs().mean()


def test_the_dot_product_of_two_positions_depends_only_on_their_distance():
    pe = sinusoidal_encoding(64, 16, dtype=torch.float64)
    gram = pe @ pe.T                                          # (T, T)
    for k in (0, 1, 5, 20):
        diagonal = torch.diagonal(gram, offset=k)
        torch.testing.assert_close(diagonal, diagonal[0].expand_as(diagonal))
    torch.testing.assert_close(torch.diagonal(gram), torch.full((64,), 8.0, dtype=torch.float64))
    # and one fixed rotation per (sin, cos) pair moves every position by k: PE[t + k] = PE[t] M_k
    k, shift = 3, torch.zeros(16, 16, dtype=torch.float64)
    for i in range(8):
        w = 1 / 10000.0 ** (2 * i / 16)
        c, s = math.cos(w * k), math.sin(w * k)
        shift[2 * i: 2 * i + 2, 2 * i: 2 * i + 2] = torch.tensor([[c, -s], [s, c]],
                                                              dtype=torch.float64)
    torch.testing.assert_close(pe[:-k] @ shift, pe[k:], atol=1e-12, rtol=0)


def test_the_naive_index_grows_without_bound_or_changes_meaning_with_the_length():
    assert torch.equal(index_encoding(4), torch.tensor([[0.0], [1.0], [2.0], [3.0]]))
    assert index_encoding(3, normalize=True)[1].item() == 0.5
    assert index_encoding(5, normalize=True)[1].item() == 0.25    # position 1, other value
    assert index_encoding(1, normalize=True).item() == 0.0


def test_learned_positions_train_and_refuse_positions_they_never_saw():
    learned = LearnedPositions(10, 6)
    assert learned(4).shape == (4, 6)
    learned(4).sum().backward()
    assert learned.embedding.weight.grad[:4].abs().sum() > 0
    assert torch.equal(learned.embedding.weight.grad[4:], torch.zeros(6, 6))
    with pytest.raises(ValueError, match="longer than the 10 positions learned"):
        learned(11)


def test_adding_keeps_the_width_and_concatenating_grows_it():
    x = torch.randn(2, 5, 8)
    pe = sinusoidal_encoding(10, 8)
    added = add_positions(x, pe)
    assert added.shape == (2, 5, 8)
    torch.testing.assert_close(added - x, pe[:5].expand(2, 5, 8))
    joined = concat_positions(x, index_encoding(10))
    assert joined.shape == (2, 5, 9) and torch.equal(joined[..., :8], x)
    assert torch.equal(joined[1, :, 8], torch.arange(5.0))
    assert add_positions(x.double(), pe).dtype == torch.float64


def test_positions_break_the_permutation_equivariance_of_self_attention():
    torch.manual_seed(0)
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(1, 6, 8)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    pe = sinusoidal_encoding(6, 8)

    def attend(z):
        return mha(z, z, z)[0]

    torch.testing.assert_close(attend(x[:, perm]), attend(x)[:, perm])     # no positions
    with_pe = attend(add_positions(x, pe))
    shuffled = attend(add_positions(x[:, perm], pe))
    assert not torch.allclose(shuffled, with_pe[:, perm], atol=1e-3)


@pytest.mark.parametrize("call, message", [
    (lambda: sinusoidal_encoding(0, 8), r"n_positions must be a positive int; got 0"),
    (lambda: sinusoidal_encoding(8, 4.0), r"d_model must be a positive int"),
    (lambda: sinusoidal_encoding(8, 4, base=1.0), r"base must be greater than 1"),
    (lambda: add_positions(torch.zeros(2, 5, 8), sinusoidal_encoding(4, 8)),
     r"pe has 4 positions; x needs T = 5"),
    (lambda: add_positions(torch.zeros(2, 5, 8), sinusoidal_encoding(5, 6)),
     r"width of x, d_model = 8"),
    (lambda: add_positions(torch.zeros(5, 8), sinusoidal_encoding(5, 8)), r"\(B, T, d_model\)"),
    (lambda: LearnedPositions(10, 0), r"d_model must be a positive int"),
])
def test_bad_arguments_raise_naming_what_was_expected(call, message):
    with pytest.raises(ValueError, match=message):
        call()


# ----------------------------------------------------------------------------- rotary (RoPE)

def rotation_by_hand(x, positions, base=10000.0):
    """The paper's block-diagonal matrix R_t, one 2 x 2 rotation per pair, applied row by row."""
    d_k = x.shape[-1]
    rows = []
    for vector, t in zip(x, positions.tolist(), strict=True):
        rotation = torch.zeros(d_k, d_k, dtype=torch.float64)
        for i in range(d_k // 2):
            angle = t * base ** (-2 * i / d_k)
            c, s = math.cos(angle), math.sin(angle)
            rotation[2 * i: 2 * i + 2, 2 * i: 2 * i + 2] = torch.tensor([[c, -s], [s, c]],
                                                                      dtype=torch.float64)
        rows.append(rotation @ vector)
    return torch.stack(rows)


def test_rotary_is_the_papers_block_diagonal_rotation_with_theta_i_from_i_zero():
    torch.manual_seed(0)
    x = torch.randn(7, 8, dtype=torch.float64)
    positions = torch.tensor([0, 1, 2, 5, 17, 100, 4095])
    torch.testing.assert_close(rotary(x, positions), rotation_by_hand(x, positions),
                               atol=1e-12, rtol=0)
    torch.testing.assert_close(rotary(x, positions, base=500.0),
                               rotation_by_hand(x, positions, base=500.0), atol=1e-12, rtol=0)


def test_rotary_agrees_with_the_complex_number_formulation():
    torch.manual_seed(1)
    x = torch.randn(2, 3, 9, 16, dtype=torch.float64)  # (B, n_heads, T, d_k)
    theta = 10000.0 ** (-torch.arange(0, 16, 2, dtype=torch.float64) / 16)  # (d_k / 2,)
    turn = torch.polar(torch.ones(9, 8, dtype=torch.float64),
                       torch.arange(9, dtype=torch.float64)[:, None] * theta)  # e^(j t theta_i)
    z = torch.view_as_complex(x.reshape(2, 3, 9, 8, 2))  # pair i = x[2i] + j x[2i + 1]
    want = torch.view_as_real(z * turn).reshape(2, 3, 9, 16)
    torch.testing.assert_close(rotary(x), want, atol=1e-12, rtol=0)


def test_rotary_keeps_norms_and_leaves_position_zero_alone():
    torch.manual_seed(2)
    x = torch.randn(4, 50, 32, dtype=torch.float64)
    y = rotary(x)
    torch.testing.assert_close(y.norm(dim=-1), x.norm(dim=-1), atol=1e-12, rtol=0)
    assert torch.equal(y[:, 0], x[:, 0])
    assert torch.equal(rotary(x, torch.zeros(50, dtype=torch.long)), x)
    assert not torch.allclose(y[:, 1:], x[:, 1:])


def test_rotary_scores_depend_on_the_offset_only():
    """(R_t q) . (R_u k) = (R_(t+s) q) . (R_(u+s) k) for every shift s: relative position."""
    torch.manual_seed(3)
    q, k = torch.randn(2, 1, 64, dtype=torch.float64)  # one query, one key: (1, d_k) each
    pairs = [(0, 0), (0, 5), (5, 0), (3, 40), (31, 2)]

    def score(t, u):
        return (rotary(q, torch.tensor([t])) @ rotary(k, torch.tensor([u])).T).item()

    for t, u in pairs:
        for shift in (1, 7, 100, 1000, 12345):
            assert score(t + shift, u + shift) == pytest.approx(score(t, u), abs=1e-9)
    # and a whole score matrix of a repeated q and k is constant along each diagonal
    scores = rotary(q.expand(30, 64)) @ rotary(k.expand(30, 64)).T  # (T, T)
    for offset in (-7, 0, 3, 20):
        diagonal = torch.diagonal(scores, offset=offset)
        torch.testing.assert_close(diagonal, diagonal[0].expand_as(diagonal))
    # both must turn: with the key alone rotated, a shift of the pair changes the score
    key_only = [(q @ rotary(k, torch.tensor([u])).T).item() for u in (40, 140)]
    assert key_only[0] != pytest.approx(key_only[1], abs=1e-3)


def test_rotary_uses_the_frequencies_of_the_sinusoidal_encoding():
    """The vector (0, 1, 0, 1, ...) turned to position t is (-sin, cos) of the sinusoids."""
    x = torch.zeros(20, 16, dtype=torch.float64)
    x[:, 1::2] = 1.0
    pe = sinusoidal_encoding(20, 16, dtype=torch.float64)
    want = torch.stack([-pe[:, 0::2], pe[:, 1::2]], dim=-1).flatten(-2)
    torch.testing.assert_close(rotary(x), want, atol=1e-12, rtol=0)


def test_rotary_broadcasts_positions_and_keeps_the_dtype():
    torch.manual_seed(4)
    x = torch.randn(2, 3, 5, 8)  # (B, n_heads, T, d_k), float32
    positions = torch.tensor([4, 0, 9, 2, 7])
    y = rotary(x, positions)
    assert y.shape == x.shape and y.dtype == torch.float32
    for b in range(2):
        for h in range(3):
            torch.testing.assert_close(y[b, h], rotary(x[b, h], positions))
    per_row = torch.tensor([[0, 1, 2, 3, 4], [10, 11, 12, 13, 14]])[:, None]  # (B, 1, T)
    torch.testing.assert_close(rotary(x, per_row)[1], rotary(x[1], per_row[1, 0]))
    torch.testing.assert_close(rotary(x.double(), positions.double()).float(), y)
    assert rotary(x.to(torch.bfloat16)).dtype == torch.bfloat16


@pytest.mark.parametrize("call, message", [
    (lambda: rotary(torch.zeros(2, 5, 7)),
     r"x must have shape \(\.\.\., T, d_k\) with d_k even .*got shape \(2, 5, 7\), d_k = 7"),
    (lambda: rotary(torch.zeros(2, 5, 8, dtype=torch.long)),
     r"x must be a floating-point tensor .* of shape \(\.\.\., T, d_k\) with d_k even; "
     r"got dtype torch.int64"),
    (lambda: rotary(torch.zeros(8)), r"at least 2 dimension\(s\), shape \(\.\.\., T, d_k\)"),
    (lambda: rotary([[0.0, 1.0]]), r"x must be a torch.Tensor of shape \(\.\.\., T, d_k\)"),
    (lambda: rotary(torch.zeros(2, 5, 8), torch.arange(6)),
     r"positions must have shape \(T,\) = \(5,\), or broadcastable to \(2, 5\).*"
     r"got shape \(6,\)"),
    (lambda: rotary(torch.zeros(5, 8), [0, 1, 2, 3, 4]),
     r"positions must be an int or float torch.Tensor of shape \(T,\) = \(5,\)"),
    (lambda: rotary(torch.zeros(5, 8), torch.ones(5, dtype=torch.bool)),
     r"positions must be an int or float torch.Tensor.*got torch.bool"),
    (lambda: rotary(torch.zeros(5, 8), base=1.0), r"base must be greater than 1"),
    (lambda: rotary(torch.zeros(5, 8), base=-3), r"base must be a positive finite number"),
])
def test_rotary_rejects_bad_input_naming_the_expected_shape(call, message):
    with pytest.raises(ValueError, match=message):
        call()
