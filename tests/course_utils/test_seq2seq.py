"""course_utils.seq2seq and translator: the GRU encoder-decoder of unit 02, checked against
PyTorch's own GRU, GRUCell and cross-entropy wherever PyTorch has one."""

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from course_utils.data.translation import NumberPair, make_batch, make_task, number_words
from course_utils.data.vocab import END_ID as END
from course_utils.data.vocab import PAD_ID as PAD
from course_utils.data.vocab import START_ID as START
from course_utils.seq2seq import (
    Decoder,
    Encoder,
    EncoderOutput,
    Seq2SeqConfig,
    decoder_step,
    encode,
    exact_match,
    greedy_decode,
    gru_step,
    initial_state,
    padded_cross_entropy,
    reverse_padded,
    token_accuracy,
)
from course_utils.translator import Seq2Seq, config_for, evaluate, train

V_SRC, V_TGT, D_EMB, D_H = 11, 9, 5, 7


pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.one_thread


def make_encoder_parts(seed: int = 0):
    torch.manual_seed(seed)
    embedding = nn.Embedding(V_SRC, D_EMB, padding_idx=PAD).double()
    rnn = nn.GRU(D_EMB, D_H, batch_first=True).double()
    return embedding, rnn


def padded_source():
    """Three sources of lengths 4, 2 and 5 (ids 3.. are real tokens), padded to width 6."""
    src = torch.tensor([[4, 5, 6, 7, 0, 0],
                        [8, 3, 0, 0, 0, 0],
                        [9, 10, 4, 6, 5, 0]])  # (B=3, S=6)
    return src, torch.tensor([4, 2, 5])


# ----------------------------------------------------------------------------- gru_step

def test_gru_step_equals_one_step_of_nn_gru_and_nn_grucell():
    torch.manual_seed(0)
    rnn = nn.GRU(D_EMB, D_H, batch_first=True).double()
    x = torch.randn(4, D_EMB, dtype=torch.float64)  # (B, d_emb)
    s = torch.randn(4, D_H, dtype=torch.float64)  # (B, d_h)
    ours = gru_step(x, s, rnn)  # (B, d_h)

    out, last = rnn(x.unsqueeze(1), s.unsqueeze(0))  # (B, 1, d_h), (1, B, d_h)
    torch.testing.assert_close(ours, out[:, 0], atol=1e-6, rtol=0)
    torch.testing.assert_close(ours, last[0], atol=1e-6, rtol=0)

    cell = nn.GRUCell(D_EMB, D_H).double()
    with torch.no_grad():
        cell.weight_ih.copy_(rnn.weight_ih_l0)
        cell.weight_hh.copy_(rnn.weight_hh_l0)
        cell.bias_ih.copy_(rnn.bias_ih_l0)
        cell.bias_hh.copy_(rnn.bias_hh_l0)
    torch.testing.assert_close(ours, cell(x, s), atol=1e-6, rtol=0)
    assert ours.shape == (4, D_H) and ours.dtype == torch.float64


def test_gru_step_rejects_bad_inputs():
    rnn = nn.GRU(D_EMB, D_H)
    x, s = torch.randn(2, D_EMB), torch.randn(2, D_H)
    with pytest.raises(ValueError, match=r"floating-point tensor .*of shape \(B, d_in\)"):
        gru_step(x.long(), s, rnn)
    with pytest.raises(ValueError, match=r"shape \(B, d_h\)"):
        gru_step(x, s[0], rnn)
    with pytest.raises(ValueError, match=rf"expects x \(2, {D_EMB}\) and s \(2, {D_H}\)"):
        gru_step(torch.randn(2, D_EMB + 1), s, rnn)
    with pytest.raises(ValueError, match=rf"expects x \(2, {D_EMB}\) and s \(2, {D_H}\)"):
        gru_step(x, torch.randn(3, D_H), rnn)


def test_decoder_step_is_embedding_then_gru_step_then_output_layer():
    torch.manual_seed(1)
    embedding = nn.Embedding(V_TGT, D_EMB).double()
    rnn = nn.GRU(D_EMB + 3, D_H, batch_first=True).double()  # input: [d_emb y; extra]
    out = nn.Linear(D_H, V_TGT).double()
    y = torch.tensor([1, 4])
    s = torch.randn(2, D_H, dtype=torch.float64)
    extra = torch.randn(2, 3, dtype=torch.float64)
    logits, s_new = decoder_step(embedding, rnn, out, y, s, extra)
    _, last = rnn(torch.cat([embedding(y), extra], 1).unsqueeze(1), s.unsqueeze(0))
    torch.testing.assert_close(s_new, last[0], atol=1e-10, rtol=0)
    torch.testing.assert_close(logits, out(last[0]), atol=1e-10, rtol=0)
    with pytest.raises(ValueError, match=r"int64 .*\(B,\)"):
        decoder_step(embedding, rnn, out, y.float(), s, extra)


