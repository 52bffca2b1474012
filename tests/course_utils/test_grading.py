"""Tests for course_utils.grading: the verdicts that exercise tests give students."""

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from course_utils import attention, grading, viz
from course_utils.grading import GradingFailure, check, check_tensor, forbidden, reference_disabled

SOFTMAX_NAMES = ("torch.softmax", "torch.Tensor.softmax", "torch.nn.functional.softmax")
EXPECTED = torch.tensor([[0.1, 0.2, 0.7], [0.5, 0.25, 0.25]])


def my_softmax(x):
    """What a student might write: no reference code, no torch softmax."""
    e = torch.exp(x - x.max(dim=-1, keepdim=True).values)
    return e / e.sum(dim=-1, keepdim=True)


# --------------------------------------------------------------------------- check


def test_grading_failure_is_an_assertion_error():
    assert issubclass(GradingFailure, AssertionError)


def test_check_passes_on_true_and_fails_with_the_message_on_false():
    check(True, "never shown")
    with pytest.raises(GradingFailure, match=r"^rows must sum to 1$"):
        check(False, "rows must sum to 1")


# --------------------------------------------------------------------- check_tensor


def test_check_tensor_passes_on_equal_tensors():
    check_tensor(EXPECTED.clone(), EXPECTED, what="softmax(x)")


def test_check_tensor_passes_within_tolerance_and_across_float_dtypes():
    check_tensor(EXPECTED + 5e-6, EXPECTED, what="softmax(x)")
    check_tensor(EXPECTED.double(), EXPECTED, what="softmax(x)")
    check_tensor(EXPECTED.half(), EXPECTED, what="softmax(x)", atol=1e-3)


def test_check_tensor_passes_on_a_tensor_that_requires_grad():
    check_tensor(EXPECTED.clone().requires_grad_(), EXPECTED, what="softmax(x)")


def test_check_tensor_accepts_nan_where_nan_is_expected():
    expected = torch.tensor([1.0, float("nan")])
    check_tensor(torch.tensor([1.0, float("nan")]), expected, what="f(x)")


def test_check_tensor_reports_a_missing_return():
    with pytest.raises(GradingFailure, match=r"softmax\(x\) returned None; .*`return`"):
        check_tensor(None, EXPECTED, what="softmax(x)")


@pytest.mark.parametrize(
    ("actual", "type_name"),
    [
        pytest.param(EXPECTED.tolist(), "list", id="list"),
        pytest.param(EXPECTED.numpy(), "ndarray", id="numpy"),
        pytest.param((EXPECTED, EXPECTED), "tuple", id="tuple"),
        pytest.param(0.5, "float", id="float"),
    ],
)
def test_check_tensor_reports_the_wrong_type(actual, type_name):
    message = rf"softmax\(x\) should return a torch\.Tensor; it returned a {type_name}\."
    with pytest.raises(GradingFailure, match=message):
        check_tensor(actual, EXPECTED, what="softmax(x)")


@pytest.mark.parametrize(
    ("actual", "shown"),
    [
        pytest.param(EXPECTED.T, r"\(3, 2\)", id="transposed"),
        pytest.param(EXPECTED[0], r"\(3,\)", id="missing-dim"),
        pytest.param(EXPECTED[None], r"\(1, 2, 3\)", id="extra-dim"),
    ],
)
def test_check_tensor_reports_both_shapes(actual, shown):
    with pytest.raises(GradingFailure, match=rf"returned shape {shown}; expected \(2, 3\)"):
        check_tensor(actual, EXPECTED, what="softmax(x)")


def test_check_tensor_reports_an_integer_dtype():
    with pytest.raises(GradingFailure, match=r"returned dtype torch\.int64; .*torch\.float32"):
        check_tensor(torch.zeros(2, 3, dtype=torch.long), EXPECTED, what="f(x)")


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_check_tensor_reports_nan_or_inf_with_its_index(bad):
    actual = EXPECTED.clone()
    actual[1, 2] = bad
    with pytest.raises(GradingFailure) as info:
        check_tensor(actual, EXPECTED, what="softmax(x)")
    message = str(info.value)
    assert f"contains {bad}" in message
    assert "at index (1, 2)" in message
    assert "0.25 was expected" in message
    assert "NaN" in message  # the explanation names NaN/inf and its usual causes


