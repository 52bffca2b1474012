"""Sequence to sequence with GRUs: encoder, decoder, teacher forcing, greedy decoding.

One file, read top to bottom. The model of unit 02 (Sutskever et al. 2014, Cho et al. 2014):

    encoder   h_t = GRU_enc(E_src x_t, h_{t-1}),        t = 1..m          states (B, S, H)
    bridge    s_0 = h_m                                  (the last *real* token, not padding)
    decoder   s_t = GRU_dec([E_tgt y_{t-1}; c], s_{t-1}),  y_0 = <start>
              p(y_t | y_<t, x) = softmax(W_out s_t + b_out)                  logits (B, V)

`c` is empty by default; with `feed_final=True` it is h_m at every step (the second of the
two old tricks; the first, reversing the source, is `reverse_source=True`). Encoder and
decoder have separate weights.

Training uses teacher forcing: the decoder reads the gold y_{t-1} and all T steps run in one
call of `nn.GRU`. Testing uses greedy decoding: the decoder reads its own previous argmax,
one step at a time, until it writes <end> (each sequence on its own) or `max_len` steps.

Extension points for unit 03 (attention): the encoder returns every state (B, S, H) and the
source mask (B, S), not only the final state; `Decoder.step` receives the whole
`EncoderOutput` and may return attention weights as a third item, which `greedy_decode`
collects.

Shapes: B batch, S source length, T target length, E embedding width, H hidden width,
V vocabulary size. Ids are int64 with <pad> = 0, <start> = 1, <end> = 2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from tqdm.auto import tqdm

from course_utils._checks import shape_str
from course_utils.data.vocab import minibatches

__all__ = [
    "Decoder",
    "Encoder",
    "EncoderOutput",
    "Seq2Seq",
    "Seq2SeqConfig",
    "decoder_step",
    "encode",
    "evaluate",
    "exact_match",
    "greedy_decode",
    "gru_step",
    "padded_cross_entropy",
    "reverse_padded",
    "token_accuracy",
    "train",
]

PAD_ID, START_ID, END_ID = 0, 1, 2


# ----------------------------------------------------------------------------- checks

def _require_ids(x, name: str, expected: str, ndim: int) -> None:
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{name} must be an int64 torch.Tensor of shape {expected}; "
                         f"got {type(x).__name__}")
    if x.dtype != torch.long:
        raise ValueError(f"{name} must have dtype torch.int64 (token ids), shape {expected}; "
                         f"got dtype {x.dtype}")
    if x.dim() != ndim:
        raise ValueError(f"{name} must have shape {expected}; got shape {shape_str(x.shape)}")


def _require_float(x, name: str, expected: str, ndim: int) -> None:
    if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point:
        got = f"dtype {x.dtype}" if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"{name} must be a floating-point tensor of shape {expected}; got {got}")
    if x.dim() != ndim:
        raise ValueError(f"{name} must have shape {expected}; got shape {shape_str(x.shape)}")


def _check_gru(rnn, name: str, batch_first: bool = True) -> None:
    """The reference code reads one layer of one direction, with biases."""
    if not isinstance(rnn, nn.GRU):
        raise ValueError(f"{name} must be an nn.GRU; got {type(rnn).__name__}")
    if (rnn.num_layers != 1 or rnn.bidirectional or not rnn.bias
            or (batch_first and not rnn.batch_first)):
        raise ValueError(f"{name} must be nn.GRU(input_size, hidden_size, batch_first=True): one "
                         f"layer, one direction, with biases; got num_layers={rnn.num_layers}, "
                         f"bidirectional={rnn.bidirectional}, bias={rnn.bias}, "
                         f"batch_first={rnn.batch_first}")


def _check_source(src, lengths) -> None:
    _require_ids(src, "src", "(B, S)", 2)
    _require_ids(lengths, "lengths", "(B,)", 1)
    if lengths.shape[0] != src.shape[0]:
        raise ValueError(f"lengths must have shape ({src.shape[0]},), one per row of src "
                         f"{shape_str(src.shape)}; got {shape_str(lengths.shape)}")
    if src.shape[0] and (int(lengths.min()) < 1 or int(lengths.max()) > src.shape[1]):
        raise ValueError(f"lengths must lie in 1..{src.shape[1]} (the width of src); got "
                         f"{int(lengths.min())}..{int(lengths.max())}")


# ----------------------------------------------------------------------------- config

@dataclass
class Seq2SeqConfig:
    """Sizes and switches of the encoder-decoder."""

    src_vocab_size: int
    tgt_vocab_size: int
    emb_dim: int = 32
    hidden: int = 64
    feed_final: bool = False  # concatenate h_m to the decoder's input at every step
    reverse_source: bool = False  # read x_m .. x_1 instead of x_1 .. x_m
    max_len: int = 40  # greedy decoding stops after this many steps at the latest

    def __post_init__(self):
        for name in ("src_vocab_size", "tgt_vocab_size", "emb_dim", "hidden", "max_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int; got {value!r}")
        for name in ("feed_final", "reverse_source"):
            if not isinstance(getattr(self, name), bool):  # "False" would silently mean True
                raise ValueError(f"{name} must be a bool; got {getattr(self, name)!r}")


# ----------------------------------------------------------------------------- encoder

class EncoderOutput(NamedTuple):
    """What the encoder hands the decoder.

    states (B, S, H): h_1..h_m for each sequence, zero at padded positions;
    final (B, H): h_m, the state after the last real token; mask (B, S) bool, True = real.
    """

    states: torch.Tensor
    final: torch.Tensor
    mask: torch.Tensor


def reverse_padded(ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse the first lengths[b] tokens of each row, leaving the padding where it is.

    [[a, b, c, 0], [d, e, 0, 0]] with lengths [3, 2] -> [[c, b, a, 0], [e, d, 0, 0]]
    ids: (B, S), lengths: (B,) -> (B, S)
    """
    _check_source(ids, lengths)
    positions = torch.arange(ids.shape[1]).unsqueeze(0)  # (1, S)
    last = lengths.unsqueeze(1) - 1  # (B, 1)
    source = torch.where(positions <= last, last - positions, positions)  # (B, S) index to read
    return ids.gather(1, source)  # (B, S)


