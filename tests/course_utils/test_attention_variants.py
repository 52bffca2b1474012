"""Unit 09's attention variants, chosen by a config and built in at construction
(multihead.MultiHeadAttention's n_kv_heads, window, causal and feature_map; the fields of
transformer.TransformerConfig and pointer_model.PointerConfig), on every path:

* `forward` against the matrix form written out head by head with the variant's sharing
  (query head r reads key/value head r // group) and its mask built pair by pair (float64,
  atol 1e-12);
* the cached path (`keys_values` of the newest positions appended to a cache, `attend` of
  their queries against all of it) equal to `forward`, one position at a time and in chunks,
  on sequences longer than the window;
* the Transformer's cached decoding equal to teacher forcing and to recomputation for every
  variant, a window of 2 over 12 decoded positions included, and that window still there on
  the cached path (from the same memory, the same weights without a window give the same
  logits at positions 0-2 and others after them);
* training: a gradient step through each variant's Transformer.
"""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from course_utils import seed_everything
from course_utils.data import translation
from course_utils.data.vocab import START_ID
from course_utils.long_inputs import elu_feature_map
from course_utils.multihead import MultiHeadAttention
from course_utils.pointer_model import PointerConfig
from course_utils.transformer import KVCache, Transformer, TransformerConfig
from course_utils.translator import config_for

pytestmark = pytest.mark.usefixtures("one_thread")  # small tensors: one thread is faster

D_MODEL, N_HEADS = 16, 4  # d_k = 4
TOL64 = {"atol": 1e-12, "rtol": 1e-10}
VARIANTS = {  # name -> the fields that choose it
    "multi-head": {},
    "grouped-query": {"n_kv_heads": 2},
    "multi-query": {"n_kv_heads": 1},
    "window": {"window": 2},
    "grouped-query, window": {"n_kv_heads": 2, "window": 2},
    "linear": {"feature_map": elu_feature_map},
    "multi-query, linear exp": {"n_kv_heads": 1, "feature_map": torch.exp},
}


def randn(*shape, seed=1):
    return torch.randn(*shape, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))


def layer_of(variant, causal=False, seed=0):
    torch.manual_seed(seed)
    layer = MultiHeadAttention(D_MODEL, N_HEADS, causal=causal, **VARIANTS[variant]).double()
    with torch.no_grad():  # biases start at 0: make them count
        for p in layer.parameters():
            if p.dim() == 1:
                p.normal_()
    return layer


def allowed_pairs(T_q, T_k, window=None, causal=False):
    """(T_q, T_k) bool, pair by pair: query i stands at t = T_k - T_q + i and may read key u
    when |t - u| <= window (if any) and u <= t (if causal)."""
    allowed = torch.zeros(T_q, T_k, dtype=torch.bool)
    for i in range(T_q):
        t = T_k - T_q + i
        for u in range(T_k):
            allowed[i, u] = (window is None or abs(t - u) <= window) and (not causal or u <= t)
    return allowed


def matrix_form(layer, query, key, value, allowed):
    """The variant written out: head r of the queries against key/value head r // group;
    softmax(q k^T / sqrt(d_k)) or phi(q) phi(k)^T normalised (+ 1e-6), a pair not allowed
    weighing 0. -> (output (B, T_q, d_model), weights (B, n_heads, T_q, T_k))."""
    q, k, v = layer.w_q(query), layer.w_k(key), layer.w_v(value)
    d_k, group = D_MODEL // N_HEADS, N_HEADS // layer.n_kv_heads
    heads, weights = [], []
    for r in range(N_HEADS):
        g = r // group
        q_r = q[..., r * d_k:(r + 1) * d_k]  # (B, T_q, d_k)
        k_g, v_g = k[..., g * d_k:(g + 1) * d_k], v[..., g * d_k:(g + 1) * d_k]
        if layer.feature_map is None:
            e = (q_r @ k_g.transpose(-2, -1) / math.sqrt(d_k)).masked_fill(~allowed, -math.inf)
            w = torch.softmax(e, dim=-1).nan_to_num(0.0)  # (B, T_q, T_k); no key: zeros
        else:
            s = layer.feature_map(q_r) @ layer.feature_map(k_g).transpose(-2, -1) * allowed
            w = s / (s.sum(-1, keepdim=True) + 1e-6)
        heads.append(w @ v_g)
        weights.append(w)
    return layer.w_o(torch.cat(heads, dim=-1)), torch.stack(weights, dim=1)