# ----------------------------------------------------------------------------- encoder

def test_encode_final_state_equals_each_sequence_run_alone():
    embedding, rnn = make_encoder_parts()
    src, lengths = padded_source()
    enc = encode(embedding, rnn, src, lengths)
    assert isinstance(enc, EncoderOutput)
    assert enc.states.shape == (3, 6, D_H) and enc.final.shape == (3, D_H)
    assert enc.mask.shape == (3, 6)
    for b, m in enumerate(lengths.tolist()):
        alone_states, alone_last = rnn(embedding(src[b : b + 1, :m]))  # (1, m, d_h), (1, 1, d_h)
        torch.testing.assert_close(enc.final[b], alone_last[0, 0], atol=1e-10, rtol=0)
        torch.testing.assert_close(enc.states[b, :m], alone_states[0], atol=1e-10, rtol=0)
        torch.testing.assert_close(enc.final[b], enc.states[b, m - 1], atol=0, rtol=0)
        assert (enc.states[b, m:] == 0).all()  # zero at padding positions
    assert enc.mask.tolist() == [[True] * 4 + [False] * 2,
                                 [True] * 2 + [False] * 4,
                                 [True] * 5 + [False]]


def test_encode_final_state_ignores_extra_padding_columns():
    embedding, rnn = make_encoder_parts()
    src, lengths = padded_source()
    enc = encode(embedding, rnn, src, lengths)
    wider = F.pad(src, (0, 5), value=PAD)  # (B, S + 5)
    enc_wide = encode(embedding, rnn, wider, lengths)
    assert enc_wide.states.shape == (3, 11, D_H)
    torch.testing.assert_close(enc_wide.final, enc.final, atol=1e-12, rtol=0)
    torch.testing.assert_close(enc_wide.states[:, :6], enc.states, atol=1e-12, rtol=0)
    assert (enc_wide.states[:, 6:] == 0).all()
    # a plain nn.GRU over the padded batch reads the <pad>s: its last state is different
    _, last_unpacked = rnn(embedding(wider))
    assert not torch.allclose(last_unpacked[0], enc.final)


def test_reverse_padded_example_and_encode_reverse():
    ids = torch.tensor([[3, 4, 5, 0], [6, 7, 0, 0], [8, 9, 10, 3]])
    lengths = torch.tensor([3, 2, 4])
    assert reverse_padded(ids, lengths).tolist() == [[5, 4, 3, 0], [7, 6, 0, 0], [3, 10, 9, 8]]
    assert torch.equal(reverse_padded(reverse_padded(ids, lengths), lengths), ids)

    embedding, rnn = make_encoder_parts()
    src, lengths = padded_source()
    by_hand = src.clone()
    for b, m in enumerate(lengths.tolist()):
        by_hand[b, :m] = src[b, :m].flip(0)
    forward_of_reversed = encode(embedding, rnn, by_hand, lengths)
    reversed_enc = encode(embedding, rnn, src, lengths, reverse=True)
    for got, want in zip(reversed_enc, forward_of_reversed, strict=True):
        torch.testing.assert_close(got, want, atol=0, rtol=0)
    assert not torch.allclose(reversed_enc.final, encode(embedding, rnn, src, lengths).final)


def test_encoder_module_uses_reverse_source():
    cfg = Seq2SeqConfig(V_SRC, V_TGT, d_emb=D_EMB, d_h=D_H, reverse_source=True)
    torch.manual_seed(0)
    encoder = Encoder(cfg).double()
    src, lengths = padded_source()
    want = encode(encoder.embedding, encoder.rnn, src, lengths, reverse=True)
    torch.testing.assert_close(encoder(src, lengths).final, want.final, atol=0, rtol=0)


IDS_2x4 = torch.ones(2, 4, dtype=torch.long)  # (B=2, S=4)