def test_check_tensor_reports_wrong_values_with_index_and_both_numbers():
    actual = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 9.0]])
    expected = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    with pytest.raises(GradingFailure) as info:
        check_tensor(actual, expected, what="f(x)")
    message = str(info.value)
    assert "f(x) is wrong at index (1, 2): got 9, expected 6" in message
    assert "Largest difference 3" in message
    assert message.splitlines()[0] == "f(x) is wrong at index (1, 2): got 9, expected 6."
    assert "Returned [1, 2, 3, 4, 5, 9], expected [1, 2, 3, 4, 5, 6] (flattened)" in message


def test_check_tensor_shows_the_values_around_the_first_wrong_one():
    expected = torch.arange(20.0)
    actual = expected.clone()
    actual[12] = -1.0
    with pytest.raises(GradingFailure) as info:
        check_tensor(actual, expected, what="f(x)")
    assert "Returned [..., 11, -1, 13, 14, 15, 16, ...], expected [..., 11, 12, 13, 14, 15, " \
           "16, ...]" in str(info.value)


def test_check_tensor_leads_with_the_worst_wrong_value_not_the_first():
    actual = torch.tensor([0.0, 1.5, 2.0, 10.0])
    expected = torch.tensor([0.0, 1.0, 2.0, 3.0])
    with pytest.raises(GradingFailure,
                       match=r"index \(3,\): got 10, expected 3\.\nLargest difference 7 "
                             r"\(2 of 4 values wrong\)"):
        check_tensor(actual, expected, what="f(x)")


def test_check_tensor_shortens_long_tensors_in_the_message():
    with pytest.raises(GradingFailure, match=r"Returned \[1, 1, 1, 1, 1, 1, \.\.\.\]"):
        check_tensor(torch.ones(10), torch.zeros(10), what="f(x)")


def test_check_tensor_respects_atol_and_rtol():
    expected = torch.tensor([100.0])
    check_tensor(torch.tensor([100.5]), expected, what="f", atol=0.0, rtol=1e-2)
    with pytest.raises(GradingFailure):
        check_tensor(torch.tensor([100.5]), expected, what="f", atol=0.0, rtol=1e-3)
    check_tensor(torch.tensor([100.5]), expected, what="f", atol=0.6, rtol=0.0)
    with pytest.raises(GradingFailure):
        check_tensor(torch.tensor([100.5]), expected, what="f", atol=0.4, rtol=0.0)


def test_check_tensor_tolerance_is_keyword_only():
    with pytest.raises(TypeError):
        check_tensor(EXPECTED, EXPECTED, "softmax(x)")


FAILING_ANSWERS = {
    "none": None,
    "type": [0.0],
    "shape": EXPECTED.T,
    "dtype": EXPECTED.long(),
    "nan": torch.full((2, 3), float("nan")),
    "values": EXPECTED + 1,
}


@pytest.mark.parametrize("kind", list(FAILING_ANSWERS))
def test_check_tensor_adds_the_hint_to_every_failure(kind):
    with pytest.raises(GradingFailure, match=r"Hint: subtract the row maximum first\.$"):
        check_tensor(FAILING_ANSWERS[kind], EXPECTED, what="softmax(x)",
                     hint="subtract the row maximum first.")


@pytest.mark.parametrize("kind", list(FAILING_ANSWERS))
def test_check_tensor_without_hint_says_no_hint_and_names_the_call(kind):
    with pytest.raises(GradingFailure) as info:
        check_tensor(FAILING_ANSWERS[kind], EXPECTED, what="softmax(x) for x of shape (2, 3)")
    assert "Hint" not in str(info.value)
    assert str(info.value).startswith("softmax(x) for x of shape (2, 3)")


# ------------------------------------------------------------------------ forbidden


def softmax_calls():
    x = torch.tensor([[1.0, 2.0, 3.0]])
    return {
        "torch.softmax": lambda: torch.softmax(x, dim=-1),
        "torch.Tensor.softmax": lambda: x.softmax(dim=-1),
        "torch.nn.functional.softmax": lambda: F.softmax(x, dim=-1),
    }


