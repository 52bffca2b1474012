"""course_utils.data.translation: numbers in old-style English words -> digits, with alignment."""

import random

import pytest
import torch

from course_utils.data import PAD, UNK
from course_utils.data import translation as tr
from course_utils.data.translation import (
    LENGTH_EDGES,
    NumberPair,
    TranslationBatch,
    length_buckets,
    make_batch,
    make_task,
    number_words,
    random_pair,
    source_vocabulary,
    target_vocabulary,
)
from course_utils.data.vocab import SPECIALS

# An independent table of word values, written out here rather than taken from the module.
WORD_VALUES = {
    "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
    "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "thirteen": 13, "fourteen": 14,
    "fifteen": 15, "sixteen": 16, "seventeen": 17, "eighteen": 18, "nineteen": 19,
    "twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
    "eighty": 80, "ninety": 90,
}


def words_to_number(words: list[str]) -> int:
    """Read old-style words back: "seven" -> 7, "four and twenty" -> 24."""
    if len(words) == 1:
        return WORD_VALUES[words[0]]
    units, conjunction, tens = words
    assert conjunction == "and"
    assert 1 <= WORD_VALUES[units] <= 9 and WORD_VALUES[tens] % 10 == 0
    return WORD_VALUES[tens] + WORD_VALUES[units]


@pytest.fixture(scope="module")
def default_task():
    return make_task()


# ----------------------------------------------------------------------------- number_words

@pytest.mark.parametrize("n, words, sources", [
    (7, ["seven"], [0]),
    (13, ["thirteen"], [0, 0]),
    (40, ["forty"], [0, 0]),
    (24, ["four", "and", "twenty"], [2, 0]),
    (99, ["nine", "and", "ninety"], [2, 0]),
    (20, ["twenty"], [0, 0]),
    (1, ["one"], [0]),
])
def test_number_words_examples(n, words, sources):
    assert number_words(n) == (words, sources)


@pytest.mark.parametrize("n", range(1, 100))
def test_number_words_read_back_and_point_each_digit_at_its_word(n):
    words, sources = number_words(n)
    assert words_to_number(words) == n
    assert len(sources) == len(str(n))  # one source word per digit
    assert all(0 <= j < len(words) for j in sources)
    if n >= 20 and n % 10:  # compound: the units come first in the words, last in the digits
        tens_digit, units_digit = str(n)
        assert WORD_VALUES[words[sources[0]]] == 10 * int(tens_digit)
        assert WORD_VALUES[words[sources[1]]] == int(units_digit)
        assert sources[0] > sources[1]  # the crossing
    else:  # one word carries every digit
        assert len(words) == 1 and set(sources) == {0}


@pytest.mark.parametrize("bad", [0, 100, -5, 2.0, "7", True, None])
def test_number_words_rejects_anything_but_an_int_in_1_to_99(bad):
    with pytest.raises(ValueError, match=r"int in 1\.\.99"):
        number_words(bad)


# ----------------------------------------------------------------------------- NumberPair

def test_number_pair_hand_checked_example():
    pair = NumberPair.of([24, 7, 13, 40])
    assert pair.numbers == (24, 7, 13, 40)
    assert pair.source == ("four", "and", "twenty", ",", "seven", ",", "thirteen", ",", "forty")
    assert pair.target == ("2", "4", ",", "7", ",", "1", "3", ",", "4", "0")
    assert pair.sources == (2, 0, 3, 4, 5, 6, 6, 7, 8, 8)
    assert str(pair) == "four and twenty , seven , thirteen , forty  ->  24,7,13,40"

    expected = torch.zeros(10, 9)
    for i, j in enumerate([2, 0, 3, 4, 5, 6, 6, 7, 8, 8]):
        expected[i, j] = 1.0
    assert torch.equal(pair.alignment(), expected)


def test_number_pair_is_consistent_for_random_lists():
    rng = random.Random(1)
    for _ in range(200):
        numbers = [rng.randint(1, 99) for _ in range(rng.randint(1, 8))]
        pair = NumberPair.of(numbers)
        assert "".join(pair.target) == ",".join(str(n) for n in numbers)
        assert len(pair.sources) == len(pair.target)
        # split the source at commas and read every number back
        chunks, current = [], []
        for word in pair.source:
            if word == ",":
                chunks.append(current)
                current = []
            else:
                current.append(word)
        chunks.append(current)
        assert [words_to_number(c) for c in chunks] == numbers
        # commas are read from commas, digits from number words
        for char, j in zip(pair.target, pair.sources, strict=True):
            assert (char == ",") == (pair.source[j] == ",")


def test_number_pair_rejects_empty_and_bad_numbers():
    with pytest.raises(ValueError, match="at least one number"):
        NumberPair.of([])
    with pytest.raises(ValueError, match=r"1\.\.99"):
        NumberPair.of([5, 100])


