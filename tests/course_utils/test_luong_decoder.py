"""course_utils.attention_decoder.LuongDecoder, unit 03: the decoder of Luong et al. (2015),
global attention with the "general" score and input feeding, against a hand-written loop."""

import pytest
import torch
import torch.nn.functional as F

from course_utils.attention_decoder import AttentionDecoder, LuongDecoder, LuongState
from course_utils.data.translation import TranslationBatch
from course_utils.data.vocab import END_ID as END
from course_utils.data.vocab import PAD_ID as PAD
from course_utils.data.vocab import START_ID as START
from course_utils.seq2seq import Seq2SeqConfig
from course_utils.translator import Seq2Seq, train

V_SRC, V_TGT, D_EMB, D_H = 11, 9, 5, 7

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.one_thread


def config(score="multiplicative", bidirectional=True, input_feeding=True):
    return Seq2SeqConfig(V_SRC, V_TGT, d_emb=D_EMB, d_h=D_H, attention=score,
                         bidirectional=bidirectional, decoder="luong",
                         input_feeding=input_feeding)


def model_for(score="multiplicative", bidirectional=True, input_feeding=True, seed=0):
    torch.manual_seed(seed)
    return Seq2Seq(config(score, bidirectional, input_feeding)).double()


def padded_source():
    """Three sources of lengths 4, 2 and 5, padded to width 6."""
    src = torch.tensor([[4, 5, 6, 7, 0, 0],
                        [8, 3, 0, 0, 0, 0],
                        [9, 10, 4, 6, 5, 0]])  # (B=3, S=6)
    return src, torch.tensor([4, 2, 5])


TGT_IN = torch.tensor([[START, 4, 5, 6, 3], [START, 7, 0, 0, 0], [START, 8, 8, 3, 4]])  # (3, 5)
# (score, bidirectional): Luong's "general" both ways, "dot" where the widths agree, additive
SETTINGS = [("multiplicative", True), ("multiplicative", False), ("dot", False),
            ("additive", True)]


def by_hand(dec: LuongDecoder, enc, tgt_in):
    """Luong's equations written out, one step at a time, for the "general" score:

        s_t  = GRU([E y_{t-1}; s~_{t-1}], s_{t-1})   (PyTorch's GRU: r * (W_hn s + b_hn))
        e_tj = h_j^T W_e s_t,  alpha_t = softmax over the real words,  c_t = sum_j alpha_tj h_j
        s~_t = tanh(W_c [c_t; s_t]),  logits_t = W_o s~_t + b_o
    """
    w_ih, w_hh = dec.rnn.weight_ih, dec.rnn.weight_hh
    b_ih, b_hh = dec.rnn.bias_ih, dec.rnn.bias_hh
    s = torch.tanh(enc.final @ dec.w_init.weight.T + dec.w_init.bias)  # s_0
    s_tilde = torch.zeros_like(s)  # s~_0 = 0
    logits, weights = [], []
    for t in range(tgt_in.shape[1]):
        x = torch.cat([dec.embedding.weight[tgt_in[:, t]], s_tilde], dim=1)
        i_r, i_z, i_n = (x @ w_ih.T + b_ih).chunk(3, dim=1)
        h_r, h_z, h_n = (s @ w_hh.T + b_hh).chunk(3, dim=1)
        r, z = torch.sigmoid(i_r + h_r), torch.sigmoid(i_z + h_z)
        s = (1 - z) * torch.tanh(i_n + r * h_n) + z * s
        e = torch.einsum("bsc,cd,bd->bs", enc.states, dec.attention.w, s)  # h^T W_e s
        alpha = torch.softmax(e.masked_fill(~enc.mask, -torch.inf), dim=1)
        c = torch.einsum("bs,bsc->bc", alpha, enc.states)
        s_tilde = torch.tanh(torch.cat([c, s], dim=1) @ dec.w_c.weight.T)
        logits.append(s_tilde @ dec.out.weight.T + dec.out.bias)
        weights.append(alpha)
    return torch.stack(logits, 1), torch.stack(weights, 1)