@pytest.mark.parametrize("name", SOFTMAX_NAMES)
def test_forbidden_makes_each_named_function_raise_inside_the_block(name):
    with forbidden(*SOFTMAX_NAMES, reason="implement the softmax yourself"):
        with pytest.raises(GradingFailure) as info:
            softmax_calls()[name]()
    assert name in str(info.value)
    assert "implement the softmax yourself" in str(info.value)


def test_forbidden_restores_the_original_functions_afterwards():
    originals = (torch.softmax, torch.Tensor.softmax, F.softmax)
    with forbidden(*SOFTMAX_NAMES, reason="no"):
        assert torch.softmax is not originals[0]
    assert (torch.softmax, torch.Tensor.softmax, F.softmax) == originals
    expected = torch.tensor([[0.0900306, 0.2447285, 0.6652409]])
    for call in softmax_calls().values():
        torch.testing.assert_close(call(), expected)


def test_forbidden_restores_the_originals_when_the_block_raises():
    originals = (torch.softmax, torch.Tensor.softmax, F.softmax)
    with pytest.raises(ZeroDivisionError):
        with forbidden(*SOFTMAX_NAMES, reason="no"):
            raise ZeroDivisionError
    assert (torch.softmax, torch.Tensor.softmax, F.softmax) == originals


def test_forbidden_restores_the_originals_after_a_grading_failure_inside():
    with pytest.raises(GradingFailure):
        with forbidden("torch.softmax", reason="no"):
            torch.softmax(torch.ones(2), dim=0)
    torch.testing.assert_close(torch.softmax(torch.ones(2), dim=0), torch.tensor([0.5, 0.5]))


def test_forbidden_leaves_other_functions_working():
    x = torch.tensor([[1.0, 2.0, 3.0]])
    with forbidden(*SOFTMAX_NAMES, reason="no"):
        got = my_softmax(x)
        logsm = torch.log_softmax(x, dim=-1)
    torch.testing.assert_close(got, torch.softmax(x, dim=-1))
    torch.testing.assert_close(logsm, torch.log(torch.softmax(x, dim=-1)))


def test_forbidden_keeps_the_name_of_the_blocked_function():
    with forbidden("torch.softmax", reason="no"):
        assert torch.softmax.__name__ == "softmax"


def test_forbidden_blocks_are_nestable():
    original = torch.softmax
    with forbidden("torch.softmax", reason="outer"):
        with forbidden("torch.softmax", reason="inner"):
            with pytest.raises(GradingFailure, match="inner"):
                torch.softmax(torch.ones(2), dim=0)
        with pytest.raises(GradingFailure, match="outer"):
            torch.softmax(torch.ones(2), dim=0)
    assert torch.softmax is original


def test_forbidden_rejects_a_name_it_cannot_resolve_and_restores_the_others():
    original = torch.softmax
    with pytest.raises(ValueError, match=r"cannot resolve 'no_such_module_xyz\.f'"):
        with forbidden("torch.softmax", "no_such_module_xyz.f", reason="no"):
            pass  # pragma: no cover - never reached
    assert torch.softmax is original


def test_forbidden_works_on_course_functions():
    with forbidden("course_utils.attention.softmax", reason="write it yourself"):
        with pytest.raises(GradingFailure, match="course_utils.attention.softmax"):
            attention.softmax(torch.ones(3))
    torch.testing.assert_close(attention.softmax(torch.ones(2)), torch.tensor([0.5, 0.5]))


# ----------------------------------------------------------------- reference_disabled