@pytest.mark.parametrize("src, lengths, message", [
    (torch.ones(2, 4), torch.tensor([1, 2]), r"src must have dtype torch.int64.*\(B, S\)"),
    (torch.ones(4, dtype=torch.long), torch.tensor([1]), r"src must have shape \(B, S\)"),
    ([[1, 2]], torch.tensor([1]), r"src must be an int64 torch.Tensor of shape \(B, S\)"),
    (IDS_2x4, torch.tensor([1.0, 2.0]), r"lengths .*\(B,\)"),
    (IDS_2x4, torch.tensor([[1, 2]]), r"lengths must have shape \(B,\)"),
    (IDS_2x4, torch.tensor([1, 0]), r"lengths must lie in 1\.\.4"),
    (IDS_2x4, torch.tensor([5, 2]), r"lengths must lie in 1\.\.4"),
    (IDS_2x4, torch.tensor([1, 2, 3]), r"lengths must have shape \(2,\), one per row"),
])
def test_encode_rejects_bad_inputs(src, lengths, message):
    embedding, rnn = make_encoder_parts()
    with pytest.raises(ValueError, match=message):
        encode(embedding, rnn, src, lengths)
    if isinstance(src, torch.Tensor) and src.dim() == 2 and src.dtype == torch.long:
        with pytest.raises(ValueError, match=message):
            reverse_padded(src, lengths)


# ----------------------------------------------------------------------------- decoder

@pytest.mark.parametrize("feed_final", [False, True])
def test_teacher_forcing_equals_stepping_with_the_gold_inputs(feed_final):
    cfg = Seq2SeqConfig(V_SRC, V_TGT, d_emb=D_EMB, d_h=D_H, feed_final=feed_final)
    torch.manual_seed(0)
    encoder, decoder = Encoder(cfg).double(), Decoder(cfg).double()
    src, lengths = padded_source()
    enc = encoder(src, lengths)
    tgt_in = torch.tensor([[START, 4, 5, 6, 3], [START, 7, 0, 0, 0], [START, 8, 8, 3, 4]])
    logits = decoder(tgt_in, enc)  # (B, T, V)
    assert logits.shape == (3, 5, V_TGT)
    s = decoder.init_state(enc)  # (B, d_h)
    torch.testing.assert_close(s, enc.final, atol=0, rtol=0)
    for t in range(tgt_in.shape[1]):
        step_logits, s, weights = decoder.step(tgt_in[:, t], s, enc)
        assert weights is None
        torch.testing.assert_close(step_logits, logits[:, t], atol=1e-6, rtol=0)


def test_feed_final_changes_the_decoder_input_width():
    plain = Decoder(Seq2SeqConfig(V_SRC, V_TGT, d_emb=D_EMB, d_h=D_H))
    fed = Decoder(Seq2SeqConfig(V_SRC, V_TGT, d_emb=D_EMB, d_h=D_H, feed_final=True))
    assert plain.rnn.input_size == D_EMB and fed.rnn.input_size == D_EMB + D_H


def test_model_loss_is_cross_entropy_of_the_shifted_target():
    cfg = Seq2SeqConfig(V_SRC, V_TGT, d_emb=D_EMB, d_h=D_H)
    torch.manual_seed(0)
    model = Seq2Seq(cfg).double()
    src, lengths = padded_source()
    tgt = torch.tensor([[START, 4, 5, END, 0], [START, 7, END, 0, 0], [START, 8, 8, 3, END]])
    logits = model(src, lengths, tgt[:, :-1])  # (B, T, V)
    want = F.cross_entropy(logits.reshape(-1, V_TGT), tgt[:, 1:].reshape(-1), ignore_index=PAD)
    torch.testing.assert_close(model.loss(src, lengths, tgt), want, atol=1e-12, rtol=0)


# ----------------------------------------------------------------------------- loss

def random_logits_and_targets(dtype=torch.float64):
    torch.manual_seed(0)
    logits = torch.randn(3, 5, 6, dtype=dtype)  # (B, T, V)
    targets = torch.tensor([[3, 4, 2, 0, 0], [5, 2, 0, 0, 0], [1, 3, 4, 5, 2]])  # (B, T)
    return logits, targets


def test_padded_cross_entropy_equals_torch_ignore_index():
    logits, targets = random_logits_and_targets()
    ours = padded_cross_entropy(logits, targets)
    want = F.cross_entropy(logits.reshape(-1, 6), targets.reshape(-1), ignore_index=0)
    torch.testing.assert_close(ours, want, atol=1e-12, rtol=0)
    unmasked = F.cross_entropy(logits.reshape(-1, 6), targets.reshape(-1))
    assert abs(ours.item() - unmasked.item()) > 1e-3  # the padding really is left out
    # another pad id
    want5 = F.cross_entropy(logits.reshape(-1, 6), targets.reshape(-1), ignore_index=5)
    torch.testing.assert_close(padded_cross_entropy(logits, targets, pad_id=5), want5,
                               atol=1e-12, rtol=0)