# ----------------------------------------------------------------------------- construction

def test_config_builds_luongs_decoder_with_the_widths_of_its_equations():
    model = model_for()
    dec = model.decoder
    assert isinstance(dec, LuongDecoder)
    assert dec.rnn.input_size == D_EMB + D_H  # [E y; s~]: input feeding
    assert dec.attention.w.shape == (2 * D_H, D_H)  # W_e (d_enc, d_h)
    assert dec.w_c.weight.shape == (D_H, 2 * D_H + D_H) and dec.w_c.bias is None
    assert dec.out.in_features == D_H  # the output layer reads s~
    assert model_for(input_feeding=False).decoder.rnn.input_size == D_EMB
    # the default is still Bahdanau's decoder
    plain = Seq2Seq(Seq2SeqConfig(V_SRC, V_TGT, d_emb=D_EMB, d_h=D_H, attention="additive"))
    assert type(plain.decoder) is AttentionDecoder


@pytest.mark.parametrize("kwargs, message", [
    (dict(decoder="luong"), r"decoder='luong' is an attention decoder: it needs attention"),
    (dict(decoder="bahdanau", attention="additive", input_feeding=False),
     r"input_feeding=False switches off the input feeding of decoder='luong'"),
    (dict(decoder="local", attention="dot"), r"decoder must be 'bahdanau' or 'luong'"),
    (dict(decoder="luong", attention="dot", bidirectional=True), r"'dot' score .* same width"),
    (dict(decoder="luong", attention="dot", input_feeding=1), r"input_feeding must be a bool"),
])
def test_bad_configurations_raise(kwargs, message):
    with pytest.raises(ValueError, match=message):
        Seq2Seq(Seq2SeqConfig(V_SRC, V_TGT, d_emb=D_EMB, d_h=D_H, **kwargs))


# ----------------------------------------------------------------------------- shapes

@pytest.mark.parametrize("score, bidirectional", SETTINGS)
def test_shapes_of_step_forward_and_greedy_decoding(score, bidirectional):
    model = model_for(score, bidirectional)
    src, lengths = padded_source()
    enc = model.encoder(src, lengths)
    state = model.decoder.init_state(enc)
    assert isinstance(state, LuongState) and state.s.shape == state.s_tilde.shape == (3, D_H)
    assert (state.s_tilde == 0).all()
    logits, state, alpha = model.decoder.step(TGT_IN[:, 0], state, enc)
    assert logits.shape == (3, V_TGT) and alpha.shape == (3, 6)
    assert state.s.shape == state.s_tilde.shape == (3, D_H)
    logits, weights = model.decoder(TGT_IN, enc, return_weights=True)
    assert logits.shape == (3, 5, V_TGT) and weights.shape == (3, 5, 6)
    assert model(src, lengths, TGT_IN).shape == (3, 5, V_TGT)
    ids, w = model.translate(src, lengths, max_len=6, return_weights=True)
    assert ids.shape[0] == 3 and 1 <= ids.shape[1] <= 6 and w.shape == (3, ids.shape[1], 6)


def test_bad_step_inputs_raise_naming_the_expected_shape():
    model = model_for()
    src, lengths = padded_source()
    enc = model.encoder(src, lengths)
    state = model.decoder.init_state(enc)
    with pytest.raises(ValueError, match=r"state must be the pair \(s, s_tilde\)"):
        model.decoder.step(TGT_IN[:, 0], state.s, enc)
    with pytest.raises(ValueError, match=r"state.s_tilde must have shape \(3, 7\)"):
        model.decoder.step(TGT_IN[:, 0], LuongState(state.s, state.s_tilde[:, :5]), enc)
    with pytest.raises(ValueError, match=r"y_prev \(previous tokens\) must have dtype torch.int64"):
        model.decoder.step(TGT_IN[:, 0].float(), state, enc)


# ----------------------------------------------------------------------------- masking

