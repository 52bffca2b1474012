"""Unit 03: the attention decoders of Bahdanau et al. (2014) and Luong et al. (2015), and how
well they align.

Built by `Seq2SeqConfig(attention="additive")` (or any name of SCORE_FUNCTIONS;
`bidirectional=True` for an encoder that reads both ways) and assembled with the encoder by
`translator.Seq2Seq`:

    e_{t'j}  = score(s_{t'-1}, h_j)                 raw scores    (B, S)
    alpha_t' = masked_softmax(e_t', mask)           weights       (B, S)
    c_t'     = sum_j alpha_{t'j} h_j                context       (B, d_enc)
    s_t'     = GRU with c_t' in every gate (`context_gru_step`)    (B, d_h)
    logits   = W_o s_t' + b_o                                      (B, n_vocab)

`Seq2SeqConfig(attention="multiplicative", decoder="luong")` builds `LuongDecoder` instead,
which steps the GRU first and attends with the new state (global attention, input feeding):

    s_t'     = GRU([E y_{t'-1}; s~_{t'-1}], s_{t'-1})                     (B, d_h)
    c_t'     = sum_j alpha_{t'j} h_j,  alpha_t' = masked_softmax(score(s_t', h))  (B, d_enc)
    s~_t'    = tanh(W_c [c_t'; s_t'])        the attentional state        (B, d_h)
    logits   = W_o s~_t' + b_o                                             (B, n_vocab)

Each decoder's `step` returns the weights (B, S) as a third item, which `greedy_decode`
collects into (B, T, S); `alignment_hit_rate` compares them with the task's true alignment.

Notation as in `seq2seq`: B batch, S source length, T target length, n_vocab vocabulary, d_emb
embedding width, d_h decoder state width, d_enc encoder state width, d_a the additive
score's width; w_a is the additive score's vector; s~ (s_tilde) Luong's attentional state.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
import torch.nn as nn

from course_utils import attention
from course_utils._checks import (
    require_choice,
    require_encoder_states,
    require_float_tensor,
    require_ids,
    require_mask,
    shape_str,
)
from course_utils.attention import masked_softmax_unchecked
from course_utils.data.vocab import PAD_ID
from course_utils.seq2seq import SCORE_FUNCTIONS, EncoderOutput, Seq2SeqConfig, initial_state

__all__ = [
    "SCORE_FUNCTIONS",
    "Attention",
    "AttentionDecoder",
    "LuongDecoder",
    "LuongState",
    "additive_attention",
    "alignment_hit_rate",
    "context_gru_step",
]


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
    nn.GRUCell (and `seq2seq.gru_step`) multiply after it, r * (W_hn s + b_hn), a slightly
    different cell; the two agree when W_ss is diagonal and the hidden-side bias is 0. In
    both, z keeps the old state.

    The three gates are stacked in the order r, z, s~ (as PyTorch stacks r, z, n):
    y: (B, d_emb) embedded previous token, c: (B, d_enc) context, s: (B, d_h) previous state,
    w_y: (3 d_h, d_emb), w_c: (3 d_h, d_enc), w_s: (3 d_h, d_h), bias: (3 d_h,) -> s' (B, d_h)
    """
    require_float_tensor(y, "y (embedded previous token)", "(B, d_emb)", ndim=2)
    require_float_tensor(c, "c (context)", "(B, d_enc)", ndim=2)
    require_float_tensor(s, "s (previous state)", "(B, d_h)", ndim=2)
    batch, d_h = s.shape
    expected = {"y": (batch, w_y.shape[1]), "c": (batch, w_c.shape[1]), "s": (batch, d_h)}
    weights = {"w_y": (3 * d_h, y.shape[1]), "w_c": (3 * d_h, c.shape[1]),
               "w_s": (3 * d_h, d_h), "bias": (3 * d_h,)}
    got = {"y": y, "c": c, "s": s, "w_y": w_y, "w_c": w_c, "w_s": w_s, "bias": bias}
    if any(tuple(got[k].shape) != v for k, v in {**expected, **weights}.items()):
        want = ", ".join(f"{k} {shape_str(v)}" for k, v in {**expected, **weights}.items())
        have = ", ".join(f"{k} {shape_str(v.shape)}" for k, v in got.items())
        raise ValueError(f"context_gru_step expects {want}; got {have}")
    g_y = y @ w_y.T + bias  # (B, d_emb) @ (d_emb, 3 d_h) -> (B, 3 d_h)
    g_c = c @ w_c.T  # (B, d_enc) @ (d_enc, 3 d_h) -> (B, 3 d_h)
    y_r, y_z, y_s = g_y.split(d_h, dim=1)  # 3 x (B, d_h)
    c_r, c_z, c_s = g_c.split(d_h, dim=1)  # 3 x (B, d_h)
    w_sr, w_sz, w_ss = w_s.split(d_h, dim=0)  # 3 x (d_h, d_h)
    r = torch.sigmoid(y_r + s @ w_sr.T + c_r)  # (B, d_h)
    z = torch.sigmoid(y_z + s @ w_sz.T + c_z)  # (B, d_h)
    s_tilde = torch.tanh(y_s + (s * r) @ w_ss.T + c_s)  # (B, d_h)
    return z * s + (1 - z) * s_tilde  # (B, d_h)