@pytest.mark.parametrize("dtype, value", [
    (torch.float64, 1e308), (torch.float32, 3e38), (torch.float64, math.inf),
    (torch.float32, -math.inf), (torch.float32, math.nan),
])
def test_padding_logits_do_not_matter_even_huge(dtype, value):
    """Logits at padded positions are never read: huge, infinite or NaN, the loss is the same
    (multiplying the log-probabilities by a 0/1 mask turned -inf into NaN)."""
    logits, targets = random_logits_and_targets(dtype)
    reference = padded_cross_entropy(logits, targets)
    pad = targets == 0  # (B, T)
    wild = logits.clone()
    wild[pad] = value * torch.tensor([-1.0, 1.0, 1.0, 0.5, -1.0, 0.25], dtype=dtype)
    loss = padded_cross_entropy(wild, targets)
    assert torch.isfinite(loss)
    torch.testing.assert_close(loss, reference, atol=0, rtol=0)


def test_padding_positions_get_no_gradient():
    logits, targets = random_logits_and_targets()
    logits.requires_grad_(True)
    padded_cross_entropy(logits, targets).backward()
    assert (logits.grad[targets == 0] == 0).all()
    assert (logits.grad[targets != 0].abs().sum(-1) > 0).all()


def test_padded_cross_entropy_rejects_bad_inputs():
    logits, targets = random_logits_and_targets()
    with pytest.raises(ValueError, match="only padding"):
        padded_cross_entropy(logits, torch.zeros_like(targets))
    with pytest.raises(ValueError, match=r"targets must have shape \(3, 5\)"):
        padded_cross_entropy(logits, targets[:, :4])
    with pytest.raises(ValueError,
                       match=r"logits must be a floating-point tensor .*\(B, T, n_vocab\)"):
        padded_cross_entropy(logits.long(), targets)
    with pytest.raises(ValueError, match=r"targets must have dtype torch.int64"):
        padded_cross_entropy(logits, targets.float())


# ----------------------------------------------------------------------------- greedy decoding

class ScriptedStep:
    """A fake decoder step: at call t it puts the largest logit on script[b][t] for row b,
    records the inputs it was fed, and threads a counter through the state."""

    def __init__(self, script, vocab=8, weights_width=None):
        self.script = torch.tensor(script)  # (B, steps)
        self.vocab, self.weights_width = vocab, weights_width
        self.inputs, self.states = [], []

    def __call__(self, y_prev, state):
        self.inputs.append(y_prev.clone())
        self.states.append(state)
        t = len(self.inputs) - 1
        logits = torch.randn(len(y_prev), self.vocab) - 10.0  # (B, V)
        logits[torch.arange(len(y_prev)), self.script[:, t]] = 5.0
        if self.weights_width is None:
            return logits, state + 1
        weights = torch.full((len(y_prev), self.weights_width), float(t))  # (B, S)
        return logits, state + 1, weights


def test_greedy_decode_feeds_back_its_argmax_and_stops_rows_at_end():
    script = [[5, 6, END, 7, 7, 7],
              [7, END, 4, 4, 4, 4],
              [END, 3, 3, 3, 3, 3]]
    step = ScriptedStep(script)
    ids = greedy_decode(step, 0, 3, max_len=10)
    assert ids.tolist() == [[5, 6, END], [7, END, PAD], [END, PAD, PAD]]
    assert ids.dtype == torch.long
    assert len(step.inputs) == 3  # every row has ended after the 3rd call: no 4th call
    assert step.inputs[0].tolist() == [START] * 3
    assert step.inputs[1].tolist() == [5, 7, END]  # its own previous argmax
    assert step.inputs[2].tolist() == [6, END, 3]
    assert step.states == [0, 1, 2]  # the state returned by a step is the next step's state


def test_greedy_decode_respects_max_len_and_custom_ids():
    step = ScriptedStep([[4] * 10, [5] * 10])  # never ends
    ids = greedy_decode(step, 0, 2, max_len=4)
    assert ids.tolist() == [[4, 4, 4, 4], [5, 5, 5, 5]] and len(step.inputs) == 4
    step = ScriptedStep([[4, 6, 6], [6, 5, 5]])
    ids = greedy_decode(step, 0, 2, max_len=5, start_id=7, end_id=6, pad_id=3)
    assert ids.tolist() == [[4, 6], [6, 3]] and step.inputs[0].tolist() == [7, 7]