def encode(embedding: nn.Embedding, rnn: nn.GRU, src: torch.Tensor, lengths: torch.Tensor,
           reverse: bool = False) -> EncoderOutput:
    """Run the encoder GRU over each source sequence, ignoring its padding.

        h_t = GRU(E x_t, h_{t-1}),  h_0 = 0;   final = h_{lengths[b]} for row b

    The sequences are packed (`pack_padded_sequence`), so the GRU never reads a <pad>: the
    final state is the state after the last real token and does not change when more
    padding is added. With `reverse`, each sequence is read backwards (padding stays right).

    src: (B, S) int64 ids, lengths: (B,) int64 in 1..S.
    Returns EncoderOutput(states (B, S, H), final (B, H), mask (B, S)).
    """
    _check_source(src, lengths)
    _check_gru(rnn, "rnn (the encoder)")
    if reverse:
        src = reverse_padded(src, lengths)  # (B, S)
    x = embedding(src)  # (B, S) -> (B, S, E)
    packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
    packed_states, final = rnn(packed)  # final: (num_layers=1, B, H)
    states, _ = pad_packed_sequence(packed_states, batch_first=True,
                                    total_length=src.shape[1])  # (B, S, H), zeros on padding
    mask = torch.arange(src.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)  # (B, S)
    return EncoderOutput(states, final[-1], mask)  # final[-1]: (1, B, H) -> (B, H)


