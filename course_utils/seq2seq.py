"""Sequence to sequence with GRUs (unit 02): the config, the encoder, the decoder, greedy
decoding, the padded loss and the metrics (the last three live in `course_utils.sequence`,
which the Transformer shares; this module offers them under its name too).

One file, read top to bottom. The model of unit 02 (Sutskever et al. 2014, Cho et al. 2014):

    encoder   h_t = GRU_enc(E_src x_t, h_{t-1}),        t = 1..S          states (B, S, d_h)
    bridge    s_0 = h_S                                  (the last *real* token, not padding)
    decoder   s_t = GRU_dec([E_tgt y_{t-1}; c], s_{t-1}),  y_0 = <start>
              p(y_t | y_<t, x) = softmax(W_o s_t + b_o)                       logits (B, n_vocab)

`c` is empty by default; with `feed_final=True` it is h_S at every step (the second of the
two old tricks; the first, reversing the source, is `reverse_source=True`). Encoder and
decoder have separate weights. With `bidirectional=True` the encoder reads both ways, its
states are (B, S, d_enc) with d_enc = 2 d_h, and the decoder starts from
s_0 = tanh(W_init [fwd h_S; bwd h_1] + b_init) (`initial_state`, shared with unit 03's
attention decoder, so that the two decoders can be compared with one recipe).

Training uses teacher forcing: the decoder reads the gold y_{t-1} and all T steps run in one
call of `nn.GRU`. Testing uses greedy decoding: the decoder reads its own previous argmax,
one step at a time, until it writes <end> (each sequence on its own) or `max_len` steps.

Unit 03's attention decoders (Bahdanau's and Luong's) are `course_utils.attention_decoder`;
the assembled model (`Seq2Seq`), `train` and `evaluate` are `course_utils.translator`.

Notation: B batch, S source length, T target length, n_vocab vocabulary size, d_emb embedding
width, d_h GRU state width, d_enc encoder state width (d_h, or 2 d_h bidirectional), d_a the
additive score's width. Ids are int64 with <pad> = PAD_ID, <start> = START_ID, <end> = END_ID
(`course_utils.data.vocab`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

import torch
import torch.nn as nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from course_utils._checks import (
    require_bool,
    require_choice,
    require_float_tensor,
    require_gru,
    require_ids,
    require_int,
    require_source,
    shape_str,
)
from course_utils.data.vocab import PAD_ID

# Unit 02's exercise asks for these four as this module's, and its tests switch this module's
# functions off (grading.reference_disabled): so they are its names too. Everything else,
# lectures included, imports them from course_utils.sequence.
from course_utils.sequence import (  # noqa: F401
    exact_match,
    greedy_decode,
    padded_cross_entropy,
    token_accuracy,
)

__all__ = [
    "ATTENTION_DECODERS",
    "SCORE_FUNCTIONS",
    "Decoder",
    "Encoder",
    "EncoderOutput",
    "Seq2SeqConfig",
    "decoder_step",
    "encode",
    "exact_match",
    "greedy_decode",
    "gru_step",
    "initial_state",
    "padded_cross_entropy",
    "reverse_padded",
    "token_accuracy",
]

# the attention scores of units 03/04 (`attention_decoder.Attention`); "bilinear" is
# "multiplicative"
SCORE_FUNCTIONS = ("additive", "multiplicative", "bilinear", "dot", "scaled_dot", "cosine")
# unit 03's two attention decoders: Bahdanau et al. (2014), `attention_decoder.AttentionDecoder`;
# Luong et al. (2015), `attention_decoder.LuongDecoder`
ATTENTION_DECODERS = ("bahdanau", "luong")


# ----------------------------------------------------------------------------- config

@dataclass
class Seq2SeqConfig:
    """Sizes and switches of the encoder-decoder (units 02-04)."""

    src_vocab_size: int  # n_vocab of the source
    tgt_vocab_size: int  # n_vocab of the target
    d_emb: int = 32  # embedding width
    d_h: int = 64  # GRU state width (encoder and decoder)
    feed_final: bool = False  # concatenate h_S to the decoder's input at every step
    reverse_source: bool = False  # read x_S .. x_1 instead of x_1 .. x_S
    max_len: int = 40  # greedy decoding stops after this many steps at the latest
    # unit 03: None = unit 02's decoder; a name of SCORE_FUNCTIONS = the attention decoder
    attention: str | None = None
    d_a: int | None = None  # width of the additive score; None = d_h ("additive" only)
    bidirectional: bool = False  # encoder reads both ways: states (B, S, 2 d_h)
    # unit 03, with attention: "bahdanau" scores s_{t'-1} and feeds c_{t'} into the GRU;
    # "luong" scores s_{t'} and feeds the attentional state tanh(W_c [c_{t'}; s_{t'}]) to the
    # output layer (ATTENTION_DECODERS)
    decoder: str = "bahdanau"
    input_feeding: bool = True  # "luong" only: the GRU also reads the last attentional state

    def __post_init__(self):
        for name in ("src_vocab_size", "tgt_vocab_size", "d_emb", "d_h", "max_len"):
            require_int(getattr(self, name), name)
        for name in ("feed_final", "reverse_source", "bidirectional", "input_feeding"):
            require_bool(getattr(self, name), name)
        if self.attention is not None:
            require_choice(self.attention, "attention", (None, *SCORE_FUNCTIONS))
        require_choice(self.decoder, "decoder", ATTENTION_DECODERS)
        if self.decoder == "luong" and self.attention is None:
            raise ValueError("decoder='luong' is an attention decoder: it needs attention, a name "
                             f"of {SCORE_FUNCTIONS} ('multiplicative' is Luong's 'general')")
        if not self.input_feeding and self.decoder != "luong":
            raise ValueError("input_feeding=False switches off the input feeding of "
                             f"decoder='luong'; got decoder={self.decoder!r}")
        if self.d_a is not None:
            require_int(self.d_a, "d_a")
            if self.attention != "additive":
                raise ValueError(f"d_a is the width of the additive score; it needs "
                                 f"attention='additive', got attention={self.attention!r}")
        if self.bidirectional and self.reverse_source:
            raise ValueError("with bidirectional=True leave reverse_source False: the encoder "
                             "already reads the source both ways")
        if self.attention is not None and (self.feed_final or self.reverse_source):
            raise ValueError("with attention, leave feed_final and reverse_source False: the "
                             "context c_t replaces the final state, and the attention weights "
                             "index the source in its own order")

    @property
    def d_enc(self) -> int:
        """The width of an encoder state: d_h, or 2 d_h when bidirectional."""
        return 2 * self.d_h if self.bidirectional else self.d_h


# ----------------------------------------------------------------------------- encoder

class EncoderOutput(NamedTuple):
    """What the encoder hands the decoder.

    states (B, S, d_h): h_1..h_S for each sequence, zero at padded positions;
    final (B, d_h): h_S, the state after the last real token; mask (B, S) bool, True = real.
    A bidirectional encoder gives states (B, S, 2 d_h), h_t = [fwd h_t; bwd h_t], and final
    (B, 2 d_h) = [fwd h_S; bwd h_1] (each direction's state after reading the whole source).
    """

    states: torch.Tensor
    final: torch.Tensor
    mask: torch.Tensor


def reverse_padded(ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Reverse the first lengths[b] tokens of each row, leaving the padding where it is.

    [[a, b, c, 0], [d, e, 0, 0]] with lengths [3, 2] -> [[c, b, a, 0], [e, d, 0, 0]]
    ids: (B, S), lengths: (B,) -> (B, S)
    """
    require_source(ids, lengths)
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
    each sequence from x_S back to x_1 (packing starts it at the last real token, not at the
    padding), and h_t = [fwd h_t; bwd h_t] knows the words on both sides of x_t:
    states (B, S, 2 d_h), final (B, 2 d_h) = [fwd h_S; bwd h_1].

    src: (B, S) int64 ids, lengths: (B,) int64 in 1..S.
    Returns EncoderOutput(states (B, S, d_enc), final (B, d_enc), mask (B, S)).
    """
    require_source(src, lengths)
    require_gru(rnn, "rnn (the encoder)", bidirectional=bidirectional)
    if reverse:
        src = reverse_padded(src, lengths)  # (B, S)
    x = embedding(src)  # (B, S) -> (B, S, d_emb)
    packed = pack_padded_sequence(x, lengths.cpu(), batch_first=True, enforce_sorted=False)
    packed_states, final = rnn(packed)  # final: (directions, B, d_h)
    states, _ = pad_packed_sequence(packed_states, batch_first=True,
                                    total_length=src.shape[1])  # (B, S, d_enc), 0 on padding
    mask = torch.arange(src.shape[1]).unsqueeze(0) < lengths.unsqueeze(1)  # (B, S)
    if bidirectional:
        return EncoderOutput(states, torch.cat([final[0], final[1]], dim=1), mask)  # (B, 2 d_h)
    return EncoderOutput(states, final[-1], mask)  # final[-1]: (1, B, d_h) -> (B, d_h)


class Encoder(nn.Module):
    """Embedding + one-layer GRU over the source; see `encode`."""

    def __init__(self, config: Seq2SeqConfig):
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.src_vocab_size, config.d_emb, padding_idx=PAD_ID)
        self.rnn = nn.GRU(config.d_emb, config.d_h, batch_first=True,
                          bidirectional=config.bidirectional)

    def forward(self, src: torch.Tensor, lengths: torch.Tensor) -> EncoderOutput:
        """src (B, S), lengths (B,) -> EncoderOutput(states (B, S, d_enc), final (B, d_enc),
        mask (B, S))."""
        return encode(self.embedding, self.rnn, src, lengths, reverse=self.config.reverse_source,
                      bidirectional=self.config.bidirectional)


def initial_state(enc: EncoderOutput, w_init: nn.Linear | None) -> torch.Tensor:
    """The decoder's first state s_0 (B, d_h), for both decoders of units 02 and 03:

        s_0 = h_S                                   unidirectional encoder (w_init None)
        s_0 = tanh(W_init [fwd h_S; bwd h_1] + b_init)   bidirectional: w_init an
                                                    nn.Linear(2 d_h, d_h)

    (Bahdanau et al. start from the backward state alone; both directions' summaries cost
    nothing more.)
    """
    require_float_tensor(enc.final, "enc.final", "(B, d_enc)", ndim=2)
    if w_init is None:
        return enc.final
    if enc.final.shape[1] != w_init.in_features:
        raise ValueError(f"enc.final must have shape (B, {w_init.in_features}) = [fwd h_S; "
                         f"bwd h_1] for W_init; got {shape_str(enc.final.shape)}")
    return torch.tanh(w_init(enc.final))  # (B, 2 d_h) -> (B, d_h)


# ----------------------------------------------------------------------------- decoder

def gru_step(x: torch.Tensor, s: torch.Tensor, rnn: nn.GRU) -> torch.Tensor:
    """One step of a GRU with the weights of `rnn` (layer 0), written out:

        r  = sigma(W_ir x + b_ir + W_hr s + b_hr)          reset gate
        z  = sigma(W_iz x + b_iz + W_hz s + b_hz)          update gate
        n  = tanh(W_in x + b_in + r * (W_hn s + b_hn))     candidate state
        s' = (1 - z) * n + z * s

    This is PyTorch's convention (`nn.GRU`): the reset gate multiplies W_hn s + b_hn. Cho et
    al. write W_hn (r * s) instead, which is a slightly different (equally good) cell.
    x: (B, d_in), s: (B, d_h) -> (B, d_h)
    """
    require_float_tensor(x, "x (decoder input)", "(B, d_in)", ndim=2)
    require_float_tensor(s, "s (previous state)", "(B, d_h)", ndim=2)
    require_gru(rnn, "rnn", batch_first=False)  # only its weights are read
    d_h = rnn.hidden_size
    if x.shape[1] != rnn.input_size or s.shape != (x.shape[0], d_h):
        raise ValueError(f"gru_step expects x ({x.shape[0]}, {rnn.input_size}) and s "
                         f"({x.shape[0]}, {d_h}); got x {shape_str(x.shape)}, "
                         f"s {shape_str(s.shape)}")
    gi = x @ rnn.weight_ih_l0.T + rnn.bias_ih_l0  # (B, d_in) @ (d_in, 3 d_h) -> (B, 3 d_h)
    gh = s @ rnn.weight_hh_l0.T + rnn.bias_hh_l0  # (B, d_h) @ (d_h, 3 d_h) -> (B, 3 d_h)
    i_r, i_z, i_n = gi.split(d_h, dim=1)  # 3 x (B, d_h), PyTorch's order: r, z, n
    h_r, h_z, h_n = gh.split(d_h, dim=1)  # 3 x (B, d_h)
    r = torch.sigmoid(i_r + h_r)  # (B, d_h)
    z = torch.sigmoid(i_z + h_z)  # (B, d_h)
    n = torch.tanh(i_n + r * h_n)  # (B, d_h)
    return (1 - z) * n + z * s  # (B, d_h)


def decoder_step(embedding: nn.Embedding, rnn: nn.GRU, out: nn.Linear, y_prev: torch.Tensor,
                 s_prev: torch.Tensor, extra: torch.Tensor | None = None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
    """One decoder step: read the previous token, update the state, score the next token.

        s_t = GRU([E y_{t-1}; extra], s_{t-1}),   logits_t = W_o s_t + b_o

    y_prev: (B,) int64, s_prev: (B, d_h), extra: (B, d_enc) or None (the final encoder
    state when it is fed to every step). Returns (logits (B, n_vocab), s_t (B, d_h)).
    """
    require_ids(y_prev, "y_prev (previous tokens)", "(B,)", 1)
    require_float_tensor(s_prev, "s_prev (previous decoder state)", "(B, d_h)", ndim=2)
    x = embedding(y_prev)  # (B,) -> (B, d_emb)
    if extra is not None:
        x = torch.cat([x, extra], dim=1)  # (B, d_emb) + (B, d_enc) -> (B, d_emb + d_enc)
    s = gru_step(x, s_prev, rnn)  # (B, d_h)
    return out(s), s  # (B, n_vocab), (B, d_h)


class Decoder(nn.Module):
    """Unit 02's decoder: a GRU and its output layer, started from `initial_state`.

    `forward` runs all T steps with teacher forcing in one `nn.GRU` call; `step` runs one
    step (for greedy decoding) with the same weights. With a bidirectional encoder it owns
    W_init (`w_init`, as the attention decoder does); otherwise s_0 = h_S.
    """

    def __init__(self, config: Seq2SeqConfig):
        super().__init__()
        self.config = config
        self.embedding = nn.Embedding(config.tgt_vocab_size, config.d_emb, padding_idx=PAD_ID)
        extra = config.d_enc if config.feed_final else 0
        self.rnn = nn.GRU(config.d_emb + extra, config.d_h, batch_first=True)
        self.w_init = nn.Linear(config.d_enc, config.d_h) if config.bidirectional else None
        # W_o (n_vocab, d_h), b_o (n_vocab,)
        self.out = nn.Linear(config.d_h, config.tgt_vocab_size)

    def init_state(self, enc: EncoderOutput) -> torch.Tensor:
        """s_0 (B, d_h): h_S, or tanh(W_init [fwd h_S; bwd h_1] + b_init) when bidirectional."""
        return initial_state(enc, self.w_init)

    def forward(self, tgt_in: torch.Tensor, enc: EncoderOutput) -> torch.Tensor:
        """Teacher forcing: tgt_in (B, T) = <start> y_1 .. y_{T-1} -> logits (B, T, n_vocab)."""
        require_ids(tgt_in, "tgt_in", "(B, T)", 2)
        x = self.embedding(tgt_in)  # (B, T) -> (B, T, d_emb)
        if self.config.feed_final:
            c = enc.final.unsqueeze(1).expand(-1, tgt_in.shape[1], -1)  # (B, T, d_enc)
            x = torch.cat([x, c], dim=2)  # (B, T, d_emb + d_enc)
        s0 = self.init_state(enc).unsqueeze(0)  # (B, d_h) -> (1, B, d_h), nn.GRU's layout
        states, _ = self.rnn(x, s0)  # (B, T, d_h)
        return self.out(states)  # (B, T, d_h) -> (B, T, n_vocab)

    def step(self, y_prev: torch.Tensor, s_prev: torch.Tensor, enc: EncoderOutput
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """One step: y_prev (B,), s_prev (B, d_h) -> (logits (B, n_vocab), s (B, d_h), None)."""
        extra = enc.final if self.config.feed_final else None  # (B, d_enc) or None
        logits, s = decoder_step(self.embedding, self.rnn, self.out, y_prev, s_prev, extra)
        return logits, s, None