@pytest.mark.parametrize("score, bidirectional", SETTINGS)
def test_padding_gets_zero_weight_and_more_padding_changes_nothing(score, bidirectional):
    model = model_for(score, bidirectional)
    src, lengths = padded_source()
    enc = model.encoder(src, lengths)
    logits, weights = model.decoder(TGT_IN, enc, return_weights=True)  # (B, T, S)
    padding = ~enc.mask.unsqueeze(1).expand_as(weights)
    assert (weights[padding] == 0).all() and (weights[~padding] > 0).all()
    torch.testing.assert_close(weights.sum(2), torch.ones(3, 5, dtype=torch.float64),
                               atol=1e-12, rtol=0)
    wider = F.pad(src, (0, 4), value=PAD)  # (B, S + 4)
    logits_w, weights_w = model.decoder(TGT_IN, model.encoder(wider, lengths),
                                        return_weights=True)
    torch.testing.assert_close(logits_w, logits, atol=1e-12, rtol=0)
    torch.testing.assert_close(weights_w[:, :, :6], weights, atol=1e-12, rtol=0)
    assert (weights_w[:, :, 6:] == 0).all()


def test_what_sits_on_padded_positions_cannot_leak_into_the_output():
    model = model_for()
    src, lengths = padded_source()
    enc = model.encoder(src, lengths)
    noisy = enc._replace(states=torch.where(enc.mask.unsqueeze(2), enc.states, 1e3))
    torch.testing.assert_close(model.decoder(TGT_IN, noisy), model.decoder(TGT_IN, enc),
                               atol=1e-12, rtol=0)


# ----------------------------------------------------------------------------- the equations

def test_one_step_is_the_hand_written_equations():
    model = model_for()
    src, lengths = padded_source()
    enc = model.encoder(src, lengths)
    dec = model.decoder
    want_logits, want_weights = by_hand(dec, enc, TGT_IN[:, :1])
    logits, state, alpha = dec.step(TGT_IN[:, 0], dec.init_state(enc), enc)
    torch.testing.assert_close(logits, want_logits[:, 0], atol=1e-12, rtol=0)
    torch.testing.assert_close(alpha, want_weights[:, 0], atol=1e-12, rtol=0)
    # the query is the *new* state: the scores are h_j^T W_e s_1, not h_j^T W_e s_0
    e = torch.einsum("bsc,cd,bd->bs", enc.states, dec.attention.w, state.s)
    torch.testing.assert_close(
        alpha, torch.softmax(e.masked_fill(~enc.mask, -torch.inf), 1), atol=1e-12, rtol=0)


def test_teacher_forcing_and_stepping_are_the_hand_written_loop():
    model = model_for()
    src, lengths = padded_source()
    enc = model.encoder(src, lengths)
    want_logits, want_weights = by_hand(model.decoder, enc, TGT_IN)
    logits, weights = model.decoder(TGT_IN, enc, return_weights=True)
    torch.testing.assert_close(logits, want_logits, atol=1e-10, rtol=0)
    torch.testing.assert_close(weights, want_weights, atol=1e-12, rtol=0)
    state = model.decoder.init_state(enc)
    for t in range(TGT_IN.shape[1]):
        step_logits, state, alpha = model.decoder.step(TGT_IN[:, t], state, enc)
        torch.testing.assert_close(step_logits, want_logits[:, t], atol=1e-10, rtol=0)
        torch.testing.assert_close(alpha, want_weights[:, t], atol=1e-12, rtol=0)


@pytest.mark.parametrize("score, bidirectional", SETTINGS)
@pytest.mark.parametrize("input_feeding", [True, False])
def test_teacher_forcing_equals_stepping_for_every_setting(score, bidirectional, input_feeding):
    model = model_for(score, bidirectional, input_feeding)
    src, lengths = padded_source()
    enc = model.encoder(src, lengths)
    logits, weights = model.decoder(TGT_IN, enc, return_weights=True)
    state = model.decoder.init_state(enc)
    for t in range(TGT_IN.shape[1]):
        step_logits, state, alpha = model.decoder.step(TGT_IN[:, t], state, enc)
        torch.testing.assert_close(step_logits, logits[:, t], atol=1e-10, rtol=0)
        torch.testing.assert_close(alpha, weights[:, t], atol=1e-12, rtol=0)


