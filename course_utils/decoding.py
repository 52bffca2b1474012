"""Unit 06: three ways to write an output with a trained Transformer.

    greedy     y_t = argmax_v p(v | y_<t, x)                     `Transformer.translate`
    sampling   y_t ~ softmax(logits / tau), restricted to the top_k most probable tokens
    beam       keep the n_beam best prefixes at every step, scored by

                   score(Y) = log p(Y | x) / lp(Y),   log p(Y | x) = sum_t log p(y_t | y_<t, x)
                   lp(Y) = ((5 + |Y|) / 6) ** alpha            (Wu et al. 2016, arXiv:1609.08144)

|Y| counts the tokens written, <end> included. alpha = `length_penalty` = 0 (the default) gives
lp = 1, the plain sum of log-probabilities: the probability of the whole output, which
greedy decoding approximates one token at a time. alpha > 0 divides by a power of the length
and so favours longer outputs (a sum of log-probabilities only falls as tokens are added).
alpha = 1 is not the plain average log p / |Y|, but close to it for long outputs.

Beam search, batched: the n_beam hypotheses of every sentence are rows of one batch of
B * n_beam rows, sentence b in rows b * n_beam .. (b + 1) * n_beam - 1, run through
`Transformer.step` together (with the key/value cache); after each step the rows are
reordered to follow the surviving parents.
A hypothesis that has written <end> is *finished*: it stays in the beam with its score
unchanged (it is extended only by <pad>, at log-probability 0) and competes with the live
ones until n_beam better hypotheses push it out. A sentence is done when no live hypothesis can
still beat its best finished one (a log p only falls as tokens are added, and lp is at most
lp(max_len)); the search stops when every sentence is done, or after max_len steps, and the
answer is the best-scoring hypothesis of the final beam. With n_beam = 1 it is greedy decoding,
token for token.

`sequence_log_prob` scores any output under the model by teacher forcing: what the lecture
compares the decoders by, next to exact match. `compare_decoders` runs several decoders on the
same sources and sets each against the first (greedy search): how often it finds an output the
model finds more probable than greedy's (a *search error* of greedy's), how many of those are
right where greedy's was wrong, and how many of its own wrong outputs the model prefers to the
right answer (*model errors*, which no search can fix; Stahlberg and Byrne 2019).

Notation: B batch, S source length, n_vocab vocabulary size, n_beam beam size; ids are int64 with
<pad> = PAD_ID, <start> = START_ID, <end> = END_ID.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from course_utils._checks import (
    require_bool,
    require_float_tensor,
    require_ids,
    require_int,
    require_positive_number,
    require_source,
    shape_str,
)
from course_utils.data.vocab import END_ID, PAD_ID, START_ID
from course_utils.sequence import exact_match
from course_utils.transformer import KVCache, Transformer

__all__ = ["DecoderResult", "beam_decode", "beam_search", "compare_decoders",
           "length_normaliser", "sample", "sample_next", "sequence_log_prob"]


# ----------------------------------------------------------------------------- scoring

def length_normaliser(length: torch.Tensor, alpha: float) -> torch.Tensor:
    """Wu et al.'s lp(Y) = ((5 + |Y|) / 6) ** alpha, elementwise; 1 for alpha = 0."""
    return ((5.0 + length.to(torch.float32)) / 6.0) ** alpha


def _written(ids: torch.Tensor, end_id: int = END_ID) -> torch.Tensor:
    """(B, T) bool: True at the tokens a decoder wrote up to and including its first <end>
    (everything, if it wrote none); False at the <pad> after it."""
    ended_before = torch.cumsum((ids == end_id).long(), dim=1) - (ids == end_id).long()
    return ended_before == 0  # (B, T)


