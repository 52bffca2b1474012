"""Lecture 06's claims about results of training, and its questions' steps."""

from __future__ import annotations

from . import Claim, Question, Rerun, exact_match, timing

# Values: native (AVX-512) / default code path, run side by side. Both trained models are read
# from shipped weights (shipped_translators, shipped_transformer), so the two paths differ only
# in the rounding of the forward pass. Timings: one thread each, on a busy 2-core machine
# (load average about 10); in brackets, the lecture's own runs.
BEAM_4 = "decoder_results['beam search, n_beam = 4']"
GREEDY = "decoder_results['greedy search']"
LONG_GREEDY = "long_results['greedy search']"
LONG_BEAM_4 = "long_results['beam search, n_beam = 4']"
CLAIMS: list[Claim] = [
    # Section 5. 0.999 / 0.999
    Claim("Transformer: more than 99% of held-out lists right", exact_match("Transformer"), 0.99),
    # 0.998 / 0.998
    Claim("RNN with attention (unit 03's recipe): more than 99% too",
          exact_match("RNN + attention"), 0.99),
    # 0.001 / 0.001
    Claim("the two translate about equally well",
          f"abs({exact_match('Transformer')} - {exact_match('RNN + attention')})", high=0.01),
    # 0.997 / 0.997
    Claim("both near the top from 5 to 30 words",
          "min(results[m][b][0] for m in results for b in ('5-10', '11-20', '21-30'))", 0.98),
    # 0.96 / 0.80 (all steps at the measured rate) [0.84]
    timing("the Transformer's six passes take about as long as the RNN's",
           "all_steps_seconds['Transformer'] / all_steps_seconds['RNN + attention']", 0.5, 1.6),
    # 0.48 / 0.40 [0.35, 0.40, 0.42]
    timing("a Transformer step (batch 64) takes less than half an RNN step (batch 128)",
           "step_seconds['Transformer'] / step_seconds['RNN + attention']", 0.2, 0.5),
    # Section 9. 0.00074 (the shipped run's last step)
    Claim("the Transformer ended at a training loss below 0.001",
          "history['Transformer'].loss[-1]", 0.0, 0.001),
    # Section 1. 4.8e-07 / 7.2e-07
    Claim("the course's layers compute PyTorch's layers' outputs to float rounding (1e-7)",
          "max(differences.values())", high=2e-6),
    # Section 2 (no training: exact up to rounding). 1.393 / 1.393
    Claim("post-LN: layer 12 gets 1.39 times the gradient of layer 1",
          "gradient_norms[False][-1] / gradient_norms[False][0]", 1.385, 1.395),
    # 0.7473 / 0.7473
    Claim("pre-LN: declines gently, to 0.75 of layer 1's",
          "gradient_norms[True][-1] / gradient_norms[True][0]", 0.745, 0.755),
    # Section 6. 0.9558 / 0.9558
    Claim("last layer's cross-attention: peak on the true word for 96% of the digits",
          "hit_rate[2]['digits']", 0.955, 0.965),
    # 0.5302 / 0.5302
    Claim("first layer's cross-attention: peak on the true word for about half (53%)",
          "hit_rate[1]['digits']", 0.525, 0.535),
    # Section 7. 1 / 1
    Claim("the cache writes the same tokens on every one of the 500 pairs",
          "float(same_tokens.float().mean())", 1.0, 1.0),
    # 1.29 / 1.26 [0.9, 1.3]
    timing("at 8 tokens cache and recomputation are close", "speedup[0]", 0.5, 1.8),
    # 2.8 / 5.0 [3.3, 3.7]
    timing("at 128 tokens the cache is more than twice as fast", "speedup[-1]", 2.0),
    # 2.2 / 4.0 [2.5, 4.1]
    timing("the longer the output, the more the cache saves",
           "speedup[-1] / speedup[0]", 1.4),
    # 22.5 / 12.4 (16 = exactly in proportion; a fixed cost per call weighs on 8 tokens)
    timing("with the cache, time about in proportion to the tokens (16 times the tokens)",
           "seconds[True][-1] / seconds[True][0]", 8.0, 32.0),
    # 49.3 / 49.5
    timing("without the cache, time grows more than in proportion (16 times the tokens)",
           "seconds[False][-1] / seconds[False][0]", 20.0),
    # Section 8, the first 500 held-out pairs. 0 / 0
    Claim("a beam of 4 writes greedy's outputs on all 500 pairs", f"{BEAM_4}.differ", 0, 0),
    # 3.3 / 3.2 [3.3]
    timing("a beam of 4 costs more time than greedy search",
           f"{BEAM_4}.seconds / {GREEDY}.seconds", 1.2, 15.0),
    # 0.986 / 0.986
    Claim("sampling at tau = 1: one or two outputs in a hundred wrong",
          "decoder_results['sampling, τ = 1'].exact_match", 0.98, 0.995),
    # 0.0936 / 0.0936
    Claim("sampling at tau = 1: the mean log-probability falls",
          f"{GREEDY}.log_p - decoder_results['sampling, τ = 1'].log_p", 0.02, 0.5),
    # 0.840 / 0.840
    Claim("sampling at tau = 1.5: many more mistakes",
          "decoder_results['sampling, τ = 1.5'].exact_match", 0.6, 0.95),
    # 0.9919 / 0.9919
    Claim("the most probable token has p > 0.99 at nearly every step",
          "float((top_two[:, 0] > 0.99).float().mean())", 0.97),
    # 4 / 4 of 7,181
    Claim("p < 0.9 at a handful of the 7,181 steps",
          "float((top_two[:, 0] < 0.9).sum())", 0, 10),
    # 6.6 / 6.6
    Claim("sampling would leave greedy's path about seven times", "leave_path", 5.5, 8.5),
    # 0.384 / 0.384
    Claim("... mostly for the second most probable token", "beyond_two / leave_path", 0.05, 0.5),
    # Section 8, 300 lists of 9-10 numbers. 11 / 11
    Claim("longer lists: greedy gets 11 of the 300 right",
          f"round(300 * {LONG_GREEDY}.exact_match)", 11, 11),
    # 213 / 213
    Claim("longer lists: most greedy outputs (213) stop after eight numbers",
          "eight_numbers", 210, 216),
    # 42 / 42
    Claim("longer lists: a beam of 4 finds a more probable output for 42 lists, one in seven",
          f"{LONG_BEAM_4}.more_probable", 40, 44),
    # -1.0185 / -1.0185
    Claim("longer lists: greedy's mean log p is -1.02", f"{LONG_GREEDY}.log_p", -1.025, -1.015),
    # -0.7332 / -0.7332
    Claim("longer lists: a beam of 4 raises it to -0.73", f"{LONG_BEAM_4}.log_p", -0.74, -0.725),
    # 0 / 0
    Claim("longer lists: the beams fix none of greedy's errors",
          "max(r.fixed for r in long_results.values())", 0, 0),
    # 1 / 1
    Claim("longer lists: a beam of 4 loses one of greedy's right lists",
          f"round(300 * ({LONG_GREEDY}.exact_match - {LONG_BEAM_4}.exact_match))", 1, 1),
    # 1 / 1
    Claim("longer lists: the model prefers every wrong output to the right answer",
          "float(all(r.model_errors == round(300 * (1 - r.exact_match)) "
          "for r in long_results.values()))", 1, 1),
]