def test_greedy_decode_collects_weights_when_the_step_returns_them():
    step = ScriptedStep([[4, END, 9], [4, 4, END]], vocab=10, weights_width=3)
    ids, weights = greedy_decode(step, 0, 2, max_len=6, return_weights=True)
    assert ids.tolist() == [[4, END, PAD], [4, 4, END]]
    assert weights.shape == (2, 3, 3)  # (B, T_out, S)
    assert weights[:, :, 0].tolist() == [[0.0, 1.0, 2.0]] * 2  # step t's weights at position t
    ids, none = greedy_decode(ScriptedStep([[END]]), 0, 1, max_len=3, return_weights=True)
    assert ids.tolist() == [[END]] and none is None


def test_greedy_decode_rejects_bad_arguments():
    step = ScriptedStep([[END]])
    for bad in (0, -1, 2.0, True):
        with pytest.raises(ValueError, match="max_len must be a positive int"):
            greedy_decode(step, 0, 1, max_len=bad)
    for bad in (0, True, 1.0):
        with pytest.raises(ValueError, match="batch_size must be a positive int"):
            greedy_decode(step, 0, bad, max_len=3)
    with pytest.raises(ValueError, match=r"logits of shape \(2, n_vocab\)"):
        greedy_decode(lambda y, s: (torch.zeros(1, 5), s), 0, 2, max_len=3)  # one row only
    with pytest.raises(ValueError, match=r"logits of shape \(2, n_vocab\)"):
        greedy_decode(lambda y, s: (torch.zeros(2), s), 0, 2, max_len=3)  # no vocabulary axis


def test_translate_is_consistent_with_teacher_forcing_on_its_own_output():
    cfg = Seq2SeqConfig(V_SRC, V_TGT, d_emb=D_EMB, d_h=D_H, max_len=6)
    torch.manual_seed(3)
    model = Seq2Seq(cfg).double()
    src, lengths = padded_source()
    ids = model.translate(src, lengths)  # (B, T_out)
    assert ids.shape[0] == 3 and 1 <= ids.shape[1] <= 6
    assert model.translate(src, lengths, max_len=2).shape[1] <= 2
    with pytest.raises(ValueError, match="max_len must be a positive int"):
        model.translate(src, lengths, max_len=0)
    # feeding the translation back as the gold input, the argmax reproduces it
    tgt_in = torch.cat([torch.full((3, 1), START), ids[:, :-1]], dim=1)  # (B, T_out)
    argmax = model(src, lengths, tgt_in).argmax(-1)  # (B, T_out)
    for b in range(3):
        row = ids[b].tolist()
        n = row.index(END) + 1 if END in row else len(row)  # up to and including <end>
        assert argmax[b, :n].tolist() == row[:n]
        assert all(i == PAD for i in row[n:])


# ----------------------------------------------------------------------------- metrics

def test_exact_match_and_token_accuracy_by_hand():
    gold = torch.tensor([[5, 6, END, 0],
                         [7, END, 0, 0],
                         [8, 9, 4, END],
                         [5, 6, END, 0],
                         [5, 6, END, 0]])
    pred = torch.tensor([[5, 6, END, 0, 0],  # right (wider, padded)
                         [7, END, 0, 0, 0],  # right
                         [8, 9, 4, 3, END],  # one token wrong, <end> late
                         [5, 6, END, 9, 0],  # right, then goes on after <end>: not exact
                         [5, 6, 0, 0, 0]])  # stops without <end>
    assert exact_match(pred, gold).tolist() == [True, True, False, False, False]
    assert exact_match(pred, gold).dtype == torch.bool
    # real gold tokens: 3 + 2 + 4 + 3 + 3 = 15; right: 3 + 2 + 3 + 3 + 2 = 13
    assert token_accuracy(pred, gold) == pytest.approx(13 / 15)
    # a narrower prediction is padded: [5, 6] against [5, 6, <end>]
    short_pred, short_gold = torch.tensor([[5, 6]]), torch.tensor([[5, 6, END]])
    assert exact_match(short_pred, short_gold).tolist() == [False]
    assert token_accuracy(short_pred, short_gold) == pytest.approx(2 / 3)
    assert token_accuracy(gold, gold) == 1.0


def test_metrics_reject_bad_inputs():
    gold = torch.tensor([[5, END]])
    with pytest.raises(ValueError, match="same batch size"):
        exact_match(torch.tensor([[5, END], [5, END]]), gold)
    with pytest.raises(ValueError, match=r"pred must have dtype torch.int64.*\(B, T_out\)"):
        token_accuracy(gold.float(), gold)
    with pytest.raises(ValueError, match=r"gold must have shape \(B, T\)"):
        exact_match(gold, gold[0])
    with pytest.raises(ValueError, match="only padding"):
        token_accuracy(gold, torch.zeros_like(gold))


