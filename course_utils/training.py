"""Training helpers: seeding, and accuracy per group of examples (e.g. per length bucket).

    seed_everything       seed Python, NumPy and PyTorch; return a seeded torch.Generator
    accuracy_by_bucket    the share of correct examples in each bucket, ordered by bucket
"""

from __future__ import annotations

import os
import random
import re
from collections.abc import Sequence

import numpy as np
import torch

__all__ = ["accuracy_by_bucket", "seed_everything"]


def seed_everything(seed: int = 0) -> torch.Generator:
    """Seed Python's `random`, NumPy and PyTorch so that a notebook gives the same numbers
    on every run, and return a `torch.Generator` seeded the same way for code that wants its
    own stream of random numbers.

    `seed` must be an int in [0, 2**32 - 1] (NumPy's range).
    """
    if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed < 2**32:
        raise ValueError(f"seed must be an int in [0, 2**32 - 1]; got {seed!r}")
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)  # for subprocesses started after this
    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator


def _bucket_key(label: str) -> tuple[int, int]:
    """Sort key of a bucket label such as "<5", "5-10", "41+": its first integer, and for
    equal integers "<n" before the rest (so "<5" comes before "5-10")."""
    number = int(re.search(r"\d+", label).group())
    return number, 0 if label.lstrip().startswith("<") else 1


def accuracy_by_bucket(correct, labels: Sequence[str], order: Sequence[str] | None = None
                       ) -> dict[str, tuple[float, int]]:
    """Accuracy within each bucket of examples, and how many examples the bucket holds:

        accuracy[b] = #{i : labels[i] = b and correct[i]} / #{i : labels[i] = b}

    correct: (N,) bool (tensor, array or list), one entry per example, e.g. `exact_match`;
    labels: N bucket names, e.g. `translation.length_buckets(lengths)`.
    order: the buckets in the order wanted; by default, when every label holds a number,
    by that number ("<5", "5-10", "11-20", ..., "41+"), otherwise in order of first
    appearance. A bucket of `order` that no example falls in is left out.
    Returns {label: (accuracy in [0, 1], count)}.
    """
    if isinstance(correct, torch.Tensor):
        flags = correct.detach().cpu().numpy()
    else:
        flags = np.asarray(correct)
    if flags.ndim != 1 or flags.dtype != np.bool_:
        raise ValueError(f"correct must be a 1-d boolean tensor, array or list of shape (N,); "
                         f"got dtype {flags.dtype} and shape {tuple(flags.shape)}")
    labels = [str(label) for label in labels]
    if len(labels) != len(flags):
        raise ValueError(f"labels must hold one label per example: correct has shape "
                         f"({len(flags)},), so expected {len(flags)} labels; got {len(labels)}")
    if not labels:
        raise ValueError("correct and labels are empty: there is no example to count")
    present = list(dict.fromkeys(labels))  # distinct labels in order of first appearance
    if order is not None:
        order = [str(label) for label in order]
        missing = [label for label in present if label not in order]
        if missing:
            raise ValueError(f"order must list every bucket that occurs; missing {missing}")
        buckets = [label for label in order if label in present]
    elif all(re.search(r"\d", label) for label in present):
        buckets = sorted(present, key=_bucket_key)
    else:
        buckets = present
    names = np.array(labels)  # (N,)
    result = {}
    for bucket in buckets:
        members = names == bucket  # (N,) bool
        count = int(members.sum())
        result[bucket] = (float(flags[members].mean()), count)
    return result