QUESTIONS: dict[int, Question] = {
    1: Question(
        steps=(
            'head_rates = [alignment_hit_rate(all_weights["cross"][-1][:500, r], '
            'task.test[:500], exclude=",") for r in range(n_heads)]\n'
            "best_head = max(range(n_heads), key=lambda r: head_rates[r])\n"
            'best_on_other_half = alignment_hit_rate(all_weights["cross"][-1][500:, best_head], '
            'task.test[500:], exclude=",")\n'
            'mean_on_other_half = alignment_hit_rate(all_weights["cross"][-1][500:].mean(dim=1), '
            'task.test[500:], exclude=",")\n'
            'print(f"head {best_head}: {best_on_other_half:.1%}, mean of the heads: '
            '{mean_on_other_half:.1%}")',
        ),
        changed="globals().get('best_on_other_half')",
        check="len(head_rates) == n_heads and 0 <= best_on_other_half <= 1 "
              "and 0 <= mean_on_other_half <= 1",
    ),
    2: Question(
        steps=(
            'SIZES["norm_first"] = False',
            Rerun("EPOCHS = 6  # passes over the 6,000 training pairs"),
            Rerun("test_buckets = translation.length_buckets([len(p.source) for p in task.test])"),
            Rerun("def cross_attention(model, pair):"),
            Rerun("hit_rate = {}"),
        ),
        changed="(models['Transformer'].config.norm_first, hit_rate[2]['digits'])",
        check="model is models['Transformer'] and not model.config.norm_first "
              "and len(history['Transformer'].loss) == 6 * 94",
        restore=('SIZES["norm_first"] = True',),
    ),
    3: Question(
        steps=(Rerun("task = translation.make_task(n_train=6000, n_test=1000, seed=0, "
                     "max_numbers=8)",
                     (("for layer in deep.decoder", "for layer in deep.encoder"),)),),
        changed="gradient_norms[False].round(4).tolist()",
        check="bool(gradient_norms[True][-1] < gradient_norms[True][0])",
    ),
    6: Question(
        steps=(
            Rerun("EPOCHS = 6  # passes over the 6,000 training pairs",
                  (("EPOCHS = 6", "EPOCHS = 2"),)),
            Rerun('model = models["Transformer"]  # section 5\'s'),
            Rerun('greedy_ids = decoder_results["greedy search"].ids  # (500, T_out)'),
        ),
        changed=f"{BEAM_4}.more_probable",
        check=f"{BEAM_4}.fixed > 0 and len(history['Transformer'].loss) == 2 * 94 "
              f"and {GREEDY}.exact_match < 0.95",
    ),
}
