"""course_utils.long_inputs and the layers that use it (multihead.MultiHeadAttention with a
window or a feature map): the sliding-window mask and its receptive field (against the
reachability of the masks and the gradients of a real stack), window attention against
torch.nn.MultiheadAttention under the band mask, linear attention against its own quadratic
form (float64 atol = 1e-12, rtol = 1e-10; float32 atol = rtol = 1e-5), its causal form with
the queries at the end of the keys, O(T) in memory, unit 05's pointer model with each
attention chosen by its config, and the pointer task's far pointers."""

from __future__ import annotations

import hashlib
import itertools

import pytest
import torch

from course_utils import seed_everything
from course_utils.attention_cost import peak_memory
from course_utils.data.pointer import make_pointer_data
from course_utils.long_inputs import (
    elu_feature_map,
    linear_attention,
    linear_attention_weights,
    receptive_field,
    sliding_window_mask,
)
from course_utils.multihead import MultiHeadAttention, split_heads
from course_utils.pointer_model import (
    PointerConfig,
    PointerModel,
    config_for,
    hit_rate,
    pointer_weights,
)
from course_utils.transformer import causal_mask

pytestmark = pytest.mark.usefixtures("one_thread")  # small tensors: one thread is faster

TOL = {torch.float64: {"atol": 1e-12, "rtol": 1e-10},
       torch.float32: {"atol": 1e-5, "rtol": 1e-5}}


def randn(*shape, seed=0, dtype=torch.float64):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- the window

def test_the_band_is_what_its_definition_says():
    for T, window, causal in itertools.product([1, 5, 9], [0, 1, 3, 20], [True, False]):
        mask = sliding_window_mask(T, window, causal)
        assert mask.shape == (T, T) and mask.dtype == torch.bool
        for i, j in itertools.product(range(T), repeat=2):
            allowed = 0 <= i - j <= window if causal else abs(i - j) <= window
            assert bool(mask[i, j]) == allowed
    assert torch.equal(sliding_window_mask(6, 5), causal_mask(6))  # window >= T - 1: causal
    assert sliding_window_mask(6, 5, causal=False).all()
    assert torch.equal(sliding_window_mask(4, 0, causal=False), torch.eye(4, dtype=torch.bool))


@pytest.mark.parametrize("causal", [True, False])
def test_the_receptive_field_is_the_reach_of_the_stacked_masks(causal):
    T = 40
    for window, n_layers in itertools.product([1, 2, 3], [1, 2, 3, 4]):
        band = sliding_window_mask(T, window, causal).long()
        reach = band
        for _ in range(n_layers - 1):
            reach = (reach @ band).clamp_max(1)  # i reaches j in one more layer
        assert int(reach[T // 2].sum()) == receptive_field(window, n_layers, causal)


def test_the_receptive_field_of_a_real_stack_read_from_its_gradients():
    torch.manual_seed(0)
    layers = [MultiHeadAttention(8, 2, window=2, causal=True).double() for _ in range(3)]
    x = randn(1, 20, 8, seed=1).requires_grad_()
    h = x
    for layer in layers:
        h = h + layer(h, h, h)[0]
    h[0, 15].sum().backward()
    depends = x.grad[0].abs().sum(-1) > 0  # (T,): which inputs position 15 depends on
    assert depends.nonzero().flatten().tolist() == list(range(15 - 3 * 2, 16))
    assert int(depends.sum()) == receptive_field(2, 3)


def test_window_attention_is_multihead_attention_under_the_band_mask_ours_and_pytorchs():
    torch.manual_seed(0)
    mine = MultiHeadAttention(12, 3, window=2).double()
    full = MultiHeadAttention(12, 3).double()
    full.load_state_dict(mine.state_dict())
    x = randn(2, 9, 12)
    band = sliding_window_mask(9, 2, causal=False)
    out, weights = mine(x, x, x)
    want, want_weights = full(x, x, x, band)
    assert torch.equal(out, want) and torch.equal(weights, want_weights)
    assert (weights[..., ~band] == 0).all()
    theirs = full.to_torch()
    torch.testing.assert_close(out, theirs(x, x, x, attn_mask=~band)[0], **TOL[torch.float64])
    pad = torch.ones(2, 1, 1, 9, dtype=torch.bool)
    pad[1, ..., 6:] = False
    torch.testing.assert_close(mine(x, x, x, pad)[0], full(x, x, x, band & pad)[0])


# ----------------------------------------------------------------------------- linear attention

def quadratic(q, k, v, causal=False, pad=None):
    """The definition, written out: alpha_ij = phi(q_i).phi(k_j) / sum_j' (...), out = alpha v."""
    phi_q, phi_k = elu_feature_map(q), elu_feature_map(k)
    scores = phi_q @ phi_k.transpose(-2, -1)  # (B, n_heads, T_q, T_k)
    allowed = torch.ones(scores.shape[-2:], dtype=torch.bool)
    if causal:
        allowed = allowed.tril()
    if pad is not None:
        allowed = allowed & pad[:, None, None, :]
    scores = scores * allowed
    return (scores / (scores.sum(-1, keepdim=True) + 1e-6)) @ v


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("T", [1, 7, 16, 37])
@pytest.mark.parametrize("masking", ["none", "causal", "padding", "both"])
def test_linear_attention_equals_its_quadratic_form_for_every_chunk_size(dtype, T, masking):
    q, k, v = randn(2, 3, T, 6, seed=1, dtype=dtype), randn(2, 3, T, 6, seed=2, dtype=dtype), \
        randn(2, 3, T, 5, seed=3, dtype=dtype)
    causal = masking in ("causal", "both")
    pad = None
    if masking in ("padding", "both"):
        pad = torch.arange(T)[None] < torch.tensor([T, max(1, T - 4)])[:, None]  # (B, T_k)
    want = quadratic(q, k, v, causal, pad)
    for chunk in (1, 4, 16, 64):
        out = linear_attention(q, k, v, causal, pad, chunk_size=chunk)
        assert out.shape == (2, 3, T, 5) and out.dtype == dtype
        torch.testing.assert_close(out, want, **TOL[dtype])
    weights = linear_attention_weights(q, k, causal, pad)
    torch.testing.assert_close(weights @ v, want, **TOL[dtype])
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, T, dtype=dtype),
                               atol=1e-5, rtol=1e-5)