# ----------------------------------------------------------------------------- training

@pytest.fixture(scope="module")
def tiny():
    task = make_task(300, 50, seed=0, max_numbers=3)
    train_data = make_batch(task.train, task.src_vocab, task.tgt_vocab)
    test_data = make_batch(task.test, task.src_vocab, task.tgt_vocab)
    cfg = Seq2SeqConfig(len(task.src_vocab), len(task.tgt_vocab), d_emb=16, d_h=32)

    def run():
        torch.manual_seed(0)
        model = Seq2Seq(cfg)
        history = train(model, train_data, epochs=3, batch_size=64, progress=False,
                        generator=torch.Generator().manual_seed(0), eval_data=test_data)
        return model, history

    (model, first), (model2, second) = run(), run()  # one thread (see `one_thread`)
    return task, train_data, test_data, model, model2, first, second


def test_train_lowers_the_loss_and_is_deterministic(tiny):
    _, _, test_data, model, model2, first, second = tiny
    assert first.loss == second.loss  # identical losses, step by step
    assert first.metrics == second.metrics
    for p, q in zip(model.parameters(), model2.parameters(), strict=True):
        assert torch.equal(p, q)
    steps_per_epoch = math.ceil(300 / 64)
    assert first.steps_per_epoch == steps_per_epoch
    assert len(first.loss) == 3 * steps_per_epoch
    epoch_loss = first.epoch_loss()
    assert len(epoch_loss) == 3
    assert epoch_loss[0] > epoch_loss[1] > epoch_loss[2]
    assert epoch_loss[-1] < epoch_loss[0] - 0.1
    assert first.loss[-1] < first.loss[0] - 0.2
    # evaluated after every epoch, on the held-out data
    assert first.eval_step == [steps_per_epoch, 2 * steps_per_epoch, 3 * steps_per_epoch]
    assert list(first.metrics) == ["exact_match"] and len(first.metrics["exact_match"]) == 3
    assert all(0.0 <= a <= 1.0 for a in first.metrics["exact_match"])
    assert first.metrics["exact_match"][-1] == float(evaluate(model, test_data).float().mean())
    assert not model.training  # left in eval mode


def test_train_rejects_bad_epochs(tiny):
    _, train_data, _, model, _, _, _ = tiny
    with pytest.raises(ValueError, match="epochs must be a positive int"):
        train(model, train_data, epochs=0, progress=False)


def test_evaluate_matches_exact_match_of_translate_in_order(tiny):
    _, _, test_data, model, _, _, _ = tiny
    correct = evaluate(model, test_data)
    assert correct.shape == (50,) and correct.dtype == torch.bool
    pred = model.translate(test_data.src, test_data.src_lengths)
    assert torch.equal(correct, exact_match(pred, test_data.tgt[:, 1:]))
    assert torch.equal(evaluate(model, test_data, batch_size=7), correct)


class Oracle(nn.Module):
    """A fake model whose `translate` reads the source words and writes the true digits,
    except that it gets every pair whose first number is odd wrong."""

    def __init__(self, task):
        super().__init__()
        self.task = task
        self.words_to_n = {tuple(number_words(n)[0]): n for n in range(1, 100)}

    def translate(self, src, lengths):
        rows = []
        for ids, m in zip(src.tolist(), lengths.tolist(), strict=True):
            words = [self.task.src_vocab.tokens[i] for i in ids[:m]]
            numbers, current = [], []
            for w in [*words, ","]:
                if w == ",":
                    numbers.append(self.words_to_n[tuple(current)])
                    current = []
                else:
                    current.append(w)
            target = self.task.tgt_vocab.encode(NumberPair.of(numbers).target, end=True)
            if numbers[0] % 2:
                target[0] = self.task.tgt_vocab.ids["0"]
            rows.append(target)
        width = max(len(r) for r in rows)
        return torch.tensor([r + [PAD] * (width - len(r)) for r in rows])  # (B, T_out)


def test_evaluate_keeps_the_order_of_the_data(tiny):
    task, _, test_data, _, _, _, _ = tiny
    expected = torch.tensor([p.numbers[0] % 2 == 0 for p in task.test])
    assert 0 < int(expected.sum()) < len(expected)  # both outcomes occur
    for batch_size in (7, 50, 1000):
        assert torch.equal(evaluate(Oracle(task), test_data, batch_size=batch_size), expected)


