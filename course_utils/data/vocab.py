"""Vocabularies, padding and minibatches: what every text task of the course shares.

A `Vocabulary` maps tokens to ids and back. Its first ids are the special tokens
`<pad>` = PAD_ID = 0, `<start>` = START_ID = 1, `<end>` = END_ID = 2, `<unk>` = UNK_ID = 3,
the same in every vocabulary, so that padding is always id 0. These four constants are the
only definition of the special ids in the course; every other module imports them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence

import torch
import torch.nn.functional as F

from course_utils._checks import require_ids, require_int

__all__ = [
    "context_windows",
    "END", "END_ID", "PAD", "PAD_ID", "SPECIALS", "START", "START_ID", "UNK", "UNK_ID",
    "Vocabulary", "minibatches", "pad_batch",
]

PAD, START, END, UNK = "<pad>", "<start>", "<end>", "<unk>"
PAD_ID, START_ID, END_ID, UNK_ID = 0, 1, 2, 3
SPECIALS = (PAD, START, END, UNK)  # a Vocabulary lists them first, in this order
# ... so that the id of each special token is its constant:
assert [SPECIALS.index(t) for t in (PAD, START, END, UNK)] == [PAD_ID, START_ID, END_ID, UNK_ID]


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
        require_int(min_count, "min_count")
        counts = Counter(token for seq in sequences for token in seq)
        ordered = [t for t, n in sorted(counts.items(), key=lambda kv: -kv[1])
                   if n >= min_count and t not in SPECIALS]
        if max_size is not None:
            require_int(max_size, "max_size", low=len(SPECIALS))
            ordered = ordered[: max_size - len(SPECIALS)]
        return cls([*SPECIALS, *ordered])

    def __len__(self) -> int:
        return len(self.tokens)

    def __contains__(self, token: str) -> bool:
        return token in self.ids

    def __repr__(self) -> str:
        return f"Vocabulary({len(self)} tokens: {self.tokens[4:10]}...)"

    pad_id = property(lambda self: PAD_ID, doc="id of <pad> (PAD_ID, always 0)")
    start_id = property(lambda self: START_ID, doc="id of <start> (START_ID)")
    end_id = property(lambda self: END_ID, doc="id of <end> (END_ID)")
    unk_id = property(lambda self: UNK_ID, doc="id of <unk> (UNK_ID)")

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


def pad_batch(sequences: Sequence[Sequence[int]], pad_id: int = PAD_ID
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
    require_int(n, "n", low=0)
    require_int(batch_size, "batch_size")
    order = torch.randperm(n, generator=generator) if shuffle else torch.arange(n)
    yield from order.split(batch_size)


def context_windows(ids: torch.Tensor, n_ctx: int, pad_id: int = PAD_ID
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """The `n_ctx` words before each position, and which of them are real words.

        context[b, t, j] = ids[b, t - n_ctx + j]   (pad_id where t - n_ctx + j < 0)
        mask[b, t, j]    = that slot holds a word of the sequence (not padding)

    ids: (B, T) int64  ->  context (B, T, n_ctx) int64, mask (B, T, n_ctx) bool.
    The last slot j = n_ctx - 1 is the word just before position t; the window never
    includes t.
    """
    require_ids(ids, "ids", "(B, T)", 2)
    require_int(n_ctx, "n_ctx")
    B, T = ids.shape
    padded = F.pad(ids, (n_ctx, 0), value=pad_id)  # (B, T) -> (B, n_ctx + T)
    context = padded.unfold(1, n_ctx, 1)[:, :T]  # (B, T + 1, n_ctx) -> (B, T, n_ctx)
    t = torch.arange(T).unsqueeze(1)  # (T, 1)
    j = torch.arange(n_ctx).unsqueeze(0)  # (1, n_ctx)
    inside = (t - n_ctx + j >= 0)  # (T, n_ctx): slot j of position t is after the start
    mask = inside.unsqueeze(0) & (context != pad_id)  # (B, T, n_ctx)
    return context, mask
