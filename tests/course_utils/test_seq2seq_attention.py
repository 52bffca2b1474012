"""course_utils.attention_decoder, unit 03: the attention decoder (Bahdanau et al. 2014), its
GRU with the context in every gate, the score functions of course_utils.attention, the
bidirectional encoder and the alignment hit rate."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from course_utils import attention
from course_utils.attention_decoder import (
    SCORE_FUNCTIONS,
    Attention,
    AttentionDecoder,
    additive_attention,
    alignment_hit_rate,
    context_gru_step,
)
from course_utils.data.translation import NumberPair, make_batch, make_task
from course_utils.data.vocab import END_ID as END
from course_utils.data.vocab import PAD_ID as PAD
from course_utils.data.vocab import START_ID as START
from course_utils.seq2seq import Decoder, Encoder, Seq2SeqConfig, encode, padded_cross_entropy
from course_utils.translator import Seq2Seq, attention_scores, evaluate, train

V_SRC, V_TGT, D_EMB, D_H = 11, 9, 5, 7
DOT_LIKE = ("dot", "scaled_dot", "cosine")  # need encoder width == decoder width


pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.one_thread


def config(score="additive", bidirectional=False, **kwargs):
    return Seq2SeqConfig(V_SRC, V_TGT, d_emb=D_EMB, d_h=D_H, attention=score,
                         bidirectional=bidirectional, **kwargs)


def model_for(score="additive", bidirectional=False, seed=0) -> Seq2Seq:
    torch.manual_seed(seed)
    return Seq2Seq(config(score, bidirectional)).double()


def padded_source():
    """Three sources of lengths 4, 2 and 5 (ids 3.. are real tokens), padded to width 6."""
    src = torch.tensor([[4, 5, 6, 7, 0, 0],
                        [8, 3, 0, 0, 0, 0],
                        [9, 10, 4, 6, 5, 0]])  # (B=3, S=6)
    return src, torch.tensor([4, 2, 5])


TGT_IN = torch.tensor([[START, 4, 5, 6, 3], [START, 7, 0, 0, 0], [START, 8, 8, 3, 4]])  # (3, 5)

# every score, and the two that also work with a bidirectional encoder (d_enc = 2H)
SETTINGS = [(score, False) for score in SCORE_FUNCTIONS] + [("additive", True),
                                                              ("multiplicative", True)]


def random_gru_weights(seed=0, c_dim=4):
    g = torch.Generator().manual_seed(seed)
    rand = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)  # noqa: E731
    return dict(y=rand(3, D_EMB), c=rand(3, c_dim), s=rand(3, D_H), w_y=rand(3 * D_H, D_EMB) / 2,
                w_c=rand(3 * D_H, c_dim) / 2, w_s=rand(3 * D_H, D_H) / 2, bias=rand(3 * D_H) / 2)


# ----------------------------------------------------------------------------- the GRU step

def cho_gru(x, s, w_x, w_h, b):
    """A GRU with input x, in the convention of Cho et al. (2014): the reset gate multiplies
    the state *before* the hidden weight, s~ = tanh(W_xn x + W_hn (r * s) + b_n)."""
    w_xr, w_xz, w_xn = w_x.chunk(3, dim=0)
    w_hr, w_hz, w_hn = w_h.chunk(3, dim=0)
    b_r, b_z, b_n = b.chunk(3)
    r = torch.sigmoid(x @ w_xr.T + s @ w_hr.T + b_r)
    z = torch.sigmoid(x @ w_xz.T + s @ w_hz.T + b_z)
    n = torch.tanh(x @ w_xn.T + (r * s) @ w_hn.T + b_n)
    return z * s + (1 - z) * n


def test_context_in_every_gate_is_a_gru_on_the_concatenation_y_c():
    w = random_gru_weights()
    ours = context_gru_step(w["y"], w["c"], w["s"], w["w_y"], w["w_c"], w["w_s"], w["bias"])
    x = torch.cat([w["y"], w["c"]], dim=1)  # (B, d_emb + d_enc): [y; c]
    w_x = torch.cat([w["w_y"], w["w_c"]], dim=1)  # (3H, d_emb + d_enc): [W_y | W_c]
    want = cho_gru(x, w["s"], w_x, w["w_s"], w["bias"])
    torch.testing.assert_close(ours, want, atol=1e-10, rtol=0)
    assert ours.shape == (3, D_H) and ours.dtype == torch.float64


def test_context_gru_step_is_pytorchs_grucell_only_where_the_conventions_agree():
    """nn.GRUCell computes tanh(W_in x + b_in + r * (W_hn s + b_hn)): the reset gate after the
    hidden weight. With a diagonal W_ss (and b_hn = 0) r * (W_ss s) = W_ss (r * s), so the
    cells agree; with a full W_ss they do not."""
    w = random_gru_weights(seed=1)
    x = torch.cat([w["y"], w["c"]], dim=1)  # (B, d_emb + d_enc)
    cell = nn.GRUCell(x.shape[1], D_H).double()
    with torch.no_grad():
        cell.weight_ih.copy_(torch.cat([w["w_y"], w["w_c"]], dim=1))
        cell.bias_ih.copy_(w["bias"])
        cell.bias_hh.zero_()
    for diagonal in (True, False):
        w_s = w["w_s"].clone()
        if diagonal:
            w_s[2 * D_H:] = torch.diag(torch.diagonal(w_s[2 * D_H:]))  # W_ss diagonal
        with torch.no_grad():
            cell.weight_hh.copy_(w_s)
        ours = context_gru_step(w["y"], w["c"], w["s"], w["w_y"], w["w_c"], w_s, w["bias"])
        if diagonal:
            torch.testing.assert_close(ours, cell(x, w["s"]), atol=1e-10, rtol=0)
        else:
            assert (ours - cell(x, w["s"])).abs().max() > 1e-3


def test_context_gru_step_rejects_mismatched_shapes():
    w = random_gru_weights()
    with pytest.raises(ValueError, match=r"expects y \(3, 5\), c \(3, 4\), s \(3, 7\)"):
        context_gru_step(w["y"], w["c"][:2], w["s"], w["w_y"], w["w_c"], w["w_s"], w["bias"])
    with pytest.raises(ValueError, match=r"w_s \(21, 7\)"):
        context_gru_step(w["y"], w["c"], w["s"], w["w_y"], w["w_c"], w["w_s"][:, :6],
                         w["bias"])
    with pytest.raises(ValueError, match=r"c \(context\) must be a floating-point .*\(B, d_enc\)"):
        context_gru_step(w["y"], w["c"].long(), w["s"], w["w_y"], w["w_c"], w["w_s"],
                         w["bias"])


def test_decoder_step_is_attention_then_context_gru_step_then_output_layer():
    model = model_for("additive")
    src, lengths = padded_source()
    enc = model.encoder(src, lengths)
    dec = model.decoder
    s = dec.init_state(enc)  # (B, d_h)
    y = torch.tensor([START, 4, 5])
    logits, s_new, alpha = dec.step(y, s, enc)
    scores = attention.additive_scores(s.unsqueeze(1), enc.states, dec.attention.w_q,
                                       dec.attention.w_k, dec.attention.w_a)  # (B, 1, S)
    want_alpha = torch.softmax(scores.squeeze(1).masked_fill(~enc.mask, -torch.inf), dim=1)
    c = torch.einsum("bs,bsc->bc", want_alpha, enc.states)  # (B, d_enc)
    want_s = cho_gru(torch.cat([dec.embedding(y), c], 1), s,
                     torch.cat([dec.w_y.weight, dec.w_c.weight], 1), dec.w_s.weight, dec.w_y.bias)
    torch.testing.assert_close(alpha, want_alpha, atol=1e-12, rtol=0)
    torch.testing.assert_close(s_new, want_s, atol=1e-10, rtol=0)
    torch.testing.assert_close(logits, dec.out(want_s), atol=1e-10, rtol=0)


def test_additive_attention_is_the_attention_module_with_its_weights_given():
    model = model_for("additive")
    src, lengths = padded_source()
    enc = model.encoder(src, lengths)
    att = model.decoder.attention
    s = torch.randn(enc.states.shape[0], att.d_h, dtype=enc.states.dtype)
    want_c, want_alpha = att(s, enc.states, enc.mask)
    c, alpha = additive_attention(s, enc.states, enc.mask, att.w_q, att.w_k, att.w_a)
    torch.testing.assert_close(alpha, want_alpha, atol=1e-12, rtol=0)
    torch.testing.assert_close(c, want_c, atol=1e-12, rtol=0)
    e = torch.tanh((s @ att.w_q.T)[:, None, :] + enc.states @ att.w_k.T) @ att.w_a  # (B, S)
    torch.testing.assert_close(alpha, torch.softmax(e.masked_fill(~enc.mask, -torch.inf), 1))
    with pytest.raises(ValueError, match=r"mask must have dtype torch.bool"):
        additive_attention(s, enc.states, enc.mask.long(), att.w_q, att.w_k, att.w_a)
    with pytest.raises(ValueError, match=r"\(B, d_h\)"):
        additive_attention(s[0], enc.states, enc.mask, att.w_q, att.w_k, att.w_a)
    with pytest.raises(ValueError, match=r"same B"):
        additive_attention(s[:1], enc.states, enc.mask, att.w_q, att.w_k, att.w_a)


# ----------------------------------------------------------------------------- masks, padding

@pytest.mark.parametrize("score, bidirectional", SETTINGS)
def test_padding_gets_zero_weight_and_real_tokens_sum_to_one(score, bidirectional):
    model = model_for(score, bidirectional)
    src, lengths = padded_source()
    enc = model.encoder(src, lengths)
    _, weights = model.decoder(TGT_IN, enc, return_weights=True)  # (B, T, S)
    assert weights.shape == (3, TGT_IN.shape[1], src.shape[1])
    padding = ~enc.mask.unsqueeze(1).expand_as(weights)  # (B, T, S)
    assert (weights[padding] == 0).all()  # exactly zero, not just small
    torch.testing.assert_close(weights.sum(2), torch.ones(3, TGT_IN.shape[1], dtype=torch.float64),
                               atol=1e-12, rtol=0)
    assert (weights[~padding] > 0).all()


@pytest.mark.parametrize("score, bidirectional", SETTINGS)
def test_extra_padding_columns_change_nothing(score, bidirectional):
    model = model_for(score, bidirectional)
    src, lengths = padded_source()
    logits, weights = model.decoder(TGT_IN, model.encoder(src, lengths), return_weights=True)
    wider = F.pad(src, (0, 4), value=PAD)  # (B, S + 4)
    logits_w, weights_w = model.decoder(TGT_IN, model.encoder(wider, lengths),
                                        return_weights=True)
    torch.testing.assert_close(logits_w, logits, atol=1e-12, rtol=0)
    torch.testing.assert_close(weights_w[:, :, :6], weights, atol=1e-12, rtol=0)
    assert (weights_w[:, :, 6:] == 0).all()
    ids, w = model.translate(src, lengths, max_len=6, return_weights=True)
    ids_w, w_w = model.translate(wider, lengths, max_len=6, return_weights=True)
    assert torch.equal(ids, ids_w)
    torch.testing.assert_close(w_w[:, :, :6], w, atol=1e-12, rtol=0)


# ----------------------------------------------------------------------------- forward vs step

@pytest.mark.parametrize("score, bidirectional", SETTINGS)
def test_teacher_forcing_equals_stepping_one_token_at_a_time(score, bidirectional):
    model = model_for(score, bidirectional)
    src, lengths = padded_source()
    enc = model.encoder(src, lengths)
    logits, weights = model.decoder(TGT_IN, enc, return_weights=True)  # (B, T, n_vocab), (B, T, S)
    assert logits.shape == (3, 5, V_TGT)
    torch.testing.assert_close(model.decoder(TGT_IN, enc), logits, atol=0, rtol=0)
    s = model.decoder.init_state(enc)  # (B, d_h)
    for t in range(TGT_IN.shape[1]):
        step_logits, s, alpha = model.decoder.step(TGT_IN[:, t], s, enc)
        torch.testing.assert_close(step_logits, logits[:, t], atol=1e-10, rtol=0)
        torch.testing.assert_close(alpha, weights[:, t], atol=1e-12, rtol=0)


def test_greedy_decoding_returns_weights_for_each_output_token():
    model = model_for("additive")
    src, lengths = padded_source()
    ids, weights = model.translate(src, lengths, max_len=7, return_weights=True)
    assert ids.dtype == torch.long and ids.shape[0] == 3 and 1 <= ids.shape[1] <= 7
    assert weights.shape == (3, ids.shape[1], src.shape[1])  # (B, T, S)
    assert (weights[~padded_source()[0].ne(PAD).unsqueeze(1).expand_as(weights)] == 0).all()
    torch.testing.assert_close(weights.sum(2), torch.ones(weights.shape[:2], dtype=torch.float64),
                               atol=1e-12, rtol=0)
    assert torch.equal(model.translate(src, lengths, max_len=7), ids)
    # the first step's weights are the teacher-forced first step's (both read <start>)
    _, tf_weights = model.decoder(TGT_IN[:, :1], model.encoder(src, lengths), return_weights=True)
    torch.testing.assert_close(weights[:, 0], tf_weights[:, 0], atol=1e-12, rtol=0)


def test_config_builds_the_attention_decoder_and_unit_02_is_unchanged():
    assert isinstance(Seq2Seq(config("additive")).decoder, AttentionDecoder)
    plain = Seq2Seq(Seq2SeqConfig(V_SRC, V_TGT, d_emb=D_EMB, d_h=D_H))
    assert type(plain.decoder) is Decoder and not plain.encoder.rnn.bidirectional
    bi = Seq2Seq(config("additive", bidirectional=True))
    assert bi.encoder.rnn.bidirectional and bi.decoder.w_c.in_features == 2 * D_H
    assert config("multiplicative", bidirectional=True).d_enc == 2 * D_H
    model = model_for("additive")
    src, lengths = padded_source()
    tgt = torch.tensor([[START, 4, 5, END, 0], [START, 7, END, 0, 0], [START, 8, 8, 3, END]])
    logits = model(src, lengths, tgt[:, :-1])  # (B, T, n_vocab)
    want = F.cross_entropy(logits.reshape(-1, V_TGT), tgt[:, 1:].reshape(-1), ignore_index=PAD)
    torch.testing.assert_close(model.loss(src, lengths, tgt), want, atol=1e-12, rtol=0)
    torch.testing.assert_close(padded_cross_entropy(logits, tgt[:, 1:]), want, atol=1e-12, rtol=0)


# ----------------------------------------------------------------------------- score functions

@pytest.mark.parametrize("score", SCORE_FUNCTIONS)
def test_each_score_is_the_course_attention_function(score):
    torch.manual_seed(0)
    module = Attention(score, D_H, D_H, d_a=6).double()
    if score == "cosine":
        with torch.no_grad():
            module.log_scale.fill_(0.7)
    s = torch.randn(3, D_H, dtype=torch.float64)  # (B, d_h)
    h = torch.randn(3, 6, D_H, dtype=torch.float64)  # (B, S, d_enc)
    q = s.unsqueeze(1)  # (B, 1, d_h)
    want = {
        "additive": lambda: attention.additive_scores(q, h, module.w_q, module.w_k, module.w_a),
        "multiplicative": lambda: attention.bilinear_scores(q, h, module.w),
        "bilinear": lambda: attention.bilinear_scores(q, h, module.w),
        "dot": lambda: attention.dot_scores(q, h),
        "scaled_dot": lambda: attention.scaled_dot_scores(q, h),
        "cosine": lambda: attention.cosine_scores(q, h) * math.exp(0.7),
    }[score]().squeeze(1)  # (B, S)
    torch.testing.assert_close(module.scores(s, h), want, atol=1e-12, rtol=0)
    # the per-batch precomputation (W_k h once for the additive score) gives the same scores
    torch.testing.assert_close(module.scores(s, h, module.prepare(h)), want, atol=1e-12, rtol=0)
    mask = torch.tensor([[True] * 6, [True] * 3 + [False] * 3, [True] + [False] * 5])
    context, alpha = module(s, h, mask)
    want_alpha = attention.masked_softmax(want.unsqueeze(1), mask.unsqueeze(1)).squeeze(1)
    torch.testing.assert_close(alpha, want_alpha, atol=1e-12, rtol=0)
    torch.testing.assert_close(context, torch.einsum("bs,bsc->bc", want_alpha, h),
                               atol=1e-12, rtol=0)
    assert alpha[2, 0] == 1 and (alpha[1, 3:] == 0).all()


def test_the_scores_differ_and_bilinear_is_multiplicative():
    src, lengths = padded_source()
    weights = {}
    for score in SCORE_FUNCTIONS:
        model = model_for(score)
        weights[score] = model.decoder(TGT_IN, model.encoder(src, lengths), return_weights=True)[1]
    torch.testing.assert_close(weights["bilinear"], weights["multiplicative"], atol=0, rtol=0)
    names = [n for n in SCORE_FUNCTIONS if n != "bilinear"]
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert (weights[a] - weights[b]).abs().max() > 1e-4, (a, b)


# ----------------------------------------------------------------------------- bidirectional

def test_bidirectional_encoder_reads_each_sequence_both_ways_ignoring_padding():
    torch.manual_seed(0)
    embedding = nn.Embedding(V_SRC, D_EMB, padding_idx=PAD).double()
    rnn = nn.GRU(D_EMB, D_H, batch_first=True, bidirectional=True).double()
    src, lengths = padded_source()
    enc = encode(embedding, rnn, src, lengths, bidirectional=True)
    assert enc.states.shape == (3, 6, 2 * D_H) and enc.final.shape == (3, 2 * D_H)
    for b, m in enumerate(lengths.tolist()):
        alone, last = rnn(embedding(src[b: b + 1, :m]))  # (1, m, 2H), (2, 1, d_h)
        torch.testing.assert_close(enc.states[b, :m], alone[0], atol=1e-10, rtol=0)
        torch.testing.assert_close(enc.final[b], torch.cat([last[0, 0], last[1, 0]]),
                                   atol=1e-10, rtol=0)
        torch.testing.assert_close(enc.final[b, :D_H], enc.states[b, m - 1, :D_H], atol=0, rtol=0)
        torch.testing.assert_close(enc.final[b, D_H:], enc.states[b, 0, D_H:], atol=0, rtol=0)
        assert (enc.states[b, m:] == 0).all()
    # the unidirectional path still refuses a bidirectional GRU, and the other way round
    with pytest.raises(ValueError, match=r"one direction.*bidirectional=True"):
        encode(embedding, rnn, src, lengths)
    with pytest.raises(ValueError, match=r"bidirectional=True\): one layer, both directions"):
        encode(embedding, nn.GRU(D_EMB, D_H, batch_first=True).double(), src, lengths,
               bidirectional=True)
    encoder = Encoder(config("additive", bidirectional=True)).double()
    want = encode(encoder.embedding, encoder.rnn, src, lengths, bidirectional=True)
    torch.testing.assert_close(encoder(src, lengths).states, want.states, atol=0, rtol=0)


def test_bidirectional_decoder_starts_from_a_bridge_of_both_final_states():
    model = model_for("additive", bidirectional=True)
    src, lengths = padded_source()
    enc = model.encoder(src, lengths)
    s0 = model.decoder.init_state(enc)
    want = torch.tanh(enc.final @ model.decoder.w_init.weight.T + model.decoder.w_init.bias)
    torch.testing.assert_close(s0, want, atol=1e-12, rtol=0)
    assert s0.shape == (3, D_H)


# ----------------------------------------------------------------------------- bad inputs

@pytest.mark.parametrize("kwargs, message", [
    (dict(attention="luong"), r"attention must be one of \(None, 'additive'"),
    (dict(attention="dot", bidirectional=True), r"'dot' score .* same width"),
    (dict(attention="cosine", bidirectional=True), r"'cosine' score .* same width"),
    (dict(attention="additive", feed_final=True), r"leave feed_final and reverse_source"),
    (dict(attention="additive", reverse_source=True), r"leave feed_final and reverse_source"),
    (dict(bidirectional=True, reverse_source=True), r"leave reverse_source False"),
    (dict(attention="additive", bidirectional="yes"), r"bidirectional must be a bool"),
    (dict(attention="additive", d_a=0), r"d_a must be a positive int"),
    (dict(attention="dot", d_a=4), r"d_a is the width of the additive score"),
])
def test_bad_configurations_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Seq2Seq(Seq2SeqConfig(V_SRC, V_TGT, d_emb=D_EMB, d_h=D_H, **kwargs))


def test_bad_decoder_inputs_raise_naming_the_expected_shape():
    model = model_for("additive")
    src, lengths = padded_source()
    enc = model.encoder(src, lengths)
    s = model.decoder.init_state(enc)
    y = torch.tensor([START] * 3)
    with pytest.raises(ValueError, match=r"y_prev .*int64.*\(B,\)"):
        model.decoder.step(y.double(), s, enc)
    with pytest.raises(ValueError, match=r"s_prev .*\(B, 7\)"):
        model.decoder.step(y, s[0], enc)
    with pytest.raises(ValueError, match=r"attention expects query \(B, 7\) and keys \(B, S, 7\)"):
        model.decoder.step(y, torch.zeros(3, D_H + 1, dtype=torch.float64), enc)
    with pytest.raises(ValueError, match=r"enc.states must have shape \(3, S, 7\)"):
        model.decoder.step(y, s, enc._replace(states=enc.states[..., :4]))
    with pytest.raises(ValueError, match=r"enc.mask must have dtype torch.bool .*shape \(3, 6\)"):
        model.decoder.step(y, s, enc._replace(mask=enc.mask.long()))
    with pytest.raises(ValueError, match=r"tgt_in .*\(B, T\)"):
        model.decoder(TGT_IN[0], enc)
    with pytest.raises(ValueError, match=r"enc.states must have shape \(2, S, 7\)"):
        model.decoder(TGT_IN[:2], enc)
    with pytest.raises(ValueError, match=r"mask must have shape \(3, 6\)"):
        model.decoder.attention(s, enc.states, enc.mask[:, :5])
    with pytest.raises(ValueError, match=r"score must be one of"):
        Attention("general", D_H, D_H, 4)
    with pytest.raises(ValueError, match=r"needs config.attention"):
        AttentionDecoder(Seq2SeqConfig(V_SRC, V_TGT, d_emb=D_EMB, d_h=D_H))


# ----------------------------------------------------------------------------- training

def test_a_short_training_run_lowers_the_loss_deterministically():
    task = make_task(240, 40, seed=3, min_numbers=1, max_numbers=2)
    data = make_batch(task.train, task.src_vocab, task.tgt_vocab)
    held_out = make_batch(task.test, task.src_vocab, task.tgt_vocab)
    runs = []
    for _ in range(2):
        torch.manual_seed(0)
        model = Seq2Seq(Seq2SeqConfig(len(task.src_vocab), len(task.tgt_vocab), d_emb=8,
                                      d_h=16, max_len=8, attention="additive",
                                      bidirectional=True))
        history = train(model, data, epochs=6, batch_size=30, lr=2e-2,
                        generator=torch.Generator().manual_seed(0), progress=False,
                        schedule="linear")
        runs.append((history, [p.detach().clone() for p in model.parameters()]))
    (history, params), (history2, params2) = runs
    assert history.loss == history2.loss  # bitwise the same losses
    assert all(torch.equal(a, b) for a, b in zip(params, params2, strict=True))
    epoch_loss = history.epoch_loss()
    assert epoch_loss[-1] < 0.8 * epoch_loss[0], epoch_loss
    assert evaluate(model, held_out).shape == (40,)


def test_linear_schedule_is_adam_with_a_falling_learning_rate():
    task = make_task(60, 10, seed=1, min_numbers=1, max_numbers=2)
    data = make_batch(task.train, task.src_vocab, task.tgt_vocab)
    cfg = Seq2SeqConfig(len(task.src_vocab), len(task.tgt_vocab), d_emb=4, d_h=6,
                        attention="dot")
    torch.manual_seed(0)
    model = Seq2Seq(cfg)
    by_hand = Seq2Seq(cfg)
    by_hand.load_state_dict(model.state_dict())
    train(model, data, epochs=2, batch_size=20, lr=0.05, progress=False, schedule="linear",
          generator=torch.Generator().manual_seed(5))
    optimizer = torch.optim.Adam(by_hand.parameters(), lr=0.05)
    order = torch.Generator().manual_seed(5)
    n_steps = 6
    for k in range(n_steps):  # 2 epochs of 3 batches, in the order train draws them
        if k % 3 == 0:
            perm = torch.randperm(60, generator=order)
        batch = data[perm[(k % 3) * 20: (k % 3 + 1) * 20]]
        for group in optimizer.param_groups:
            group["lr"] = 0.05 * (1 - k / n_steps)
        loss = by_hand.loss(batch.src, batch.src_lengths, batch.tgt)
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(by_hand.parameters(), 1.0)
        optimizer.step()
    for a, b in zip(model.parameters(), by_hand.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)
    with pytest.raises(ValueError, match=r"schedule must be 'constant' or 'linear'"):
        train(model, data, epochs=1, schedule="cosine", progress=False)


# ----------------------------------------------------------------------------- alignment

def test_alignment_hit_rate_on_hand_made_weights():
    pair = NumberPair.of([24, 7])  # four and twenty , seven  ->  2 4 , 7
    assert pair.sources == (2, 0, 3, 4)
    exact = pair.alignment().unsqueeze(0)  # (1, T=4, S=5)
    assert alignment_hit_rate(exact, [pair]) == 1.0
    with_end = F.pad(exact, (0, 2, 0, 1), value=0.0)  # an <end> step and two padding columns
    with_end[0, 4, 4] = 1.0
    assert alignment_hit_rate(with_end, [pair]) == 1.0  # the <end> step is not counted
    swapped = exact[:, [1, 0, 2, 3]]  # tens and units digits look at each other's word
    assert alignment_hit_rate(swapped, [pair]) == 0.5
    assert alignment_hit_rate(swapped, [pair], exclude=",") == pytest.approx(1 / 3)
    assert alignment_hit_rate(exact[:, :2], [pair]) == 0.5  # steps never reached are misses
    soft = 0.6 * exact + 0.4 * exact[:, [1, 0, 2, 3]]  # right peaks, some weight elsewhere
    assert alignment_hit_rate(soft, [pair]) == 1.0
    other = NumberPair.of([13])  # thirteen -> 1 3, both from word 0
    both = torch.zeros(2, 4, 5)
    both[0] = exact[0]
    both[1, :2, 0] = 1.0
    assert alignment_hit_rate(both, [pair, other]) == 1.0
    both[1, 1, 0], both[1, 1, 3] = 0.0, 1.0  # one of six characters now misses
    assert alignment_hit_rate(both, [pair, other]) == pytest.approx(5 / 6)


def test_alignment_hit_rate_rejects_bad_inputs():
    pair = NumberPair.of([24, 7])
    weights = pair.alignment().unsqueeze(0)  # (1, 4, 5)
    with pytest.raises(ValueError, match=r"weights must have shape \(2, T, S\)"):
        alignment_hit_rate(weights, [pair, pair])
    with pytest.raises(ValueError, match=r"at least 5 source columns"):
        alignment_hit_rate(weights[:, :, :4], [pair])
    with pytest.raises(ValueError, match=r"\(N, T, S\)"):
        alignment_hit_rate(weights[0], [pair])
    with pytest.raises(ValueError, match=r"nothing to score"):
        alignment_hit_rate(weights, [pair], exclude=",0123456789")


def test_the_decoders_attention_module_sees_every_query_through_its_hooks():
    """Lecture 04 reads the queries with a forward pre-hook on decoder.attention: forward must
    call the module once per target step, with the state it attends with."""
    model = model_for("multiplicative")
    src, lengths = padded_source()
    queries = []
    hook = model.decoder.attention.register_forward_pre_hook(
        lambda module, args: queries.append(args[0]))
    try:
        with torch.no_grad():
            model.decoder(TGT_IN, model.encoder(src, lengths))
    finally:
        hook.remove()
    assert len(queries) == TGT_IN.shape[1]
    assert all(q.shape == (3, D_H) for q in queries)


@pytest.mark.parametrize("score", SCORE_FUNCTIONS)
def test_attention_scores_are_the_scores_behind_each_teacher_forced_step(score):
    """The raw scores that attention_scores returns, masked and softmaxed, are the weights of
    the very steps of teacher forcing; the model is left as it was."""
    model = model_for(score, bidirectional=score not in DOT_LIKE).eval()
    src = torch.randint(4, V_SRC, (3, 5))
    lengths = torch.tensor([5, 3, 2])
    tgt_in = torch.randint(3, V_TGT, (3, 4))
    tgt_in[:, 0] = START
    scores, weights, mask = attention_scores(model, src, lengths, tgt_in)
    assert scores.shape == weights.shape == (3, 4, 5) and mask.shape == (3, 5)
    assert torch.allclose(attention.masked_softmax(scores, mask[:, None, :]), weights,
                          atol=1e-6)
    with torch.no_grad():
        _, direct = model.decoder(tgt_in, model.encoder(src, lengths), return_weights=True)
    assert torch.equal(direct, weights)
    assert not model.decoder.attention._forward_pre_hooks  # the hook is gone


def test_attention_scores_refuses_decoders_that_do_not_score_through_their_module():
    src, lengths = torch.randint(4, V_SRC, (2, 3)), torch.tensor([3, 2])
    tgt_in = torch.full((2, 2), START)
    for cfg in (config(None), config("multiplicative", decoder="luong")):
        with pytest.raises(ValueError, match="AttentionDecoder"):
            attention_scores(Seq2Seq(cfg), src, lengths, tgt_in)
