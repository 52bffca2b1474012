"""`make bench`, second part: the course's attention against PyTorch's, measured in one run.

One forward and backward of `course_utils.multihead.MultiHeadAttention` divided by that of
`torch.nn.MultiheadAttention` with the same weights (B = 32, T = 128, d_model = 256, 8 heads,
self-attention, float32): against PyTorch called as by default (weights averaged over heads),
with the per-head weights the course's module returns, and without weights (PyTorch's fused
kernel). Medians of several runs, after a warm-up. Prints figures; asserts nothing.
"""

from __future__ import annotations

import torch
import torch.nn as nn

from course_utils.multihead import MultiHeadAttention
from course_utils.training import seconds_per_call

B, T, D_MODEL, N_HEADS = 32, 128, 256, 8
REPEATS = 15
GOAL = 1.5


def main() -> None:
    torch.manual_seed(0)
    theirs = nn.MultiheadAttention(D_MODEL, N_HEADS, batch_first=True)
    ours = MultiHeadAttention.from_torch(theirs)
    x = torch.randn(B, T, D_MODEL, requires_grad=True)

    def step_ours():
        out, _ = ours(x, x, x)
        out.sum().backward()

    def step_theirs(**kwargs):
        def step():
            out, _ = theirs(x, x, x, **kwargs)
            out.sum().backward()
        return step

    mine = seconds_per_call(step_ours, repeats=REPEATS, warmup=3)
    print(f"MultiHeadAttention forward+backward, B={B} T={T} d_model={D_MODEL} "
          f"heads={N_HEADS}, {torch.get_num_threads()} threads")
    print(f"  course_utils.multihead              {mine * 1e3:8.1f} ms")
    for label, kwargs in (("default (weights averaged)", {}),
                          ("per-head weights", {"average_attn_weights": False}),
                          ("no weights (fused kernel)", {"need_weights": False})):
        t = seconds_per_call(step_theirs(**kwargs), repeats=REPEATS, warmup=3)
        ratio = mine / t
        mark = "ok" if ratio <= GOAL else f"over the goal of {GOAL}"
        print(f"  torch.nn, {label:<26} {t * 1e3:8.1f} ms   ratio {ratio:4.2f}  {mark}")


if __name__ == "__main__":
    main()