def test_causal_linear_attention_at_position_i_is_the_plain_one_on_the_prefix():
    q, k, v = randn(1, 2, 12, 4, seed=1), randn(1, 2, 12, 4, seed=2), randn(1, 2, 12, 3, seed=3)
    causal = linear_attention(q, k, v, causal=True, chunk_size=5)
    for i in range(12):
        prefix = linear_attention(q[..., i:i + 1, :], k[..., :i + 1, :], v[..., :i + 1, :])
        torch.testing.assert_close(causal[..., i:i + 1, :], prefix, **TOL[torch.float64])


@pytest.mark.parametrize("T_q", [1, 4, 12])
def test_causal_queries_stand_at_the_end_of_the_keys_as_a_decoders_newest_do(T_q):
    """The last T_q queries against all 12 keys (a cached step reads the earlier keys too):
    the rows of the whole causal attention that belong to them, in both forms."""
    q, k, v = randn(2, 2, 12, 4, seed=1), randn(2, 2, 12, 4, seed=2), randn(2, 2, 12, 3, seed=3)
    whole = linear_attention(q, k, v, causal=True)
    for chunk in (1, 3, 64):
        out = linear_attention(q[..., 12 - T_q:, :], k, v, causal=True, chunk_size=chunk)
        torch.testing.assert_close(out, whole[..., 12 - T_q:, :], **TOL[torch.float64])
    weights = linear_attention_weights(q[..., 12 - T_q:, :], k, causal=True)
    want = linear_attention_weights(q, k, causal=True)[..., 12 - T_q:, :]
    torch.testing.assert_close(weights, want, **TOL[torch.float64])
    assert (weights[..., 0, 12 - T_q + 1:] == 0).all()  # the first of them sees no later key


def test_the_quadratic_form_takes_any_mask_and_zeroes_what_it_leaves_out():
    q, k = randn(2, 3, 5, 4, seed=1), randn(2, 3, 7, 4, seed=2)
    mask = randn(2, 1, 5, 7, seed=3) > 0  # any pattern, the same for every head
    mask[..., 0] = True  # every query keeps a key
    weights = linear_attention_weights(q, k, mask=mask)
    scores = elu_feature_map(q) @ elu_feature_map(k).transpose(-2, -1) * mask
    torch.testing.assert_close(weights, scores / (scores.sum(-1, keepdim=True) + 1e-6),
                               **TOL[torch.float64])
    assert (weights.masked_select(~mask.expand(2, 3, 5, 7)) == 0).all()


