"""course_utils.multihead against torch.nn.MultiheadAttention with the weights copied across."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from course_utils.multihead import MultiHeadAttention, merge_heads, split_heads


def torch_pair(d_model=16, n_heads=4, bias=True, dtype=torch.float32, seed=0):
    torch.manual_seed(seed)
    theirs = nn.MultiheadAttention(d_model, n_heads, bias=bias, batch_first=True, dtype=dtype)
    if bias:   # PyTorch starts its biases at zero: make them count
        with torch.no_grad():
            theirs.in_proj_bias.normal_()
            theirs.out_proj.bias.normal_()
    return theirs, MultiHeadAttention.from_torch(theirs).eval()


def padding(lengths, t_k):
    return torch.arange(t_k) < torch.tensor(lengths)[:, None]   # (B, T_k), True = real


@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("t_q, t_k, masking", [   # self-attention, then cross-attention
    (5, 5, "none"), (5, 5, "causal"), (5, 5, "padding"), (5, 5, "both"),
    (4, 7, "none"), (4, 7, "padding")])
@pytest.mark.parametrize("bias", [True, False])
def test_outputs_and_per_head_weights_equal_pytorchs(batch, t_q, t_k, masking, bias):
    theirs, mine = torch_pair(bias=bias)
    gen = torch.Generator().manual_seed(1)
    query = torch.randn(batch, t_q, 16, generator=gen)
    memory = query if t_q == t_k else torch.randn(batch, t_k, 16, generator=gen)
    lengths = [t_k, max(1, t_k - 2), 2][:batch]
    causal = torch.ones(t_q, t_k, dtype=torch.bool).tril()              # (T_q, T_k)
    pad = padding(lengths, t_k)                                          # (B, T_k)
    mask, attn_mask, key_padding_mask = None, None, None
    if masking in ("causal", "both"):
        mask, attn_mask = causal, ~causal                                # torch: True = NOT
    if masking in ("padding", "both"):
        pad_mask = pad[:, None, None, :]                                 # (B, 1, 1, T_k)
        mask = pad_mask if mask is None else mask & pad_mask
        key_padding_mask = ~pad
    out, weights = mine(query, memory, memory, mask)
    want, want_weights = theirs(query, memory, memory, attn_mask=attn_mask,
                                key_padding_mask=key_padding_mask, need_weights=True,
                                average_attn_weights=False)
    assert out.shape == (batch, t_q, 16) and weights.shape == (batch, 4, t_q, t_k)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(weights, want_weights, atol=1e-6, rtol=1e-5)


def test_float64_agrees_to_rounding_and_the_round_trip_keeps_every_weight():
    theirs, mine = torch_pair(d_model=12, n_heads=3, dtype=torch.float64)
    x = torch.randn(2, 6, 12, dtype=torch.float64)
    torch.testing.assert_close(mine(x, x, x)[0], theirs(x, x, x)[0], atol=1e-12, rtol=1e-12)
    back = mine.to_torch()
    assert back.batch_first and back.in_proj_weight.dtype == torch.float64
    for a, b in zip(back.state_dict().values(), theirs.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_split_heads_gives_each_head_its_slice_of_every_position_and_merge_undoes_it():
    x = torch.arange(2 * 3 * 8, dtype=torch.float32).reshape(2, 3, 8)   # (B, T, d_model)
    heads = split_heads(x, 4)                                            # (B, 4, T, 2)
    assert heads.shape == (2, 4, 3, 2)
    for h in range(4):
        assert torch.equal(heads[:, h], x[:, :, 2 * h: 2 * h + 2])
    assert torch.equal(merge_heads(heads), x)
    assert not torch.equal(x.reshape(2, 4, 3, 2), heads)   # a reshape alone mixes positions


def test_self_attention_without_positions_is_permutation_equivariant():
    _, mine = torch_pair()
    x = torch.randn(2, 6, 16)
    perm = torch.randperm(6)
    out, weights = mine(x, x, x)
    out_p, weights_p = mine(x[:, perm], x[:, perm], x[:, perm])
    torch.testing.assert_close(out_p, out[:, perm])
    torch.testing.assert_close(weights_p, weights[:, :, perm][:, :, :, perm])


def test_a_fully_masked_query_gets_zero_weights_not_nan():
    _, mine = torch_pair()
    x = torch.randn(1, 3, 16)
    mask = torch.tensor([[True, False, False], [False, False, False], [True, True, True]])
    out, weights = mine(x, x, x, mask)
    assert torch.equal(weights[0, :, 1], torch.zeros(4, 3))
    torch.testing.assert_close(out[0, 1], mine.w_o.bias)   # zero heads: the output bias alone


def test_gradients_reach_the_inputs_and_every_projection():
    torch.manual_seed(0)
    mine = MultiHeadAttention(6, 2).double()
    q = torch.randn(2, 3, 6, dtype=torch.float64, requires_grad=True)
    kv = torch.randn(2, 4, 6, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda q, kv: mine(q, kv, kv)[0], (q, kv))
    mine(q, kv, kv)[0].sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in mine.parameters())


@pytest.mark.parametrize("call, message", [
    (lambda: MultiHeadAttention(10, 4), r"d_model = 10 must be divisible by n_heads = 4"),
    (lambda: MultiHeadAttention(8, 0), r"n_heads"),
    (lambda: split_heads(torch.zeros(2, 3, 10), 4), r"divisible by n_heads = 4"),
    (lambda: merge_heads(torch.zeros(2, 3, 8)), r"\(B, n_heads, T, d_k\)"),
])
def test_bad_sizes_raise_naming_what_was_expected(call, message):
    with pytest.raises(ValueError, match=message):
        call()


@pytest.mark.parametrize("args, message", [
    ((torch.zeros(2, 3, 12), torch.zeros(2, 3, 16), torch.zeros(2, 3, 16)),
     r"query must have shape \(B, T_q, d_model = 16\); got \(2, 3, 12\)"),
    ((torch.zeros(2, 3, 16), torch.zeros(1, 4, 16), torch.zeros(1, 4, 16)), r"same batch size"),
    ((torch.zeros(2, 3, 16), torch.zeros(2, 4, 16), torch.zeros(2, 5, 16)), r"same length T_k"),
    ((torch.zeros(3, 16), torch.zeros(3, 16), torch.zeros(3, 16)), r"query"),
    ((torch.zeros(2, 3, 16), torch.zeros(2, 4, 16), torch.zeros(2, 4, 16),
      torch.ones(2, 4, dtype=torch.long)), r"mask must have dtype torch.bool"),
    ((torch.zeros(2, 3, 16), torch.zeros(2, 4, 16), torch.zeros(2, 4, 16),
      torch.ones(2, 4, dtype=torch.bool)), r"mask .*broadcast"),
])
def test_bad_inputs_and_masks_raise_naming_what_was_expected(args, message):
    _, mine = torch_pair()
    with pytest.raises(ValueError, match=message):
        mine(*args)


def test_from_torch_refuses_what_has_no_counterpart():
    with pytest.raises(ValueError, match="batch_first=True"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2))
    with pytest.raises(ValueError, match="kdim = vdim"):
        MultiHeadAttention.from_torch(nn.MultiheadAttention(8, 2, kdim=4, batch_first=True))
    with pytest.raises(TypeError, match="MultiheadAttention"):
        MultiHeadAttention.from_torch(nn.Linear(8, 8))
