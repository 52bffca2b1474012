"""Lecture 06's claims about results of training, and its questions' steps."""

from __future__ import annotations

from . import Claim, Question, exact_match, timing

# Values: native (AVX-512) / default code path, the lecture's seed 0; in brackets, other
# seeds (seed_everything(s) before each model) on the native path where measured. Timings
# come from one thread, with the two code paths' runs side by side on a 2-core machine.
CLAIMS: list[Claim] = [
    # 0.997 / 0.999 [seeds 1, 2: 0.993, 0.996]
    Claim("Transformer: at least 99% of held-out lists right",
          exact_match("Transformer"), 0.99),
    # 0.996 / 0.996
    Claim("RNN with attention (unit 03's recipe): about 99% as well",
          exact_match("RNN + attention"), 0.985),
    # 0.001 / 0.003
    Claim("the two translate about equally well (within a point and a half)",
          f"abs({exact_match('Transformer')} - {exact_match('RNN + attention')})",
          high=0.015),
    # 0.9939 / 0.9908
    Claim("both flat near the top from 5 to 30 words",
          "min(results[m][b][0] for m in results for b in ('5-10', '11-20', '21-30'))",
          0.95),
    # 0.87 / 0.81 (steps measured in the lecture, times the steps of six passes)
    timing("the Transformer's six passes take about as long as the RNN's",
          "six_passes['Transformer'] / six_passes['RNN + attention']", 0.5, 1.6),
    # 0.44 / 0.41
    timing("a Transformer step (batch 64) takes about half an RNN step (batch 128)",
          "step_seconds['Transformer'] / step_seconds['RNN + attention']",
          0.25, 0.85),  # a timing: wider than the others
    # 7.2e-07 / 4.8e-07
    Claim("the course's layers compute PyTorch's layers' outputs to float rounding",
          "max(differences.values())", high=1e-5),
    # 1.393 / 1.393 (no training: exact up to rounding)
    Claim("post-LN: layer 12 gets about 1.4 times the gradient of layer 1",
          "gradient_norms[False][-1] / gradient_norms[False][0]", 1.3, 1.5),
    # 0.7473 / 0.7473
    Claim("pre-LN: about the same gradient at every layer, a little less at the top",
          "gradient_norms[True][-1] / gradient_norms[True][0]", 0.6, 1.0),
    # 0.955 / 0.955
    Claim("last layer's cross-attention: peak on the true word for about 95% of digits",
          "hit_rate[2]['digits']", 0.88),
    # 0.530 / 0.549
    Claim("first layer's cross-attention: peak on the true word for about half the digits",
          "hit_rate[1]['digits']", 0.3, 0.75),
    # 1 / 1
    Claim("the cache writes the same tokens on every held-out pair",
          "float(same_tokens.float().mean())", 1.0, 1.0),
    # 0.92 / 1.09 (alone: 1.0 - 1.2)
    timing("at 8 tokens cache and recomputation are close",
          "speedup[0]", 0.5, 1.8),  # a timing (0.61 measured on a busy machine)
    # 2.73 / 3.43 (alone: 2.4 - 3.3)
    timing("at 128 tokens the cache is about twice as fast or more",
          "speedup[-1]", 1.6),
    # 2.96 / 3.14
    timing("the longer the output, the more the cache saves",
          "speedup[-1] / speedup[0]", 1.4),
    # 11.4 / 14.1 (16 = exactly in proportion; a fixed cost per call weighs on 8 tokens)
    timing("with the cache, time about in proportion to the tokens (16 times the tokens)",
          "seconds[True][-1] / seconds[True][0]", 8.0, 32.0),
    # 33.8 / 44.4
    timing("without the cache, time grows more than in proportion (16 times the tokens)",
          "seconds[False][-1] / seconds[False][0]", 20.0),
    # Section 8, the first 500 held-out pairs (native AVX-512 / default path; the Transformer
    # of these runs: 99.9% / 99.7% exact match). 0 / 0 outputs of the beams differ
    Claim("beams of 2 and 4 write greedy search's outputs (all 500 here)",
          "max(decoder_results[f'beam search, n_beam = {n}']['differ'] for n in (2, 4))",
          0, 2),
    # 0 / 0
    Claim("beam search: the same exact match as greedy search",
          "max(abs(decoder_results[f'beam search, n_beam = {n}']['exact match'] - "
          "decoder_results['greedy search']['exact match']) for n in (2, 4))", high=0.004),
    # 0 / 0 (-0.0134 for each, native)
    Claim("beam search: the same mean log-probability (never a less probable output)",
          "min(decoder_results[f'beam search, n_beam = {n}']['log p'] - "
          "decoder_results['greedy search']['log p'] for n in (2, 4))", -1e-4, 1e-3),
    # 3.8 / 3.7 (1.3 s against 0.3 s)
    timing("a beam of 4 costs more time, about in proportion to its width",
          "decoder_results['beam search, n_beam = 4']['seconds'] / "
          "decoder_results['greedy search']['seconds']", 1.5, 15.0),
    # 0.986 / 0.982
    Claim("sampling at tau = 1: one or two outputs in a hundred wrong",
          "decoder_results['sampling, τ = 1']['exact match']", 0.95, 0.998),
    # 0.094 / 0.097
    Claim("sampling at tau = 1: the mean log-probability falls",
          "decoder_results['greedy search']['log p'] - "
          "decoder_results['sampling, τ = 1']['log p']", 0.02, 0.5),
    # 0.840 / 0.832
    Claim("sampling at tau = 1.5: many more mistakes",
          "decoder_results['sampling, τ = 1.5']['exact match']", 0.6, 0.95),
    # 0.991 / 0.992
    Claim("the most probable token has p > 0.99 at nearly every step",
          "float((top_two[:, 0] > 0.99).float().mean())", 0.97),
    # 17 / 15 of about 14,550
    Claim("p < 0.9 at a few dozen steps at most",
          "float((top_two[:, 0] < 0.9).sum())", 0, 60),
    # 16.0 / 15.3
    Claim("sampling would leave greedy's path some ten to twenty times",
          "leave_path", 6, 35),
    # 0.33 / 0.33
    Claim("... mostly for the second most probable token",
          "beyond_two / leave_path", 0.05, 0.5),
    # 1 of 1 / 2 of 3 (1.0 / 0.667)
    Claim("greedy's mistakes are model errors (all here, two of three on the other path)",
          "1.0 if int(wrong.sum()) == 0 else model_errors / int(wrong.sum())", 0.5, 1.0),
]

QUESTIONS: dict[int, Question] = {}