@torch.no_grad()
def sequence_log_prob(model: Transformer, src: torch.Tensor, src_lengths: torch.Tensor,
                      ids: torch.Tensor, start_id: int = START_ID, end_id: int = END_ID
                      ) -> torch.Tensor:
    """log p(Y | x) = sum_t log p(y_t | y_<t, x) of the outputs `ids` (B, T) = y_1 .. <end>
    <pad>.. (as a decoder writes them), by one teacher-forced pass: (B,) float.
    Tokens after the first <end> are not counted; a row without <end> counts all T."""
    require_source(src, src_lengths)
    require_ids(ids, "ids", "(B, T)", 2)
    if ids.shape[0] != src.shape[0]:
        raise ValueError(f"ids must have one row per source: expected ({src.shape[0]}, T); "
                         f"got {shape_str(ids.shape)}")
    start = torch.full((ids.shape[0], 1), start_id, dtype=torch.long, device=ids.device)
    tgt_in = torch.cat([start, ids[:, :-1]], dim=1)  # (B, T) <start> y_1 .. y_{T-1}
    log_p = F.log_softmax(model(src, src_lengths, tgt_in), dim=-1)  # (B, T, n_vocab)
    per_token = log_p.gather(-1, ids[..., None]).squeeze(-1)  # (B, T) log p(y_t | y_<t, x)
    return (per_token * _written(ids, end_id)).sum(dim=1)  # (B,)


def _decoding_state(model: Transformer, src, src_lengths, copies: int, use_cache: bool) -> dict:
    """The state `Transformer.step` reads, for `copies` rows per source (beam search: n_beam)."""
    memory, src_mask = model.encode(src, src_lengths)  # (B, S, d_model), (B, 1, 1, S)
    rows = src.shape[0] * copies
    return {"memory": memory.repeat_interleave(copies, dim=0),  # (B * n_beam, S, d_model)
            "src_mask": src_mask.repeat_interleave(copies, dim=0),  # (B * n_beam, 1, 1, S)
            "cache": [KVCache() for _ in model.decoder] if use_cache else None,
            "prefix": torch.empty(rows, 0, dtype=torch.long, device=src.device)}


def _max_len(model, max_len) -> int:
    return model.config.max_len if max_len is None else require_int(max_len, "max_len")


# ----------------------------------------------------------------------------- sampling

def _check_sampling(temperature, top_k, generator, n_vocab: int) -> tuple[float, int | None]:
    temperature = require_positive_number(temperature, "temperature", zero=True)
    if top_k is not None:
        top_k = require_int(top_k, "top_k", high=n_vocab)
    if generator is not None and not isinstance(generator, torch.Generator):
        raise ValueError(f"generator must be a torch.Generator or None; got "
                         f"{type(generator).__name__}")
    return temperature, top_k


