"""course_utils._checks: the one set of argument checks; each names what was expected."""

import math

import numpy as np
import pytest
import torch
import torch.nn as nn

from course_utils import _checks as C


@pytest.mark.parametrize(("call", "message"), [
    (lambda: C.require_int(0, "n"), r"^n must be a positive int; got 0$"),
    (lambda: C.require_int(True, "n"), r"^n must be a positive int; got True$"),
    (lambda: C.require_int(2.0, "n"), r"^n must be a positive int; got 2.0$"),
    (lambda: C.require_int(-1, "n", low=0), r"^n must be an int >= 0; got -1$"),
    (lambda: C.require_int(9, "k", low=1, high=8), r"^k must be an int in \[1, 8\]; got 9$"),
    (lambda: C.require_bool("False", "flag"), r"^flag must be a bool \(True or False\)"),
    (lambda: C.require_str(3, "desc"), r"^desc must be a str; got int$"),
    (lambda: C.require_choice("x", "mode", ("a", "b")), r"^mode must be 'a' or 'b'; got 'x'$"),
    (lambda: C.require_choice("x", "mode", ("a", "b", "c")),
     r"^mode must be one of \('a', 'b', 'c'\); got 'x'$"),
    (lambda: C.require_positive_number(0.0, "lr"), r"^lr must be a positive finite number"),
    (lambda: C.require_positive_number(math.inf, "lr"), r"^lr must be a positive finite"),
    (lambda: C.require_positive_number(-1, "t", zero=True), r"^t must be a non-negative finite"),
    (lambda: C.require_fraction(85.0, "acc"), r"\[0, 1\] \(a fraction, not a percentage\)"),
    (lambda: C.require_number_in(3.0, "tau", 0.1, 2.0), r"^tau must be a number in \[0.1, 2\]"),
    (lambda: C.require_increasing_pair((2, 1), "range", "(1, 2)"), r"0 < lowest < highest"),
    (lambda: C.require_labels("ab", 2, "labels", "row", (2, 3)), r"must be a list of 2 labels"),
    (lambda: C.require_labels(["a"], 2, "labels", "row", (2, 3)),
     r"one label per row: the matrix is \(2, 3\), so expected 2 labels; got 1"),
])
def test_scalar_checks_name_what_was_expected(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_scalar_checks_return_the_checked_value():
    assert C.require_int(np.int64(3), "n") == 3 and isinstance(C.require_int(np.int64(3), "n"), int)
    assert C.require_positive_number(1, "lr") == 1.0
    assert C.require_fraction(torch.tensor(0.25), "acc") == 0.25
    assert C.require_number_in(2.0 * (1 + 1e-12), "tau", 0.1, 2.0, rel_tol=1e-9) > 2.0
    assert C.require_labels(("a", 1), 2, "labels", "row", (2, 2)) == ["a", "1"]


@pytest.mark.parametrize(("call", "message"), [
    (lambda: C.require_ids(torch.ones(2, 3), "src", "(B, S)", 2),
     r"^src must have dtype torch.int64 \(token ids\), shape \(B, S\); got dtype torch.float32"),
    (lambda: C.require_ids([1, 2], "src", "(B, S)", 2), r"^src must be an int64 torch.Tensor"),
    (lambda: C.require_ids(torch.ones(3, dtype=torch.long), "src", "(B, S)", 2),
     r"^src must have shape \(B, S\); got shape \(3,\)"),
    (lambda: C.require_float_tensor(torch.ones(2, dtype=torch.long), "x", "(N,)"),
     r"^x must be a floating-point tensor .* of shape \(N,\); got dtype torch.int64"),
    (lambda: C.require_mask(torch.ones(2, 3), "mask", (2, 3)), r"^mask must have dtype torch.bool"),
    (lambda: C.require_mask(torch.ones(2, 4, dtype=torch.bool), "mask", (2, 3)),
     r"^mask must have shape \(2, 3\) \(True = may attend\); got \(2, 4\)"),
    (lambda: C.require_mask(torch.ones(3, 1, dtype=torch.bool), "mask", (2, 3), broadcast=True),
     r"^mask of shape \(3, 1\) does not broadcast to the scores \(2, 3\)"),
    (lambda: C.require_weight(torch.ones(3, 2), "w_k", (2, 3), torch.float32),
     r"^w_k must have shape \(2, 3\); got \(3, 2\)"),
    (lambda: C.require_queries_keys(torch.ones(2, 4), torch.ones(3, 5)),
     r"same width d_k: q is \(2, 4\), so k must be \(\.\.\., T_k, 4\); got k \(3, 5\)"),
    (lambda: C.require_query_and_keys(torch.ones(2, 4), torch.ones(2, 4)),
     r"keys must hold n_ctx vectors for every query: .*expects keys of shape \(2, n_ctx, 4\)"),
    (lambda: C.require_gru(nn.LSTM(2, 3), "rnn"), r"^rnn must be an nn.GRU; got LSTM$"),
    (lambda: C.require_source(torch.ones(2, 4, dtype=torch.long), torch.tensor([1, 5])),
     r"^lengths must lie in 1\.\.4 \(the width of src\); got 1\.\.5$"),
    (lambda: C.require_encoder_states(torch.ones(2, 3, 4), torch.ones(2, 3, dtype=torch.bool),
                                      2, 8),
     r"^enc.states must have shape \(2, S, 8\); got \(2, 3, 4\)$"),
    (lambda: C.require_matrix(np.ones((2, 2, 2))), r"2-d matrix of shape \(T_q, T_k\)"),
])
def test_tensor_checks_name_the_expected_shape_or_dtype(call, message):
    with pytest.raises(ValueError, match=message):
        call()