class Encoder(nn.Module):
    """Embedding + one-layer GRU over the source; see `encode`."""

    def __init__(self, cfg: Seq2SeqConfig):
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(cfg.src_vocab_size, cfg.emb_dim, padding_idx=PAD_ID)
        self.rnn = nn.GRU(cfg.emb_dim, cfg.hidden, batch_first=True)

    def forward(self, src: torch.Tensor, lengths: torch.Tensor) -> EncoderOutput:
        """src (B, S), lengths (B,) -> EncoderOutput(states (B, S, H), final (B, H), mask)."""
        return encode(self.embedding, self.rnn, src, lengths, reverse=self.cfg.reverse_source)


# ----------------------------------------------------------------------------- decoder

def gru_step(x: torch.Tensor, s: torch.Tensor, rnn: nn.GRU) -> torch.Tensor:
    """One step of a GRU with the weights of `rnn` (layer 0), written out:

        r  = sigma(W_ir x + b_ir + W_hr s + b_hr)          reset gate
        z  = sigma(W_iz x + b_iz + W_hz s + b_hz)          update gate
        n  = tanh(W_in x + b_in + r * (W_hn s + b_hn))     candidate state
        s' = (1 - z) * n + z * s

    This is PyTorch's convention (`nn.GRU`): the reset gate multiplies W_hn s + b_hn. Cho et
    al. write W (r * s) instead, which is a slightly different (equally good) cell.
    x: (B, E), s: (B, H) -> (B, H)
    """
    _require_float(x, "x (decoder input)", "(B, E)", 2)
    _require_float(s, "s (previous state)", "(B, H)", 2)
    _check_gru(rnn, "rnn", batch_first=False)  # only its weights are read
    hidden = rnn.hidden_size
    if x.shape[1] != rnn.input_size or s.shape != (x.shape[0], hidden):
        raise ValueError(f"gru_step expects x ({x.shape[0]}, {rnn.input_size}) and s "
                         f"({x.shape[0]}, {hidden}); got x {shape_str(x.shape)}, "
                         f"s {shape_str(s.shape)}")
    gi = x @ rnn.weight_ih_l0.T + rnn.bias_ih_l0  # (B, E) @ (E, 3H) -> (B, 3H)
    gh = s @ rnn.weight_hh_l0.T + rnn.bias_hh_l0  # (B, H) @ (H, 3H) -> (B, 3H)
    i_r, i_z, i_n = gi.split(hidden, dim=1)  # 3 x (B, H), PyTorch's order: r, z, n
    h_r, h_z, h_n = gh.split(hidden, dim=1)  # 3 x (B, H)
    r = torch.sigmoid(i_r + h_r)  # (B, H)
    z = torch.sigmoid(i_z + h_z)  # (B, H)
    n = torch.tanh(i_n + r * h_n)  # (B, H)
    return (1 - z) * n + z * s  # (B, H)