# ----------------------------------------------------------------------------- config

def test_config_defaults_and_validation():
    cfg = Seq2SeqConfig(10, 12)
    assert (cfg.d_emb, cfg.d_h, cfg.max_len) == (32, 64, 40)
    assert cfg.feed_final is False and cfg.reverse_source is False
    for name in ("src_vocab_size", "tgt_vocab_size", "d_emb", "d_h", "max_len"):
        for bad in (0, -3, 2.0, True, "8"):
            kwargs = dict(src_vocab_size=10, tgt_vocab_size=12) | {name: bad}
            with pytest.raises(ValueError, match=f"{name} must be a positive int"):
                Seq2SeqConfig(**kwargs)
    for name in ("feed_final", "reverse_source"):
        for bad in ("False", 1, None):
            with pytest.raises(ValueError, match=f"{name} must be a bool"):
                Seq2SeqConfig(10, 12, **{name: bad})


def test_the_reference_refuses_grus_it_does_not_model():
    """A bidirectional or stacked encoder, or a GRU without biases, would be read wrongly
    (final[-1] is only the backward direction's state): refuse it, naming the expected GRU."""
    embedding = nn.Embedding(10, 4)
    src, lengths = torch.tensor([[4, 5, 6]]), torch.tensor([3])
    for rnn in (nn.GRU(4, 6, batch_first=True, bidirectional=True),
                nn.GRU(4, 6, batch_first=True, num_layers=2),
                nn.GRU(4, 6, batch_first=True, bias=False),
                nn.GRU(4, 6)):
        with pytest.raises(ValueError, match=r"nn.GRU\(input_size, hidden_size, batch_first"):
            encode(embedding, rnn, src, lengths)
    with pytest.raises(ValueError, match="with biases; got .* bias=False"):
        gru_step(torch.zeros(1, 4), torch.zeros(1, 6), nn.GRU(4, 6, bias=False))


def test_evaluate_refuses_targets_longer_than_max_len():
    task = make_task(20, 5, seed=0, min_numbers=10, max_numbers=12)
    data = make_batch(task.test, task.src_vocab, task.tgt_vocab)
    cfg = Seq2SeqConfig(len(task.src_vocab), len(task.tgt_vocab), d_emb=4, d_h=4,
                        max_len=10)
    with pytest.raises(ValueError, match="raise Seq2SeqConfig.max_len to at least"):
        evaluate(Seq2Seq(cfg), data)


def test_config_for_fills_the_vocabulary_sizes_from_the_task():
    task = make_task(20, 5, seed=0, max_numbers=3)
    cfg = config_for(task, d_h=16, attention="additive", bidirectional=True, max_len=30)
    assert cfg == Seq2SeqConfig(src_vocab_size=len(task.src_vocab),
                                tgt_vocab_size=len(task.tgt_vocab), d_h=16,
                                attention="additive", bidirectional=True, max_len=30)
    # 4 specials, the comma, "and", one..nineteen, the 8 tens; 4 specials, 10 digits, comma
    assert (cfg.src_vocab_size, cfg.tgt_vocab_size) == (33, 15)
    assert config_for(task) == Seq2SeqConfig(33, 15)
    with pytest.raises(ValueError, match="takes the vocabulary sizes from the task; do not "
                                         "pass src_vocab_size"):
        config_for(task, src_vocab_size=40)
    with pytest.raises(ValueError, match="task must be a translation.TranslationTask"):
        config_for(make_batch(task.train, task.src_vocab, task.tgt_vocab))
    with pytest.raises(ValueError, match="d_h must be a positive int"):
        config_for(task, d_h=0)
    with pytest.raises(ValueError, match="config_class must be a config dataclass"):
        config_for(task, dict)


def test_config_rejects_settings_that_would_be_ignored():
    with pytest.raises(ValueError, match="d_a is the width of the additive score"):
        Seq2SeqConfig(10, 12, attention="dot", d_a=8)
    with pytest.raises(ValueError, match="d_a is the width of the additive score"):
        Seq2SeqConfig(10, 12, d_a=8)
    with pytest.raises(ValueError, match="leave reverse_source False"):
        Seq2SeqConfig(10, 12, bidirectional=True, reverse_source=True)
    with pytest.raises(ValueError, match="attention must be one of"):
        Seq2SeqConfig(10, 12, attention="luong")
    assert Seq2SeqConfig(10, 12, d_h=8).d_enc == 8
    assert Seq2SeqConfig(10, 12, d_h=8, bidirectional=True).d_enc == 16


