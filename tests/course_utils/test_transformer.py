"""course_utils.transformer: masks, layers equal to PyTorch's with copied weights (both norm
placements), the model, greedy decoding, and the key/value cache equal to recomputation."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from course_utils import seed_everything
from course_utils.data import translation
from course_utils.data.vocab import END_ID, PAD_ID, START_ID
from course_utils.transformer import (
    DecoderLayer,
    EncoderLayer,
    KVCache,
    Transformer,
    TransformerConfig,
    causal_mask,
    padding_mask,
    padding_mask_from_ids,
)
from course_utils.translator import config_for, evaluate, train

D, HEADS, D_FF = 16, 4, 24


def randn(*shape, dtype=torch.float32, seed=1):
    return torch.randn(*shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))


def nonzero_biases(layer):
    """PyTorch starts attention biases at 0 and LayerNorm at (1, 0): make every weight count."""
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for name, p in layer.named_parameters():
            if "bias" in name or "norm" in name:
                p.add_(0.3 * torch.randn(p.shape, generator=gen, dtype=p.dtype))
    return layer


# ----------------------------------------------------------------------------- masks

def test_causal_mask_is_the_lower_triangle_with_the_diagonal():
    m = causal_mask(4)
    assert m.dtype == torch.bool and m.shape == (4, 4)
    for i in range(4):
        for j in range(4):
            assert bool(m[i, j]) == (j <= i)   # itself and earlier, never later


def test_causal_mask_of_one_position_lets_it_see_itself():
    assert causal_mask(1).tolist() == [[True]]


def test_padding_masks_from_lengths_and_from_ids_agree():
    lengths = torch.tensor([3, 1, 4])
    m = padding_mask(lengths)
    assert m.tolist() == [[True, True, True, False], [True, False, False, False], [True] * 4]
    assert padding_mask(lengths, 6).shape == (3, 6)
    ids = torch.tensor([[5, 6, 7, PAD_ID], [5, PAD_ID, PAD_ID, PAD_ID], [5, 6, 7, 8]])
    assert torch.equal(padding_mask_from_ids(ids), m)


@pytest.mark.parametrize("call, message", [
    (lambda: causal_mask(0), "T"),
    (lambda: causal_mask(2.0), "T"),
    (lambda: padding_mask(torch.tensor([2, 0])), "at least 1"),
    (lambda: padding_mask(torch.tensor([2, 5]), 4), "longest"),
    (lambda: padding_mask(torch.tensor([[2]])), "lengths"),
    (lambda: padding_mask(torch.tensor([2.0])), "lengths"),
    (lambda: padding_mask_from_ids(torch.tensor([1, 2])), "(B, T)"),
])
def test_bad_mask_arguments_raise(call, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        call()


# ----------------------------------------------------------------------------- layers

def keep_mask(lengths, t):
    return padding_mask(torch.tensor(lengths), t)[:, None, None, :]   # (B, 1, 1, T)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch, dtype, tol", [(1, torch.float32, 1e-5), (3, torch.float32, 1e-5),
                                               (3, torch.float64, 1e-12)])
def test_encoder_layer_equals_pytorchs(norm_first, batch, dtype, tol):
    torch.manual_seed(0)
    theirs = nonzero_biases(nn.TransformerEncoderLayer(
        D, HEADS, D_FF, dropout=0.0, batch_first=True, norm_first=norm_first, dtype=dtype))
    mine = EncoderLayer.from_torch(theirs)
    assert mine.norm_first == norm_first
    x = randn(batch, 6, D, dtype=dtype)
    lengths = [6, 4, 1][:batch]
    out, weights = mine(x, keep_mask(lengths, 6))
    want = theirs(x, src_key_padding_mask=~padding_mask(torch.tensor(lengths), 6))
    assert out.shape == (batch, 6, D) and weights.shape == (batch, HEADS, 6, 6)
    torch.testing.assert_close(out, want, atol=tol, rtol=tol)
    assert torch.all(weights[:, :, :, 1:].sum(-1) >= 0)
    for b, n in enumerate(lengths):   # no weight on padding
        assert torch.all(weights[b, :, :, n:] == 0)


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("batch, t, s, dtype, tol", [
    (1, 4, 4, torch.float32, 1e-5), (3, 4, 7, torch.float32, 1e-5),
    (3, 5, 3, torch.float64, 1e-12)])
def test_decoder_layer_equals_pytorchs(norm_first, batch, t, s, dtype, tol):
    torch.manual_seed(0)
    theirs = nonzero_biases(nn.TransformerDecoderLayer(
        D, HEADS, D_FF, dropout=0.0, batch_first=True, norm_first=norm_first, dtype=dtype))
    mine = DecoderLayer.from_torch(theirs)
    y, memory = randn(batch, t, D, dtype=dtype), randn(batch, s, D, dtype=dtype, seed=2)
    src_lengths = [s, max(1, s - 2), 1][:batch]
    tgt_lengths = [t, 2, t - 1][:batch]
    self_mask = keep_mask(tgt_lengths, t) & causal_mask(t)            # (B, 1, T, T)
    out, self_w, cross_w = mine(y, memory, self_mask, keep_mask(src_lengths, s))
    want = theirs(y, memory, tgt_mask=~causal_mask(t),
                  tgt_key_padding_mask=~padding_mask(torch.tensor(tgt_lengths), t),
                  memory_key_padding_mask=~padding_mask(torch.tensor(src_lengths), s))
    assert out.shape == (batch, t, D)
    assert self_w.shape == (batch, HEADS, t, t) and cross_w.shape == (batch, HEADS, t, s)
    torch.testing.assert_close(out, want, atol=tol, rtol=tol)
    assert torch.all(self_w.triu(1) == 0)   # nothing after the query


def test_gelu_layers_are_copied_too_and_other_activations_refused():
    theirs = nn.TransformerEncoderLayer(D, HEADS, D_FF, dropout=0.0, batch_first=True,
                                        activation="gelu")
    x = randn(2, 3, D)
    torch.testing.assert_close(EncoderLayer.from_torch(theirs)(x)[0], theirs(x))
    odd = nn.TransformerEncoderLayer(D, HEADS, D_FF, batch_first=True, activation=torch.tanh)
    with pytest.raises(ValueError, match="relu and gelu"):
        EncoderLayer.from_torch(odd)
    with pytest.raises(ValueError, match="batch_first"):
        EncoderLayer.from_torch(nn.TransformerEncoderLayer(D, HEADS, D_FF))
    with pytest.raises(TypeError, match="TransformerEncoderLayer"):
        EncoderLayer.from_torch(nn.Linear(2, 2))


def test_post_ln_output_is_normalised_and_pre_ln_output_is_not():
    x = 5 * randn(2, 5, D) + 3
    for norm_first in (False, True):
        out, _ = EncoderLayer(D, HEADS, D_FF, norm_first=norm_first)(x)
        mean, std = out.mean(-1), out.std(-1, unbiased=False)
        normalised = torch.allclose(mean, torch.zeros_like(mean), atol=1e-5) and \
            torch.allclose(std, torch.ones_like(std), atol=1e-3)
        assert normalised == (not norm_first)


def test_decoder_layer_output_at_t_does_not_depend_on_later_targets():
    layer = DecoderLayer(D, HEADS, D_FF).eval()
    y, memory = randn(2, 5, D), randn(2, 3, D, seed=2)
    changed = y.clone()
    changed[:, 3:] += 10.0
    a = layer(y, memory, causal_mask(5))[0]
    b = layer(changed, memory, causal_mask(5))[0]
    torch.testing.assert_close(a[:, :3], b[:, :3])
    assert not torch.allclose(a[:, 3:], b[:, 3:])


def test_encoder_layer_is_permutation_equivariant_without_positions():
    layer = EncoderLayer(D, HEADS, D_FF).eval()
    x = randn(2, 6, D)
    perm = torch.tensor([3, 0, 5, 1, 4, 2])
    out = layer(x)[0]
    torch.testing.assert_close(layer(x[:, perm])[0], out[:, perm], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("make, message", [
    (lambda: EncoderLayer(10, 4, 8), "divisible"),
    (lambda: DecoderLayer(16, 4, 0), "d_ff"),
    (lambda: EncoderLayer(16, 4, 8, dropout=1.5), "dropout"),
    (lambda: DecoderLayer(16, 4, 8, norm_first="yes"), "norm_first"),
    (lambda: EncoderLayer(16, 4, 8, activation="tanh"), "activation"),
    (lambda: TransformerConfig(10, 10, d_model=30, n_heads=4), "divisible"),
    (lambda: TransformerConfig(10, 10, max_len=40, n_positions=40), "n_positions"),
    (lambda: TransformerConfig(10, 0), "tgt_vocab_size"),
])
def test_bad_sizes_raise_errors_that_name_them(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_bad_layer_inputs_raise_errors_that_name_the_expected_shape():
    layer = DecoderLayer(D, HEADS, D_FF)
    y, memory = randn(2, 4, D), randn(2, 3, D)
    with pytest.raises(ValueError, match="d_model = 16"):
        layer(randn(2, 4, 8), memory)
    with pytest.raises(ValueError, match="memory"):
        layer(y, randn(3, D))
    with pytest.raises(ValueError, match="mask"):
        layer(y, memory, causal_mask(5))
    with pytest.raises(ValueError, match="mask"):
        layer(y, memory, None, torch.ones(2, 1, 1, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="batch"):
        layer(y, randn(3, 3, D))


# ----------------------------------------------------------------------------- the model

@pytest.fixture(scope="module")
def task():
    return translation.make_task(n_train=300, n_test=40, seed=0, max_numbers=4)


@pytest.fixture(scope="module")
def trained(task):
    """A small model trained a little: its greedy outputs vary in length and content."""
    data = translation.make_batch(task.train, task.src_vocab, task.tgt_vocab)
    generator = seed_everything(0)
    model = Transformer(config_for(task, TransformerConfig,
                                   d_model=32, n_heads=4, d_ff=48, n_layers=2,
                                   max_len=20))
    train(model, data, epochs=3, batch_size=32, lr=3e-3, generator=generator, progress=False)
    return model.eval()


@pytest.mark.parametrize("norm_first", [False, True])
def test_forward_shapes_and_loss(task, norm_first):
    torch.manual_seed(0)
    model = Transformer(config_for(task, TransformerConfig,
                                   d_model=16, n_heads=2, d_ff=32, n_layers=1,
                                   norm_first=norm_first))
    batch = translation.make_batch(task.train[:5], task.src_vocab, task.tgt_vocab)
    logits = model(batch.src, batch.src_lengths, batch.tgt[:, :-1])
    assert logits.shape == (5, batch.tgt.shape[1] - 1, len(task.tgt_vocab))
    loss = model.loss(batch.src, batch.src_lengths, batch.tgt)
    loss.backward()
    assert loss.dim() == 0 and torch.isfinite(loss)
    assert all(p.grad is not None for p in model.parameters())


def test_padding_does_not_change_a_sentences_logits(task):
    torch.manual_seed(0)
    model = Transformer(config_for(task, TransformerConfig, d_model=16, n_heads=2, d_ff=32)).eval()
    batch = translation.make_batch(task.train[:6], task.src_vocab, task.tgt_vocab)
    both = model(batch.src, batch.src_lengths, batch.tgt[:, :-1])
    for b in range(6):
        one = batch[torch.tensor([b])]
        alone = model(one.src, one.src_lengths, one.tgt[:, :-1])     # no padding at all
        torch.testing.assert_close(both[b, : alone.shape[1]], alone[0], atol=1e-5, rtol=1e-5)


def test_teacher_forced_logits_do_not_read_later_targets(task):
    torch.manual_seed(0)
    model = Transformer(config_for(task, TransformerConfig, d_model=16, n_heads=2, d_ff=32)).eval()
    batch = translation.make_batch(task.train[:4], task.src_vocab, task.tgt_vocab)
    tgt_in = batch.tgt[:, :-1]
    changed = tgt_in.clone()
    changed[:, 3:] = 5
    a = model(batch.src, batch.src_lengths, tgt_in)
    b = model(batch.src, batch.src_lengths, changed)
    torch.testing.assert_close(a[:, :3], b[:, :3])


def test_decode_returns_weights_per_layer(task):
    model = Transformer(config_for(task, TransformerConfig,
                                   d_model=16, n_heads=2, d_ff=32, n_layers=3)).eval()
    batch = translation.make_batch(task.train[:2], task.src_vocab, task.tgt_vocab)
    memory, src_mask, enc_w = model.encode(batch.src, batch.src_lengths, return_weights=True)
    _, w = model.decode(batch.tgt[:, :-1], memory, src_mask, return_weights=True)
    S, T = batch.src.shape[1], batch.tgt.shape[1] - 1
    assert len(enc_w) == len(w["self"]) == len(w["cross"]) == 3
    assert enc_w[0].shape == (2, 2, S, S) and w["cross"][2].shape == (2, 2, T, S)
    torch.testing.assert_close(w["cross"][0].sum(-1), torch.ones(2, 2, T))


def test_cache_gives_the_tokens_and_logits_of_recomputation(trained, task):
    data = translation.make_batch(task.test, task.src_vocab, task.tgt_vocab)
    with_cache = trained.translate(data.src, data.src_lengths, use_cache=True)
    without = trained.translate(data.src, data.src_lengths, use_cache=False)
    assert torch.equal(with_cache, without)
    lengths = (with_cache != PAD_ID).sum(1)
    assert lengths.min() < lengths.max()          # rows end at different steps
    # step by step, the logits agree to float rounding
    memory, src_mask = trained.encode(data.src, data.src_lengths)
    empty = torch.empty(len(data), 0, dtype=torch.long)
    states = [{"memory": memory, "src_mask": src_mask, "prefix": empty, "cache": cache}
              for cache in (None, [KVCache() for _ in trained.decoder])]
    y = torch.full((len(data),), START_ID)
    for _ in range(8):
        (a, states[0]), (b, states[1]) = (trained.step(y, s) for s in states)
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
        y = a.argmax(-1)
    assert all(len(c) == 8 for c in states[1]["cache"])   # one key per step, not two


def test_translate_stops_each_row_at_its_end_and_pads_after(trained, task):
    data = translation.make_batch(task.test[:10], task.src_vocab, task.tgt_vocab)
    ids = trained.translate(data.src, data.src_lengths)
    for row in ids.tolist():
        if END_ID in row:
            assert all(t == PAD_ID for t in row[row.index(END_ID) + 1:])
    assert ids.shape[1] <= trained.config.max_len
    short = trained.translate(data.src, data.src_lengths, max_len=2)
    assert short.shape[1] <= 2


@pytest.mark.parametrize("norm_first", [False, True])
def test_model_learns_to_translate_a_few_pairs_exactly(task, norm_first):
    """Training, decoding and the loss fit together: eight pairs are learnt by heart."""
    data = translation.make_batch(task.train[:8], task.src_vocab, task.tgt_vocab)
    generator = seed_everything(0)
    model = Transformer(config_for(task, TransformerConfig,
                                   d_model=32, n_heads=4, d_ff=48, n_layers=2,
                                   max_len=20, norm_first=norm_first))
    assert evaluate(model, data).float().mean() == 0
    train(model, data, epochs=60, batch_size=8, lr=1e-2, generator=generator, progress=False)
    assert evaluate(model, data).all()


def test_evaluate_and_train_accept_the_transformer(trained, task):
    data = translation.make_batch(task.test[:12], task.src_vocab, task.tgt_vocab)
    correct = evaluate(trained, data)
    assert correct.shape == (12,) and correct.dtype == torch.bool


def test_sequences_longer_than_the_position_table_are_refused(task):
    model = Transformer(config_for(task, TransformerConfig,
                                   d_model=16, n_heads=2, d_ff=32, max_len=5,
                                   n_positions=8))
    src = torch.full((1, 9), 5)
    with pytest.raises(ValueError, match="n_positions = 8"):
        model.encode(src, torch.tensor([9]))


def test_config_for_takes_sizes_from_the_task(task):
    cfg = config_for(task, TransformerConfig, d_model=32)
    assert isinstance(cfg, TransformerConfig)
    assert cfg.src_vocab_size == len(task.src_vocab) and cfg.d_model == 32
    with pytest.raises(ValueError, match="do not pass"):
        config_for(task, TransformerConfig, src_vocab_size=3)
    with pytest.raises(ValueError, match="TranslationTask"):
        config_for(object(), TransformerConfig)
    with pytest.raises(ValueError, match="TransformerConfig"):
        Transformer(cfg.__dict__)
