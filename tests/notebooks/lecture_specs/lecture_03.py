"""Lecture 03's claims about results of training, and its questions' steps."""

from __future__ import annotations

from . import Claim, Question, exact_match, timing


def share(name: str, bucket: str) -> str:
    return f"results[{name!r}][{bucket!r}][0]"



# Values: seed 0 native / default (or one value when both agree); in brackets, seeds 0-4 on
# the native path where measured.
CLAIMS: list[Claim] = [
    # 0.994 / 0.998
    Claim("attention: about 99% of held-out lists right", exact_match("attention"), 0.985),
    # 0.153 / 0.158
    Claim("no attention (same recipe): a minority right", exact_match("no attention"),
          high=0.40),
    Claim("attention beats no attention by at least 60 points",
          f"{exact_match('attention')} - {exact_match('no attention')}", 0.60),
    # 0.986 / 0.994
    Claim("a forward encoder translates nearly as well", exact_match(
        "attention, forward encoder"), 0.95),
    # 0 / 0
    Claim("no attention: none right from 21 words on", share("no attention", "21-30"),
          high=0.02),
    # 0.07692 / 0.07925
    Claim("no attention: few of the middle lengths", share("no attention", "11-20"),
          high=0.30),
    # 0.5202 / 0.5381
    Claim("no attention: some of the short lists right", share("no attention", "5-10"),
          0.15),
    # 0.9877 / 0.9977
    Claim("attention: flat near the top up to 30 words",
          f"min({share('attention', '5-10')}, {share('attention', '11-20')}, "
          f"{share('attention', '21-30')})", 0.95),
    # 0.9496 / 0.955
    Claim("bidirectional: the peak is on the true word for around 95% of digits",
          "hit_rate['attention']['digits']", 0.88),
    # 0.9189 / 0.9256
    Claim("bidirectional: digit misses mostly one word to the left",
          "offsets['attention']['digits'].get(-1, 0)"
          " / (1 - offsets['attention']['digits'].get(0, 0))", 0.5),
    # 0.3727 / 0.3896
    Claim("forward encoder: far fewer digit peaks on the true word",
          "hit_rate['attention']['digits'] - hit_rate['attention, forward encoder']['digits']",
          0.15),
    # 0.42 / 0.42 of 0.42 misses ...
    Claim("forward encoder: most misses one word to the right",
          "offsets['attention, forward encoder']['digits'].get(1, 0)"
          " / (1 - offsets['attention, forward encoder']['digits'].get(0, 0))", 0.5),
    # 0.01346 / 0.01298
    Claim("attention: training loss falls far lower than without",
          "history['attention'].epoch_loss()[-1] / history['no attention'].epoch_loss()[-1]",
          high=0.2),
    # Section 8, Luong's decoder (general score, input feeding), the same recipe.
    # 0.999 / 1.000
    Claim("Luong: about 99% of held-out lists right, as Bahdanau's", exact_match("Luong"),
          0.985),
    # 0.001 / 0.000
    Claim("Luong and Bahdanau: within about a point of each other",
          f"abs({exact_match('Luong')} - {exact_match('attention')})", high=0.02),
    # 0.997 / 1.000
    Claim("Luong: flat near the top up to 30 words",
          f"min({share('Luong', '5-10')}, {share('Luong', '11-20')}, "
          f"{share('Luong', '21-30')})", 0.95),
    # 0.952 / 0.954
    Claim("Luong: the digits' peak on the true word about as often as Bahdanau's",
          "hit_rate['Luong']['digits']", 0.85),
    # 0.188 / 0.235
    Claim("Luong: commas bring its hit rate over all characters well below Bahdanau's",
          "hit_rate['attention']['all'] - hit_rate['Luong']['all']", 0.05),
    # 0.607 / 0.637
    Claim("Luong: most comma peaks three words to the left (where the last digit was read)",
          "comma_offsets.get(-3, 0)", 0.4),
    # 0.82 / 0.80 (one training step on a batch of 128, Luong / Bahdanau, measured in
    # the lecture; the whole runs of `make translators`: 48.0 s / 46.0 s)
    timing("Luong: trains in about the same time as Bahdanau's decoder",
          "step_seconds['Luong'] / step_seconds['attention']", 0.5, 1.6),
]

QUESTIONS: dict[int, Question] = {}