# ----------------------------------------------------------------------------- one layer

@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_forward_is_the_matrix_form_with_the_variants_sharing_and_mask(variant, causal):
    layer = layer_of(variant, causal)
    x = randn(2, 9, D_MODEL, seed=2)
    pad = torch.ones(2, 1, 1, 9, dtype=torch.bool)
    pad[1, ..., 6:] = False  # the second row's last three keys: position 8 of the window
    # of 2 has no key left, and gets zero weights (and the output bias alone)
    window = VARIANTS[variant].get("window")
    for mask in (None, pad):
        out, weights = layer(x, x, x, mask)
        allowed = allowed_pairs(9, 9, window, causal)  # (T_q, T_k)
        if mask is not None:
            allowed = allowed & mask[:, 0]  # (B, T_q, T_k)
        want, want_weights = matrix_form(layer, x, x, x, allowed)
        torch.testing.assert_close(out, want, **TOL64)
        torch.testing.assert_close(weights, want_weights, **TOL64)
    if window is not None:  # the band: nothing beyond the window
        assert (weights[..., ~allowed_pairs(9, 9, window)] == 0).all()


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_the_cached_path_gives_forwards_outputs_one_position_or_a_chunk_at_a_time(variant):
    """A decoder's causal self-attention over 12 positions (window 2: the later positions have
    keys out of reach): the newest queries against every key so far, as `DecoderLayer` calls
    the layer with a cache, equal the whole sequence's rows."""
    layer = layer_of(variant, causal=True)
    x = randn(2, 12, D_MODEL, seed=3)
    whole = layer(x, x, x)[0]  # (B, T, d_model)
    for size in (1, 5):
        cache, outputs = KVCache(), []
        for start in range(0, 12, size):
            new = x[:, start:start + size]  # (B, T_new, d_model)
            k, v = cache.append(*layer.keys_values(new, new))  # (B, n_kv_heads, t, d_k)
            assert k.shape == (2, layer.n_kv_heads, min(start + size, 12), 4)
            outputs.append(layer.attend(new, k, v)[0])
        torch.testing.assert_close(torch.cat(outputs, dim=1), whole, **TOL64)


def test_each_variant_computes_something_else_from_the_same_draws():
    x = randn(2, 9, D_MODEL, seed=4)
    outputs = {name: layer_of(name, causal=True)(x, x, x)[0] for name in VARIANTS}
    for name in VARIANTS:  # the same weights drawn: each variant computes something else
        if name != "multi-head":
            assert (outputs[name] - outputs["multi-head"]).abs().max() > 1e-3, name
    # the first three positions see every earlier key within the window: as multi-head there
    torch.testing.assert_close(outputs["window"][:, :3], outputs["multi-head"][:, :3], **TOL64)


# ----------------------------------------------------------------------------- the Transformer

@pytest.fixture(scope="module")
def task():
    return translation.make_task(n_train=40, n_test=6, seed=0, max_numbers=4)


def transformer(task, variant, **fields):
    seed_everything(0)
    config = config_for(task, TransformerConfig, d_model=D_MODEL, n_heads=N_HEADS, d_ff=24,
                        n_layers=2, max_len=14, norm_first=True, **{**VARIANTS[variant], **fields})
    return Transformer(config).double().eval()


