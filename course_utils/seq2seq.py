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

Unit 03 adds attention (Bahdanau et al. 2014), built by `Seq2SeqConfig(attention="additive")`
(or any name of SCORE_FUNCTIONS; `bidirectional=True` for an encoder that reads both ways):

    alpha_t' = masked_softmax(score(s_{t'-1}, h_1..h_m))   c_t' = sum_t alpha_t't h_t
    s_t'     = GRU_dec with c_t' in every gate (`context_gru_step`)   logits = W_out s_t'

`AttentionDecoder.step` returns the weights (B, S) as a third item, which `greedy_decode`
collects into (B, L, S); `alignment_hit_rate` compares them with the task's true alignment.
`train`, `evaluate` and `translate` work for both decoders.

Shapes: B batch, S source length, T target length, E embedding width, H hidden width,
C encoder state width (H, or 2H when bidirectional), V vocabulary size. Ids are int64
with <pad> = 0, <start> = 1, <end> = 2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from tqdm.auto import tqdm

from course_utils import attention
from course_utils._checks import shape_str
from course_utils.data.vocab import minibatches

__all__ = [
    "SCORE_FUNCTIONS",
    "Attention",
    "AttentionDecoder",
    "Decoder",
    "Encoder",
    "EncoderOutput",
    "Seq2Seq",
    "Seq2SeqConfig",
    "alignment_hit_rate",
    "context_gru_step",
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
# the attention scores of unit 03/04 (see `Attention`); "bilinear" is "multiplicative"
SCORE_FUNCTIONS = ("additive", "multiplicative", "bilinear", "dot", "scaled_dot", "cosine")


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


def _check_gru(rnn, name: str, batch_first: bool = True, bidirectional: bool = False) -> None:
    """The reference code reads one layer with biases, of one direction unless told otherwise
    (a bidirectional GRU read as a unidirectional one would give wrong states)."""
    if not isinstance(rnn, nn.GRU):
        raise ValueError(f"{name} must be an nn.GRU; got {type(rnn).__name__}")
    if (rnn.num_layers != 1 or rnn.bidirectional != bidirectional or not rnn.bias
            or (batch_first and not rnn.batch_first)):
        direction = "both directions" if bidirectional else "one direction"
        raise ValueError(f"{name} must be nn.GRU(input_size, hidden_size, batch_first=True"
                         f"{', bidirectional=True' if bidirectional else ''}): one layer, "
                         f"{direction}, with biases; got num_layers={rnn.num_layers}, "
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
    # unit 03: None = unit 02's decoder; a name of SCORE_FUNCTIONS = the attention decoder
    attention: str | None = None
    attention_dim: int | None = None  # d_a of additive scores; None = hidden
    bidirectional: bool = False  # encoder reads both ways: states (B, S, 2H) (attention only)

    def __post_init__(self):
        for name in ("src_vocab_size", "tgt_vocab_size", "emb_dim", "hidden", "max_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive int; got {value!r}")
        for name in ("feed_final", "reverse_source", "bidirectional"):
            if not isinstance(getattr(self, name), bool):  # "False" would silently mean True
                raise ValueError(f"{name} must be a bool; got {getattr(self, name)!r}")
        if self.attention is not None and self.attention not in SCORE_FUNCTIONS:
            raise ValueError(f"attention must be None or one of {SCORE_FUNCTIONS}; "
                             f"got {self.attention!r}")
        dim = self.attention_dim
        if dim is not None and (not isinstance(dim, int) or isinstance(dim, bool) or dim < 1):
            raise ValueError(f"attention_dim must be None or a positive int; got {dim!r}")
        if self.attention is None and self.bidirectional:
            raise ValueError("bidirectional=True needs attention: unit 02's decoder starts from "
                             "the final state of one direction")
        if self.attention is not None and (self.feed_final or self.reverse_source):
            raise ValueError("with attention, leave feed_final and reverse_source False: the "
                             "context c_t replaces the final state, and the attention weights "
                             "index the source in its own order")

    @property
    def encoder_width(self) -> int:
        """C, the width of an encoder state: hidden, or 2 * hidden when bidirectional."""
        return 2 * self.hidden if self.bidirectional else self.hidden


# ----------------------------------------------------------------------------- encoder

class EncoderOutput(NamedTuple):
    """What the encoder hands the decoder.

    states (B, S, H): h_1..h_m for each sequence, zero at padded positions;
    final (B, H): h_m, the state after the last real token; mask (B, S) bool, True = real.
    A bidirectional encoder gives states (B, S, 2H), h_t = [fwd h_t; bwd h_t], and final
    (B, 2H) = [fwd h_m; bwd h_1] (each direction's state after reading the whole source).
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
           reverse: bool = False, bidirectional: bool = False) -> EncoderOutput:
    """Run the encoder GRU over each source sequence, ignoring its padding.

        h_t = GRU(E x_t, h_{t-1}),  h_0 = 0;   final = h_{lengths[b]} for row b

    The sequences are packed (`pack_padded_sequence`), so the GRU never reads a <pad>: the
    final state is the state after the last real token and does not change when more
    padding is added. With `reverse`, each sequence is read backwards (padding stays right).

    With `bidirectional` (and `rnn` an nn.GRU(..., bidirectional=True)), a second GRU reads
    each sequence from x_m back to x_1 (packing starts it at the last real token, not at the
    padding), and h_t = [fwd h_t; bwd h_t] knows the words on both sides of x_t:
    states (B, S, 2H), final (B, 2H) = [fwd h_m; bwd h_1].

    src: (B, S) int64 ids, lengths: (B,) int64 in 1..S.
    Returns EncoderOutput(states (B, S, H), final (B, H), mask (B, S)) (2H when bidirectional).
    """
    _check_source(src, lengths)
    _check_gru(rnn, "rnn (the encoder)", bidirectional=bidirectional)
    if reverse:
        src = reverse_padded(src, lengths)  # (B, S)
    x = embedding(src)  # (B, S) -> (B, S, E)
    packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
    packed_states, final = rnn(packed)  # final: (directions, B, H)
    states, _ = pad_packed_sequence(packed_states, batch_first=True,
                                    total_length=src.shape[1])  # (B, S, H or 2H), 0 on padding
    mask = torch.arange(src.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)  # (B, S)
    if bidirectional:
        return EncoderOutput(states, torch.cat([final[0], final[1]], dim=1), mask)  # (B, 2H)
    return EncoderOutput(states, final[-1], mask)  # final[-1]: (1, B, H) -> (B, H)


class Encoder(nn.Module):
    """Embedding + one-layer GRU over the source; see `encode`."""

    def __init__(self, cfg: Seq2SeqConfig):
        super().__init__()
        self.cfg = cfg
        self.embedding = nn.Embedding(cfg.src_vocab_size, cfg.emb_dim, padding_idx=PAD_ID)
        self.rnn = nn.GRU(cfg.emb_dim, cfg.hidden, batch_first=True,
                          bidirectional=cfg.bidirectional)

    def forward(self, src: torch.Tensor, lengths: torch.Tensor) -> EncoderOutput:
        """src (B, S), lengths (B,) -> EncoderOutput(states (B, S, C), final (B, C), mask),
        C = cfg.encoder_width (H, or 2H when bidirectional)."""
        return encode(self.embedding, self.rnn, src, lengths, reverse=self.cfg.reverse_source,
                      bidirectional=self.cfg.bidirectional)


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


# ----------------------------------------------------------------------------- attention (unit 03)

def context_gru_step(y: torch.Tensor, c: torch.Tensor, s: torch.Tensor, w_y: torch.Tensor,
                     w_c: torch.Tensor, w_s: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """One step of the attention decoder's GRU, which reads the context c in every gate:

        r  = sigma(W_yr y + W_sr s + W_cr c + b_r)            reset gate
        z  = sigma(W_yz y + W_sz s + W_cz c + b_z)            update gate
        s~ = tanh(W_ys y + W_ss (s * r) + W_cs c + b_s)       candidate state
        s' = z * s + (1 - z) * s~

    Since W_y y + W_c c = [W_y | W_c] [y; c], this *is* a GRU whose input is the
    concatenation [y; c] and whose input weight is [W_y | W_c]: "context in every gate" and
    "[y; c] as the GRU input" are one model. The cell is the one of Cho et al. (2014) and
    Bahdanau et al. (2014): the reset gate multiplies s *before* W_ss. PyTorch's nn.GRU and
    nn.GRUCell (and `gru_step`) multiply after it, r * (W_hn s + b_hn), a slightly different
    cell; the two agree when W_ss is diagonal and the hidden-side bias is 0. In both, z
    keeps the old state.

    The three gates are stacked in the order r, z, s~ (as PyTorch stacks r, z, n):
    y: (B, E) embedded previous token, c: (B, C) context, s: (B, H) previous state,
    w_y: (3H, E), w_c: (3H, C), w_s: (3H, H), bias: (3H,)  ->  s' (B, H)
    """
    _require_float(y, "y (embedded previous token)", "(B, E)", 2)
    _require_float(c, "c (context)", "(B, C)", 2)
    _require_float(s, "s (previous state)", "(B, H)", 2)
    batch, hidden = s.shape
    expected = {"y": (batch, w_y.shape[1]), "c": (batch, w_c.shape[1]), "s": (batch, hidden)}
    weights = {"w_y": (3 * hidden, y.shape[1]), "w_c": (3 * hidden, c.shape[1]),
               "w_s": (3 * hidden, hidden), "bias": (3 * hidden,)}
    got = {"y": y, "c": c, "s": s, "w_y": w_y, "w_c": w_c, "w_s": w_s, "bias": bias}
    if any(tuple(got[k].shape) != v for k, v in {**expected, **weights}.items()):
        want = ", ".join(f"{k} {shape_str(v)}" for k, v in {**expected, **weights}.items())
        have = ", ".join(f"{k} {shape_str(v.shape)}" for k, v in got.items())
        raise ValueError(f"context_gru_step expects {want}; got {have}")
    g_y = y @ w_y.T + bias  # (B, E) @ (E, 3H) -> (B, 3H)
    g_c = c @ w_c.T  # (B, C) @ (C, 3H) -> (B, 3H)
    y_r, y_z, y_s = g_y.split(hidden, dim=1)  # 3 x (B, H)
    c_r, c_z, c_s = g_c.split(hidden, dim=1)  # 3 x (B, H)
    w_sr, w_sz, w_ss = w_s.split(hidden, dim=0)  # 3 x (H, H)
    r = torch.sigmoid(y_r + s @ w_sr.T + c_r)  # (B, H)
    z = torch.sigmoid(y_z + s @ w_sz.T + c_z)  # (B, H)
    s_tilde = torch.tanh(y_s + (s * r) @ w_ss.T + c_s)  # (B, H)
    return z * s + (1 - z) * s_tilde  # (B, H)


class Attention(nn.Module):
    """Score the decoder's previous state against every encoder state, normalise, mix.

        e_t = score(s_{t'-1}, h_t),   alpha = masked_softmax(e, mask),   c = sum_t alpha_t h_t

    Keys and values are the encoder states h_t (B, S, C); the query is s (B, H). `score`
    names one of the functions of `course_utils.attention`:

        "additive"        v . tanh(W_q s + W_k h)   (Bahdanau)      additive_scores
        "multiplicative"  h^T W s  (Luong's "general"; "bilinear" is the same)  bilinear_scores
        "dot"             h . s                     (needs C == H)  dot_scores
        "scaled_dot"      h . s / sqrt(H)           (needs C == H)  scaled_dot_scores
        "cosine"          g * h . s / (|h| |s|)     (needs C == H)  cosine_scores, times a
                                                    learned scale g (init 1), since scores in
                                                    [-1, 1] cannot make a sharp softmax

    The additive score's key side W_k h does not depend on the decoder step: `prepare` computes
    it once per batch, and `scores(..., prepared)` then adds only W_q s at each step (the
    same numbers as `additive_scores`, which recomputes W_k h every call).
    """

    def __init__(self, score: str, query_dim: int, key_dim: int, attention_dim: int):
        super().__init__()
        if score not in SCORE_FUNCTIONS:
            raise ValueError(f"score must be one of {SCORE_FUNCTIONS}; got {score!r}")
        if score in ("dot", "scaled_dot", "cosine") and query_dim != key_dim:
            raise ValueError(f"the {score!r} score compares s and h directly, so the decoder "
                             f"state (H = {query_dim}) and the encoder state (C = {key_dim}) "
                             f"must have the same width; use 'multiplicative' or 'additive'")
        self.score = score
        self.query_dim, self.key_dim = query_dim, key_dim
        if score == "additive":
            self.w_q = nn.Parameter(nn.Linear(query_dim, attention_dim, bias=False).weight.data)
            self.w_k = nn.Parameter(nn.Linear(key_dim, attention_dim, bias=False).weight.data)
            bound = 1 / math.sqrt(attention_dim)
            self.v = nn.Parameter(torch.empty(attention_dim).uniform_(-bound, bound))  # (d_a,)
        elif score in ("multiplicative", "bilinear"):
            self.w = nn.Parameter(nn.Linear(query_dim, key_dim, bias=False).weight.data)  # (C, H)
        elif score == "cosine":
            self.log_scale = nn.Parameter(torch.zeros(()))  # g = exp(log_scale) > 0

    def prepare(self, keys: torch.Tensor) -> torch.Tensor:
        """What the scores need from the keys at every step: W_k h (B, S, d_a) for the
        additive score, the keys (B, S, C) themselves for the others."""
        _require_float(keys, "keys (encoder states)", "(B, S, C)", 3)
        if self.score == "additive":
            return keys @ self.w_k.T  # (B, S, C) @ (C, d_a) -> (B, S, d_a)
        return keys

    def scores(self, query: torch.Tensor, keys: torch.Tensor,
               prepared: torch.Tensor | None = None) -> torch.Tensor:
        """Raw scores e (B, S) of query s (B, H) against keys h (B, S, C)."""
        q = query.unsqueeze(1)  # (B, H) -> (B, 1, H): one query per row
        if self.score == "additive" and prepared is not None:
            from_q = (query @ self.w_q.T).unsqueeze(1)  # (B, d_a) -> (B, 1, d_a)
            return torch.tanh(from_q + prepared) @ self.v  # (B, S, d_a) @ (d_a,) -> (B, S)
        if self.score == "additive":
            e = attention.additive_scores(q, keys, self.w_q, self.w_k, self.v)  # (B, 1, S)
        elif self.score in ("multiplicative", "bilinear"):
            e = attention.bilinear_scores(q, keys, self.w)  # (B, 1, S)
        elif self.score == "dot":
            e = attention.dot_scores(q, keys)  # (B, 1, S)
        elif self.score == "scaled_dot":
            e = attention.scaled_dot_scores(q, keys)  # (B, 1, S)
        else:
            e = attention.cosine_scores(q, keys) * self.log_scale.exp()  # (B, 1, S)
        return e.squeeze(1)  # (B, S)

    def forward(self, query: torch.Tensor, keys: torch.Tensor, mask: torch.Tensor,
                prepared: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """query s (B, H), keys = values = h (B, S, C), mask (B, S) bool (True = real token)
        -> (context c (B, C), weights alpha (B, S)); padding gets weight exactly 0."""
        _require_float(query, "query (decoder state)", "(B, H)", 2)
        _require_float(keys, "keys (encoder states)", "(B, S, C)", 3)
        batch, width = query.shape[0], keys.shape[2]
        if query.shape[1] != self.query_dim or keys.shape[0] != batch or width != self.key_dim:
            raise ValueError(f"attention expects query (B, {self.query_dim}) and keys "
                             f"(B, S, {self.key_dim}) with the same B; got query "
                             f"{shape_str(query.shape)}, keys {shape_str(keys.shape)}")
        if not isinstance(mask, torch.Tensor) or mask.shape != keys.shape[:2]:
            got = shape_str(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise ValueError(f"mask must be a bool tensor of shape "
                             f"{shape_str(keys.shape[:2])} (B, S); got {got}")
        e = self.scores(query, keys, prepared)  # (B, S)
        alpha = attention.masked_softmax(e.unsqueeze(1), mask.unsqueeze(1))  # (B, 1, S)
        context = (alpha @ keys).squeeze(1)  # (B, 1, S) @ (B, S, C) -> (B, 1, C) -> (B, C)
        return context, alpha.squeeze(1)  # (B, C), (B, S)


class AttentionDecoder(nn.Module):
    """The decoder of Bahdanau et al. (2014): a GRU that reads a fresh context at each step.

        alpha_{t'} = masked_softmax(score(s_{t'-1}, h_1..h_m))          weights (B, S)
        c_{t'}     = sum_t alpha_{t't} h_t                               context (B, C)
        s_{t'}     = context_gru_step(E y_{t'-1}, c_{t'}, s_{t'-1})      state   (B, H)
        logits     = W_out s_{t'} + b_out                                (B, V)

    s_0 = h_m (the last encoder state) for a unidirectional encoder; for a bidirectional one
    s_0 = tanh(W_init [fwd h_m; bwd h_1] + b_init) (Bahdanau et al. start from the backward
    state alone; both directions' summaries cost nothing more).

    Teacher forcing cannot be one nn.GRU call, since c_{t'} depends on s_{t'-1}: `forward`
    loops over the T steps. It computes once per batch what does not depend on the step:
    the token's share of the gates W_y E y + b for all T steps, the key projection of the
    additive score, and the output layer over all T states at the end.
    """

    def __init__(self, cfg: Seq2SeqConfig):
        super().__init__()
        if cfg.attention is None:
            raise ValueError("AttentionDecoder needs cfg.attention, a name of "
                             f"{SCORE_FUNCTIONS}; got None")
        self.cfg = cfg
        hidden, width = cfg.hidden, cfg.encoder_width
        self.embedding = nn.Embedding(cfg.tgt_vocab_size, cfg.emb_dim, padding_idx=PAD_ID)
        self.attention = Attention(cfg.attention, hidden, width, cfg.attention_dim or hidden)
        self.w_y = nn.Linear(cfg.emb_dim, 3 * hidden)  # W_yr, W_yz, W_ys stacked; b_r, b_z, b_s
        self.w_c = nn.Linear(width, 3 * hidden, bias=False)  # W_cr, W_cz, W_cs
        self.w_s = nn.Linear(hidden, 3 * hidden, bias=False)  # W_sr, W_sz, W_ss
        self.init = nn.Linear(width, hidden) if cfg.bidirectional else None
        self.out = nn.Linear(hidden, cfg.tgt_vocab_size)

    def init_state(self, enc: EncoderOutput) -> torch.Tensor:
        """s_0 (B, H): h_m, or tanh(W_init [fwd h_m; bwd h_1] + b_init) when bidirectional."""
        if self.init is None:
            return enc.final
        return torch.tanh(self.init(enc.final))  # (B, 2H) -> (B, H)

    def _check(self, enc: EncoderOutput, batch: int) -> None:
        width = self.cfg.encoder_width
        _require_float(enc.states, "enc.states", f"(B, S, {width})", 3)
        if enc.states.shape[0] != batch or enc.states.shape[2] != width:
            raise ValueError(f"enc.states must have shape ({batch}, S, {width}); got "
                             f"{shape_str(enc.states.shape)}")
        if enc.mask.dtype != torch.bool or enc.mask.shape != enc.states.shape[:2]:
            raise ValueError(f"enc.mask must be bool of shape {shape_str(enc.states.shape[:2])}"
                             f"; got {enc.mask.dtype} {shape_str(enc.mask.shape)}")

    def step(self, y_prev: torch.Tensor, s_prev: torch.Tensor, enc: EncoderOutput
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step, written out: y_prev (B,), s_prev (B, H) ->
        (logits (B, V), s (B, H), weights alpha (B, S))."""
        _require_ids(y_prev, "y_prev (previous tokens)", "(B,)", 1)
        _require_float(s_prev, "s_prev (previous decoder state)", f"(B, {self.cfg.hidden})", 2)
        self._check(enc, y_prev.shape[0])
        c, alpha = self.attention(s_prev, enc.states, enc.mask)  # (B, C), (B, S)
        y = self.embedding(y_prev)  # (B,) -> (B, E)
        s = context_gru_step(y, c, s_prev, self.w_y.weight, self.w_c.weight, self.w_s.weight,
                             self.w_y.bias)  # (B, H)
        return self.out(s), s, alpha  # (B, V), (B, H), (B, S)

    def forward(self, tgt_in: torch.Tensor, enc: EncoderOutput, return_weights: bool = False):
        """Teacher forcing: tgt_in (B, T) = <start> y_1 .. y_{T-1} -> logits (B, T, V)
        (and, with `return_weights`, the weights (B, T, S)). The same numbers as T calls of
        `step` with the gold tokens."""
        _require_ids(tgt_in, "tgt_in", "(B, T)", 2)
        self._check(enc, tgt_in.shape[0])
        hidden = self.cfg.hidden
        g_y = self.w_y(self.embedding(tgt_in))  # (B, T, E) -> (B, T, 3H), all steps at once
        g_y = g_y.unbind(dim=1)  # T x (B, 3H) (indexing g_y[:, t] would make backward fill
        #                          a zero (B, T, 3H) gradient for every step)
        prepared = self.attention.prepare(enc.states)  # (B, S, d_a) or (B, S, C)
        w_srz, w_ss = self.w_s.weight[: 2 * hidden], self.w_s.weight[2 * hidden:]  # (2H|H, H)
        s = self.init_state(enc)  # (B, H)
        states, weights = [], []
        for t in range(tgt_in.shape[1]):
            c, alpha = self.attention(s, enc.states, enc.mask, prepared)  # (B, C), (B, S)
            g = torch.addmm(g_y[t], c, self.w_c.weight.T)  # (B, 3H) + (B, C) @ (C, 3H)
            rz = torch.sigmoid(torch.addmm(g[:, : 2 * hidden], s, w_srz.T))  # (B, 2H)
            r, z = rz.chunk(2, dim=1)  # 2 x (B, H)
            s_tilde = torch.tanh(torch.addmm(g[:, 2 * hidden:], s * r, w_ss.T))  # (B, H)
            s = torch.lerp(s_tilde, s, z)  # s~ + z * (s - s~) = z * s + (1 - z) * s~
            states.append(s)
            weights.append(alpha)
        logits = self.out(torch.stack(states, dim=1))  # T x (B, H) -> (B, T, H) -> (B, T, V)
        if return_weights:
            return logits, torch.stack(weights, dim=1)  # (B, T, S)
        return logits


def alignment_hit_rate(weights: torch.Tensor, pairs, exclude: str | tuple[str, ...] = ()
                       ) -> float:
    """How often the attention of a target character peaks on the source word it is read from:

        hits / total,  over every pair i and target position t < len(pairs[i].target)
                       whose character pairs[i].target[t] is not in `exclude`:
        hit when t < L and argmax_j weights[i, t, j] == pairs[i].sources[t]

    weights: (N, L, S) float, row i for pairs[i] (a `NumberPair`), step t the weights used to
    write target character t (from `translate(..., return_weights=True)` or the teacher-forced
    `AttentionDecoder.forward(..., return_weights=True)`); S at least the longest source.
    The <end> step is not counted (it is read from no word). A step that greedy decoding never
    reached (t >= L) counts as a miss. `exclude=","` leaves out the commas, whose true
    source (the comma between the same two numbers) says nothing that another comma's state
    could not say as well. Returns a float in [0, 1].
    """
    _require_float(weights, "weights", "(N, L, S)", 3)
    pairs = list(pairs)
    if weights.shape[0] != len(pairs):
        raise ValueError(f"weights must have shape ({len(pairs)}, L, S), one row per pair; got "
                         f"{shape_str(weights.shape)}")
    if not pairs:
        raise ValueError("there are no pairs to score")
    longest = max(len(p.source) for p in pairs)
    if weights.shape[2] < longest:
        raise ValueError(f"weights must have at least {longest} source columns (the longest "
                         f"source); got {shape_str(weights.shape)}")
    peak = weights.argmax(dim=2).tolist()  # (N, L)
    hits = total = 0
    for i, pair in enumerate(pairs):
        for t, (char, source) in enumerate(zip(pair.target, pair.sources, strict=True)):
            if char in exclude:
                continue
            total += 1
            hits += t < len(peak[i]) and peak[i][t] == source
    if total == 0:
        raise ValueError(f"every target character is in exclude={exclude!r}: nothing to score")
    return hits / total


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
        if decoder is None:
            decoder = Decoder(cfg) if cfg.attention is None else AttentionDecoder(cfg)
        self.decoder = decoder

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
          desc: str = "training", progress: bool = True, schedule: str = "constant"
          ) -> dict[str, list[float]]:
    """Train with Adam and teacher forcing on `data` (a `translation.TranslationBatch`).

    Each epoch visits every example once in minibatches drawn with `generator`; gradients
    are clipped to norm `clip`. The learning rate is `lr` throughout (`schedule="constant"`)
    or falls linearly from `lr` at the first step to lr / n_steps at the last
    (`schedule="linear"`: large steps early, small ones to settle at the end).
    After each epoch, if `eval_data` is given, the exact-match accuracy of greedy decoding on
    it is recorded. One tqdm progress bar counts the steps.
    Returns {"loss": mean loss per epoch, "step_loss": every step's loss,
    "eval_exact": exact match per epoch (empty without eval_data)}.
    """
    if not isinstance(epochs, int) or epochs < 1:
        raise ValueError(f"epochs must be a positive int; got {epochs!r}")
    if schedule not in ("constant", "linear"):
        raise ValueError(f"schedule must be 'constant' or 'linear'; got {schedule!r}")
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    history: dict[str, list[float]] = {"loss": [], "step_loss": [], "eval_exact": []}
    steps_per_epoch = math.ceil(len(data) / batch_size)
    n_steps = epochs * steps_per_epoch
    if schedule == "linear":  # step k = 0 .. n_steps - 1 uses lr * (n_steps - k) / n_steps
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: 1 - k / n_steps)
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
            if schedule == "linear":
                scheduler.step()
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
