"""Lecture 04's claims about results of training, and its questions' steps."""

from __future__ import annotations

from . import Claim, Question, Rerun, timing

PARAMETER_FREE = ("dot", "scaled_dot", "cosine")  # lecture 04's score functions without weights
LEARNED = ("additive", "multiplicative")


# Values: seed 0 native / default (or one value when both agree); in brackets, seeds 0-4 on
# the native path where measured.
CLAIMS: list[Claim] = [
    # 0.99 / 0.992
    Claim("additive: more than 95% exact match", "results['additive']['exact match']", 0.95),
    # 0.984 / 0.98
    Claim("multiplicative: more than 95% exact match",
          "results['multiplicative']['exact match']", 0.95),
    # 0.22 / 0.22
    Claim("parameter-free scores: fewer than two lists in five",
          f"max(results[s]['exact match'] for s in {PARAMETER_FREE})", high=0.40),
    # 0.764 / 0.76
    Claim("parameter-free scores: more than 50 points behind the learned maps",
          f"min(results[s]['exact match'] for s in {LEARNED})"
          f" - max(results[s]['exact match'] for s in {PARAMETER_FREE})", 0.50),
    # 0.4109 / 0.412
    Claim("parameter-free scores: token accuracy over 20 points above exact match",
          f"min(results[s]['token accuracy'] - results[s]['exact match']"
          f" for s in {PARAMETER_FREE})", 0.20),
    # 14.94 / 13.41
    Claim("parameter-free scores: last-epoch loss at least 5 times the learned maps'",
          f"min(results[s]['last-epoch loss'] for s in {PARAMETER_FREE})"
          f" / max(results[s]['last-epoch loss'] for s in {LEARNED})", 5.0),
    # -0.035 / -0.036
    Claim("scaling the dot product does not help inside the GRU model",
          "results['scaled_dot']['exact match'] - results['dot']['exact match']",
          high=0.05),
    # 0.584 / 0.584
    Claim("dot model: encoder states' root mean square well below 1",
          "real_states.pow(2).mean().sqrt().item()", high=0.8),
    # 14.61 / 14.61
    Claim("dot: scores span more than five units per row",
          "attention_stats['dot'][0]", 5.0),
    # 0.6796 / 0.6796
    Claim("dot: the softmax is sharp but not saturated", "attention_stats['dot'][1]",
          0.3, 0.95),
    # 0.1453 / 0.1453
    Claim("scaled dot: scores several times narrower than dot's",
          "attention_stats['scaled_dot'][0] / attention_stats['dot'][0]", high=0.4),
    # 0.1944 / 0.1944
    Claim("scaled dot: largest weight below a third", "attention_stats['scaled_dot'][1]",
          high=0.33),
    # 0.5076 / 0.5076
    Claim("cosine: the learned scale g went down, below 1", "g", high=1.0),
    # 0.2337 / 0.2338
    Claim("cosine: a row of scores spans a fraction of a unit",
          "attention_stats['cosine'][0]", high=1.0),
    # 0.009684 / 0.009687
    Claim("cosine: largest weight within a few hundredths of uniform",
          "attention_stats['cosine'][1] - uniform.item()", high=0.05),
    # 1.34 / 1.76 (timings: the band leaves room for a busy machine)
    timing("the five scores' training steps lie within a factor of three",
          "max(step_seconds.values()) / min(step_seconds.values())", high=3.0),
    # 5.375 / 2.643 (timings: only margins far larger than the noise of a busy machine)
    timing("PyTorch's attention faster than the course's on long sequences",
          "seconds['course_utils SDPA'][-1] / seconds['torch SDPA'][-1]", 1.1),
    # (timing) the slope that section 5's legend fits to PyTorch's times over T = 1024 .. 4096
    timing("PyTorch's kernel: time close to T^2 at the largest lengths",
           "loglog_slope(sequence_lengths[-3:], seconds['torch SDPA'][-3:])", 1.6, 2.4),
    # 58.33 / 39.53 before the course's softmax got its own backward; then 1.36 (default)
    timing("additive scores cost more than 10 times the matrix form at T = 512",
          "seconds['additive scores'][-1] / seconds['course_utils SDPA'][3]", 10.0),
]

QUESTIONS: dict[int, Question] = {
    # Entries of standard deviation 0.58, as the GRU states: the unscaled softmax saturates
    # later, the scaled one is nearly uniform at every width.
    2: Question(
        steps=(Rerun("n_keys, n_trials = 10, 1000", (
            ("q = torch.randn(n_trials, 1, d_k)", "q = 0.58 * torch.randn(n_trials, 1, d_k)"),
            ("k = torch.randn(n_trials, n_keys, d_k)",
             "k = 0.58 * torch.randn(n_trials, n_keys, d_k)"))),),
        changed="round(max_weight['unscaled'][4], 3)",
        check="max_weight['scaled'][-1] < 0.2 < max_weight['unscaled'][-1]"),
    # The dot model for 8 epochs (376 steps, about 20 CPU-s), then the table and the statistics.
    3: Question(
        steps=('models["dot"], histories["dot"] = train_variant(number_task, "dot", '
               'recipe=UNIT04.with_training(epochs=8))',
               Rerun("results = {}"),
               Rerun("def attention_statistics(model, data):")),
        changed="results['dot']['exact match']",
        check="len(histories['dot'].loss) == 2 * steps and attention_stats['dot'][0] > 0"),
}