def cached_logits(model, memory, src_mask, tgt_in):
    """Teacher forcing through `step` with the cache: feed tgt_in one token at a time;
    -> the logits of every step, (B, T, n_vocab)."""
    state = {"memory": memory, "src_mask": src_mask, "cache": [KVCache() for _ in model.decoder],
             "prefix": torch.empty(len(tgt_in), 0, dtype=torch.long)}
    logits = []
    for t in range(tgt_in.shape[1]):
        step_logits, state = model.step(tgt_in[:, t], state)  # (B, n_vocab)
        logits.append(step_logits)
    return torch.stack(logits, dim=1)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_cached_decoding_equals_recomputation_for_every_variant(task, variant):
    model = transformer(task, variant)
    fields = VARIANTS[variant]
    for layer in model.decoder:  # built in: every decoder layer reads the config
        assert layer.self_attn.n_kv_heads == layer.cross_attn.n_kv_heads \
            == fields.get("n_kv_heads", N_HEADS)
        assert layer.self_attn.window == fields.get("window")
        assert layer.self_attn.feature_map is fields.get("feature_map")
        assert layer.cross_attn.window is None and layer.cross_attn.feature_map is None
    data = translation.make_batch(task.test, task.src_vocab, task.tgt_vocab)
    with_cache = model.translate(data.src, data.src_lengths, use_cache=True, max_len=12)
    without = model.translate(data.src, data.src_lengths, use_cache=False, max_len=12)
    assert torch.equal(with_cache, without) and with_cache.shape[1] == 12
    # <start> and the first 11 tokens decoded: 12 positions, longer than the window of 2
    tgt_in = torch.cat([torch.full((len(data), 1), START_ID), with_cache[:, :-1]], dim=1)
    with torch.no_grad():
        memory, src_mask = model.encode(data.src, data.src_lengths)
        forced = model.decode(tgt_in, memory, src_mask)  # (B, 12, n_vocab)
        stepped = cached_logits(model, memory, src_mask, tgt_in)
    torch.testing.assert_close(stepped, forced, **TOL64)
    if "window" in fields:  # the decoder's window acts on the cached path too
        full = transformer(task, variant, window=None)
        full.load_state_dict(model.state_dict())  # the same weights, the same parameter names
        with torch.no_grad():
            unbanded = cached_logits(full, memory, src_mask, tgt_in)  # the same memory
        torch.testing.assert_close(unbanded[:, :3], stepped[:, :3], **TOL64)  # all in reach
        assert (unbanded[:, 3:] - stepped[:, 3:]).abs().amax(dim=(0, 2)).min() > 1e-4


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_each_variant_trains_through_the_config_built_layers(task, variant):
    model = transformer(task, variant).float().train()
    data = translation.make_batch(task.train[:16], task.src_vocab, task.tgt_vocab)
    loss = model.loss(data.src, data.src_lengths, data.tgt)
    loss.backward()
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    assert all(p.grad.abs().sum() > 0 for name, p in model.named_parameters()
               if "self_attn.w_k" in name)


def test_the_config_refuses_a_variant_that_makes_no_attention(task):
    config = config_for(task, TransformerConfig, d_model=D_MODEL, n_heads=N_HEADS)
    for fields, message in (({"n_kv_heads": 3}, r"^n_kv_heads = 3 must divide n_heads = 4"),
                            ({"window": -1}, r"^window must be an int >= 0; got -1"),
                            ({"feature_map": 2}, r"^feature_map must be None \(softmax"),
                            ({"window": 2, "feature_map": torch.exp},
                             r"^a window masks softmax scores")):
        with pytest.raises(ValueError, match=message):
            replace(config, **fields)
    with pytest.raises(ValueError, match=r"^causal must be a bool"):
        MultiHeadAttention(D_MODEL, N_HEADS, causal=1)


def test_a_config_prints_the_variant_only_where_one_is_chosen(task):
    plain = config_for(task, TransformerConfig, d_model=D_MODEL, n_heads=N_HEADS)
    assert repr(plain).endswith("max_len=40, n_positions=128)")  # as unit 06 prints it
    for name in ("n_kv_heads", "window", "feature_map"):
        assert name not in repr(plain)
    grouped = replace(plain, n_kv_heads=2, window=3)
    assert repr(grouped).endswith("n_positions=128, n_kv_heads=2, window=3)")
    pointer = PointerConfig(10, 4, 8, feature_map=torch.exp)
    assert repr(pointer) == ("PointerConfig(vocab_size=10, n_symbols=4, n_positions=8, d_model=32, "
                             "n_heads=2, d_ff=64, n_layers=1, positions='sinusoidal', "
                             f"feature_map={torch.exp!r})")