def decoder_step(embedding: nn.Embedding, rnn: nn.GRU, out: nn.Linear, y_prev: torch.Tensor,
                 s_prev: torch.Tensor, extra: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """One decoder step: read the previous token, update the state, score the next token.

        s_t = GRU([E y_{t-1}; extra], s_{t-1}),   logits_t = W_out s_t + b_out

    y_prev: (B,) int64, s_prev: (B, H), extra: (B, C) or None (the final encoder state when
    it is fed to every step). Returns (logits (B, V), s_t (B, H)).
    """
    _require_ids(y_prev, "y_prev (previous tokens)", "(B,)", 1)
    _require_float(s_prev, "s_prev (previous decoder state)", "(B, H)", 2)
    x = embedding(y_prev)  # (B,) -> (B, E)
    if extra is not None:
        x = torch.cat([x, extra], dim=1)  # (B, E) + (B, C) -> (B, E + C)
    s = gru_step(x, s_prev, rnn)  # (B, H)
    return out(s), s  # (B, V), (B, H)


class Decoder(nn.Module):
    """The decoder GRU and its output layer.

    `forward` runs all T steps with teacher forcing in one `nn.GRU` call; `step` runs one
    step (for greedy decoding) with the same weights. Subclasses (unit 03) override
    `init_state`, `forward` and `step`.
    """

    def __init__(self, cfg: Seq2SeqConfig):
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(cfg.tgt_vocab_size, cfg.emb_dim, padding_idx=PAD_ID)
        extra = cfg.hidden if cfg.feed_final else 0
        self.rnn = nn.GRU(cfg.emb_dim + extra, cfg.hidden, batch_first=True)
        self.out = nn.Linear(cfg.hidden, cfg.tgt_vocab_size)

    def init_state(self, enc: EncoderOutput) -> torch.Tensor:
        """s_0 = h_m: (B, H)."""
        return enc.final

    def forward(self, tgt_in: torch.Tensor, enc: EncoderOutput) -> torch.Tensor:
        """Teacher forcing: tgt_in (B, T) = <start> y_1 .. y_{T-1} -> logits (B, T, V)."""
        _require_ids(tgt_in, "tgt_in", "(B, T)", 2)
        x = self.embedding(tgt_in)  # (B, T) -> (B, T, E)
        if self.cfg.feed_final:
            c = enc.final.unsqueeze(1).expand(-1, tgt_in.shape[1], -1)  # (B, H) -> (B, T, H)
            x = torch.cat([x, c], dim=2)  # (B, T, E + H)
        s0 = self.init_state(enc).unsqueeze(0)  # (B, H) -> (1, B, H), nn.GRU's layout
        states, _ = self.rnn(x, s0)  # (B, T, H)
        return self.out(states)  # (B, T, H) -> (B, T, V)

    def step(self, y_prev: torch.Tensor, s_prev: torch.Tensor, enc: EncoderOutput
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """One step: y_prev (B,), s_prev (B, H) -> (logits (B, V), s (B, H), weights None)."""
        extra = enc.final if self.cfg.feed_final else None  # (B, H) or None
        logits, s = decoder_step(self.embedding, self.rnn, self.out, y_prev, s_prev, extra)
        return logits, s, None


# ----------------------------------------------------------------------------- loss

def padded_cross_entropy(logits: torch.Tensor, targets: torch.Tensor, pad_id: int = PAD_ID
                         ) -> torch.Tensor:
    """Cross-entropy averaged over the real (non-pad) target tokens of the whole batch:

        loss = - sum_{b,t: y_bt != pad} log softmax(logits_bt)[y_bt] / #{b,t: y_bt != pad}

    A padded position adds nothing to the sum and nothing to the count. (Equal to
    `nn.CrossEntropyLoss(ignore_index=pad_id)` on the flattened tensors.)
    logits: (B, T, V) float, targets: (B, T) int64 -> scalar.
    """
    _require_float(logits, "logits", "(B, T, V)", 3)
    _require_ids(targets, "targets", "(B, T)", 2)
    if targets.shape != logits.shape[:2]:
        raise ValueError(f"targets must have shape {shape_str(logits.shape[:2])} to match "
                         f"logits {shape_str(logits.shape)}; got {shape_str(targets.shape)}")
    real = targets != pad_id  # (B, T)
    if not real.any():
        raise ValueError("targets hold only padding: there is no token to average over")
    log_p = torch.log_softmax(logits, dim=-1)  # (B, T, V)
    picked = log_p.gather(2, targets.unsqueeze(2)).squeeze(2)  # (B, T, 1) -> (B, T)
    picked = torch.where(real, picked, 0.0)  # not picked * real: -inf * 0 would be NaN
    return -picked.sum() / real.sum()


# ----------------------------------------------------------------------------- greedy decoding

def greedy_decode(step, state, batch_size: int, *, max_len: int, start_id: int = START_ID,
                  end_id: int = END_ID, pad_id: int = PAD_ID, return_weights: bool = False):
    """Greedy decoding: start from <start>, feed back the argmax, stop at <end>.

        y_0 = <start>;  logits, s_t = step(y_{t-1}, s_{t-1});  y_t = argmax logits

    `step(y_prev (B,), state) -> (logits (B, V), state)` or `(logits, state, weights (B, S))`.
    Each row stops at its own first <end>: the <end> is kept and every later position is
    <pad>. The loop stops when every row has ended, or after `max_len` steps.

    Returns ids (B, L) int64 with L <= max_len; with `return_weights`, (ids, weights) where
    weights is (B, L, S) if `step` returned weights, else None.
    """
    if not isinstance(max_len, int) or isinstance(max_len, bool) or max_len < 1:
        raise ValueError(f"max_len must be a positive int; got {max_len!r}")
    if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int; got {batch_size!r}")
    y = torch.full((batch_size,), start_id, dtype=torch.long)  # (B,)
    done = torch.zeros(batch_size, dtype=torch.bool)  # (B,) has this row written <end>?
    outputs, weights = [], []
    for _ in range(max_len):
        result = step(y, state)
        logits, state = result[0], result[1]  # (B, V), new state
        if logits.shape[0] != batch_size or logits.dim() != 2:
            raise ValueError(f"step must return logits of shape ({batch_size}, V); "
                             f"got {shape_str(logits.shape)}")
        if len(result) > 2 and result[2] is not None:
            weights.append(result[2])  # (B, S)
        y = logits.argmax(dim=-1)  # (B,) the model's own choice is the next input
        outputs.append(torch.where(done, torch.full_like(y, pad_id), y))  # (B,)
        done = done | (y == end_id)
        if bool(done.all()):
            break
    ids = torch.stack(outputs, dim=1)  # L x (B,) -> (B, L)
    if not return_weights:
        return ids
    return ids, (torch.stack(weights, dim=1) if weights else None)  # (B, L, S)


# ----------------------------------------------------------------------------- the model

class Seq2Seq(nn.Module):
    """Encoder + decoder. `forward` is teacher forcing, `translate` greedy decoding."""

    def __init__(self, cfg: Seq2SeqConfig, decoder: Decoder | None = None):
        super().__init__()
        self.cfg = cfg
        self.encoder = Encoder(cfg)
        self.decoder = decoder if decoder is not None else Decoder(cfg)

    def forward(self, src, lengths, tgt_in) -> torch.Tensor:
        """src (B, S), lengths (B,), tgt_in (B, T) -> logits (B, T, V)."""
        return self.decoder(tgt_in, self.encoder(src, lengths))

    def loss(self, src, lengths, tgt) -> torch.Tensor:
        """tgt (B, T + 1) = <start> y_1 .. y_n <end> <pad>..: read tgt[:, :-1], predict
        tgt[:, 1:], padded cross-entropy (a scalar)."""
        logits = self(src, lengths, tgt[:, :-1])  # (B, T, V)
        return padded_cross_entropy(logits, tgt[:, 1:])

    @torch.no_grad()
    def translate(self, src, lengths, max_len: int | None = None, return_weights=False):
        """Greedy decoding of a batch: ids (B, L) (and weights (B, L, S) or None)."""
        enc = self.encoder(src, lengths)
        s0 = self.decoder.init_state(enc)  # (B, H)
        return greedy_decode(lambda y, s: self.decoder.step(y, s, enc), s0, src.shape[0],
                             max_len=self.cfg.max_len if max_len is None else max_len,
                             return_weights=return_weights)


# ----------------------------------------------------------------------------- metrics

def _align_widths(pred: torch.Tensor, gold: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    _require_ids(pred, "pred", "(B, L)", 2)
    _require_ids(gold, "gold", "(B, T)", 2)
    if pred.shape[0] != gold.shape[0]:
        raise ValueError(f"pred and gold must have the same batch size; got "
                         f"{shape_str(pred.shape)} and {shape_str(gold.shape)}")
    width = max(pred.shape[1], gold.shape[1])
    pad = lambda x: nn.functional.pad(x, (0, width - x.shape[1]), value=PAD_ID)  # noqa: E731
    return pad(pred), pad(gold)  # (B, W), (B, W)


def exact_match(pred: torch.Tensor, gold: torch.Tensor) -> torch.Tensor:
    """Per sequence: is the prediction equal to the gold target up to and including <end>,
    with nothing but <pad> after it?

    Both are padded with <pad> to the same width and compared at every position, so a
    prediction that is right up to <end> but has other tokens after it does not count
    (`greedy_decode` writes only <pad> after <end>, so its output is never penalised for
    this); nor does one that stops early or never writes <end>.
    pred (B, L) from `greedy_decode`, gold (B, T) = y_1 .. y_n <end> <pad>.. -> (B,) bool.
    """
    p, g = _align_widths(pred, gold)
    return (p == g).all(dim=1)  # (B, W) -> (B,)


def token_accuracy(pred: torch.Tensor, gold: torch.Tensor) -> float:
    """Share of the real gold tokens (<end> included, <pad> not) that the prediction has
    right at the same position:  #{b,t: gold_bt != pad, pred_bt = gold_bt} / #{gold_bt != pad}.

    Positions where gold is <pad> are not counted, so (unlike `exact_match`) tokens a
    prediction writes after the gold <end> cost nothing here.
    """
    p, g = _align_widths(pred, gold)
    real = g != PAD_ID  # (B, W)
    if not real.any():
        raise ValueError("gold holds only padding: there is no token to score")
    return float(((p == g) & real).sum() / real.sum())


# ----------------------------------------------------------------------------- training

def train(model: Seq2Seq, data, *, epochs: int, batch_size: int = 64, lr: float = 3e-3,
          generator: torch.Generator | None = None, clip: float = 1.0, eval_data=None,
          desc: str = "training", progress: bool = True) -> dict[str, list[float]]:
    """Train with Adam and teacher forcing on `data` (a `translation.TranslationBatch`).

    Each epoch visits every example once in minibatches drawn with `generator`; gradients
    are clipped to norm `clip`. After each epoch, if `eval_data` is given, the exact-match
    accuracy of greedy decoding on it is recorded. One tqdm progress bar counts the steps.
    Returns {"loss": mean loss per epoch, "step_loss": every step's loss,
    "eval_exact": exact match per epoch (empty without eval_data)}.
    """
    if not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be a positive int; got {epochs!r}")
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    history: dict[str, list[float]] = {"loss": [], "step_loss": [], "eval_exact": []}
    steps_per_epoch = math.ceil(len(data) / batch_size)
    bar = tqdm(total=epochs * steps_per_epoch, desc=desc, leave=False, disable=not progress)
    for _ in range(epochs):
        model.train()
        losses = []
        for index in minibatches(len(data), batch_size, generator=generator):
            batch = data[index]
            loss = model.loss(batch.src, batch.src_lengths, batch.tgt)
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            losses.append(loss.item())
            bar.update(1)
        history["step_loss"].extend(losses)
        history["loss"].append(sum(losses) / len(losses))
        if eval_data is not None:
            history["eval_exact"].append(float(evaluate(model, eval_data).float().mean()))
    bar.close()
    model.eval()
    return history


def evaluate(model: Seq2Seq, data, batch_size: int = 1000) -> torch.Tensor:
    """Exact match of greedy decoding for every example of `data` (a TranslationBatch):
    (N,) bool, in the order of `data`."""
    longest = data.tgt.shape[1] - 1  # y_1 .. y_n <end>, without <start>
    cfg = getattr(model, "cfg", None)
    if cfg is not None and longest > cfg.max_len:
        raise ValueError(f"the longest target has {longest} tokens (with <end>) but greedy "
                         f"decoding stops after max_len = {cfg.max_len}: raise "
                         f"Seq2SeqConfig.max_len to at least {longest}")
    model.eval()
    correct = []
    for index in minibatches(len(data), batch_size, shuffle=False):
        batch = data[index]
        pred = model.translate(batch.src, batch.src_lengths)  # (b, L)
        correct.append(exact_match(pred, batch.tgt[:, 1:]))  # (b,)
    return torch.cat(correct)  # (N,)
