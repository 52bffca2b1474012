"""Unit 07: BERT's uncased WordPiece tokenizer, from scratch, and a small WordPiece trainer.

    basic_tokenize  clean      drop NUL, U+FFFD and control characters; whitespace -> " "
                    CJK        put spaces around every CJK ideograph (each one is a word)
                    accents    NFD, then drop the non-spacing marks (category Mn): é -> e
                    lower      lower-case, one character at a time
                    split      on whitespace, then every punctuation character is a word
    WordPiece       each word -> the longest prefix in the vocabulary, then the longest
                    "##"-piece of the rest, and so on: "embeddings" -> em ##bed ##ding ##s;
                    if no piece fits at some point the WHOLE word is [UNK]
    encode          [CLS] A [SEP]  or  [CLS] A [SEP] B [SEP], segments 0 ... 0 1 ... 1

Text in which a special token is written out, "the [MASK] sat", keeps it as one token (the
masked-LM example of unit 07); the rest is cut into words as above.

The reference is Hugging Face's `tokenizers` with the vocabulary of bert-base-uncased (the
tests compare the ids on thousands of sentences and on every character of the BMP). Where it
differs from the Python code of the original BERT release we follow the library:
lower-casing is per character (no Greek final sigma: ΟΔΟΣ -> οδοσ); U+2028 and U+2029 are
whitespace; unassigned code points are kept, not dropped; one CJK block starts at U+2B920,
not U+2B820; a special token written in the text is one token. What remains is the Unicode
version: the library's tables are older than Python's, so it treats characters added since
(a few hundred, none of them common) as unassigned.

train_wordpiece learns a vocabulary: start from every character (word-initial "c", inner
"##c"), then repeatedly merge the adjacent pair (a, b) with the highest score
count(ab) / (count(a) * count(b)). Unlike BPE's count(ab) alone, the score prefers pairs
whose parts are rarely seen apart; so much so that with min_frequency=2 the first merges
complete rare words ("exquisite") while "the" stays th ##e. A higher min_frequency (20 on
Shakespeare's tragedies) spends the vocabulary on common words instead.
"""

from __future__ import annotations

import heapq
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import torch

from course_utils._checks import require_bool, require_int, require_str

__all__ = ["SPECIAL_TOKENS", "WordPiece", "basic_tokenize", "train_wordpiece"]

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PREFIX = "##"  # marks a piece that continues a word
CACHE_CHUNKS = 100_000  # distinct " "-separated chunks a WordPiece remembers the pieces of

# CJK ideographs, the code-point blocks of the original BERT (kana and hangul are not here:
# they are split like letters), except that the library starts Extension E at 0x2B920
# (BERT: 0x2B820), and we follow the library
_CJK = ((0x4E00, 0x9FFF), (0x3400, 0x4DBF), (0x20000, 0x2A6DF), (0x2A700, 0x2B73F),
        (0x2B740, 0x2B81F), (0x2B920, 0x2CEAF), (0xF900, 0xFAFF), (0x2F800, 0x2FA1F))


# ----------------------------------------------------------------------------- basic

def _is_whitespace(ch: str) -> bool:
    """Space, tab, newline, carriage return, or a Unicode separator (Zs, Zl, Zp)."""
    return ch in " \t\n\r" or unicodedata.category(ch) in ("Zs", "Zl", "Zp")


def _is_control(ch: str) -> bool:
    """Category Cc, Cf, Co or Cs (control, format, private use, surrogate), except tab and
    newlines. Unassigned code points (Cn) are kept: the library does (the original BERT drops
    them)."""
    return ch not in "\t\n\r" and unicodedata.category(ch) in ("Cc", "Cf", "Co", "Cs")


def _is_cjk(ch: str) -> bool:
    code = ord(ch)
    return any(low <= code <= high for low, high in _CJK)