def call_every_attention_function():
    q, k, v = torch.ones(2, 3), torch.ones(4, 3), torch.ones(4, 5)
    return {
        "softmax": lambda: attention.softmax(q),
        "masked_softmax": lambda: attention.masked_softmax(q),
        "dot_scores": lambda: attention.dot_scores(q, k),
        "scaled_dot_scores": lambda: attention.scaled_dot_scores(q, k),
        "bilinear_scores": lambda: attention.bilinear_scores(q, k, torch.eye(3)),
        "additive_scores": lambda: attention.additive_scores(q, k, torch.eye(3), torch.eye(3),
                                                             torch.ones(3)),
        "cosine_scores": lambda: attention.cosine_scores(q, k),
        "weighted_average": lambda: attention.weighted_average(torch.full((2, 4), 0.25), v),
        "soft_lookup": lambda: attention.soft_lookup(q[0], k, v),
        "scaled_dot_product_attention": lambda: attention.scaled_dot_product_attention(q, k, v),
        "masked_softmax_unchecked": lambda: attention.masked_softmax_unchecked(q, None),
        "attention_unchecked": lambda: attention.attention_unchecked(q, k, v, None),
    }


def test_every_public_attention_function_is_covered_here():
    assert sorted(call_every_attention_function()) == sorted(attention.__all__)


@pytest.mark.parametrize("name", attention.__all__)
def test_reference_disabled_makes_each_attention_function_raise(name):
    with reference_disabled():
        with pytest.raises(GradingFailure) as info:
            call_every_attention_function()[name]()
    assert f"course_utils.attention.{name}" in str(info.value)
    assert "reference code" in str(info.value)


@pytest.mark.parametrize("name", attention.__all__)
def test_reference_functions_work_again_after_the_block(name):
    call = call_every_attention_function()[name]
    before = call()
    with reference_disabled():
        pass
    after = call()
    if isinstance(before, tuple):  # soft_lookup and attention return (output, weights)
        assert all(torch.equal(a, b) for a, b in zip(after, before, strict=True))
    else:
        assert torch.equal(after, before)


def test_reference_disabled_restores_functions_when_the_block_raises():
    originals = {name: getattr(attention, name) for name in attention.__all__}
    with pytest.raises(KeyError):
        with reference_disabled():
            raise KeyError("student bug")
    assert {name: getattr(attention, name) for name in attention.__all__} == originals


def test_student_code_that_does_not_use_the_reference_passes_inside_the_block():
    x = torch.tensor([[0.0, np.log(2), np.log(3)]])
    with reference_disabled():
        got = my_softmax(x)
        check_tensor(got, torch.tensor([[1 / 6, 2 / 6, 3 / 6]]), what="my_softmax(x)")


def test_reference_disabled_leaves_torch_alone():
    with reference_disabled():
        got = torch.softmax(torch.zeros(2), dim=0)
    torch.testing.assert_close(got, torch.tensor([0.5, 0.5]))


def test_reference_disabled_with_another_module_blocks_only_that_module():
    with reference_disabled("course_utils.viz"):
        with pytest.raises(GradingFailure, match="course_utils.viz.attention_heatmap"):
            viz.attention_heatmap(np.eye(2), ["a", "b"], ["c", "d"])
        torch.testing.assert_close(attention.softmax(torch.zeros(2)), torch.tensor([0.5, 0.5]))


def test_grading_exports_what_the_exercises_use():
    assert set(grading.__all__) == {
        "GradingFailure", "READY_MADE_SOFTMAX", "call", "check", "check_function", "check_tensor",
        "cotangent", "forbidden",
        "gradients", "reference_disabled", "rtol_for", "seeded", "stand_ins", "substitute",
        "summary", "wrap_message",
    }


def test_unit_03s_hidden_tests_switch_off_the_reference_attention_decoder():
    """Exercise 03's hidden tests disable course_utils.attention, seq2seq and
    attention_decoder: the reference decoder step and the GRU with the context in every gate
    raise, also when imported by name first, and nothing counts as tampering. A fresh
    interpreter, so that translator (which imports seq2seq by name) is loaded before the
    baseline."""
    import subprocess
    import sys

    code = (
        "import torch\n"
        "import course_utils.translator\n"
        "from course_utils.attention_decoder import context_gru_step\n"
        "from course_utils import grading\n"
        "modules = ('course_utils.attention', 'course_utils.seq2seq',\n"
        "           'course_utils.attention_decoder')\n"
        "z = torch.zeros(1, 2)\n"
        "with grading.reference_disabled(*modules):\n"
        "    for call in (lambda: context_gru_step(z, z, z, *[torch.zeros(6, 2)] * 3,\n"
        "                                          torch.zeros(6)),\n"
        "                 lambda: course_utils.attention_decoder.alignment_hit_rate(z, []),\n"
        "                 lambda: course_utils.seq2seq.initial_state(None, None)):\n"
        "        try:\n"
        "            call()\n"
        "        except grading.GradingFailure as err:\n"
        "            print('blocked', str(err).split(',')[0])\n"
        "    grading.check(True, 'unused')\n"
        "grading.check(True, 'unused')\n"
        "print(context_gru_step(z, z, z, *[torch.zeros(6, 2)] * 3, torch.zeros(6)).shape)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == [
        "blocked your code called course_utils.attention_decoder.context_gru_step",
        "blocked your code called course_utils.attention_decoder.alignment_hit_rate",
        "blocked your code called course_utils.seq2seq.initial_state",
        "torch.Size([1, 2])",
    ], proc.stdout


