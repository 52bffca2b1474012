"""Vocabularies, padding and minibatches: what every text task of the course shares.

A `Vocabulary` maps tokens to ids and back. Its first ids are the special tokens
`<pad>` = 0, `<start>` = 1, `<end>` = 2, `<unk>` = 3, so that padding is always id 0.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence

import torch

__all__ = ["END", "PAD", "SPECIALS", "START", "UNK", "Vocabulary", "minibatches", "pad_batch"]

PAD, START, END, UNK = "<pad>", "<start>", "<end>", "<unk>"
SPECIALS = (PAD, START, END, UNK)


class Vocabulary:
    """A fixed list of tokens: `vocab.tokens[i]` is the token of id `i`."""

    def __init__(self, tokens: Sequence[str]):
        if list(tokens[: len(SPECIALS)]) != list(SPECIALS):
            raise ValueError(f"a vocabulary starts with the special tokens {SPECIALS}; "
                             f"got {list(tokens[:len(SPECIALS)])}")
        if len(set(tokens)) != len(tokens):
            raise ValueError("a vocabulary lists each token once; found duplicates")
        self.tokens = list(tokens)
        self.ids = {token: i for i, token in enumerate(self.tokens)}

    @classmethod
    def build(cls, sequences: Iterable[Sequence[str]], *, min_count: int = 1,
              max_size: int | None = None) -> Vocabulary:
        """The tokens of `sequences` seen at least `min_count` times, most frequent first
        (ties in first-seen order), after the special tokens; at most `max_size` in all."""
        if min_count < 1:
            raise ValueError(f"min_count must be at least 1, got {min_count}")
        counts = Counter(token for seq in sequences for token in seq)
        ordered = [t for t, n in sorted(counts.items(), key=lambda kv: -kv[1])
                   if n >= min_count and t not in SPECIALS]
        if max_size is not None:
            if max_size < len(SPECIALS):
                raise ValueError(f"max_size must be at least {len(SPECIALS)}, got {max_size}")
            ordered = ordered[: max_size - len(SPECIALS)]
        return cls([*SPECIALS, *ordered])

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: str) -> bool:
        return token in self.ids

    def __repr__(self) -> str:
        return f"Vocabulary({len(self)} tokens: {self.tokens[4:10]}...)"

    pad_id = property(lambda self: 0, doc="id of <pad> (always 0)")
    start_id = property(lambda self: 1, doc="id of <start>")
    end_id = property(lambda self: 2, doc="id of <end>")
    unk_id = property(lambda self: 3, doc="id of <unk>")

    def encode(self, tokens: Iterable[str], *, start: bool = False, end: bool = False
               ) -> list[int]:
        """Ids of `tokens` (<unk> for unknown ones), optionally framed by <start> and <end>."""
        ids = [self.ids.get(t, self.unk_id) for t in tokens]
        return ([self.start_id] if start else []) + ids + ([self.end_id] if end else [])

    def decode(self, ids: Iterable[int], *, stop_at_end: bool = True) -> list[str]:
        """Tokens of `ids`, without <pad> and <start>; stops at the first <end>."""
        out = []
        for i in ids:
            i = int(i)
            if not 0 <= i < len(self):
                raise ValueError(f"id {i} is outside the vocabulary (0..{len(self) - 1})")
            if i == self.end_id and stop_at_end:
                break
            if i not in (self.pad_id, self.start_id):
                out.append(self.tokens[i])
        return out


def pad_batch(sequences: Sequence[Sequence[int]], pad_id: int = 0
              ) -> tuple[torch.Tensor, torch.Tensor]:
    """Stack id sequences of different lengths into one tensor.

    Returns (ids, lengths): ids (B, T_max) int64 padded with `pad_id` on the right,
    lengths (B,) int64.
    """
    if len(sequences) == 0:
        raise ValueError("pad_batch needs at least one sequence")
    lengths = torch.tensor([len(s) for s in sequences], dtype=torch.long)  # (B,)
    if int(lengths.min()) == 0:
        raise ValueError("pad_batch got an empty sequence; every sequence needs a token")
    ids = torch.full((len(sequences), int(lengths.max())), pad_id, dtype=torch.long)  # (B, T)
    for row, seq in enumerate(sequences):
        ids[row, : len(seq)] = torch.as_tensor(list(seq), dtype=torch.long)
    return ids, lengths


def minibatches(n: int, batch_size: int, *, generator: torch.Generator | None = None,
                shuffle: bool = True) -> Iterator[torch.Tensor]:
    """Index tensors that split range(n) into batches of `batch_size` (the last may be
    smaller), in a random order drawn from `generator` when `shuffle`."""
    if batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size}")
    order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    yield from order.split(batch_size)