def test_cross_attention_with_another_length_and_another_feature_map():
    q, k, v = randn(2, 2, 3, 4, seed=1), randn(2, 2, 8, 4, seed=2), randn(2, 2, 8, 6, seed=3)
    out = linear_attention(q, k, v, feature_map=torch.exp)
    scores = torch.exp(q) @ torch.exp(k).transpose(-2, -1)  # (B, n_heads, T_q, T_k)
    torch.testing.assert_close(out, scores / (scores.sum(-1, keepdim=True) + 1e-6) @ v)


def test_linear_attention_memory_grows_linearly_in_t():
    peaks = []
    for T in (512, 1024, 2048):
        q = torch.randn(1, 2, T, 16)
        with torch.no_grad():
            peaks.append(peak_memory(linear_attention, q, q, q, causal=True)[1])
    for small, large in itertools.pairwise(peaks):
        assert 1.7 < large / small < 2.3  # T doubled: twice the memory, not four times
    assert peaks[-1] < 2048 * 2048 * 2 * 4 / 8  # far below one (B, n_heads, T, T) matrix


def test_the_linear_attention_layer_returns_the_quadratic_weights_to_look_at():
    torch.manual_seed(0)
    mine = MultiHeadAttention(12, 3, feature_map=elu_feature_map).double()
    x = randn(2, 7, 12)
    out, weights = mine(x, x, x)
    assert weights.shape == (2, 3, 7, 7) and not weights.requires_grad
    q = mine.w_q(x).reshape(2, 7, 3, 4).transpose(1, 2)  # (B, n_heads, T, d_k)
    k, v = mine.keys_values(x, x)
    torch.testing.assert_close(weights, linear_attention_weights(q, k))
    heads = (weights @ v).transpose(1, 2).reshape(2, 7, 12)  # (B, T, d_model)
    torch.testing.assert_close(out, mine.w_o(heads), **TOL[torch.float64])
    causal = MultiHeadAttention(12, 3, causal=True, feature_map=elu_feature_map).double()
    causal.load_state_dict(mine.state_dict())
    changed = x.clone()
    changed[:, 4:] += 1.0
    before, after = causal(x, x, x)[0], causal(changed, changed, changed)[0]
    torch.testing.assert_close(before[:, :4], after[:, :4])  # no position reads a later one
    assert not torch.allclose(before[:, 4:], after[:, 4:])


# ----------------------------------------------------------------------------- unit 05's task

def test_the_pointer_datas_default_rows_are_unchanged_and_far_pointers_are_far():
    for args, digest in (((4000, 16, 24, 1), "31a104cdc93e6ce9"),  # lecture 05's data
                         ((1000, 16, 24, 2), "b8149d04daec99a5")):
        ids = make_pointer_data(*args).ids
        assert hashlib.sha256(ids.numpy().tobytes()).hexdigest()[:16] == digest
        assert torch.equal(make_pointer_data(*args, min_distance=1).ids, ids)
    far = make_pointer_data(2000, 24, 32, seed=2, min_distance=7)
    distance = 24 - far.target  # the pointer stands at position 24
    assert distance.min() == 7 and distance.max() == 24
    assert torch.equal(far.answer, far.ids[torch.arange(2000), far.target])
    assert torch.equal(make_pointer_data(50, 8, 8, min_distance=8).target, torch.zeros(50).long())
    with pytest.raises(ValueError, match=r"^min_distance must be an int in \[1, 8\]; got 9"):
        make_pointer_data(5, 8, 8, min_distance=9)


def test_pointer_models_with_each_attention_start_alike_and_differ_in_what_they_see():
    data = make_pointer_data(64, 24, 32, seed=1)
    config = config_for(data, d_model=16, n_heads=2, d_ff=32)
    variants = {"full": {}, "window": {"window": 6}, "linear": {"feature_map": elu_feature_map}}
    models = {}
    for attention, fields in variants.items():
        seed_everything(0)
        models[attention] = PointerModel(config_for(data, d_model=16, n_heads=2, d_ff=32,
                                                    **fields))
    seed_everything(0)
    unit05 = PointerModel(config)
    for model in models.values():  # the same weights, whatever the attention
        for p, r in zip(model.state_dict().values(), unit05.state_dict().values(), strict=True):
            assert torch.equal(p, r)
    assert models["window"].blocks[0].attention.window == 6
    assert models["full"].blocks[0].attention.window is None
    with torch.no_grad():
        assert torch.equal(models["full"](data.ids)[0], unit05(data.ids)[0])
        _, weights = models["window"](data.ids)  # (N, n_layers, n_heads, T, T)
        row = pointer_weights(weights)  # (N, T): the pointer, at position 24, over positions
        assert (row[:, :24 - 6] == 0).all() and (row[:, 24 - 6:] > 0).all()
        far = make_pointer_data(200, 24, 32, seed=2, min_distance=7)
        _, weights = models["window"](far.ids)
        assert hit_rate(pointer_weights(weights), far.target) == 0.0  # out of its reach
        logits, weights = models["linear"](data.ids)
        assert logits.shape == (64, 32) and weights.shape == (64, 1, 2, 25, 25)