def test_input_feeding_changes_the_result_from_the_second_step_on():
    """The same weights with and without the s~ columns of the GRU's input weight: the first
    step agrees (s~_0 = 0), every later one differs; with those columns zero, all agree."""
    fed, plain = model_for(input_feeding=True), model_for(input_feeding=False)
    plain.load_state_dict({k: v for k, v in fed.state_dict().items()
                           if k != "decoder.rnn.weight_ih"}, strict=False)
    with torch.no_grad():
        plain.decoder.rnn.weight_ih.copy_(fed.decoder.rnn.weight_ih[:, :D_EMB])
    src, lengths = padded_source()
    logits_fed, weights_fed = fed(src, lengths, TGT_IN), fed.decoder(
        TGT_IN, fed.encoder(src, lengths), return_weights=True)[1]
    logits_plain, weights_plain = plain(src, lengths, TGT_IN), plain.decoder(
        TGT_IN, plain.encoder(src, lengths), return_weights=True)[1]
    torch.testing.assert_close(logits_fed[:, 0], logits_plain[:, 0], atol=1e-12, rtol=0)
    for t in range(1, TGT_IN.shape[1]):
        assert (logits_fed[:, t] - logits_plain[:, t]).abs().max() > 1e-4, t
        assert (weights_fed[:, t] - weights_plain[:, t]).abs().max() > 1e-6, t
    with torch.no_grad():
        fed.decoder.rnn.weight_ih[:, D_EMB:] = 0
    torch.testing.assert_close(fed(src, lengths, TGT_IN), logits_plain, atol=1e-12, rtol=0)


def test_gradients_match_finite_differences():
    model = model_for()
    src, lengths = padded_source()
    enc = model.encoder(src, lengths)
    dec = model.decoder
    states = enc.states.detach().requires_grad_()  # (B, S, d_enc), keys and values

    def through_states(states):
        return dec(TGT_IN, enc._replace(states=states))

    assert torch.autograd.gradcheck(through_states, (states,), eps=1e-6, atol=1e-6)
    # every parameter of the decoder receives a gradient
    dec(TGT_IN, enc._replace(states=states)).sum().backward()
    for name, p in dec.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


def test_parameter_gradients_match_finite_differences():
    model = model_for()
    src, lengths = padded_source()
    enc = model.encoder(src, lengths)
    enc = enc._replace(states=enc.states.detach(), final=enc.final.detach())
    dec = model.decoder
    params = dict(dec.named_parameters())

    def run(w_e, w_c, w_ih):
        return torch.func.functional_call(dec, {**params, "attention.w": w_e, "w_c.weight": w_c,
                                                "rnn.weight_ih": w_ih}, (TGT_IN, enc))

    inputs = tuple(params[n].detach().clone().requires_grad_()
                   for n in ("attention.w", "w_c.weight", "rnn.weight_ih"))
    assert torch.autograd.gradcheck(run, inputs, eps=1e-6, atol=1e-6)


def test_a_short_training_run_lowers_the_loss_deterministically():
    src, lengths = padded_source()
    tgt = torch.cat([TGT_IN, torch.tensor([[END], [PAD], [END]])], dim=1)  # ... <end>
    data = TranslationBatch(src, lengths, tgt)
    losses = []
    for _ in range(2):
        torch.manual_seed(0)
        model = Seq2Seq(config())
        history = train(model, data, epochs=30, batch_size=3, lr=1e-2, progress=False,
                        generator=torch.Generator().manual_seed(0))
        losses.append(history.loss)
    assert losses[0] == losses[1]
    assert losses[0][-1] < 0.5 * losses[0][0]