def _is_punctuation(ch: str) -> bool:
    """Every ASCII symbol ($, ^, ` count too) or a Unicode punctuation mark (category P*)."""
    code = ord(ch)
    if 33 <= code <= 47 or 58 <= code <= 64 or 91 <= code <= 96 or 123 <= code <= 126:
        return True
    return unicodedata.category(ch).startswith("P")


def _normalize(text: str) -> str:
    """Clean, space out CJK, strip accents, lower-case (BERT's uncased normaliser)."""
    chars = []
    for ch in text:
        if ch == "\0" or ch == "\ufffd" or _is_control(ch):
            continue
        if _is_whitespace(ch):
            chars.append(" ")
        elif _is_cjk(ch):
            chars.append(f" {ch} ")
        else:
            chars.append(ch)
    text = unicodedata.normalize("NFD", "".join(chars))
    # The library strips the accents first and lower-cases after, one character at a time.
    return "".join(ch.lower() for ch in text if unicodedata.category(ch) != "Mn")


def basic_tokenize(text: str) -> list[str]:
    """BERT-uncased words: normalise, split on whitespace, split off every punctuation mark.

    >>> basic_tokenize("Héllo, WORLD!  I'm here.")
    ['hello', ',', 'world', '!', 'i', "'", 'm', 'here', '.']
    """
    require_str(text, "text")
    words = []
    for chunk in _normalize(text).split(" "):
        word = ""
        for ch in chunk:
            if _is_punctuation(ch):
                if word:
                    words.append(word)
                words.append(ch)
                word = ""
            else:
                word += ch
        if word:
            words.append(word)
    return words


# ----------------------------------------------------------------------------- WordPiece

def _require_text_list(texts, name: str) -> list[str]:
    if isinstance(texts, str) or not isinstance(texts, list | tuple):
        raise ValueError(f"{name} must be a list of str; got {type(texts).__name__}")
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"{name}[{i}] must be a str; got {type(text).__name__}")
    return list(texts)


