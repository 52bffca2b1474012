"""A translation-like task with a known alignment: numbers in old-style English words to digits.

Units 02, 03 and 06 translate a list of numbers written in words into digits. The words
follow the old English order that puts the units before the tens ("four and twenty
blackbirds"), so the alignment crosses itself, as between two real languages:

    source (words):   four and twenty , seven , thirteen , five and ninety
    target (chars):   2 4 , 7 , 1 3 , 9 5

Source and target grow together: a longer source holds more numbers, so there is more to
carry through the encoder's single final state. This is the property that makes an RNN
encoder-decoder without attention fail on long inputs (unit 02) and an attention model
hold up (unit 03), as in Bahdanau et al. (2014), Figure 2.

Everything is generated here from a seed; nothing is downloaded. The task knows what a real
translation corpus does not: the **true alignment**. `NumberPair.alignment()` is the exact
(T, S) 0/1 matrix (target length T, source length S): the tens digit of "four and twenty"
comes from "twenty", its units digit from "four", each comma from the source's comma.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from course_utils._checks import require_int
from course_utils.data.vocab import PAD_ID, SPECIALS, Vocabulary, pad_batch

__all__ = [
    "LENGTH_EDGES",
    "NumberPair",
    "TranslationBatch",
    "TranslationTask",
    "length_buckets",
    "make_batch",
    "make_task",
    "number_words",
    "random_pair",
    "source_vocabulary",
    "target_vocabulary",
]

_SMALL = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
          "fourteen fifteen sixteen seventeen eighteen nineteen").split()
_TENS = {2: "twenty", 3: "thirty", 4: "forty", 5: "fifty", 6: "sixty", 7: "seventy",
         8: "eighty", 9: "ninety"}
SEPARATOR = ","
LENGTH_EDGES = (5, 11, 21, 31, 41)  # the length buckets 5-10, 11-20, 21-30, 31-40, 41+


def number_words(n: int) -> tuple[list[str], list[int]]:
    """The words of n (1..99) in the old order, and for each digit of `str(n)` the index of
    the word it comes from.

        7  -> (["seven"], [0])                        13 -> (["thirteen"], [0, 0])
        40 -> (["forty"], [0, 0])                     24 -> (["four", "and", "twenty"], [2, 0])
    """
    if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= 99:
        raise ValueError(f"n must be an int in 1..99; got {n!r}")
    if n < 20:
        return [_SMALL[n]], [0] * len(str(n))
    tens, units = divmod(n, 10)
    if units == 0:
        return [_TENS[tens]], [0, 0]
    return [_SMALL[units], "and", _TENS[tens]], [2, 0]  # tens digit <- "twenty", units <- "four"


@dataclass(frozen=True)
class NumberPair:
    """One example: the source words, the target characters, and for each target character
    the index of the source word it is read from (`sources[i]`)."""

    numbers: tuple[int, ...]
    source: tuple[str, ...]
    target: tuple[str, ...]
    sources: tuple[int, ...]

    @classmethod
    def of(cls, numbers) -> NumberPair:
        """The pair for a list of numbers in 1..99."""
        numbers = tuple(numbers)
        if not numbers:
            raise ValueError("a pair needs at least one number")
        source: list[str] = []
        target: list[str] = []
        sources: list[int] = []
        for i, n in enumerate(numbers):
            if i:
                sources.append(len(source))  # the target's comma <- the source's comma
                source.append(SEPARATOR)
                target.append(SEPARATOR)
            words, digit_sources = number_words(n)
            sources.extend(len(source) + j for j in digit_sources)
            target.extend(str(n))
            source.extend(words)
        return cls(numbers, tuple(source), tuple(target), tuple(sources))

    def alignment(self) -> torch.Tensor:
        """The true alignment, a (T, S) float 0/1 matrix with one 1 per row:
        entry (i, j) is 1 when target character i is read from source word j."""
        matrix = torch.zeros(len(self.target), len(self.source))  # (T, S)
        matrix[torch.arange(len(self.target)), torch.tensor(self.sources)] = 1.0
        return matrix

    def __str__(self) -> str:
        return f"{' '.join(self.source)}  ->  {''.join(self.target)}"


def random_pair(rng: random.Random, min_numbers: int = 1, max_numbers: int = 12) -> NumberPair:
    """A pair of `k` numbers, k uniform in min_numbers..max_numbers, each uniform in 1..99."""
    k = rng.randint(min_numbers, max_numbers)
    return NumberPair.of(rng.randint(1, 99) for _ in range(k))


def source_vocabulary() -> Vocabulary:
    """The special tokens, the comma, "and", and the 28 number words: the same for every split."""
    words = [SEPARATOR, "and", *_SMALL[1:], *_TENS.values()]
    return Vocabulary([*SPECIALS, *words])


def target_vocabulary() -> Vocabulary:
    """The special tokens, the ten digits and the comma."""
    return Vocabulary([*SPECIALS, *"0123456789", SEPARATOR])


@dataclass
class TranslationTask:
    """Train and held-out pairs (no source in both) and the two vocabularies."""

    train: list[NumberPair]
    test: list[NumberPair]
    src_vocab: Vocabulary
    tgt_vocab: Vocabulary


def make_task(n_train: int = 6000, n_test: int = 1000, seed: int = 0, *,
              min_numbers: int = 2, max_numbers: int = 12) -> TranslationTask:
    """Train and held-out pairs drawn with `seed`; every pair holds min_numbers..max_numbers
    numbers (uniformly), so a source has up to 4 * max_numbers - 1 words (about 3.5 per
    number on average; 3 to 47 with the defaults). A held-out source never occurs in
    training. Deterministic: the same arguments give the same task."""
    require_int(n_train, "n_train", low=0)
    require_int(n_test, "n_test", low=0)
    require_int(seed, "seed", low=0)
    require_int(min_numbers, "min_numbers")
    require_int(max_numbers, "max_numbers", low=min_numbers)
    if n_train + n_test == 0:
        raise ValueError("n_train + n_test must be positive")
    rng = random.Random(seed)
    test = [random_pair(rng, min_numbers, max_numbers) for _ in range(n_test)]
    held_out = {p.source for p in test}
    train: list[NumberPair] = []
    for _ in range(100 * n_train + 100):
        if len(train) == n_train:
            break
        pair = random_pair(rng, min_numbers, max_numbers)
        if pair.source not in held_out:
            train.append(pair)
    if len(train) < n_train:  # (not a for-else: the last draw may be the one that completes)
        raise ValueError(f"could not draw {n_train} training pairs that differ from the held-out "
                         f"ones with {min_numbers}..{max_numbers} numbers; ask for fewer")
    return TranslationTask(train, test, source_vocabulary(), target_vocabulary())


@dataclass
class TranslationBatch:
    """Padded tensors for a list of pairs.

    src (B, S) int64 source ids padded with <pad> = PAD_ID; src_lengths (B,) int64;
    tgt (B, T) int64 target ids `<start> y_1 .. y_n <end>` padded with PAD_ID.
    The decoder reads tgt[:, :-1] and is trained to predict tgt[:, 1:].
    """

    src: torch.Tensor
    src_lengths: torch.Tensor
    tgt: torch.Tensor

    def __len__(self) -> int:
        return self.src.shape[0]

    def __getitem__(self, index) -> TranslationBatch:
        """Rows `index` (a tensor of indices or a slice), without the padding columns that no
        row of the selection needs."""
        src, lengths, tgt = self.src[index], self.src_lengths[index], self.tgt[index]
        src = src[:, : int(lengths.max())]  # (b, S') with S' = the longest selected source
        tgt = tgt[:, : int((tgt != PAD_ID).sum(1).max())]  # (b, T')
        return TranslationBatch(src, lengths, tgt)


def make_batch(pairs: list[NumberPair], src_vocab: Vocabulary, tgt_vocab: Vocabulary
               ) -> TranslationBatch:
    """Encode and pad `pairs` (words -> ids, characters -> ids) into one TranslationBatch."""
    if not pairs:
        raise ValueError("make_batch needs at least one pair")
    src, src_lengths = pad_batch([src_vocab.encode(p.source) for p in pairs])  # (B, S), (B,)
    tgt, _ = pad_batch([tgt_vocab.encode(p.target, start=True, end=True) for p in pairs])
    return TranslationBatch(src, src_lengths, tgt)  # tgt: (B, T)


def length_buckets(lengths, edges=LENGTH_EDGES) -> list[str]:
    """A label per length: "11-20" for the bucket [11, 21) of `edges`; at or above the last
    edge "41+"; below the first "<5"."""
    edges = tuple(edges)
    if (len(edges) < 2 or not all(isinstance(e, int) and not isinstance(e, bool) for e in edges)
            or list(edges) != sorted(set(edges))):
        raise ValueError(f"edges must be at least two increasing ints; got {edges!r}")
    labels = []
    for n in (int(x) for x in lengths):
        if n < edges[0]:
            labels.append(f"<{edges[0]}")
        elif n >= edges[-1]:
            labels.append(f"{edges[-1]}+")
        else:
            i = max(k for k in range(len(edges) - 1) if edges[k] <= n)
            labels.append(f"{edges[i]}-{edges[i + 1] - 1}")
    return labels
