"""course_utils.attention_cost: the measured peak memory is the bytes really allocated, and it
grows as T^2 for the matrix form of attention and as T for the tiled form."""

from __future__ import annotations

import pytest
import torch

from course_utils.attention_cost import (
    element_bytes,
    format_bytes,
    matrix_bytes,
    peak_memory,
    tile_bytes,
)
from course_utils.tiled_attention import matrix_attention, tiled_attention

pytestmark = pytest.mark.usefixtures("one_thread")  # no thread spinning on a busy machine


def test_the_peak_of_allocating_one_tensor_is_its_size():
    result, peak = peak_memory(torch.empty, 1000, 1000)  # float32: 4,000,000 bytes
    assert result.shape == (1000, 1000)
    assert 4_000_000 <= peak <= 4_000_000 + 4096
    _, peak = peak_memory(torch.zeros, 250, 1000, dtype=torch.float64)
    assert 2_000_000 <= peak <= 2_000_000 + 4096


def test_the_peak_is_the_most_live_at_once_not_the_total_allocated():
    def temporaries():
        big = torch.ones(1000, 1000)  # 4 MB, freed before the next allocation
        total = big.sum()
        del big
        return torch.ones(500, 1000) * total  # 2 MB, then another 2 MB; the first freed

    result, peak = peak_memory(temporaries)
    assert result.shape == (500, 1000)
    assert 4_000_000 <= peak <= 4_000_000 + 8192  # not 4 + 2 + 2 MB
    inputs = torch.ones(1000, 1000)
    _, peak = peak_memory(lambda x: x.add_(1), inputs)  # in place: nothing new
    assert peak < 4096


def peaks(form, lengths, **kwargs):
    out = []
    for T in lengths:
        q = torch.randn(1, 2, T, 32)
        with torch.no_grad():
            out.append(peak_memory(form, q, q, q, **kwargs)[1])
    return out


def test_the_matrix_forms_peak_grows_as_t_squared_and_the_tiled_forms_as_t():
    lengths = [256, 512, 1024]
    matrix = peaks(matrix_attention, lengths)
    tiled = peaks(tiled_attention, lengths, block_size=64)
    for T, peak in zip(lengths, matrix, strict=True):
        scores = matrix_bytes(1, 2, T, T)  # (B, n_heads, T, T) float32
        assert scores <= peak <= 3 * scores  # the scores and their softmax, about 2x
    for small, large in zip(matrix, matrix[1:], strict=False):
        assert 3.6 < large / small < 4.4  # T doubled: four times the memory
    for small, large in zip(tiled, tiled[1:], strict=False):
        assert 1.8 < large / small < 2.2  # T doubled: twice the memory
    for T, peak in zip(lengths, tiled, strict=True):
        assert peak <= 6 * tile_bytes(1, 2, T, 64, 32)  # a few tiles' worth, never T x T
    assert tiled[-1] < matrix[-1] / 4


def test_the_arithmetic():
    assert element_bytes(torch.float32) == 4 and element_bytes(torch.float16) == 2
    assert element_bytes(torch.bfloat16) == 2 and element_bytes(torch.float64) == 8
    assert matrix_bytes(1, 4, 4096, 4096) == 4 * 4096 ** 2 * 4 == 256 * 2 ** 20
    assert matrix_bytes(2, 8, 10, 20, torch.float16) == 2 * 8 * 10 * 20 * 2
    assert tile_bytes(1, 4, 4096, 128, 64) == 4 * 4096 * (128 + 2 + 64) * 4
    assert [format_bytes(n) for n in (0, 1023, 1536, 16 * 2 ** 20, 3 * 2 ** 30, 2 ** 50)] == \
        ["0 B", "1023 B", "1.5 KiB", "16.0 MiB", "3.0 GiB", "1048576.0 GiB"]


@pytest.mark.parametrize(("call", "message"), [
    (lambda: peak_memory(3), r"^fn must be a function; got int"),
    (lambda: matrix_bytes(1, 0, 4, 4), r"^n_heads must be a positive int"),
    (lambda: matrix_bytes(1, 2, 4, 4, "float32"), r"^dtype must be a torch.dtype"),
    (lambda: tile_bytes(1, 2, 4, 0, 8), r"^block_size must be a positive int"),
    (lambda: format_bytes(-1), r"^n must be an int >= 0"),
])
def test_bad_arguments_fail_with_a_message_naming_what_was_expected(call, message):
    with pytest.raises(ValueError, match=message):
        call()
