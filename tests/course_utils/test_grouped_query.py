"""course_utils.grouped_query and the layer it describes (multihead.MultiHeadAttention with
n_kv_heads): grouped-query attention against multi-head attention (ours and torch.nn's),
PyTorch's own grouped attention (scaled_dot_product_attention with enable_gqa) and an explicit
loop over heads; Ainslie et al.'s conversion; the cache's size, measured and worked out; the
Transformer whose config asks for fewer key/value heads, drawn as the multi-head one, and its
cached decoding equal to recomputation."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from course_utils import seed_everything
from course_utils.data import translation
from course_utils.grouped_query import (
    LLAMA_2_7B,
    MISTRAL_7B,
    cache_bytes,
    fill_caches,
    from_multihead,
    kv_cache_bytes_per_token,
)
from course_utils.multihead import MultiHeadAttention, repeat_kv
from course_utils.training import count_parameters
from course_utils.transformer import Transformer, TransformerConfig
from course_utils.translator import config_for, train

pytestmark = pytest.mark.usefixtures("one_thread")  # small tensors: one thread is faster

D_MODEL, N_HEADS = 24, 6  # d_k = 4
TOL64 = {"atol": 1e-12, "rtol": 1e-10}


def randn(*shape, seed=1, dtype=torch.float64):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


def layer(n_kv_heads, seed=0):
    torch.manual_seed(seed)
    gqa = MultiHeadAttention(D_MODEL, N_HEADS, n_kv_heads=n_kv_heads).double().eval()
    with torch.no_grad():  # biases start at 0: make them count
        for p in gqa.parameters():
            if p.dim() == 1:
                p.normal_()
    return gqa


def loop_reference(gqa, query, key, value, mask=None, order="blocked"):
    """Head by head, as the paper writes it: head r uses key/value head r // group
    ("blocked") or r % n_kv_heads ("interleaved", the wrong pairing)."""
    d_k, n_kv = gqa.d_k, gqa.n_kv_heads
    q, k, v = gqa.w_q(query), gqa.w_k(key), gqa.w_v(value)  # (B, T, n d_k)
    heads = []
    for r in range(gqa.n_heads):
        g = r // gqa.group if order == "blocked" else r % n_kv
        q_r = q[..., r * d_k:(r + 1) * d_k]  # (B, T_q, d_k)
        k_g, v_g = k[..., g * d_k:(g + 1) * d_k], v[..., g * d_k:(g + 1) * d_k]
        e = q_r @ k_g.transpose(-2, -1) / d_k ** 0.5  # (B, T_q, T_k)
        if mask is not None:
            e = e.masked_fill(~mask, float("-inf"))
        heads.append(torch.softmax(e, dim=-1) @ v_g)
    return gqa.w_o(torch.cat(heads, dim=-1))  # (B, T_q, d_model)


def test_repeat_kv_repeats_each_head_in_a_block_as_llama_and_pytorch_do():
    x = randn(2, 3, 5, 4)
    out = repeat_kv(x, 4)  # (B, 12, T, d_k)
    assert out.shape == (2, 12, 5, 4)
    for r in range(12):
        assert torch.equal(out[:, r], x[:, r // 4])
    assert torch.equal(out, x.repeat_interleave(4, dim=1))
    assert not torch.equal(out, x.repeat(1, 4, 1, 1))  # interleaved: head r gets r % 3
    assert torch.equal(repeat_kv(x, 1), x)


@pytest.mark.parametrize("n_kv_heads", [1, 2, 3])
@pytest.mark.parametrize("masking", ["none", "causal", "padding"])
def test_fewer_kv_heads_equal_the_loop_over_heads_and_pytorchs_grouped_attention(n_kv_heads,
                                                                                  masking):
    gqa = layer(n_kv_heads)
    x, memory = randn(2, 5, D_MODEL, seed=2), randn(2, 7, D_MODEL, seed=3)
    source, mask, heads_mask = x, None, None  # mask (B, T_q, T_k) style, heads_mask per head
    if masking == "causal":
        mask = heads_mask = torch.ones(5, 5, dtype=torch.bool).tril()  # (T_q, T_k)
    elif masking == "padding":  # cross-attention to a padded memory
        source = memory
        mask = (torch.arange(7) < torch.tensor([7, 4])[:, None])[:, None, :]  # (B, 1, T_k)
        heads_mask = mask[:, None]  # (B, 1, 1, T_k)
    out, weights = gqa(x, source, source, heads_mask)
    assert out.shape == (2, 5, D_MODEL) and weights.shape == (2, N_HEADS, 5, source.shape[1])
    torch.testing.assert_close(out, loop_reference(gqa, x, source, source, mask), **TOL64)
    # PyTorch's grouped attention on the same projections
    k, v = gqa.keys_values(source, source)  # (B, n_kv_heads, T_k, d_k)
    assert k.shape == (2, n_kv_heads, source.shape[1], 4)
    q = gqa.w_q(x).reshape(2, 5, N_HEADS, 4).transpose(1, 2)  # (B, n_heads, T_q, d_k)
    heads = F.scaled_dot_product_attention(q, k, v, attn_mask=heads_mask, enable_gqa=True)
    torch.testing.assert_close(out, gqa.w_o(heads.transpose(1, 2).reshape(2, 5, D_MODEL)),
                               **TOL64)
    if n_kv_heads not in (1, N_HEADS):  # the wrong pairing of heads is detectably different
        wrong = loop_reference(gqa, x, source, source, mask, order="interleaved")
        assert (wrong - out).abs().max() > 1e-3


def test_as_many_kv_heads_as_heads_is_multi_head_attention_ours_and_pytorchs():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D_MODEL, N_HEADS).double()
    gqa = from_multihead(mha, N_HEADS)
    assert gqa.group == 1 and gqa.w_k.weight.shape == (D_MODEL, D_MODEL)
    x = randn(3, 6, D_MODEL)
    mask = torch.ones(6, 6, dtype=torch.bool).tril()
    out, weights = gqa(x, x, x, mask)
    want, want_weights = mha(x, x, x, mask)
    assert torch.equal(out, want) and torch.equal(weights, want_weights)
    theirs = mha.to_torch()
    torch.testing.assert_close(out, theirs(x, x, x, attn_mask=~mask)[0], **TOL64)
    # the same seed draws the same layer either way
    torch.manual_seed(4)
    a = MultiHeadAttention(D_MODEL, N_HEADS)
    torch.manual_seed(4)
    b = MultiHeadAttention(D_MODEL, N_HEADS, n_kv_heads=N_HEADS)
    for p, r in zip(a.state_dict().values(), b.state_dict().values(), strict=True):
        assert torch.equal(p, r)
    # fewer key/value heads: drawn as that layer, each group keeping its first head's rows
    torch.manual_seed(4)
    c = MultiHeadAttention(D_MODEL, N_HEADS, n_kv_heads=2)
    for name in ("w_q", "w_o"):
        assert torch.equal(getattr(c, name).weight, getattr(a, name).weight)
    for name in ("w_k", "w_v"):
        rows = torch.cat([getattr(a, name).weight[0:4], getattr(a, name).weight[12:16]])
        assert torch.equal(getattr(c, name).weight, rows)
        assert getattr(c, name).out_features == 8


def test_from_multihead_averages_each_groups_key_and_value_heads():
    torch.manual_seed(0)
    mha = MultiHeadAttention(D_MODEL, N_HEADS).double()
    gqa = from_multihead(mha, 2)  # groups of 3 heads
    assert gqa.w_k.weight.shape == (8, D_MODEL) and gqa.w_v.bias.shape == (8,)
    # the multi-head layer whose heads of each group all hold the group's mean
    pooled = MultiHeadAttention(D_MODEL, N_HEADS).double()
    pooled.load_state_dict(mha.state_dict())
    with torch.no_grad():
        for name in ("w_k", "w_v"):
            w = getattr(mha, name).weight.reshape(2, 3, 4, D_MODEL)  # (n_kv, group, d_k, d)
            getattr(pooled, name).weight.copy_(w.mean(1, keepdim=True).expand(2, 3, 4, D_MODEL)
                                               .reshape(D_MODEL, D_MODEL))
            b = getattr(mha, name).bias.reshape(2, 3, 4)
            getattr(pooled, name).bias.copy_(b.mean(1, keepdim=True).expand(2, 3, 4).flatten())
    x = randn(2, 5, D_MODEL)
    torch.testing.assert_close(gqa(x, x, x)[0], pooled(x, x, x)[0], **TOL64)
    first = from_multihead(mha, 2, pool="first")
    assert torch.equal(first.w_k.weight, torch.cat([mha.w_k.weight[0:4], mha.w_k.weight[12:16]]))


def test_the_cache_holds_n_kv_heads_and_its_bytes_follow_the_arithmetic():
    assert kv_cache_bytes_per_token(**LLAMA_2_7B) == 2 * 32 * 32 * 128 * 2 == 2 ** 19  # 0.5 MiB
    assert kv_cache_bytes_per_token(**MISTRAL_7B) == 2 ** 17  # 128 KiB: 4x less
    assert kv_cache_bytes_per_token(2, 4, 12, torch.float32) == 768  # unit 06's model
    task = translation.make_task(n_train=20, n_test=5, seed=0, max_numbers=4)
    data = translation.make_batch(task.test, task.src_vocab, task.tgt_vocab)
    config = config_for(task, TransformerConfig, d_model=24, n_heads=6, d_ff=32, n_layers=3)
    measured = {}
    for n_kv in (6, 3, 1):
        torch.manual_seed(0)
        model = Transformer(replace(config, n_kv_heads=n_kv)).eval()
        caches = fill_caches(model, data.src, data.src_lengths, 9)
        assert len(caches) == 3
        for cache in caches:
            assert cache.k.shape == cache.v.shape == (5, n_kv, 9, 4)  # (B, n_kv_heads, t, d_k)
            assert cache.memory_k.shape == (5, n_kv, data.src.shape[1], 4)
        measured[n_kv] = cache_bytes(caches)
        per_token = kv_cache_bytes_per_token(3, n_kv, 4, torch.float32, n_heads=6)
        assert measured[n_kv] == {"self": 5 * 9 * per_token,
                                  "cross": 5 * data.src.shape[1] * per_token}
    assert measured[6]["self"] == 6 * measured[1]["self"] == 2 * measured[3]["self"]


def test_the_grouped_transformer_is_unit_06s_drawn_alike_with_the_decoder_sharing_heads():
    task = translation.make_task(n_train=20, n_test=5, seed=0, max_numbers=4)
    config = config_for(task, TransformerConfig, d_model=16, n_heads=4, d_ff=24)
    seed_everything(3)
    plain = Transformer(config)
    seed_everything(3)
    same = Transformer(replace(config, n_kv_heads=4))  # as many kv heads as heads
    for (name, p), r in zip(plain.state_dict().items(), same.state_dict().values(), strict=True):
        assert torch.equal(p, r), name
    seed_everything(3)
    mqa = Transformer(replace(config, n_kv_heads=1))
    assert all(layer.self_attn.n_kv_heads == layer.cross_attn.n_kv_heads == 1
               for layer in mqa.decoder)
    assert all(layer.self_attn.n_kv_heads == 4 for layer in mqa.encoder)  # never cached
    # per decoder layer, W^K and W^V of two attentions lose 3 of 4 heads: 4 (16 x 12 + 12)
    assert count_parameters(plain) - count_parameters(mqa) == 2 * 4 * (16 * 12 + 12)
    mine, theirs = mqa.state_dict(), plain.state_dict()
    assert list(mine) == list(theirs)  # the same names: a state dict maps one to one
    for name, p in mine.items():  # the same draws; the one group keeps head 0's rows 0-3
        shared = name.startswith("decoder") and (".w_k." in name or ".w_v." in name)
        assert torch.equal(p, theirs[name][:4] if shared else theirs[name]), name


def test_cached_decoding_of_a_trained_grouped_model_equals_recomputation():
    task = translation.make_task(n_train=300, n_test=40, seed=0, max_numbers=4)
    data = translation.make_batch(task.train, task.src_vocab, task.tgt_vocab)
    test = translation.make_batch(task.test, task.src_vocab, task.tgt_vocab)
    generator = seed_everything(0)
    model = Transformer(config_for(task, TransformerConfig, d_model=32, n_heads=4, d_ff=48,
                                   max_len=20, n_kv_heads=2))
    history = train(model, data, epochs=3, batch_size=32, lr=3e-3, generator=generator,
                    progress=False)
    assert history.loss[-1] < 0.8 * history.loss[0]
    with_cache = model.translate(test.src, test.src_lengths, use_cache=True)
    without = model.translate(test.src, test.src_lengths, use_cache=False)
    assert torch.equal(with_cache, without)
    assert (with_cache != 0).sum(1).unique().numel() > 1  # outputs of several lengths


@pytest.mark.parametrize(("call", "message"), [
    (lambda: MultiHeadAttention(24, 6, n_kv_heads=4), r"^n_kv_heads = 4 must divide n_heads = 6"),
    (lambda: MultiHeadAttention(24, 6, n_kv_heads=0), r"^n_kv_heads must be a positive int"),
    (lambda: MultiHeadAttention(26, 4, n_kv_heads=2),
     r"d_model = 26 must be divisible by n_heads = 4"),
    (lambda: layer(2).attend(randn(1, 3, 24), randn(1, 6, 3, 4), randn(1, 6, 3, 4)),
     r"k must have shape \(B, n_kv_heads = 2, T_k, d_k = 4\); got \(1, 6, 3, 4\)"),
    (lambda: kv_cache_bytes_per_token(32, 5, 128, n_heads=32), r"^n_kv_heads = 5 must divide"),
    (lambda: repeat_kv(randn(2, 3, 4), 2), r"x must have 4 dimension"),
    (lambda: from_multihead(layer(2), 1), r"mha must be multi-head .* n_kv_heads = 2 among"),
    (lambda: from_multihead(nn.Linear(24, 24), 1), r"mha must be a multihead.MultiHeadAttention"),
    (lambda: from_multihead(MultiHeadAttention(24, 6), 4), r"^n_kv_heads = 4 must divide"),
    (lambda: from_multihead(MultiHeadAttention(24, 6), 2, pool="max"),
     r"pool must be 'mean' or 'first'"),
    (lambda: replace(TransformerConfig(9, 9, d_model=16, n_heads=4), n_kv_heads=3),
     r"^n_kv_heads = 3 must divide n_heads = 4"),
    (lambda: layer(2).to_torch(), r"only plain multi-head attention .* \{'n_kv_heads': 2\}"),
    (lambda: cache_bytes([1]), r"caches must be a list of transformer.KVCache"),
])
def test_bad_arguments_fail_with_a_message_naming_what_was_expected(call, message):
    with pytest.raises(ValueError, match=message):
        call()