# ------------------------------------------------------------- call, gradients, substitute


def test_call_returns_the_result_of_a_function_that_leaves_its_inputs_alone():
    x = torch.tensor([1.0, 2.0])
    assert torch.equal(grading.call(lambda t: t * 2, x), torch.tensor([2.0, 4.0]))
    assert torch.equal(x, torch.tensor([1.0, 2.0]))


@pytest.mark.parametrize("modify", [
    lambda x, m: x.add_(1),
    lambda x, m: x.masked_fill_(~m, 0.0),
    lambda x, m: x.__setitem__(0, 5.0),
    lambda x, m: x.clamp_(max=0.0),
])
def test_call_fails_a_function_that_modifies_an_argument_in_place(modify):
    x, m = torch.tensor([1.0, 2.0]), torch.tensor([True, False])

    def student(x, m):
        modify(x, m)
        return x

    with pytest.raises(GradingFailure, match=r"student\(\.\.\.\) changed its argument #1 in place"):
        grading.call(student, x, m)


def test_call_names_a_keyword_or_nested_argument_that_was_modified():
    params = {"W": torch.ones(2)}
    with pytest.raises(GradingFailure, match=r"changed its argument `attn`\['W'\]"):
        grading.call(lambda attn: attn["W"].mul_(2), attn=params)


def test_call_accepts_nan_that_was_there_before():
    x = torch.tensor([float("nan"), 1.0])
    grading.call(lambda t: t + 1, x)


def test_gradients_match_autograd_for_tensors_nested_arguments_and_modules():
    torch.manual_seed(0)
    layer = torch.nn.Linear(3, 2)
    x = torch.randn(4, 3)
    scale = {"s": torch.tensor(2.0)}

    def f(layer, x, scale):
        return torch.tanh(layer(x)) * scale["s"]

    result, (g_layer, g_x, g_scale) = grading.gradients(f, layer, x, scale)
    x2 = x.clone().requires_grad_(True)
    s2 = scale["s"].clone().requires_grad_(True)
    out = torch.tanh(layer(x2)) * s2
    loss = (out * grading.cotangent(out.shape, out.dtype)).sum()
    want = torch.autograd.grad(loss, [layer.weight, layer.bias, x2, s2])
    torch.testing.assert_close(g_layer["weight"], want[0])
    torch.testing.assert_close(g_layer["bias"], want[1])
    torch.testing.assert_close(g_x, want[2])
    torch.testing.assert_close(g_scale["s"], want[3])
    torch.testing.assert_close(result.detach(), out.detach())


def test_gradients_give_zeros_for_an_input_the_result_does_not_depend_on():
    _, (g_x, g_y) = grading.gradients(lambda x, y: x * 3, torch.ones(2), torch.ones(2))
    assert torch.equal(g_x, torch.full((2,), 3.0) * grading.cotangent((2,), torch.float32))
    assert torch.equal(g_y, torch.zeros(2))


@pytest.mark.parametrize("cut", [
    lambda x: x.detach() * 2,
    lambda x: torch.tensor(x.tolist()) * 2,
    lambda x: torch.from_numpy(x.detach().numpy() * 2),
])
def test_gradients_fail_a_result_cut_off_from_its_inputs(cut):
    with pytest.raises(GradingFailure, match="not connected to its inputs"):
        grading.gradients(cut, torch.ones(3))