def test_alignment_has_one_one_per_row_and_the_right_shape():
    pair = NumberPair.of([24, 7, 13, 40, 86])
    a = pair.alignment()
    assert a.shape == (len(pair.target), len(pair.source))
    assert a.dtype == torch.float32
    assert torch.equal(a.sum(dim=1), torch.ones(len(pair.target)))
    assert set(a.unique().tolist()) == {0.0, 1.0}
    assert a.argmax(dim=1).tolist() == list(pair.sources)


def test_alignment_is_not_monotone_for_compound_numbers():
    cols = NumberPair.of([24]).alignment().argmax(dim=1)  # target "2", "4"
    assert cols.tolist() == [2, 0]  # "2" from "twenty", "4" from "four": backwards
    cols = NumberPair.of([7, 13, 40]).alignment().argmax(dim=1)  # no compound number
    assert (cols[1:] >= cols[:-1]).all()  # ... and then it is monotone


# ----------------------------------------------------------------------------- make_task

def test_make_task_is_deterministic_for_a_seed_and_differs_between_seeds():
    a, b = make_task(200, 50, seed=3), make_task(200, 50, seed=3)
    assert a.train == b.train and a.test == b.test
    c = make_task(200, 50, seed=4)
    assert c.train != a.train and c.test != a.test
    assert (len(a.train), len(a.test)) == (200, 50)


def test_no_held_out_source_is_in_training(default_task):
    held_out = {p.source for p in default_task.test}
    assert not held_out & {p.source for p in default_task.train}
    # with one number per pair, held-out numbers are numerous: the filter really works
    small = make_task(300, 40, seed=0, min_numbers=1, max_numbers=1)
    assert not {p.numbers for p in small.test} & {p.numbers for p in small.train}


def test_default_task_spans_short_and_long_sources(default_task):
    lengths = [len(p.source) for p in default_task.train]
    assert min(lengths) <= 5 and max(lengths) >= 40
    labels = set(length_buckets(lengths))
    assert {"5-10", "11-20", "21-30", "31-40", "41+"} <= labels
    counts = [len(p.numbers) for p in default_task.train + default_task.test]
    assert min(counts) == 2 and max(counts) == 12  # the defaults, both reached


@pytest.mark.parametrize("low, high", [(1, 1), (3, 5), (4, 4)])
def test_number_counts_stay_within_min_and_max(low, high):
    task = make_task(300, 50, seed=0, min_numbers=low, max_numbers=high)
    counts = {len(p.numbers) for p in task.train + task.test}
    assert counts == set(range(low, high + 1))
    assert all(1 <= n <= 99 for p in task.train for n in p.numbers)


def test_random_pair_draws_within_bounds():
    rng = random.Random(0)
    pairs = [random_pair(rng, 2, 4) for _ in range(300)]
    assert {len(p.numbers) for p in pairs} == {2, 3, 4}
    assert min(n for p in pairs for n in p.numbers) == 1
    assert max(n for p in pairs for n in p.numbers) == 99


@pytest.mark.parametrize("kwargs, message", [
    (dict(n_train=-1), r"n_train must be an int >= 0"),
    (dict(n_train=2.5), r"n_train must be an int >= 0"),
    (dict(n_test=-1), r"n_test must be an int >= 0"),
    (dict(seed=-1), r"seed must be an int >= 0"),
    (dict(seed="0"), r"seed must be an int >= 0"),
    (dict(min_numbers=0), r"min_numbers must be a positive int"),
    (dict(min_numbers=True), r"min_numbers must be a positive int"),
    (dict(min_numbers=5, max_numbers=4), r"max_numbers must be an int >= 5"),
    (dict(n_train=0, n_test=0), r"n_train \+ n_test must be positive"),
])
def test_make_task_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        make_task(**kwargs)


def test_make_task_fails_clearly_when_training_pairs_cannot_be_found():
    # 1000 held-out pairs of one number cover all 99 possible sources: nothing is left
    with pytest.raises(ValueError, match="could not draw 5 training pairs"):
        make_task(5, 1000, seed=0, min_numbers=1, max_numbers=1)


def test_make_task_accepts_a_training_pair_found_on_the_last_allowed_draw(monkeypatch):
    """n_train=1 allows 200 draws; the only new source comes on draw 200 (a for-else bug
    used to reject it)."""
    calls = []

    def scripted_pair(rng, min_numbers, max_numbers):
        calls.append(1)
        if len(calls) == 1:
            return NumberPair.of([5])  # the held-out pair
        return NumberPair.of([7] if len(calls) == 201 else [5])

    monkeypatch.setattr(tr, "random_pair", scripted_pair)
    task = make_task(1, 1, seed=0)
    assert [p.numbers for p in task.train] == [(7,)] and len(calls) == 201


# ----------------------------------------------------------------------------- vocabularies