class WordPiece:
    """A WordPiece tokenizer over a fixed vocabulary (a list of tokens, id = position, or a
    dict token -> id whose ids are 0 .. V-1).

        wp = WordPiece.from_vocab_file("vocab.txt")
        wp.tokenize("He likes playing")         # ['he', 'likes', 'playing']
        wp.encode("my dog is cute", "he likes playing")
        ids, segments, mask = wp.encode_batch(["a short one", "and a longer one"])
    """

    def __init__(self, vocab: list[str] | dict[str, int], unk: str = "[UNK]",
                 max_chars_per_word: int = 100):
        if isinstance(vocab, dict):
            ids = list(vocab.values())
            ints = all(isinstance(i, int) and not isinstance(i, bool) for i in ids)
            if not ints or sorted(ids) != list(range(len(ids))):
                raise ValueError(f"vocab as a dict must map each token to an int id, the ids "
                                 f"being 0 .. {len(ids) - 1} once each")
            tokens = sorted(vocab, key=vocab.get)
        elif isinstance(vocab, list | tuple):
            tokens = list(vocab)
        else:
            raise ValueError(f"vocab must be a list of tokens (id = position) or a dict "
                             f"token -> id; got {type(vocab).__name__}")
        for i, token in enumerate(tokens):
            if not isinstance(token, str) or not token or "\n" in token or "\r" in token:
                raise ValueError(f"every token must be a non-empty str without line breaks; "
                                 f"token {i} is {token!r}")
        self.vocab = {token: i for i, token in enumerate(tokens)}
        if len(self.vocab) != len(tokens):
            twice = [t for t, n in Counter(tokens).items() if n > 1]
            raise ValueError(f"every token must appear once in vocab; repeated: {twice[:5]}")
        self.tokens = tokens
        require_str(unk, "unk")
        if unk not in self.vocab:
            raise ValueError(f"unk must be a token of the vocabulary; {unk!r} is not in it")
        self.unk = unk
        self.max_chars_per_word = require_int(max_chars_per_word, "max_chars_per_word")
        # the special tokens that the text may spell out: "the [MASK] sat"
        written = sorted({t for t in (*SPECIAL_TOKENS, unk) if t in self.vocab},
                         key=lambda t: (-len(t), t))  # the longest first
        self._written_special = re.compile("(" + "|".join(map(re.escape, written)) + ")")
        self._chunk_words: dict[str, tuple[tuple[str, ...], ...]] = {}  # see _words

    @classmethod
    def from_vocab_file(cls, path, **kwargs) -> WordPiece:
        """Read a vocab.txt: one token per line, the id is the line number (from 0)."""
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"path must be a vocabulary file (one token per line); "
                             f"{str(path)!r} is not a file")
        lines = path.read_text(encoding="utf-8").split("\n")
        if lines and lines[-1] == "":
            lines.pop()  # the file ends with a newline
        return cls([line.removesuffix("\r") for line in lines], **kwargs)

    def save(self, path) -> None:
        """Write the vocabulary as vocab.txt: one token per line, in id order."""
        Path(path).write_text("".join(token + "\n" for token in self.tokens), encoding="utf-8")

    def __len__(self) -> int:
        return len(self.tokens)

    def __repr__(self) -> str:
        return f"WordPiece({len(self):,} tokens, unk={self.unk!r})"

    # ------------------------------------------------------------------------- special ids

    def _special_id(self, token: str) -> int:
        if token not in self.vocab:
            raise ValueError(f"the vocabulary has no {token} token; expected the special tokens "
                             f"{SPECIAL_TOKENS} (a BERT vocab.txt or train_wordpiece has them)")
        return self.vocab[token]

    @property
    def pad_id(self) -> int:
        return self._special_id("[PAD]")

    @property
    def unk_id(self) -> int:
        return self.vocab[self.unk]

    @property
    def cls_id(self) -> int:
        return self._special_id("[CLS]")

    @property
    def sep_id(self) -> int:
        return self._special_id("[SEP]")

    @property
    def mask_id(self) -> int:
        return self._special_id("[MASK]")

    @property
    def special_ids(self) -> frozenset[int]:
        """The ids of those SPECIAL_TOKENS that the vocabulary has."""
        return frozenset(self.vocab[t] for t in SPECIAL_TOKENS if t in self.vocab)

    # ------------------------------------------------------------------------- tokenizing

    def split_word(self, word: str) -> list[str]:
        """Greedy longest-match-first: take the longest prefix of `word` in the vocabulary,
        then the longest "##"-piece of what is left, until the word is used up.

        If no piece fits at some position the whole word becomes [UNK] (not only the rest),
        and so does a word of more than max_chars_per_word characters.
        """
        require_str(word, "word")
        if len(word) > self.max_chars_per_word:
            return [self.unk]
        pieces, start = [], 0
        while start < len(word):
            for end in range(len(word), start, -1):
                piece = word[start:end] if start == 0 else PREFIX + word[start:end]
                if piece in self.vocab:
                    break
            else:
                return [self.unk]
            pieces.append(piece)
            start = end
        return pieces

    def _words(self, text: str) -> list[tuple[str, ...]]:
        """The pieces of each word of `text`; a special token written in the text is a word
        of its own (as in the library, which finds them before normalising).

        No word or special token spans a " " (basic_tokenize splits there first), so the
        words of a text are those of its " "-separated chunks one after the other; each
        distinct chunk is cut once and remembered (a corpus of a few hundred distinct words
        in thousands of sentences is tokenized at the cost of its words)."""
        words = []
        for chunk in text.split(" "):
            pieces = self._chunk_words.get(chunk)
            if pieces is None:
                pieces = self._cut(chunk)
                if len(self._chunk_words) >= CACHE_CHUNKS:  # bounded: forget, start again
                    self._chunk_words.clear()
                self._chunk_words[chunk] = pieces
            words += pieces
        return words

    def _cut(self, text: str) -> tuple[tuple[str, ...], ...]:
        """_words without the cache."""
        words = []
        parts = self._written_special.split(text)  # text, special, text, special, ..., text
        for i, part in enumerate(parts):
            if i % 2 == 1:
                words.append((part,))
            else:
                words += [tuple(self.split_word(word)) for word in basic_tokenize(part)]
        return tuple(words)

    def tokenize(self, text: str) -> list[str]:
        """basic_tokenize, then split_word on each word: "He likes playing!" ->
        ['he', 'likes', 'playing', '!']."""
        require_str(text, "text")
        return [piece for pieces in self._words(text) for piece in pieces]

    def _encode(self, text: str, pair: str | None) -> tuple[list[int], list[int],
                                                           list[int | None]]:
        """ids, segment ids and word ids of [CLS] A [SEP] (B [SEP])."""
        require_str(text, "text")
        if pair is not None:
            require_str(pair, "pair")
        ids, segments, word_ids = [self.cls_id], [0], [None]
        vocab, sep = self.vocab, self.sep_id
        for segment, part in enumerate([text] if pair is None else [text, pair]):
            words = self._words(part)
            part_ids = [vocab[piece] for pieces in words for piece in pieces]
            ids += part_ids
            ids.append(sep)
            segments += [segment] * (len(part_ids) + 1)
            word_ids += [w for w, pieces in enumerate(words) for _ in pieces]
            word_ids.append(None)
        return ids, segments, word_ids

    def encode(self, text: str, pair: str | None = None) -> list[int]:
        """Token ids of [CLS] text [SEP], or of [CLS] text [SEP] pair [SEP]."""
        return self._encode(text, pair)[0]

    def segment_ids(self, ids: list[int]) -> list[int]:
        """BERT's token type ids for the output of encode: 0 for [CLS], the tokens of A and the
        first [SEP]; 1 for the tokens of B and the final [SEP].

        It reads the first [SEP] as the end of A, so an A that spells out "[SEP]" itself is
        cut there; encode_batch counts the tokens instead and has no such problem.
        """
        ids = self._require_id_list(ids)
        if self.sep_id not in ids:
            raise ValueError(f"ids must be the output of encode, [CLS] A [SEP] (B [SEP]); "
                             f"got no [SEP] (id {self.sep_id}) in them")
        end_of_a = ids.index(self.sep_id)
        return [0] * (end_of_a + 1) + [1] * (len(ids) - end_of_a - 1)

    def word_ids(self, text: str, pair: str | None = None, *, continue_in_pair: bool = False
                 ) -> list[int | None]:
        """For each id of encode(text, pair), the index of the word it comes from (the words
        of basic_tokenize, counted from 0 in text and again from 0 in pair, as `transformers`'
        word_ids() counts them); None for [CLS] and [SEP].
        "he likes embeddings" -> [None, 0, 1, 2, 2, 2, 2, None].

        continue_in_pair=True counts the words of pair on after those of text (word i of pair
        is word n_text + i), so that a relation between the two sentences is one pair of word
        indices."""
        require_bool(continue_in_pair, "continue_in_pair")
        _, segments, words = self._encode(text, pair)
        if not continue_in_pair or pair is None:
            return words
        offset = len(self._words(text))
        return [w if w is None or segment == 0 else w + offset
                for w, segment in zip(words, segments, strict=True)]

    def encode_batch(self, texts: list[str], pairs: list[str] | None = None,
                     n_positions: int | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Encode B texts (or B pairs) into padded tensors, T = the longest encoding:

            ids             (B, T) int64, padded with pad_id
            segments        (B, T) int64, 0 for A, 1 for B, 0 at padding
            attention_mask  (B, T) bool, True at the real tokens

        n_positions: the rows of the model's position table (BertConfig.n_positions); a
        ValueError names any text whose encoding is longer (never truncated).
        """
        texts = _require_text_list(texts, "texts")
        if not texts:
            raise ValueError("texts must be a non-empty list of str; got an empty list")
        if pairs is not None:
            pairs = _require_text_list(pairs, "pairs")
            if len(pairs) != len(texts):
                raise ValueError(f"pairs must have one str per text, {len(texts)} of them; "
                                 f"got {len(pairs)}")
        if n_positions is not None:
            require_int(n_positions, "n_positions", low=2)
        encoded = [self._encode(text, None if pairs is None else pairs[i])
                   for i, text in enumerate(texts)]
        T = max(len(ids) for ids, _, _ in encoded)
        if n_positions is not None and T > n_positions:
            i = next(i for i, (ids, _, _) in enumerate(encoded) if len(ids) > n_positions)
            what = f"texts[{i}]" if pairs is None else f"texts[{i}] with pairs[{i}]"
            raise ValueError(f"{what} is {len(encoded[i][0])} tokens long with [CLS] and [SEP], "
                             f"over n_positions={n_positions}, the positions a model reads; "
                             f"encode_batch never truncates: shorten it")
        pad = [T - len(row) for row, _, _ in encoded]
        ids = torch.tensor([row + [self.pad_id] * n
                            for (row, _, _), n in zip(encoded, pad, strict=True)])  # (B, T)
        segments = torch.tensor([seg + [0] * n
                                 for (_, seg, _), n in zip(encoded, pad, strict=True)])  # (B, T)
        mask = torch.arange(T) < torch.tensor([T - n for n in pad])[:, None]  # (B, T)
        return ids, segments, mask

    # ------------------------------------------------------------------------- decoding

    def _require_id_list(self, ids) -> list[int]:
        if isinstance(ids, torch.Tensor):
            if ids.dim() != 1 or ids.dtype.is_floating_point or ids.dtype == torch.bool:
                raise ValueError(f"ids must be a 1-d tensor of int token ids; got dtype "
                                 f"{ids.dtype}, {ids.dim()} dimension(s)")
            ids = ids.tolist()
        if not isinstance(ids, list | tuple):
            raise ValueError(f"ids must be a list of int token ids; got {type(ids).__name__}")
        for i in ids:
            if not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(self):
                raise ValueError(f"ids must be ints in [0, {len(self) - 1}] (the vocabulary "
                                 f"has {len(self)} tokens); got {i!r}")
        return list(ids)

    def decode(self, ids) -> str:
        """The tokens joined by spaces, each "##" piece glued to the one before it:
        [CLS] he likes em ##bed ##ding ##s [SEP] -> "[CLS] he likes embeddings [SEP]"."""
        text = ""
        for i in self._require_id_list(ids):
            token = self.tokens[i]
            if token.startswith(PREFIX) and text:
                text += token[len(PREFIX):]
            else:
                text += (" " if text else "") + token
        return text


# ----------------------------------------------------------------------------- training

def _merge_word(word: tuple[str, ...], a: str, b: str, merged: str) -> tuple[str, ...]:
    """Replace every adjacent (a, b) in word by `merged`, from left to right."""
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and word[i] == a and word[i + 1] == b:
            out.append(merged)
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def train_wordpiece(texts: Iterable[str], vocab_size: int, min_frequency: int = 2) -> WordPiece:
    """Learn a WordPiece vocabulary of at most vocab_size tokens from `texts`.

    1. Count the words of basic_tokenize(texts); spell each as characters, the first as
       itself and the others with "##": "dog" -> d ##o ##g. The vocabulary starts as the
       special tokens and every such character.
    2. Find the adjacent pair (a, b) with the highest score count(ab) / (count(a) * count(b))
       (counts weighted by word frequency) among pairs seen at least min_frequency times;
       ties go to the smallest (a, b). Add a + b (without b's "##") and merge it everywhere.
    3. Repeat until the vocabulary has vocab_size tokens or no pair is frequent enough.

    Only the word types that contain the merged pair are re-spelt, and a heap keeps the
    candidates by score. Every training word of at most 100 characters can be tokenized
    without [UNK], since every character it is made of is in the vocabulary.
    """
    # Long on purpose: one algorithm (count pairs, score, merge, recount only what changed);
    # its bookkeeping is checked against the definition more easily in one place.
    if isinstance(texts, str) or not isinstance(texts, Iterable):
        raise ValueError(f"texts must be an iterable of str (e.g. a list of lines); got "
                         f"{type(texts).__name__}")
    require_int(vocab_size, "vocab_size")
    require_int(min_frequency, "min_frequency")
    counts = Counter()
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise ValueError(f"texts must hold str only; item {i} is {type(text).__name__}")
        counts.update(basic_tokenize(text))
    spelt = [(w[0], *(PREFIX + ch for ch in w[1:])) for w in counts]
    freq = list(counts.values())
    alphabet = sorted({ch for word in spelt for ch in word})
    vocab = [*SPECIAL_TOKENS, *alphabet]
    if vocab_size < len(vocab):
        raise ValueError(f"vocab_size must be at least {len(vocab)}: the {len(SPECIAL_TOKENS)} "
                         f"special tokens and the {len(alphabet)} characters of texts; got "
                         f"{vocab_size}")

    symbol_count = Counter()  # symbol -> how often it occurs
    pair_count = Counter()  # (a, b) -> how often a is followed by b
    pair_words = {}  # (a, b) -> the words (indices into spelt) that contain it
    pairs_with = {}  # symbol -> the pairs it is part of

    def count(w: int, sign: int) -> set:
        """Add (sign=1) or remove (sign=-1) word w's symbols and pairs; return its pairs."""
        word, f = spelt[w], freq[w]
        for symbol in word:
            symbol_count[symbol] += sign * f
        pairs = set(zip(word, word[1:], strict=False))
        for pair in zip(word, word[1:], strict=False):
            pair_count[pair] += sign * f
        for pair in pairs:
            if sign > 0:
                pair_words.setdefault(pair, set()).add(w)
                pairs_with.setdefault(pair[0], set()).add(pair)
                pairs_with.setdefault(pair[1], set()).add(pair)
            else:
                pair_words[pair].discard(w)
                if pair_count[pair] == 0:
                    del pair_count[pair], pair_words[pair]
                    pairs_with[pair[0]].discard(pair)
                    pairs_with[pair[1]].discard(pair)
        return pairs

    def score(pair) -> float:
        return pair_count[pair] / (symbol_count[pair[0]] * symbol_count[pair[1]])

    heap = []  # (-score, a, b); an entry whose score is out of date is skipped when popped

    def push(pairs) -> None:
        for pair in pairs:
            if pair_count.get(pair, 0) >= min_frequency:
                heapq.heappush(heap, (-score(pair), *pair))

    for w in range(len(spelt)):
        count(w, +1)
    push(pair_count)
    known = set(vocab)
    while len(vocab) < vocab_size and heap:
        minus_score, a, b = heapq.heappop(heap)
        if pair_count.get((a, b), 0) < min_frequency or -minus_score != score((a, b)):
            continue  # stale: the counts changed since this entry was pushed
        merged = a + b[len(PREFIX):]  # b never starts a word, so it has the "##"
        if merged not in known:  # (the same string can come from two different pairs)
            vocab.append(merged)
            known.add(merged)
        touched = set()
        for w in sorted(pair_words[(a, b)]):
            touched |= count(w, -1)
            spelt[w] = _merge_word(spelt[w], a, b, merged)
            touched |= count(w, +1)
        # the pairs whose count changed, and every pair of a or b: their counts went down,
        # so the scores of all their pairs went up
        push(touched | pairs_with.get(a, set()) | pairs_with.get(b, set()))
    return WordPiece(vocab)