def test_gradients_fail_a_result_computed_under_no_grad():
    def student(x):
        with torch.no_grad():
            return x * 2

    with pytest.raises(GradingFailure, match="no torch.no_grad"):
        grading.gradients(student, torch.ones(3))


def test_substitute_lets_a_function_call_the_correct_callee_while_the_block_runs():
    import __main__

    namespace = vars(__main__)
    namespace["helper_under_test"] = lambda x: x + 100   # the student's wrong helper
    exec("def caller_under_test(x):\n    return helper_under_test(x) * 2", namespace)
    try:
        with grading.substitute(helper_under_test=lambda x: x + 1):
            assert namespace["caller_under_test"](1) == 4
        assert namespace["caller_under_test"](1) == 202
    finally:
        namespace.pop("helper_under_test")
        namespace.pop("caller_under_test")


def test_forbidden_with_missing_ok_skips_names_it_cannot_resolve():
    with forbidden("torch.softmax", "course_utils.no_such_module.f", reason="x",
                   missing_ok=True):
        with pytest.raises(GradingFailure):
            torch.softmax(torch.zeros(2), 0)
    torch.softmax(torch.zeros(2), 0)


def test_ready_made_softmax_includes_the_aten_operators():
    x = torch.randn(2, 3)
    with forbidden(*grading.READY_MADE_SOFTMAX, reason="x"):
        for call in (lambda: torch.ops.aten._softmax(x, -1, False),
                     lambda: torch.ops.aten.softmax(x, -1), lambda: torch._softmax(x, -1, False)):
            with pytest.raises(GradingFailure):
                call()
    torch.ops.aten._softmax(x, -1, False)