def test_vocabularies_put_specials_first_and_pad_at_zero():
    for vocab in (source_vocabulary(), target_vocabulary()):
        assert vocab.tokens[: len(SPECIALS)] == list(SPECIALS)
        assert vocab.ids[PAD] == 0 == vocab.pad_id
    src, tgt = source_vocabulary(), target_vocabulary()
    assert len(src) == 4 + 2 + 27  # specials, comma and "and", 19 small words + 8 tens
    assert set(src.tokens[4:]) == {",", "and", *WORD_VALUES}
    assert tgt.tokens[4:] == [*"0123456789", ","]


def test_every_token_of_the_task_is_in_vocabulary(default_task):
    src, tgt = default_task.src_vocab, default_task.tgt_vocab
    pairs = default_task.train + default_task.test
    assert all(w in src for p in pairs for w in p.source)
    assert all(c in tgt for p in pairs for c in p.target)
    batch = make_batch(pairs, src, tgt)
    assert not (batch.src == src.unk_id).any() and not (batch.tgt == tgt.unk_id).any()
    assert src.tokens[src.unk_id] == UNK == tgt.tokens[tgt.unk_id]


# ----------------------------------------------------------------------------- batches

def test_make_batch_shapes_padding_and_framing():
    pairs = [NumberPair.of([24, 7]), NumberPair.of([5]), NumberPair.of([13, 40, 99])]
    src_vocab, tgt_vocab = source_vocabulary(), target_vocabulary()
    batch = make_batch(pairs, src_vocab, tgt_vocab)
    src_lengths = [len(p.source) for p in pairs]  # [5, 1, 7]
    tgt_lengths = [len(p.target) + 2 for p in pairs]  # with <start> and <end>: [6, 3, 10]
    assert batch.src.shape == (3, 7) and batch.tgt.shape == (3, 10) and len(batch) == 3
    assert batch.src.dtype == batch.tgt.dtype == batch.src_lengths.dtype == torch.long
    assert batch.src_lengths.tolist() == src_lengths
    for row, pair in enumerate(pairs):
        m, n = src_lengths[row], tgt_lengths[row]
        assert src_vocab.decode(batch.src[row, :m]) == list(pair.source)
        assert (batch.src[row, m:] == 0).all() and (batch.src[row, :m] != 0).all()
        assert batch.tgt[row, 0] == tgt_vocab.start_id and batch.tgt[row, n - 1] == 2
        assert tgt_vocab.decode(batch.tgt[row]) == list(pair.target)
        assert (batch.tgt[row, n:] == 0).all() and (batch.tgt[row, :n] != 0).all()
    with pytest.raises(ValueError, match="at least one pair"):
        make_batch([], src_vocab, tgt_vocab)


def test_getitem_keeps_rows_and_drops_padding_columns_nobody_needs():
    pairs = [NumberPair.of([13, 40, 99]), NumberPair.of([5]), NumberPair.of([24, 7])]
    batch = make_batch(pairs, source_vocabulary(), target_vocabulary())  # src (3, 7), tgt (3, 10)
    sub = batch[torch.tensor([1, 2])]
    assert isinstance(sub, TranslationBatch) and len(sub) == 2
    assert sub.src.shape == (2, 5) and sub.tgt.shape == (2, 6)  # longest source 5, target 6
    assert torch.equal(sub.src, batch.src[1:, :5]) and torch.equal(sub.tgt, batch.tgt[1:, :6])
    assert sub.src_lengths.tolist() == [1, 5]
    one = batch[torch.tensor([1])]
    assert one.src.tolist() == [[batch.src[1, 0].item()]] and one.tgt.shape == (1, 3)
    full = batch[0:3]  # a slice; the longest rows keep every column
    assert torch.equal(full.src, batch.src) and torch.equal(full.tgt, batch.tgt)
    rev = batch[torch.tensor([2, 0])]  # the order of the index is kept
    assert rev.src_lengths.tolist() == [5, 7] and torch.equal(rev.tgt, batch.tgt[[2, 0]])


# ----------------------------------------------------------------------------- length buckets

def test_length_buckets_labels_at_the_edges():
    lengths = [1, 4, 5, 10, 11, 20, 21, 30, 31, 40, 41, 300]
    assert length_buckets(lengths) == ["<5", "<5", "5-10", "5-10", "11-20", "11-20",
                                       "21-30", "21-30", "31-40", "31-40", "41+", "41+"]
    assert length_buckets(torch.tensor([4, 41])) == ["<5", "41+"]
    assert LENGTH_EDGES == (5, 11, 21, 31, 41)
    assert length_buckets([0, 2, 3, 9], edges=(2, 3)) == ["<2", "2-2", "3+", "3+"]
    assert length_buckets([]) == []


@pytest.mark.parametrize("edges", [(), (5,), (5, 5, 10), (10, 5), (5, 10.5), (True, 5), "ab"])
def test_length_buckets_rejects_bad_edges(edges):
    with pytest.raises(ValueError, match="edges must be at least two increasing ints"):
        length_buckets([3], edges=edges)
