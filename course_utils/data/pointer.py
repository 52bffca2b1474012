"""Unit 05's pointer task: fetch the symbol at a named position.

An example is a row of `length` symbols, all different, followed by one **pointer** token that
names a position p; the answer is the symbol found at position p:

    position:   0    1    2   ...  length-1   length
    ids:        s_0  s_1  s_2 ...  s_{L-1}    @p          (length + 1,)
    answer:     s_p                                        target position p

Symbols are the ids 0 .. n_symbols - 1 and the pointer to position p is the id n_symbols + p,
so a model reads a vocabulary of V = n_symbols + length ids and answers with one of n_symbols
classes. The pointer sits at the end, and p is uniform over 0 .. length - 1: the symbol to
fetch is anywhere from 1 to `length` positions before the question.

Why the task needs positions: the symbols of one row are all different and p is drawn
independently of them, so *which* symbol is the answer is decided by where it stands and by
nothing else. A model that sees the row as a bag of tokens (self-attention without positional
encoding) gets the same bag for every p, and can do no better than pick one of the `length`
symbols present: 1 / length of the answers right, on average. A model that knows positions
can match the pointer to the position it names, one step of attention.

Everything is generated from a seed by Python's `random` (the same numbers on every machine);
nothing is downloaded.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import torch

from course_utils._checks import require_int

__all__ = ["PointerData", "describe", "make_pointer_data", "pointer_id", "vocab_size"]


def vocab_size(length: int, n_symbols: int) -> int:
    """V = n_symbols + length: the symbols, then one pointer id per position."""
    length, n_symbols = _require_sizes(length, n_symbols)
    return n_symbols + length


def pointer_id(position: int, length: int, n_symbols: int) -> int:
    """The id of the pointer token that names `position` (0 .. length - 1): n_symbols + p."""
    length, n_symbols = _require_sizes(length, n_symbols)
    position = require_int(position, "position", low=0, high=length - 1)
    return n_symbols + position


@dataclass
class PointerData:
    """N examples of the pointer task.

    ids (N, length + 1) int64: the symbols, then the pointer id n_symbols + p;
    target (N,) int64: the position p each pointer names, in 0 .. length - 1;
    answer (N,) int64: the symbol at that position, ids[i, target[i]], in 0 .. n_symbols - 1.
    """

    ids: torch.Tensor
    target: torch.Tensor
    answer: torch.Tensor
    n_symbols: int

    @property
    def length(self) -> int:
        """The number of symbols in a row (the pointer not counted)."""
        return self.ids.shape[1] - 1

    @property
    def vocab_size(self) -> int:
        return self.n_symbols + self.length

    def __len__(self) -> int:
        return self.ids.shape[0]

    def __getitem__(self, index) -> PointerData:
        """The examples `index` (a slice, or a tensor or list of indices), as PointerData."""
        if isinstance(index, int):
            index = slice(index, index + 1)
        return PointerData(self.ids[index], self.target[index], self.answer[index],
                           self.n_symbols)


def _require_sizes(length, n_symbols) -> tuple[int, int]:
    length = require_int(length, "length", low=2)
    n_symbols = require_int(n_symbols, "n_symbols", low=2)
    if n_symbols < length:
        raise ValueError(f"the symbols of a row are all different, so n_symbols must be at "
                         f"least length = {length}; got n_symbols = {n_symbols}")
    return length, n_symbols


def make_pointer_data(n: int, length: int = 16, n_symbols: int = 24, seed: int = 0,
                      min_distance: int = 1) -> PointerData:
    """`n` examples drawn with `seed`: each row is `length` different symbols drawn from
    0 .. n_symbols - 1 in random order, followed by a pointer to a uniform position.
    Deterministic: the same arguments give the same tensors on every machine.

    The pointer stands `length - p` positions after the symbol it names (1 .. length);
    `min_distance` keeps only pointers at least that far away, p uniform over
    0 .. length - min_distance (unit 09's far pointers). The default, 1, allows every
    position and draws exactly the rows it always drew.

    n >= 1; length >= 2; n_symbols >= length; seed an int >= 0; min_distance in 1 .. length.
    """
    n = require_int(n, "n")
    length, n_symbols = _require_sizes(length, n_symbols)
    seed = require_int(seed, "seed", low=0)
    min_distance = require_int(min_distance, "min_distance", high=length)
    rng = random.Random(seed)
    rows, targets = [], []
    for _ in range(n):
        symbols = rng.sample(range(n_symbols), length)  # `length` different symbols
        position = rng.randrange(length - min_distance + 1)  # distance length - p >= min
        rows.append([*symbols, n_symbols + position])
        targets.append(position)
    ids = torch.tensor(rows, dtype=torch.long)  # (N, length + 1)
    target = torch.tensor(targets, dtype=torch.long)  # (N,)
    answer = ids[torch.arange(n), target]  # (N,)
    return PointerData(ids, target, answer, n_symbols)


def describe(data: PointerData, i: int) -> str:
    """Example i in words, e.g. `17 3 22 ... 9 | @2 -> 22` (the pointer names position 2,
    whose symbol is 22)."""
    if not isinstance(data, PointerData):
        raise ValueError(f"data must be PointerData; got {type(data).__name__}")
    i = require_int(i, "i", low=0, high=len(data) - 1)
    symbols = " ".join(str(s) for s in data.ids[i, :-1].tolist())
    return f"{symbols} | @{int(data.target[i])} -> {int(data.answer[i])}"