def additive_attention(s: torch.Tensor, h: torch.Tensor, mask: torch.Tensor, w_q: torch.Tensor,
                       w_k: torch.Tensor, w_a: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Bahdanau's attention in one call, the weights given (`Attention("additive")` learns them):

        e_j = w_a . tanh(W_q s + W_k h_j),  alpha = masked_softmax(e, mask),  c = sum_j alpha_j h_j

    s (B, d_h), h (B, S, d_enc), mask (B, S) bool (True = a real source token),
    w_q (d_a, d_h), w_k (d_a, d_enc), w_a (d_a,) -> (context (B, d_enc), alpha (B, S)).
    """
    require_float_tensor(s, "s (decoder state)", "(B, d_h)", ndim=2)
    require_float_tensor(h, "h (encoder states)", "(B, S, d_enc)", ndim=3)
    if h.shape[0] != s.shape[0]:
        raise ValueError(f"s (B, d_h) and h (B, S, d_enc) must have the same B; got s "
                         f"{shape_str(s.shape)}, h {shape_str(h.shape)}")
    require_mask(mask, "mask", h.shape[:2], meaning="True = a real source token")
    e = attention.additive_scores(s.unsqueeze(1), h, w_q, w_k, w_a)  # (B, 1, S)
    alpha = attention.masked_softmax(e, mask.unsqueeze(1))  # (B, 1, S)
    return (alpha @ h).squeeze(1), alpha.squeeze(1)  # (B, 1, S) @ (B, S, d_enc) -> (B, d_enc)


class Attention(nn.Module):
    """Score the decoder's previous state against every encoder state, normalise, mix.

        e_j = score(s_{t'-1}, h_j),   alpha = masked_softmax(e, mask),   c = sum_j alpha_j h_j

    Keys and values are the encoder states h_j (B, S, d_enc); the query is s (B, d_h).
    `score` names one of the functions of `course_utils.attention`:

        "additive"        w_a . tanh(W_q s + W_k h)   (Bahdanau)    additive_scores
        "multiplicative"  h^T W_e s  (Luong's "general"; "bilinear" is the same) bilinear_scores
        "dot"             h . s             (needs d_enc == d_h)    dot_scores
        "scaled_dot"      h . s / sqrt(d_h) (needs d_enc == d_h)    scaled_dot_scores
        "cosine"          g * h . s / (|h| |s|)  (d_enc == d_h)     cosine_scores, times a
                                            learned scale g (init 1), since scores in
                                            [-1, 1] cannot make a sharp softmax

    The additive score's key side W_k h does not depend on the decoder step: `prepare` computes
    it once per batch, and `scores(..., prepared)` then adds only W_q s at each step (the
    same numbers as `additive_scores`, which recomputes W_k h every call).
    """

    def __init__(self, score: str, d_h: int, d_enc: int, d_a: int):
        super().__init__()
        require_choice(score, "score", SCORE_FUNCTIONS)
        if score in ("dot", "scaled_dot", "cosine") and d_h != d_enc:
            raise ValueError(f"the {score!r} score compares s and h directly, so the decoder "
                             f"state (d_h = {d_h}) and the encoder state (d_enc = {d_enc}) "
                             f"must have the same width; use 'multiplicative' or 'additive'")
        self.score = score
        self.d_h, self.d_enc = d_h, d_enc
        if score == "additive":
            self.w_q = nn.Parameter(nn.Linear(d_h, d_a, bias=False).weight.data)  # (d_a, d_h)
            self.w_k = nn.Parameter(nn.Linear(d_enc, d_a, bias=False).weight.data)  # (d_a, d_enc)
            bound = 1 / math.sqrt(d_a)
            self.w_a = nn.Parameter(torch.empty(d_a).uniform_(-bound, bound))  # (d_a,)
        elif score in ("multiplicative", "bilinear"):
            self.w = nn.Parameter(nn.Linear(d_h, d_enc, bias=False).weight.data)  # W_e (d_enc, d_h)
        elif score == "cosine":
            self.log_scale = nn.Parameter(torch.zeros(()))  # g = exp(log_scale) > 0

    def prepare(self, keys: torch.Tensor) -> torch.Tensor:
        """What the scores need from the keys at every step: W_k h (B, S, d_a) for the
        additive score, the keys (B, S, d_enc) themselves for the others."""
        require_float_tensor(keys, "keys (encoder states)", "(B, S, d_enc)", ndim=3)
        if self.score == "additive":
            return keys @ self.w_k.T  # (B, S, d_enc) @ (d_enc, d_a) -> (B, S, d_a)
        return keys

    def scores(self, query: torch.Tensor, keys: torch.Tensor,
               prepared: torch.Tensor | None = None) -> torch.Tensor:
        """Raw scores e (B, S) of query s (B, d_h) against keys h (B, S, d_enc)."""
        q = query.unsqueeze(1)  # (B, d_h) -> (B, 1, d_h): one query per row
        if self.score == "additive" and prepared is not None:
            from_q = (query @ self.w_q.T).unsqueeze(1)  # (B, d_a) -> (B, 1, d_a)
            return torch.tanh(from_q + prepared) @ self.w_a  # (B, S, d_a) @ (d_a,) -> (B, S)
        if self.score == "additive":
            e = attention.additive_scores(q, keys, self.w_q, self.w_k, self.w_a)  # (B, 1, S)
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
        """query s (B, d_h), keys = values = h (B, S, d_enc), mask (B, S) bool (True = real
        token) -> (context c (B, d_enc), weights alpha (B, S)); padding gets weight 0."""
        require_float_tensor(query, "query (decoder state)", "(B, d_h)", ndim=2)
        require_float_tensor(keys, "keys (encoder states)", "(B, S, d_enc)", ndim=3)
        batch, width = query.shape[0], keys.shape[2]
        if query.shape[1] != self.d_h or keys.shape[0] != batch or width != self.d_enc:
            raise ValueError(f"attention expects query (B, {self.d_h}) and keys "
                             f"(B, S, {self.d_enc}) with the same B; got query "
                             f"{shape_str(query.shape)}, keys {shape_str(keys.shape)}")
        require_mask(mask, "mask", keys.shape[:2], meaning="True = a real source token")
        e = self.scores(query, keys, prepared)  # (B, S)
        alpha = attention.masked_softmax(e.unsqueeze(1), mask.unsqueeze(1))  # (B, 1, S)
        context = (alpha @ keys).squeeze(1)  # (B, 1, S) @ (B, S, d_enc) -> (B, d_enc)
        return context, alpha.squeeze(1)  # (B, d_enc), (B, S)


class AttentionDecoder(nn.Module):
    """The decoder of Bahdanau et al. (2014): a GRU that reads a fresh context at each step.

        alpha_{t'} = masked_softmax(score(s_{t'-1}, h_1..h_S))          weights (B, S)
        c_{t'}     = sum_j alpha_{t'j} h_j                               context (B, d_enc)
        s_{t'}     = context_gru_step(E y_{t'-1}, c_{t'}, s_{t'-1})      state   (B, d_h)
        logits     = W_o s_{t'} + b_o                                    (B, n_vocab)

    s_0 = `seq2seq.initial_state`: h_S for a unidirectional encoder, tanh(W_init [fwd h_S;
    bwd h_1] + b_init) for a bidirectional one (the same as unit 02's decoder).

    Teacher forcing cannot be one nn.GRU call, since c_{t'} depends on s_{t'-1}: `forward`
    loops over the T steps. It computes once per batch what does not depend on the step:
    the token's share of the gates W_y E y + b for all T steps, the key projection of the
    additive score, and the output layer over all T states at the end.
    """

    def __init__(self, config: Seq2SeqConfig):
        super().__init__()
        if config.attention is None:
            raise ValueError(f"AttentionDecoder needs config.attention, a name of "
                             f"{SCORE_FUNCTIONS}; got None")
        self.config = config
        d_h, d_enc = config.d_h, config.d_enc
        self.embedding = nn.Embedding(config.tgt_vocab_size, config.d_emb, padding_idx=PAD_ID)
        self.attention = Attention(config.attention, d_h, d_enc, config.d_a or d_h)
        self.w_y = nn.Linear(config.d_emb, 3 * d_h)  # W_yr, W_yz, W_ys stacked; b_r, b_z, b_s
        self.w_c = nn.Linear(d_enc, 3 * d_h, bias=False)  # W_cr, W_cz, W_cs
        self.w_s = nn.Linear(d_h, 3 * d_h, bias=False)  # W_sr, W_sz, W_ss
        self.w_init = nn.Linear(d_enc, d_h) if config.bidirectional else None
        self.out = nn.Linear(d_h, config.tgt_vocab_size)  # W_o (n_vocab, d_h), b_o (n_vocab,)

    def init_state(self, enc: EncoderOutput) -> torch.Tensor:
        """s_0 (B, d_h): h_S, or tanh(W_init [fwd h_S; bwd h_1] + b_init) when bidirectional."""
        return initial_state(enc, self.w_init)

    def step(self, y_prev: torch.Tensor, s_prev: torch.Tensor, enc: EncoderOutput
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One step, written out: y_prev (B,), s_prev (B, d_h) ->
        (logits (B, n_vocab), s (B, d_h), weights alpha (B, S))."""
        require_ids(y_prev, "y_prev (previous tokens)", "(B,)", 1)
        require_float_tensor(s_prev, "s_prev (previous decoder state)", f"(B, {self.config.d_h})",
                              ndim=2)
        require_encoder_states(enc.states, enc.mask, y_prev.shape[0], self.config.d_enc)
        c, alpha = self.attention(s_prev, enc.states, enc.mask)  # (B, d_enc), (B, S)
        y = self.embedding(y_prev)  # (B,) -> (B, d_emb)
        s = context_gru_step(y, c, s_prev, self.w_y.weight, self.w_c.weight, self.w_s.weight,
                             self.w_y.bias)  # (B, d_h)
        return self.out(s), s, alpha  # (B, n_vocab), (B, d_h), (B, S)

    def forward(self, tgt_in: torch.Tensor, enc: EncoderOutput, return_weights: bool = False):
        """Teacher forcing: tgt_in (B, T) = <start> y_1 .. y_{T-1} -> logits (B, T, n_vocab)
        (and, with `return_weights`, the weights (B, T, S)). The same numbers as T calls of
        `step` with the gold tokens."""
        require_ids(tgt_in, "tgt_in", "(B, T)", 2)
        require_encoder_states(enc.states, enc.mask, tgt_in.shape[0], self.config.d_enc)
        d_h = self.config.d_h
        g_y = self.w_y(self.embedding(tgt_in))  # (B, T, d_emb) -> (B, T, 3 d_h), all steps
        g_y = g_y.unbind(dim=1)  # T x (B, 3 d_h) (indexing g_y[:, t] would make backward fill
        #                          a zero (B, T, 3 d_h) gradient for every step)
        prepared = self.attention.prepare(enc.states)  # (B, S, d_a) or (B, S, d_enc)
        w_srz, w_ss = self.w_s.weight[: 2 * d_h], self.w_s.weight[2 * d_h:]  # (2 d_h | d_h, d_h)
        s = self.init_state(enc)  # (B, d_h)
        states, weights = [], []
        for t in range(tgt_in.shape[1]):
            # through the module, so that its hooks see every query (lecture 04 reads them)
            c, alpha = self.attention(s, enc.states, enc.mask, prepared)  # (B, d_enc), (B, S)
            g = torch.addmm(g_y[t], c, self.w_c.weight.T)  # (B, 3 d_h) + (B, d_enc) @ W_c^T
            rz = torch.sigmoid(torch.addmm(g[:, : 2 * d_h], s, w_srz.T))  # (B, 2 d_h)
            r, z = rz.chunk(2, dim=1)  # 2 x (B, d_h)
            s_tilde = torch.tanh(torch.addmm(g[:, 2 * d_h:], s * r, w_ss.T))  # (B, d_h)
            s = torch.lerp(s_tilde, s, z)  # s~ + z * (s - s~) = z * s + (1 - z) * s~
            states.append(s)
            weights.append(alpha)
        # T x (B, d_h) -> (B, T, d_h) -> (B, T, n_vocab)
        logits = self.out(torch.stack(states, dim=1))
        if return_weights:
            return logits, torch.stack(weights, dim=1)  # (B, T, S)
        return logits


class LuongState(NamedTuple):
    """What Luong's decoder carries from one step to the next: the GRU state s (B, d_h) and
    the attentional state s~ (B, d_h) that input feeding gives the next step's GRU."""

    s: torch.Tensor
    s_tilde: torch.Tensor


class LuongDecoder(nn.Module):
    """The decoder of Luong, Pham and Manning (2015): global attention, input feeding.

        s_{t'}     = GRU([E y_{t'-1}; s~_{t'-1}], s_{t'-1})    state, computed first (B, d_h)
        e_{t'j}    = score(s_{t'}, h_j)     "multiplicative": h_j^T W_e s_{t'}, Luong's
                                            "general" (his s^T W_a h with W_a = W_e^T)  (B, S)
        alpha_{t'} = masked_softmax(e_{t'}, mask)                                     (B, S)
        c_{t'}     = sum_j alpha_{t'j} h_j                                        (B, d_enc)
        s~_{t'}    = tanh(W_c [c_{t'}; s_{t'}])             the attentional state    (B, d_h)
        logits     = W_o s~_{t'} + b_o                                              (B, n_vocab)

    What differs from Bahdanau's `AttentionDecoder`: the query is the *current* state s_{t'}
    (the GRU steps first, from y_{t'-1} and s_{t'-1}), not the previous one; the context does
    not enter the GRU's gates but meets the state after it, in s~_{t'}, which the output layer
    reads. Input feeding (`config.input_feeding`, on by default) concatenates s~_{t'-1} to the next
    step's input, so that the GRU knows what was attended to before; s~_0 = 0. Without it the
    GRU reads E y_{t'-1} alone, as unit 02's decoder does.

    Luong et al. stack LSTMs; this is one GRU of PyTorch's convention (nn.GRUCell), started
    from `seq2seq.initial_state` like the other decoders. `config.attention` names the score (any
    of SCORE_FUNCTIONS; "dot" needs d_enc == d_h). Only global attention (every source word);
    local attention, a window around a predicted position, is not implemented.
    `forward` loops over the T steps: with input feeding, step t' needs s~_{t'-1}.
    """

    def __init__(self, config: Seq2SeqConfig):
        super().__init__()
        if config.attention is None:
            raise ValueError(f"LuongDecoder needs config.attention, a name of {SCORE_FUNCTIONS}; "
                             f"got None")
        self.config = config
        d_h, d_enc = config.d_h, config.d_enc
        self.embedding = nn.Embedding(config.tgt_vocab_size, config.d_emb, padding_idx=PAD_ID)
        d_in = config.d_emb + (d_h if config.input_feeding else 0)  # [E y; s~] or E y
        self.rnn = nn.GRUCell(d_in, d_h)  # W_ih (3 d_h, d_in), W_hh (3 d_h, d_h), two biases
        self.attention = Attention(config.attention, d_h, d_enc, config.d_a or d_h)
        self.w_c = nn.Linear(d_enc + d_h, d_h, bias=False)  # W_c (d_h, d_enc + d_h)
        self.w_init = nn.Linear(d_enc, d_h) if config.bidirectional else None
        self.out = nn.Linear(d_h, config.tgt_vocab_size)  # W_o (n_vocab, d_h), b_o (n_vocab,)

    def init_state(self, enc: EncoderOutput) -> LuongState:
        """(s_0, s~_0): s_0 (B, d_h) as in the other decoders (`seq2seq.initial_state`), and
        s~_0 = 0 (B, d_h)."""
        s0 = initial_state(enc, self.w_init)  # (B, d_h)
        return LuongState(s0, torch.zeros_like(s0))  # 2 x (B, d_h)

    def _input(self, y: torch.Tensor, s_tilde: torch.Tensor) -> torch.Tensor:
        """The GRU's input: [E y; s~] (B, d_emb + d_h) with input feeding, else E y (B, d_emb)."""
        if self.config.input_feeding:
            return torch.cat([y, s_tilde], dim=1)  # (B, d_emb) + (B, d_h) -> (B, d_emb + d_h)
        return y  # (B, d_emb)

    def _attend(self, s: torch.Tensor, enc: EncoderOutput, prepared: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """s (B, d_h) -> (s~ = tanh(W_c [c; s]) (B, d_h), alpha (B, S))."""
        c, alpha = self.attention(s, enc.states, enc.mask, prepared)  # (B, d_enc), (B, S)
        s_tilde = torch.tanh(self.w_c(torch.cat([c, s], dim=1)))  # (B, d_enc + d_h) -> (B, d_h)
        return s_tilde, alpha

    def _gru(self, g_x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        """nn.GRUCell's update of s (B, d_h), given the input's share of the gates,
        g_x = W_ih x + b_ih (B, 3 d_h), already computed (PyTorch's order r, z, n):

            r, z = sigma(g_x[r, z] + W_h[r, z] s + b_h[r, z]),
            n = tanh(g_x[n] + r * (W_hn s + b_hn)),   s' = (1 - z) * n + z * s
        """
        d_h = s.shape[1]
        g_s = torch.addmm(self.rnn.bias_hh, s, self.rnn.weight_hh.T)  # (B, 3 d_h)
        rz = torch.sigmoid(g_x[:, : 2 * d_h] + g_s[:, : 2 * d_h])  # (B, 2 d_h)
        r, z = rz.chunk(2, dim=1)  # 2 x (B, d_h)
        n = torch.tanh(g_x[:, 2 * d_h:] + r * g_s[:, 2 * d_h:])  # (B, d_h)
        return torch.lerp(n, s, z)  # n + z * (s - n) = (1 - z) * n + z * s

    def step(self, y_prev: torch.Tensor, state: LuongState, enc: EncoderOutput
             ) -> tuple[torch.Tensor, LuongState, torch.Tensor]:
        """One step: y_prev (B,), state (s_{t'-1}, s~_{t'-1}) ->
        (logits (B, n_vocab), (s_{t'}, s~_{t'}), weights alpha (B, S))."""
        require_ids(y_prev, "y_prev (previous tokens)", "(B,)", 1)
        if not isinstance(state, tuple) or len(state) != 2:
            raise ValueError("state must be the pair (s, s_tilde) of LuongDecoder.init_state "
                             f"or of the previous step; got {type(state).__name__}")
        for name, x in zip(("state.s", "state.s_tilde"), state, strict=True):
            require_float_tensor(x, name, f"(B, {self.config.d_h})", ndim=2)
            if tuple(x.shape) != (y_prev.shape[0], self.config.d_h):
                raise ValueError(f"{name} must have shape ({y_prev.shape[0]}, {self.config.d_h}); "
                                 f"got {shape_str(x.shape)}")
        require_encoder_states(enc.states, enc.mask, y_prev.shape[0], self.config.d_enc)
        y = self.embedding(y_prev)  # (B,) -> (B, d_emb)
        s = self.rnn(self._input(y, state.s_tilde), state.s)  # (B, d_h): the state comes first
        s_tilde, alpha = self._attend(s, enc)  # (B, d_h), (B, S): then attention, with it
        # (B, n_vocab), 2 x (B, d_h), (B, S)
        return self.out(s_tilde), LuongState(s, s_tilde), alpha

    def forward(self, tgt_in: torch.Tensor, enc: EncoderOutput, return_weights: bool = False):
        """Teacher forcing: tgt_in (B, T) = <start> y_1 .. y_{T-1} -> logits (B, T, n_vocab)
        (and, with `return_weights`, the weights (B, T, S)). The same numbers as T calls of
        `step` with the gold tokens."""
        require_ids(tgt_in, "tgt_in", "(B, T)", 2)
        require_encoder_states(enc.states, enc.mask, tgt_in.shape[0], self.config.d_enc)
        d_emb, d_enc = self.config.d_emb, self.config.d_enc
        h, mask = enc.states, enc.mask  # (B, S, d_enc), (B, S)
        # What does not depend on the step, once per batch: the token's share of the GRU's
        # input gates for all T steps, and the key side of the score.
        w_ih = self.rnn.weight_ih  # (3 d_h, d_emb [+ d_h]): [W_iy | W_is~]
        g_y = self.embedding(tgt_in) @ w_ih[:, :d_emb].T + self.rnn.bias_ih  # (B, T, 3 d_h)
        g_y = g_y.unbind(dim=1)  # T x (B, 3 d_h)
        w_cc, w_cs = self.w_c.weight[:, :d_enc], self.w_c.weight[:, d_enc:]  # W_c = [W_cc | W_cs]
        if self.attention.score in ("multiplicative", "bilinear"):
            keys = h @ self.attention.w  # h_j^T W_e s = (W_e^T h_j) . s: (B, S, d_h)
            score = lambda s: torch.bmm(keys, s.unsqueeze(2)).squeeze(2)  # noqa: E731
            #                  (B, S, d_h) @ (B, d_h, 1) -> (B, S, 1) -> (B, S)
        else:
            prepared = self.attention.prepare(h)  # (B, S, d_a) or (B, S, d_enc)
            score = lambda s: self.attention.scores(s, h, prepared)  # noqa: E731  (B, S)
        s, s_tilde = self.init_state(enc)  # 2 x (B, d_h)
        outputs, weights = [], []
        for g in g_y:
            if self.config.input_feeding:
                g = torch.addmm(g, s_tilde, w_ih[:, d_emb:].T)  # + (B, d_h) @ (d_h, 3 d_h)
            s = self._gru(g, s)  # (B, d_h)
            alpha = masked_softmax_unchecked(score(s), mask)  # (B, S), scores of checked inputs
            c = torch.bmm(alpha.unsqueeze(1), h).squeeze(1)  # (B, 1, S) @ (B, S, d_enc)
            #                                                   -> (B, 1, d_enc) -> (B, d_enc)
            s_tilde = torch.tanh(torch.addmm(c @ w_cc.T, s, w_cs.T))  # W_c [c; s]: (B, d_h)
            outputs.append(s_tilde)
            weights.append(alpha)
        # T x (B, d_h) -> (B, T, d_h) -> (B, T, n_vocab)
        logits = self.out(torch.stack(outputs, dim=1))
        if return_weights:
            return logits, torch.stack(weights, dim=1)  # T x (B, S) -> (B, T, S)
        return logits


def alignment_hit_rate(weights: torch.Tensor, pairs, exclude: str | tuple[str, ...] = ()
                       ) -> float:
    """How often the attention of a target character peaks on the source word it is read from:

        hits / total,  over every pair i and target position t < len(pairs[i].target)
                       whose character pairs[i].target[t] is not in `exclude`:
        hit when t < T and argmax_j weights[i, t, j] == pairs[i].sources[t]

    weights: (N, T, S) float, row i for pairs[i] (a `NumberPair`), step t the weights used to
    write target character t (from `Seq2Seq.translate(..., return_weights=True)` or the
    teacher-forced `AttentionDecoder.forward(..., return_weights=True)`); S at least the
    longest source. The <end> step is not counted (it is read from no word). A step that
    greedy decoding never reached (t >= T) counts as a miss. `exclude=","` leaves out the
    commas, whose true source (the comma between the same two numbers) says nothing that
    another comma's state could not say as well. Returns a float in [0, 1].
    """
    require_float_tensor(weights, "weights", "(N, T, S)", ndim=3)
    pairs = list(pairs)
    if weights.shape[0] != len(pairs):
        raise ValueError(f"weights must have shape ({len(pairs)}, T, S), one row per pair; got "
                         f"{shape_str(weights.shape)}")
    if not pairs:
        raise ValueError("there are no pairs to score")
    longest = max(len(p.source) for p in pairs)
    if weights.shape[2] < longest:
        raise ValueError(f"weights must have at least {longest} source columns (the longest "
                         f"source); got {shape_str(weights.shape)}")
    peak = weights.argmax(dim=2).tolist()  # (N, T)
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