def test_a_failure_shows_in_ipython_as_its_message_alone():
    """In a kernel, a GradingFailure is one line (the message), not a traceback through the
    grading library."""
    import subprocess
    import sys

    code = ("from IPython.testing.globalipapp import start_ipython\n"
            "ip = start_ipython()\n"
            "ip.run_cell('from course_utils import grading')\n"
            "ip.run_cell('grading.check(False, \"the rows must sum to 1\")')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)
    shown = proc.stdout + proc.stderr
    assert "GradingFailure" in shown and "the rows must sum to 1" in shown, shown
    assert "grading/__init__.py" not in shown and "Traceback" not in shown, shown


def test_check_tensor_with_a_dtype_fails_a_result_in_another_dtype():
    x = torch.ones(3, dtype=torch.float64)
    check_tensor(x, x, what="f(x)", dtype=torch.float64)
    with pytest.raises(GradingFailure, match=r"f\(x\) returned dtype torch.float32; expected "
                                             r"torch.float64, the dtype of its input"):
        check_tensor(x.float(), x, what="f(x)", dtype=torch.float64)


def _softmax(x, dim=-1):
    e = torch.exp(x - x.amax(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)


def _in_place(x, dim=-1):
    x -= x.amax(dim, keepdim=True)
    return _softmax(x, dim)


def _no_grad(x, dim=-1):
    with torch.no_grad():
        return _softmax(x, dim)


def _numpy(x, dim=-1):
    return torch.tensor(_softmax(x.detach(), dim).numpy(), requires_grad=True)


def _straight_through(x, dim=-1):
    y = _softmax(x, dim)
    return y.detach() + 2 * (y - y.detach())   # right values, doubled gradient


@pytest.mark.parametrize("fn, message", [
    (_softmax, None),
    (lambda x, dim=-1: torch.exp(x - torch.logsumexp(x, dim, keepdim=True)), None),
    (lambda x, dim=-1: _softmax(x.float(), dim), "returned dtype torch.float32"),
    (lambda x, dim=-1: torch.exp(x) / torch.exp(x).sum(), "is wrong at index"),
    (_in_place, "changed its argument #1 in place"),
    (_no_grad, "not connected to its inputs"),
    (_numpy, "the gradient of softmax\\(x\\) with respect to x is wrong"),
    (_straight_through, "the gradient of softmax\\(x\\) with respect to x is wrong"),
])
def test_check_function_accepts_correct_methods_and_names_each_mistake(fn, message):
    x = torch.randn(2, 3, 5, dtype=torch.float64) * 3
    before = x.clone()
    if message is None:
        grading.check_function(fn, (x,), lambda x: F.softmax(x, -1), what="softmax(x)")
    else:
        with pytest.raises(GradingFailure, match=message):
            grading.check_function(fn, (x,), lambda x: F.softmax(x, -1), what="softmax(x)")
    if fn is not _in_place:
        assert torch.equal(x, before)


def test_check_function_follows_gradients_into_module_parameters_and_picks_an_output():
    torch.manual_seed(0)
    layer = torch.nn.Linear(4, 3).double()
    x = torch.randn(5, 4, dtype=torch.float64)

    def good(layer, x):
        return x.shape[0], torch.tanh(x @ layer.weight.T + layer.bias)

    def frozen_bias(layer, x):
        return x.shape[0], torch.tanh(x @ layer.weight.T + layer.bias.detach())

    def expected(layer, x):
        return torch.tanh(layer(x))

    grading.check_function(good, (layer, x), expected, what="f(layer, x)", output=1)
    with pytest.raises(GradingFailure, match=r"with respect to layer \(parameter bias\)"):
        grading.check_function(frozen_bias, (layer, x), expected, what="f(layer, x)", output=1)
    with pytest.raises(GradingFailure, match="should return a tuple of at least 3 values"):
        grading.check_function(good, (layer, x), expected, what="f(layer, x)", output=2)


@pytest.mark.parametrize("scale", [1e3, 1e4])
def test_rtol_for_accepts_a_logsumexp_softmax_and_still_catches_a_wrong_one(scale):
    x = torch.tensor([-scale, -scale + 1.0, -scale - 1.0, -scale + 0.5])   # float32
    exact = torch.softmax(x.double() + scale, -1)
    lse = torch.exp(x - torch.logsumexp(x, -1, keepdim=True))
    check_tensor(lse, exact, what="softmax", rtol=grading.rtol_for(scale))
    wrong = torch.exp(x + scale) / torch.exp(x + scale).sum() * 1.05   # 5 % off
    with pytest.raises(GradingFailure):
        check_tensor(wrong, exact, what="softmax", rtol=grading.rtol_for(scale))


def test_a_substituted_function_is_not_bound_by_what_the_test_forbids():
    import __main__

    __main__.helper_softmax = lambda x: x
    __main__.calls_helper = eval("lambda x: helper_softmax(x) * 2", vars(__main__))
    __main__.calls_softmax = eval("lambda x: __import__('torch').softmax(x, -1)", vars(__main__))
    try:
        x = torch.tensor([0.0, 1.0])
        expected = 2 * torch.softmax(x, -1)
        with grading.forbidden("torch.softmax", reason="write it yourself"), \
                grading.substitute(helper_softmax=lambda x: torch.softmax(x, -1)):
            assert torch.allclose(__main__.calls_helper(x), expected)
            with pytest.raises(GradingFailure, match="forbids"):   # the student's own call
                __main__.calls_softmax(x)
            with pytest.raises(GradingFailure, match="forbids"):   # blocked again after
                torch.softmax(x, -1)
        assert torch.equal(torch.softmax(x, -1), torch.tensor([0.0, 1.0]).softmax(-1))
    finally:
        del __main__.helper_softmax, __main__.calls_helper, __main__.calls_softmax


def test_a_substitute_is_called_the_way_the_students_own_function_is():
    import __main__

    __main__.scaled = eval("lambda x, weight: x * weight", {})
    __main__.uses_scaled = eval("lambda x: scaled(x, weight=3.0)", vars(__main__))
    try:
        with grading.substitute(scaled=lambda v, w: v * w + 1):
            assert torch.equal(__main__.uses_scaled(torch.ones(2)), torch.full((2,), 4.0))
        assert torch.equal(__main__.uses_scaled(torch.ones(2)), torch.full((2,), 3.0))
    finally:
        del __main__.scaled, __main__.uses_scaled


def test_gradients_flow_through_a_substituted_function():
    import __main__

    __main__.helper_squared = lambda x: x + 100
    __main__.uses_helper_squared = eval("lambda x: helper_squared(x) * 2", vars(__main__))
    try:
        x = torch.tensor([1.0, -2.0], dtype=torch.float64)
        with grading.substitute(helper_squared=lambda x: x * x):
            grading.check_function(__main__.uses_helper_squared, (x,), lambda x: 2 * x * x,
                                   what="uses_helper_squared")
        _, (grad,) = grading.gradients(__main__.uses_helper_squared, x)   # its own helper
        assert torch.equal(grad, 2 * grading.cotangent((2,), torch.float64))
    finally:
        del __main__.helper_squared, __main__.uses_helper_squared


def test_a_failure_shows_its_message_first_wrapped_and_without_a_traceback():
    """In a notebook and in nbgrader's Validate, IPython shows what `_render_traceback_`
    gives: the message, its first line the sentence that matters, wrapped to 80 columns."""
    long_what = ("multi_head_attention(x, W_q, W_k, W_v, W_o, n_heads=4) "
                 "for x of shape (2, 5, 8)")
    with pytest.raises(GradingFailure) as info:
        check_tensor(torch.zeros(2, 5, 8), torch.ones(2, 5, 8), what=long_what,
                     hint="split the last axis into (n_heads, d_k), attend per head, then merge "
                          "the heads back and apply W_o once to the merged result.")
    lines = info.value._render_traceback_()
    assert lines[0].startswith("GradingFailure: multi_head_attention(")
    assert all(len(line) <= 80 for line in lines), lines
    assert any(line.startswith("Hint: split") for line in lines)
    assert not any("Traceback" in line or "line " in line for line in lines)
    # the first sentence ends before the values and the hint
    first = str(info.value).splitlines()[0]
    assert first.endswith("got 0, expected 1.")


def test_seeded_starts_the_call_from_torchs_seed():
    def draws(n):
        return torch.rand(n)

    with grading.seeded(7):
        first = draws(3)
    with grading.seeded(7):
        again = draws(3)
    with grading.seeded(8):
        other = draws(3)
    assert torch.equal(first, again) and not torch.equal(first, other)


def _double(x):
    return 2 * x


def test_stand_ins_keep_a_working_function_and_replace_a_wrong_or_raising_one(capsys):
    def wrong(x):
        return 3 * x

    def raising(x):
        raise ValueError("not yet")

    x = torch.arange(4.0)
    use = grading.stand_ins({"good": (_double, _double, (x,)), "wrong": (wrong, _double, (x,)),
                             "raising": (raising, _double, (x,))})
    assert use["good"] is _double
    assert torch.equal(use["wrong"](x), 2 * x) and torch.equal(use["raising"](x), 2 * x)
    printed = capsys.readouterr().out
    assert "wrong does not compute what the reference does" in printed
    assert "raising does not" in printed and "good does not" not in printed


def test_stand_ins_compare_tuples_shapes_and_kinds():
    x = torch.arange(4.0)

    def pair(t):
        return t, t + 1

    cases = {"same": (pair, pair, (x,)),
             "short": (lambda t: (t,), pair, (x,)),
             "reshaped": (lambda t: (t.view(2, 2), t + 1), pair, (x,)),
             "integer": (lambda t: (t.long(), (t + 1).long()), pair, (x,))}
    use = grading.stand_ins(cases)
    assert use["same"] is pair
    assert all(use[name] is not cases[name][0] for name in ("short", "reshaped", "integer"))


def test_stand_ins_fail_when_none_of_the_functions_works():
    with pytest.raises(GradingFailure, match="None of f, g computes what the reference does"):
        grading.stand_ins({"f": (lambda x: x, _double, (torch.ones(2),)),
                           "g": (lambda x: None, _double, (torch.ones(2),))})


def test_a_stand_in_reference_is_not_bound_by_what_the_test_forbids():
    from course_utils import attention

    q = torch.randn(2, 3)
    use = grading.stand_ins({"mine": (lambda t: None, attention.softmax, (q,)),
                             "good": (_double, _double, (q,))})
    with reference_disabled("course_utils.attention"):
        assert torch.allclose(use["mine"](q), torch.softmax(q, dim=-1))