def sample_next(logits: torch.Tensor, temperature: float = 1.0, top_k: int | None = None,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """One token per row of logits (B, n_vocab): y ~ softmax(logits / temperature) over the top_k
    largest logits of the row (all n_vocab when top_k is None). temperature = 0 is the limit
    temperature -> 0, the argmax (greedy). Returns (B,) int64."""
    require_float_tensor(logits, "logits", "(B, n_vocab)", ndim=2)
    temperature, top_k = _check_sampling(temperature, top_k, generator, logits.shape[-1])
    if temperature == 0.0:
        return logits.argmax(dim=-1)  # (B,)
    scaled = logits.float() / temperature  # (B, n_vocab)
    if top_k is not None:  # every logit below the k-th largest of its row is cut off
        kth = scaled.topk(top_k, dim=-1).values[:, -1:]  # (B, 1)
        scaled = scaled.masked_fill(scaled < kth, -math.inf)
    probs = torch.softmax(scaled, dim=-1)  # (B, n_vocab)
    return torch.multinomial(probs, 1, generator=generator).squeeze(1)  # (B, 1) -> (B,)


@torch.no_grad()
def sample(model: Transformer, src: torch.Tensor, src_lengths: torch.Tensor, *,
           temperature: float = 1.0, top_k: int | None = None,
           generator: torch.Generator | None = None, max_len: int | None = None,
           use_cache: bool = True, start_id: int = START_ID, end_id: int = END_ID
           ) -> torch.Tensor:
    """Generation by sampling: like greedy decoding, but each token is drawn with
    `sample_next` (temperature, top_k) from the model's distribution, with `generator` (the
    same seed, the same outputs). Each row stops at its own <end>, <pad> after it.
    Returns ids (B, T_out), T_out <= max_len (default the model's config.max_len)."""
    require_source(src, src_lengths)
    require_bool(use_cache, "use_cache")
    max_len = _max_len(model, max_len)
    _check_sampling(temperature, top_k, generator, model.config.tgt_vocab_size)
    state = _decoding_state(model, src, src_lengths, 1, use_cache)
    batch = src.shape[0]
    y = torch.full((batch,), start_id, dtype=torch.long, device=src.device)  # (B,)
    done = torch.zeros(batch, dtype=torch.bool, device=src.device)  # (B,) written <end>?
    outputs = []
    for _ in range(max_len):
        logits, state = model.step(y, state)  # (B, n_vocab)
        y = sample_next(logits, temperature, top_k, generator)  # (B,)
        outputs.append(torch.where(done, torch.full_like(y, PAD_ID), y))
        done = done | (y == end_id)
        if bool(done.all()):
            break
    return torch.stack(outputs, dim=1)  # T_out x (B,) -> (B, T_out)


# ----------------------------------------------------------------------------- beam search

@torch.no_grad()
def beam_search(model: Transformer, src: torch.Tensor, src_lengths: torch.Tensor,
                beam_size: int, max_len: int | None = None, length_penalty: float = 0.0, *,
                use_cache: bool = True, return_scores: bool = False,
                start_id: int = START_ID, end_id: int = END_ID):
    """Beam search with a trained `Transformer` (the module docstring has the scoring).

    src (B, S), src_lengths (B,) -> ids (B, T_out): for each source the best hypothesis of
    the final beam, y_1 .. <end> then <pad>, as `translate` writes them; T_out <= max_len
    (default the model's config.max_len). beam_size = n_beam >= 1 (n_beam = 1: greedy decoding);
    length_penalty = alpha >= 0 (0: the plain sum of log-probabilities). With
    `return_scores`, also (B,) the sum of log-probabilities of each answer (before any length
    normalisation). The key/value cache is reordered with the beams (`use_cache=False`:
    recompute the prefix at every step; the same tokens).
    """
    require_source(src, src_lengths)
    require_bool(use_cache, "use_cache")
    beam_size = require_int(beam_size, "beam_size")
    max_len = _max_len(model, max_len)
    state = _decoding_state(model, src, src_lengths, beam_size, use_cache)
    return beam_decode(model.step, state, src.shape[0], beam_size, max_len=max_len,
                       length_penalty=length_penalty, reorder=_reorder_state,
                       return_scores=return_scores, start_id=start_id, end_id=end_id)


def _reorder_state(state: dict, rows: torch.Tensor) -> dict:
    """The Transformer's decoding state for the rows `rows` (B * n_beam,) of the old one: row r of
    the new state continues the hypothesis of old row rows[r]."""
    for cache in state["cache"] or []:
        cache.k, cache.v = cache.k[rows], cache.v[rows]  # (B * n_beam, n_heads, t, d_k)
        # cache.memory_k / memory_v need no reordering: a beam's parent is in the same
        # sentence, and all n_beam rows of a sentence hold the same projected memory
    return {**state, "prefix": state["prefix"][rows]}  # (B * n_beam, t)


def _settled(scores, lengths, finished, max_len: int, alpha: float) -> torch.Tensor:
    """(B,) bool: no live hypothesis can beat the sentence's best finished one any more. A
    live one's log p can only fall, and lp grows to lp(max_len) at most, so none can win once
    its log p / lp(max_len) is below the best finished log p / lp(|Y|). scores, lengths,
    finished: (B, n_beam)."""
    best_finished = torch.where(finished, scores / length_normaliser(lengths, alpha),
                                -math.inf).amax(dim=1)  # (B,)
    best_possible = torch.where(finished, -math.inf, scores / length_normaliser(
        torch.tensor(max_len), alpha)).amax(dim=1)  # (B,)
    return best_finished >= best_possible


def beam_decode(step: Callable, state, batch_size: int, beam_size: int, *, max_len: int,
                reorder: Callable, length_penalty: float = 0.0, return_scores: bool = False,
                start_id: int = START_ID, end_id: int = END_ID, pad_id: int = PAD_ID):
    """Beam search over any decoder with the interface of `seq2seq.greedy_decode`:
    `step(y_prev (B * n_beam,), state) -> (logits (B * n_beam, n_vocab), state)`, where the state
    holds n_beam rows per sentence (sentence b in rows b * n_beam .. (b + 1) * n_beam - 1),
    and `reorder(state, rows (B * n_beam,))` returns the state of the rows `rows` of the old
    one. Returns ids (B, T_out) (and, with `return_scores`, (B,) the answers' sums of
    log-probabilities)."""
    batch_size = require_int(batch_size, "batch_size")
    n_beam = require_int(beam_size, "beam_size")
    max_len = require_int(max_len, "max_len")
    alpha = require_positive_number(length_penalty, "length_penalty", zero=True)
    B = batch_size
    # log p of each hypothesis; at first only beam 0 is alive, so that the n_beam first tokens
    # come from n_beam different continuations of <start> and not n_beam copies of the same one
    scores = torch.full((B, n_beam), -math.inf)  # (B, n_beam)
    scores[:, 0] = 0.0
    lengths = torch.zeros(B, n_beam, dtype=torch.long)  # (B, n_beam) tokens written, <end> included
    finished = torch.zeros(B, n_beam, dtype=torch.bool)  # (B, n_beam) written <end>?
    done = torch.zeros(B, dtype=torch.bool)  # (B,) can no live hypothesis win any more?
    tokens = torch.empty(B * n_beam, 0, dtype=torch.long)  # (B * n_beam, t) written so far
    y = torch.full((B * n_beam,), start_id, dtype=torch.long)  # (B * n_beam,)
    for t in range(max_len):
        logits, state = step(y, state)
        if logits.dim() != 2 or logits.shape[0] != B * n_beam:
            raise ValueError(f"step must return logits of shape ({B * n_beam}, n_vocab) for "
                             f"{B} sentences x {n_beam} beams; got {shape_str(logits.shape)}")
        n_vocab = logits.shape[1]
        log_p = F.log_softmax(logits.float(), dim=-1)  # (B * n_beam, n_vocab)
        log_p = log_p.view(B, n_beam, n_vocab)  # (B * n_beam, n_vocab) -> (B, n_beam, n_vocab)
        # a finished hypothesis (and every one of a sentence that is done) has one
        # continuation, <pad>, at log-probability 0: it stays in the beam with its score
        frozen = finished | done[:, None]  # (B, n_beam)
        log_p = torch.where(frozen[..., None], -math.inf, log_p)
        log_p[..., pad_id] = torch.where(frozen, 0.0, log_p[..., pad_id])
        total = scores[..., None] + log_p  # (B, n_beam, n_vocab) log p of every candidate
        length = torch.where(frozen, lengths, t + 1)  # (B, n_beam) each candidate's |Y|
        ranked = total / length_normaliser(length, alpha)[..., None]  # (B, n_beam, n_vocab)
        # (B, n_beam), best first: the beam and the token of each survivor
        best = ranked.view(B, n_beam * n_vocab).topk(n_beam, dim=-1).indices
        parent, token = best // n_vocab, best % n_vocab  # (B, n_beam) each
        scores = total.view(B, n_beam * n_vocab).gather(1, best)  # (B, n_beam)
        lengths = length.gather(1, parent)  # (B, n_beam)
        finished = finished.gather(1, parent) | (token == end_id)  # (B, n_beam)
        rows = parent + n_beam * torch.arange(B)[:, None]  # (B, n_beam) rows of the parents
        rows = rows.view(B * n_beam)  # (B, n_beam) -> (B * n_beam,)
        state = reorder(state, rows)
        y = token.view(B * n_beam)  # (B * n_beam,)
        tokens = torch.cat([tokens[rows], y[:, None]], dim=1)  # (B * n_beam, t + 1)
        done = done | _settled(scores, lengths, finished, max_len, alpha)
        if bool(done.all()):
            break
    # the answer: a done sentence's best finished hypothesis (on a tie with a live one, the
    # finished one: the live one could at best equal it); otherwise the best live one, beam 0
    # (topk sorts best first)
    finished_score = torch.where(finished, scores / length_normaliser(lengths, alpha),
                                 -math.inf)  # (B, n_beam)
    beam = torch.where(done, finished_score.argmax(dim=1), 0)  # (B,)
    best_rows = n_beam * torch.arange(B) + beam  # (B,)
    ids = tokens[best_rows]  # (B, T)
    width = int((ids != pad_id).any(dim=0).nonzero().max()) + 1 if ids.numel() else 0
    ids = ids[:, :max(width, 1)]  # (B, T_out): no column of <pad> alone at the end
    return (ids, scores.view(B * n_beam)[best_rows]) if return_scores else ids


# ----------------------------------------------------------------------------- comparing decoders

@dataclass
class DecoderResult:
    """One decoder's outputs on N sources, scored by `compare_decoders`.

    ids (N, T_out); seconds: wall time of the call; exact_match: share of outputs equal to
    the right answer; log_p: mean log p(Y | x) of its outputs under the model; then counts
    of outputs, each against the reference decoder's output for the same source:
    differ (not the same), more_probable (not the same and more probable: a search error
    of the reference's that this decoder found), fixed (of those, right where the
    reference's was wrong); and model_errors (wrong, yet more probable under the model
    than the right answer: no search, however wide, would give the right one)."""

    ids: torch.Tensor
    seconds: float
    exact_match: float
    log_p: float
    differ: int
    more_probable: int
    fixed: int
    model_errors: int


def compare_decoders(model: Transformer, src: torch.Tensor, src_lengths: torch.Tensor,
                     gold: torch.Tensor, decoders: dict[str, Callable[[], torch.Tensor]]
                     ) -> dict[str, DecoderResult]:
    """Call each decoder of `decoders` (name -> a function of no arguments that decodes src
    (N, S), src_lengths (N,) and returns ids (N, T_out)) once, timed, and score its outputs
    against `gold` (N, T) = y_1 .. <end> <pad>.. and against the first decoder's outputs
    (the reference: greedy search). -> {name: DecoderResult}, in the order of `decoders`."""
    require_source(src, src_lengths)
    require_ids(gold, "gold", "(N, T)", 2)
    if gold.shape[0] != src.shape[0]:
        raise ValueError(f"gold must have one row per source: expected ({src.shape[0]}, T); "
                         f"got {shape_str(gold.shape)}")
    if not decoders or not all(callable(d) for d in decoders.values()):
        raise ValueError("decoders must map at least one name to a function of no arguments")
    gold_log_p = sequence_log_prob(model, src, src_lengths, gold)  # (N,)
    results: dict[str, DecoderResult] = {}
    reference = None  # (ids, log p, right) of the first decoder
    for name, decode in decoders.items():
        start = time.perf_counter()
        ids = decode()  # (N, T_out)
        seconds = time.perf_counter() - start
        require_ids(ids, f"the output of decoder {name!r}", "(N, T_out)", 2)
        if ids.shape[0] != src.shape[0]:
            raise ValueError(f"decoder {name!r} must return one row per source: expected "
                             f"({src.shape[0]}, T_out); got {shape_str(ids.shape)}")
        log_p = sequence_log_prob(model, src, src_lengths, ids)  # (N,)
        right = exact_match(ids, gold)  # (N,)
        if reference is None:
            reference = (ids, log_p, right)
        differ = ~exact_match(ids, reference[0])  # (N,) the reference's ids padded alike
        more_probable = differ & (log_p > reference[1])
        results[name] = DecoderResult(
            ids=ids, seconds=seconds, exact_match=float(right.float().mean()),
            log_p=float(log_p.mean()), differ=int(differ.sum()),
            more_probable=int(more_probable.sum()),
            fixed=int((more_probable & right & ~reference[2]).sum()),
            model_errors=int((~right & (log_p > gold_log_p)).sum()))
    return results