def test_a_linear_pointer_model_takes_another_feature_map():
    data = make_pointer_data(8, 24, 32, seed=1)
    seed_everything(0)
    default = PointerModel(config_for(data, d_model=16, n_heads=2, d_ff=32, n_layers=2,
                                      feature_map=elu_feature_map))
    seed_everything(0)
    exp = PointerModel(config_for(data, d_model=16, n_heads=2, d_ff=32, n_layers=2,
                                  feature_map=torch.exp))
    assert [b.attention.feature_map for b in default.blocks] == [elu_feature_map] * 2
    assert [b.attention.feature_map for b in exp.blocks] == [torch.exp] * 2
    with torch.no_grad():
        _, weights = exp(data.ids)  # (N, n_layers, n_heads, T, T)
        q = split_heads(exp.blocks[0].attention.w_q(exp.blocks[0].norm_attention(
            exp.embed(data.ids))), 2)  # (N, n_heads, T, d_k)
        k = split_heads(exp.blocks[0].attention.w_k(exp.blocks[0].norm_attention(
            exp.embed(data.ids))), 2)
        expected = linear_attention_weights(q, k, feature_map=torch.exp)
        assert torch.allclose(weights[:, 0], expected, atol=1e-6)
        assert not torch.allclose(default(data.ids)[1][:, 0], expected, atol=1e-3)


@pytest.mark.parametrize(("call", "message"), [
    (lambda: sliding_window_mask(5, -1), r"^window must be an int >= 0; got -1"),
    (lambda: sliding_window_mask(0, 2), r"^T must be a positive int"),
    (lambda: receptive_field(2, 0), r"^n_layers must be a positive int"),
    (lambda: MultiHeadAttention(8, 2, window=1).double()(randn(1, 4, 8), randn(1, 3, 8),
                                                          randn(1, 3, 8)),
     r"a window or causal=True reads the queries as the last T_q of the T_k positions: "
     r"T_q = 4 must not exceed T_k = 3"),
    (lambda: linear_attention(randn(1, 1, 5, 4), randn(1, 1, 3, 4), randn(1, 1, 3, 4),
                              causal=True), r"causal linear attention reads the queries as the "
                                            r"last T_q of the T_k positions"),
    (lambda: linear_attention(randn(1, 1, 3, 4), randn(1, 1, 3, 4), randn(1, 1, 3, 4),
                              feature_map=lambda x: x.sum(-1)), r"feature_map must keep the"),
    (lambda: linear_attention(randn(1, 1, 3, 4), randn(1, 1, 3, 4), randn(1, 1, 2, 4)),
     r"every key needs a value"),
    (lambda: linear_attention(randn(1, 1, 3, 4), randn(1, 1, 3, 4), randn(1, 1, 3, 4),
                              key_padding_mask=torch.ones(1, 4, dtype=torch.bool)),
     r"key_padding_mask must have shape \(1, 3\)"),
    (lambda: linear_attention_weights(randn(1, 1, 3, 4), randn(1, 1, 3, 4),
                                      mask=torch.ones(3, 4, dtype=torch.bool)),
     r"mask of shape \(3, 4\) does not broadcast to the scores \(1, 1, 3, 3\)"),
    (lambda: config_for(make_pointer_data(4), window=-1), r"^window must be an int >= 0"),
    (lambda: config_for(make_pointer_data(4), feature_map="elu"),
     r"^feature_map must be None \(softmax attention\) or a function of a tensor"),
    (lambda: config_for(make_pointer_data(4), window=2, feature_map=torch.exp),
     r"^a window masks softmax scores; linear attention \(feature_map\) takes none"),
    (lambda: PointerConfig(8, 4, 5, n_heads=2, n_kv_heads=3),
     r"^n_kv_heads = 3 must divide n_heads = 2"),
])
def test_bad_arguments_fail_with_a_message_naming_what_was_expected(call, message):
    with pytest.raises(ValueError, match=message):
        call()
