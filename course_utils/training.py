"""Training helpers: seeding (the training loop and metrics come with later units)."""

from __future__ import annotations

import os
import random

import numpy as np
import torch

__all__ = ["seed_everything"]


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