# ----------------------------------------------------------------- bidirectional, no attention

def test_bidirectional_decoder_without_attention_starts_from_w_init_of_both_directions():
    cfg = Seq2SeqConfig(V_SRC, V_TGT, d_emb=D_EMB, d_h=D_H, bidirectional=True)
    torch.manual_seed(0)
    model = Seq2Seq(cfg).double()
    assert isinstance(model.decoder, Decoder)
    assert model.decoder.w_init.weight.shape == (D_H, 2 * D_H)
    src, lengths = padded_source()
    enc = model.encoder(src, lengths)
    assert enc.states.shape == (3, 6, 2 * D_H) and enc.final.shape == (3, 2 * D_H)
    s0 = model.decoder.init_state(enc)
    w, b = model.decoder.w_init.weight, model.decoder.w_init.bias
    torch.testing.assert_close(s0, torch.tanh(enc.final @ w.T + b), atol=1e-12, rtol=0)
    # the same code as the attention decoder's: seq2seq.initial_state
    torch.testing.assert_close(s0, initial_state(enc, model.decoder.w_init), atol=0, rtol=0)
    # [fwd h_S; bwd h_1]: each row's forward state after its last real word, backward after x_1
    for b_, m in enumerate(lengths.tolist()):
        torch.testing.assert_close(enc.final[b_, :D_H], enc.states[b_, m - 1, :D_H],
                                   atol=0, rtol=0)
        torch.testing.assert_close(enc.final[b_, D_H:], enc.states[b_, 0, D_H:], atol=0, rtol=0)
    # unidirectional: no W_init, s_0 = h_S exactly
    plain = Decoder(Seq2SeqConfig(V_SRC, V_TGT, d_emb=D_EMB, d_h=D_H))
    assert plain.w_init is None


def test_bidirectional_decoder_without_attention_ignores_padding_and_steps_like_it_forces():
    cfg = Seq2SeqConfig(V_SRC, V_TGT, d_emb=D_EMB, d_h=D_H, bidirectional=True, max_len=7)
    torch.manual_seed(1)
    model = Seq2Seq(cfg).double()
    src, lengths = padded_source()
    tgt_in = torch.tensor([[START, 4, 5, 6], [START, 7, 0, 0], [START, 8, 8, 3]])
    logits = model(src, lengths, tgt_in)
    assert logits.shape == (3, 4, V_TGT)
    wider = F.pad(src, (0, 4), value=PAD)  # more padding changes nothing
    torch.testing.assert_close(model(wider, lengths, tgt_in), logits, atol=1e-12, rtol=0)
    enc = model.encoder(src, lengths)
    s = model.decoder.init_state(enc)
    for t in range(tgt_in.shape[1]):  # one step at a time = teacher forcing
        step_logits, s, weights = model.decoder.step(tgt_in[:, t], s, enc)
        assert weights is None
        torch.testing.assert_close(step_logits, logits[:, t], atol=1e-10, rtol=0)
    ids = model.translate(src, lengths)
    assert ids.shape[0] == 3 and ids.shape[1] <= 7


def test_bidirectional_feed_final_reads_the_whole_encoder_width():
    cfg = Seq2SeqConfig(V_SRC, V_TGT, d_emb=D_EMB, d_h=D_H, bidirectional=True, feed_final=True)
    torch.manual_seed(2)
    model = Seq2Seq(cfg).double()
    assert model.decoder.rnn.input_size == D_EMB + 2 * D_H
    src, lengths = padded_source()
    tgt_in = torch.tensor([[START, 4], [START, 7], [START, 8]])
    logits = model(src, lengths, tgt_in)
    enc = model.encoder(src, lengths)
    s = model.decoder.init_state(enc)
    for t in range(2):
        step_logits, s, _ = model.decoder.step(tgt_in[:, t], s, enc)
        torch.testing.assert_close(step_logits, logits[:, t], atol=1e-10, rtol=0)


def test_bidirectional_model_without_attention_trains(tiny):
    task, train_data, test_data, _, _, _, _ = tiny
    torch.manual_seed(0)
    model = Seq2Seq(config_for(task, d_emb=16, d_h=16, bidirectional=True))
    history = train(model, train_data, epochs=3, batch_size=64, progress=False,
                    generator=torch.Generator().manual_seed(0))
    epoch_loss = history.epoch_loss()
    assert epoch_loss[-1] < epoch_loss[0] - 0.1
    assert history.metrics == {} and history.eval_step == []
