"""Unit 09: what attention costs in memory, measured on the CPU and worked out by hand.

    peak_memory(fn, *args)   -> (fn's result, the peak bytes of tensors fn allocated)
    matrix_bytes(...)        B n_heads T_q T_k (bytes per element): one score matrix
    tile_bytes(...)          one tile of tiled attention's scores, and its running state
    format_bytes(n)          "16.0 MiB"

How `peak_memory` measures: `torch.profiler.profile(profile_memory=True)` records every
allocation and every free of PyTorch's CPU allocator as an event with its size (a free is
negative) and its time. Replaying the events in time order gives the bytes live at every
moment after the call began; the peak is the largest of them. Tensors alive before the call
(the inputs) are not counted, and the result is (it is alive at the end). What the allocator
does not see is not counted either: Python objects, and scratch space that a library such as
oneDNN or a BLAS takes for itself. A test checks that allocating one known tensor measures
its size, and that the matrix form's peak grows as T^2 and the tiled form's as T.

Time is measured apart (`training.seconds_per_call`): the profiler slows every call down.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from course_utils._checks import require_int

__all__ = ["element_bytes", "format_bytes", "matrix_bytes", "peak_memory", "tile_bytes"]


def peak_memory(fn: Callable, *args, **kwargs) -> tuple[object, int]:
    """Call fn(*args, **kwargs) under the profiler; return (its result, peak bytes): the largest
    total of bytes allocated and not yet freed by PyTorch's CPU allocator at any moment of the
    call, counted from 0 at its start. Call it under `torch.no_grad()` to leave out what
    autograd would keep for a backward pass."""
    if not callable(fn):
        raise ValueError(f"fn must be a function; got {type(fn).__name__}")
    # the profiler's library (Kineto) logs two lines to stderr at every start and stop unless
    # its level is above 5; set before its first use, kept if the user chose another level
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = fn(*args, **kwargs)
    # "[memory]" events: +bytes at an allocation, -bytes at a free, in the order they happened
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events()
                    if e.name() == "[memory]" and e.device_type() == DeviceType.CPU)
    live = peak = 0
    for _, nbytes in events:
        live += nbytes
        peak = max(peak, live)
    return result, peak


def element_bytes(dtype: torch.dtype) -> int:
    """Bytes per element of `dtype`: 4 for float32, 2 for float16 and bfloat16, 8 for float64."""
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"dtype must be a torch.dtype such as torch.float32; got {dtype!r}")
    return torch.empty((), dtype=dtype).element_size()


def matrix_bytes(B: int, n_heads: int, T_q: int, T_k: int, dtype: torch.dtype = torch.float32
                 ) -> int:
    """The bytes of one score matrix (B, n_heads, T_q, T_k): B n_heads T_q T_k times the bytes
    of an element. The matrix form holds at least this much at once (the scores; the weights
    take as much again unless computed in place)."""
    for value, name in ((B, "B"), (n_heads, "n_heads"), (T_q, "T_q"), (T_k, "T_k")):
        require_int(value, name)
    return B * n_heads * T_q * T_k * element_bytes(dtype)


def tile_bytes(B: int, n_heads: int, T_q: int, block_size: int, d_v: int,
               dtype: torch.dtype = torch.float32) -> int:
    """What tiled attention holds beside q, k, v and the output, for a query block of T_q rows
    and key blocks of `block_size`: one tile of scores (B, n_heads, T_q, block_size), the
    running max and sum (B, n_heads, T_q, 1) each and the accumulator (B, n_heads, T_q, d_v):

        B n_heads T_q (block_size + 2 + d_v) (bytes per element)

    (a step makes a few such temporaries at once: the measured peak is a small multiple)."""
    for value, name in ((B, "B"), (n_heads, "n_heads"), (T_q, "T_q"),
                        (block_size, "block_size"), (d_v, "d_v")):
        require_int(value, name)
    return B * n_heads * T_q * (block_size + 2 + d_v) * element_bytes(dtype)


def format_bytes(n: int) -> str:
    """1536 -> "1.5 KiB", 16777216 -> "16.0 MiB": powers of 1024, one decimal."""
    require_int(n, "n", low=0)
    if n < 1024:
        return f"{n} B"
    power = min(3, (n.bit_length() - 1) // 10)  # 1 KiB, 2 MiB, 3 GiB
    return f"{n / 1024 ** power:.1f} {('KiB', 'MiB', 'GiB')[power - 1]}"
