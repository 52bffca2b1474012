"""Lecture 03's claims about results of training, and its questions' steps."""

from __future__ import annotations

from . import Claim, Question, Rerun, exact_match, timing


def share(name: str, bucket: str) -> str:
    return f"results[{name!r}][{bucket!r}][0]"


# Every model of lecture 03 is read from the shipped weights (translators.safetensors), so the
# values are those of these weights (native / default code path, or one value when both agree);
# a band leaves room for a rebuild of the file on another CPU.
CLAIMS: list[Claim] = [
    # 0.998
    Claim("attention: about 99% of held-out lists right", exact_match("attention"), 0.985),
    # 0.149
    Claim("no attention (same recipe): a minority right", exact_match("no attention"),
          high=0.40),
    Claim("attention beats no attention by at least 60 points",
          f"{exact_match('attention')} - {exact_match('no attention')}", 0.60),
    # 0.995
    Claim("a forward encoder translates nearly as well", exact_match(
        "attention, forward encoder"), 0.95),
    # 0.003
    Claim("bidirectional: hardly any accuracy gained over a forward encoder",
          f"{exact_match('attention')} - {exact_match('attention, forward encoder')}",
          -0.02, 0.02),
    # 2
    Claim("attention: only a handful of the 1,000 held-out lists wrong",
          "float((~correct['attention']).sum())", 0, 10),
    # 1.0 (one miss on 11-20 words, one on 21-30)
    Claim("attention: its misses fall where most pairs are (11 to 30 words)",
          "float(all(b in ('11-20', '21-30') for b, ok in "
          "zip(test_buckets, correct['attention'].tolist()) if not ok))", 1.0, 1.0),
    # 0
    Claim("no attention: none right from 21 words on", share("no attention", "21-30"),
          high=0.02),
    # 0.0746
    Claim("no attention: few of the middle lengths", share("no attention", "11-20"),
          high=0.30),
    # 0.507
    Claim("no attention: about half of the short lists (5-10 words) right",
          share("no attention", "5-10"), 0.4, 0.6),
    # 0.9969
    Claim("attention: flat near the top up to 30 words",
          f"min({share('attention', '5-10')}, {share('attention', '11-20')}, "
          f"{share('attention', '21-30')})", 0.95),
    # 0.9552 (printed 96%)
    Claim("bidirectional: the peak is on the true word for 96% of digits",
          "hit_rate['attention']['digits']", 0.955, 0.965),
    # 0.9439
    Claim("bidirectional: digit misses mostly one word to the left",
          "offsets['attention']['digits'].get(-1, 0)"
          " / (1 - offsets['attention']['digits'].get(0, 0))", 0.5),
    # 0.4012
    Claim("forward encoder: far fewer digit peaks on the true word",
          "hit_rate['attention']['digits'] - hit_rate['attention, forward encoder']['digits']",
          0.15),
    # 0.9972
    Claim("forward encoder: most misses one word to the right",
          "offsets['attention, forward encoder']['digits'].get(1, 0)"
          " / (1 - offsets['attention, forward encoder']['digits'].get(0, 0))", 0.5),
    # 0.01336
    Claim("attention: training loss falls far lower than without",
          "history['attention'].epoch_loss()[-1] / history['no attention'].epoch_loss()[-1]",
          high=0.2),
    # Section 8, Luong's decoder (general score, input feeding), the same recipe.
    # 0.999
    Claim("Luong: about 99% of held-out lists right, as Bahdanau's", exact_match("Luong"),
          0.985),
    # 0.001
    Claim("Luong and Bahdanau: within about a point of each other",
          f"abs({exact_match('Luong')} - {exact_match('attention')})", high=0.02),
    # 0.9969
    Claim("Luong: flat near the top up to 30 words",
          f"min({share('Luong', '5-10')}, {share('Luong', '11-20')}, "
          f"{share('Luong', '21-30')})", 0.95),
    # 0.9525 (printed 95%, against Bahdanau's 96%)
    Claim("Luong: the digits' peak on the true word about as often as Bahdanau's (95%)",
          "hit_rate['Luong']['digits']", 0.945, 0.955),
    # 0.1876
    Claim("Luong: commas bring its hit rate over all characters well below Bahdanau's",
          "hit_rate['attention']['all'] - hit_rate['Luong']['all']", 0.05),
    # 0.6073
    Claim("Luong: most comma peaks three words to the left (where the last digit was read)",
          "comma_offsets.get(-3, 0)", 0.4),
    # 0.86 / 0.97 under load; 0.82 / 0.80 quiet (one training step on a batch of 128,
    # Luong / Bahdanau; the whole runs of `make translators`: 48.0 s / 46.0 s)
    timing("Luong: trains in about the same time as Bahdanau's decoder",
          "step_seconds['Luong'] / step_seconds['attention']", 0.5, 1.6),
    # 3.8 / 2.1 under load (stored: 2.5); the shipped runs' whole trainings: 46.0 s / 14.1 s
    timing("attention: a training step more than twice as long as the baseline's",
           "step_seconds['attention'] / step_seconds['no attention']", 2.0, 8.0),
]

TABLE_OF_SECTION_6 = Rerun(
    "results = {name: accuracy_by_bucket(correct[name], test_buckets) for name in models}")

# Each question trains one model with the recipe (a few tens of CPU-seconds; the short sources
# of question 2 about a third of that).
QUESTIONS: dict[int, Question] = {
    2: Question(
        steps=("train_data = translation.make_batch([p for p in task.train if "
               "len(p.source) <= 15], src_vocab, tgt_vocab)",
               'train_and_report("attention, short sources", attention="additive")',
               TABLE_OF_SECTION_6,
               "train_data = translation.make_batch(task.train, src_vocab, tgt_vocab)"),
        changed="sorted(results)",
        # trained on the short sources only: 2,965 pairs, 24 steps an epoch
        check="history['attention, short sources'].steps_per_epoch == 24 and "
              "'31-40' in results['attention, short sources'] and len(train_data) == 6000"),
    3: Question(
        steps=('train_and_report("attention, d_a 8", attention="additive", d_a=8)',
               '_, weights = models["attention, d_a 8"].translate(test_data.src, '
               "test_data.src_lengths, return_weights=True)",
               'narrow_hit_rate = alignment_hit_rate(weights, task.test, exclude=",")'),
        changed="sorted(models)",
        check="models['attention, d_a 8'].config.d_a == 8 and 0 <= narrow_hit_rate <= 1"),
    5: Question(
        steps=('train_and_report("Luong, no input feeding", attention="multiplicative", '
               'decoder="luong", input_feeding=False)',
               '_, weights = models["Luong, no input feeding"].translate(test_data.src, '
               "test_data.src_lengths, return_weights=True)",
               'no_feeding_hit_rate = {"all": alignment_hit_rate(weights, task.test), '
               '"digits": alignment_hit_rate(weights, task.test, exclude=",")}'),
        changed="sorted(models)",
        check="models['Luong, no input feeding'].decoder.rnn.input_size == 32 and "
              "0 <= no_feeding_hit_rate['digits'] <= 1"),
}
