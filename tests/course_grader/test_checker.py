"""course_grader.checker against a real kernel: the student's functions are called there and
judged here, from plain values only. A plain local kernel (the sandbox is exercised by the
adversarial corpus); one per module, the student's code defined once."""

from __future__ import annotations

import pytest
from jupyter_client.manager import start_new_kernel

from course_grader.checker import CellRunner, KernelLink
from course_grader.nbgrader_hooks import student_names

STUDENT = '''
import torch, sys, warnings

def softmax(x, dim=-1):
    e = torch.exp(x - x.amax(dim=dim, keepdim=True))
    return e / e.sum(dim=dim, keepdim=True)

def wrong_softmax(x, dim=-1):
    return torch.exp(x) / torch.exp(x).sum()

def detached_softmax(x, dim=-1):
    return softmax(x, dim).detach()

def chatty(x):
    print("hello from chatty")
    print("a note", file=sys.stderr)
    warnings.warn("careful")
    return x * 2

def in_place(x):
    x.mul_(2)
    return x

def scales_in_place(x):
    x.mul_(2)
    return x

def crashes(x):
    y = x.reshape(7, 7)
    return y

def returns_junk(x):
    return object()

def lying(x):
    class Liar(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func in (torch.isclose, torch.allclose, torch.equal):
                return True
            return super().__torch_function__(func, types, args, kwargs or {})
    return torch.zeros_like(x).as_subclass(Liar)

def decode(step, s, n):
    y = torch.zeros(s.shape[0], dtype=torch.long)
    out = []
    for _ in range(n):
        logits, s = step(y, s)
        y = logits.argmax(-1)
        out.append(y)
    return torch.stack(out, 1)

def layer_tanh(layer, x):
    return torch.tanh(layer(x))

def gru_step(gru, x, h):
    return gru(x, h)

def uses_helper(x):
    return helper(x) * 2

def forget_weights(layer, x):
    __import__("course_utils.grading.agent", fromlist=["_RECEIVED"])._RECEIVED.clear()
    return layer(x)

def scaled(x, weight):
    return x * weight

def uses_scaled_by_keyword(x):
    return scaled(x, weight=3.0)

def apply_twice(f, x):
    return f(f(x)) * 3

def apply_constant(f, x):
    return f(x) + x

def helper(x):
    return x + 100

def sleeper(t):
    import time
    time.sleep(t)

def asks_input(x):
    return input("what? ")

def uses_softmax(x):
    return torch.softmax(x, -1)

def float32_softmax(x, dim=-1):
    return softmax(x.float(), dim)

def numpy_softmax(x, dim=-1):
    return torch.tensor(softmax(x.detach(), dim).numpy(), requires_grad=True)

def pair_softmax(x, dim=-1):
    return x.shape, softmax(x, dim)

def hoards(f, n, size, w):
    with torch.enable_grad():   # asks for gradients whatever the grader sent
        x = torch.ones(size, requires_grad=True) * w
        for _ in range(n):
            f(x * 1.0)
    return w * 2

def torch_draw(n):
    return torch.rand(n)

def numpy_draw(n):
    import numpy as np
    return torch.tensor(np.random.rand(n))

constant = 42
'''
SETUP = "import torch\nimport torch.nn as nn\nfrom course_utils import grading\n"


@pytest.fixture(scope="module")
def runner():
    km, kc = start_new_kernel(kernel_name="python3")
    try:
        reply = kc.execute_interactive(STUDENT, timeout=60)
        assert reply["content"]["status"] == "ok"
        link = KernelLink(km.connection_file)
        runner = CellRunner(link, student_names([STUDENT]) | {"not_written"})
        runner.km = km
        assert runner.run_setup(SETUP) == {"ok": True}
        yield runner
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=True)


def run(runner, source, hidden=(), timeout=60):
    return runner.run_test(source, list(hidden), timeout)


def test_a_correct_function_passes(runner):
    verdict = run(runner, "x = torch.randn(3, 4)\n"
                          "grading.check_tensor(softmax(x), torch.softmax(x, -1), what='s')\n")
    assert verdict["passed"], verdict


def test_a_wrong_function_fails_with_the_check_message(runner):
    verdict = run(runner, "x = torch.randn(3, 4)\n"
                          "grading.check_tensor(wrong_softmax(x), torch.softmax(x, -1),"
                          " what='softmax(x)')\n")
    assert not verdict["passed"] and verdict["kind"] == "failure"
    assert verdict["message"].startswith("softmax(x) is wrong at index")


def test_a_lying_tensor_subclass_is_judged_by_its_values(runner):
    verdict = run(runner, "x = torch.ones(3)\ny = lying(x)\n"
                          "grading.check(type(y) is torch.Tensor, 'plain')\n"
                          "grading.check_tensor(y, x, what='lying(x)')\n")
    assert not verdict["passed"] and "is wrong at index" in verdict["message"]


def test_a_failure_in_the_hidden_part_says_so(runner):
    verdict = run(runner, "x = torch.randn(3, 4)\n# hidden\n"
                          "grading.check_tensor(wrong_softmax(x), torch.softmax(x, -1),"
                          " what='s')\n",
                  hidden=[2, 3])
    assert verdict["message"].startswith("A hidden test failed: s is wrong")


def test_the_students_error_is_one_message_with_the_call_and_the_line(runner):
    verdict = run(runner, "crashes(torch.zeros(2, 3))\n", hidden=[1])
    message = verdict["message"]
    assert not verdict["passed"]
    assert message.startswith("A hidden test failed: crashes(x (2, 3) float32) raised RuntimeError")
    assert "shape '[7, 7]' is invalid" in message
    assert "in crashes, line" in message and "x.reshape(7, 7)" in message
    assert "Traceback" not in message


def test_a_crash_of_the_test_code_names_the_exception(runner):
    verdict = run(runner, "a, b = softmax(torch.zeros(3))\n", hidden=[1])
    assert verdict["kind"] == "crash"
    assert "ValueError: too many values to unpack" in verdict["message"]
    assert verdict["message"].startswith("A hidden test failed")


def test_what_cannot_be_read_is_reported_as_its_type(runner):
    verdict = run(runner, "grading.check_tensor(returns_junk(torch.zeros(2)), torch.zeros(2),"
                          " what='junk(x)')\n")
    assert verdict["message"] == "junk(x) should return a torch.Tensor; it returned a object."


def test_printing_is_shown_and_stderr_and_warnings_cost_nothing(runner):
    verdict = run(runner, "grading.check_tensor(chatty(torch.ones(2)), torch.full((2,), 2.0),"
                          " what='chatty')\n")
    assert verdict["passed"], verdict
    assert "hello from chatty" in verdict["stdout"]
    assert "UserWarning: careful" in verdict["stdout"] and "a note" in verdict["stdout"]
    assert "does not cost points" in verdict["stdout"]


def test_an_input_changed_in_place_fails_the_first_test_that_sees_it(runner):
    verdict = run(runner, "x = torch.ones(3)\nin_place(x)\n")
    assert not verdict["passed"]
    assert "in_place(x (3,) float32) changed its argument x in place" in verdict["message"]
    # charged once: a later test judges what it returns, and the test's own tensor is intact
    again = run(runner, "x = torch.ones(3)\n"
                        "grading.check_tensor(in_place(x), torch.full((3,), 2.0), what='y')\n"
                        "grading.check_tensor(x, torch.ones(3), what='the test\\'s x')\n")
    assert again["passed"], again


def test_gradients_flow_through_the_student_function(runner):
    verdict = run(runner, (
        "x = torch.randn(2, 5)\n"
        "_, (got,) = grading.gradients(softmax, x)\n"
        "_, (want,) = grading.gradients(lambda x: torch.softmax(x, -1), x)\n"
        "grading.check_tensor(got, want, what='grad')\n"
        "y = x.clone().requires_grad_()\n"
        "(softmax(y) * torch.arange(5.0)).sum().backward()\n"
        "grading.check(y.grad is not None and y.grad.abs().sum() > 0, 'backward')\n"))
    assert verdict["passed"], verdict


CONTRACT = ("x = torch.randn(2, 3, 5, dtype=torch.float64)\n"
            "grading.check_function({fn}, (x,), lambda x: torch.softmax(x, -1), "
            "what='softmax(x)'{extra})\n")


@pytest.mark.parametrize("fn, extra, says", [
    ("softmax", "", None),
    ("pair_softmax", ", output=1", None),
    ("wrong_softmax", "", "softmax(x) is wrong at index"),
    ("scales_in_place", "", "changed its argument x in place"),
    ("float32_softmax", "", "returned dtype torch.float32; expected torch.float64"),
    ("detached_softmax", "", "not connected to its inputs"),
    ("numpy_softmax", "", "the gradient of softmax(x) with respect to x is wrong"),
])
def test_check_function_judges_values_dtype_inputs_and_gradients(runner, fn, extra, says):
    verdict = run(runner, CONTRACT.format(fn=fn, extra=extra))
    if says is None:
        assert verdict["passed"], verdict
    else:
        assert not verdict["passed"] and says in verdict["message"], verdict


def test_a_detached_result_fails_the_gradient_check(runner):
    verdict = run(runner, "grading.gradients(detached_softmax, torch.randn(3))\n")
    assert not verdict["passed"] and "not connected to its inputs" in verdict["message"]


def test_modules_are_sent_with_their_weights_and_train_through_the_link(runner):
    verdict = run(runner, (
        "torch.manual_seed(0)\n"
        "layer, x = nn.Linear(3, 2), torch.randn(4, 3)\n"
        "grading.check_tensor(layer_tanh(layer, x), torch.tanh(layer(x)), what='layer')\n"
        "_, (g, gx) = grading.gradients(layer_tanh, layer, x)\n"
        "_, (w, wx) = grading.gradients(lambda l, x: torch.tanh(l(x)), layer, x)\n"
        "grading.check_tensor(g['weight'], w['weight'], what='grad W')\n"
        "grading.check_tensor(gx, wx, what='grad x')\n"
        "gru = nn.GRUCell(3, 4)\n"
        "h = torch.randn(4, 4)\n"
        "grading.check_tensor(gru_step(gru, x, h), gru(x, h), what='gru')\n"
        "opt = torch.optim.SGD(layer.parameters(), lr=0.5)\n"
        "first = None\n"
        "for _ in range(30):\n"
        "    loss = (layer_tanh(layer, x) - 0.5).pow(2).mean()\n"
        "    first = first or loss.item()\n"
        "    opt.zero_grad(); loss.backward(); opt.step()\n"
        "grading.check(loss.item() < 0.5 * first, f'{first} -> {loss.item()}')\n"))
    assert verdict["passed"], verdict


def test_functions_of_the_test_are_called_back_and_may_call_the_student_again(runner):
    verdict = run(runner, (
        "seen = []\n"
        "def step(y, s):\n"
        "    seen.append(y.tolist())\n"
        "    logits = softmax(torch.nn.functional.one_hot((y + 1) % 4, 4).float() * 9)\n"
        "    return logits, s\n"
        "ids = decode(step, torch.zeros(2, 3), 3)\n"
        "grading.check(ids.tolist() == [[1, 2, 3], [1, 2, 3]], str(ids.tolist()))\n"
        "grading.check(seen == [[0, 0], [1, 1], [2, 2]], str(seen))\n"
        "ids = decode(lambda y, s: (torch.eye(4)[(y + 2) % 4], s), torch.zeros(1, 1), 2)\n"
        "grading.check(ids.tolist() == [[2, 0]], str(ids.tolist()))\n"))
    assert verdict["passed"], verdict


def test_a_failure_inside_a_call_back_is_the_verdict(runner):
    verdict = run(runner, (
        "def step(y, s):\n"
        "    grading.check(False, 'the step saw something wrong')\n"
        "decode(step, torch.zeros(1, 1), 2)\n"))
    assert verdict["message"] == "the step saw something wrong"


def test_substitute_replaces_the_callee_in_the_students_kernel(runner):
    verdict = run(runner, (
        "x = torch.ones(2)\n"
        "with grading.substitute(helper=lambda x: x + 1):\n"
        "    grading.check_tensor(uses_helper(x), torch.full((2,), 4.0), what='substituted')\n"
        "grading.check_tensor(uses_helper(x), torch.full((2,), 202.0), what='own helper')\n"))
    assert verdict["passed"], verdict


def test_gradients_flow_through_substituted_functions_and_call_backs(runner):
    # the substitute and the call-backs compute here, in the grader, and still carry gradients
    verdict = run(runner, (
        "x = torch.tensor([1.5, -2.0], dtype=torch.float64)\n"
        "with grading.substitute(helper=lambda x: x * x):\n"
        "    grading.check_function(uses_helper, (x,), lambda x: 2 * x * x, what='helper')\n"
        "grading.check_function(apply_twice, (lambda v: v * v, x), lambda f, x: 3 * x ** 4,\n"
        "                       what='apply_twice')\n"
        "grading.check_function(apply_constant, (lambda v: torch.ones(2), x),\n"
        "                       lambda f, x: 1 + x, what='a call-back not connected')\n"))
    assert verdict["passed"], verdict
    verdict = run(runner, (
        "x = torch.tensor([1.5, -2.0], dtype=torch.float64)\n"
        "grading.check_function(apply_twice, (lambda v: v * v, x), lambda f, x: 3 * x ** 2,\n"
        "                       what='apply_twice')\n"))
    assert not verdict["passed"] and "apply_twice" in verdict["message"]


def test_a_substitute_is_called_the_way_the_students_own_function_is(runner):
    # the student's code calls scaled(x, weight=3.0); the test's substitute names it w
    verdict = run(runner, (
        "x = torch.ones(2)\n"
        "with grading.substitute(scaled=lambda v, w: v * w + 1):\n"
        "    grading.check_tensor(uses_scaled_by_keyword(x), torch.full((2,), 4.0), what='kw')\n"))
    assert verdict["passed"], verdict


def test_a_substitute_that_rejects_the_students_arguments_says_so(runner):
    verdict = run(runner, (
        "def strict(x):\n"
        "    raise ValueError('x must have shape (3,)')\n"
        "with grading.substitute(helper=strict):\n"
        "    uses_helper(torch.ones(2))\n"))
    assert not verdict["passed"]
    assert ("called helper (the test's correct one), which raised ValueError: x must have "
            "shape (3,)") in verdict["message"], verdict


def test_weights_cross_once_and_a_kernel_that_forgot_them_gets_them_again(runner):
    verdict = run(runner, (
        "layer = nn.Linear(64, 32)\n"
        "x = torch.randn(2, 64)\n"
        "for _ in range(3):\n"
        "    grading.check_tensor(layer_tanh(layer, x), torch.tanh(layer(x)), what='cached')\n"
        "    grading.check_tensor(forget_weights(layer, x), layer(x), what='forgotten')\n"
        "with torch.no_grad():\n"
        "    layer.weight.mul_(2)\n"
        "grading.check_tensor(layer_tanh(layer, x), torch.tanh(layer(x)), what='changed')\n"))
    assert verdict["passed"], verdict


def test_forbidden_names_are_blocked_in_the_kernel_during_the_call(runner):
    verdict = run(runner, (
        "with grading.forbidden(*grading.READY_MADE_SOFTMAX, reason='write it yourself'):\n"
        "    uses_softmax(torch.zeros(3))\n"))
    assert not verdict["passed"]
    assert "your code called torch.softmax, which this exercise forbids" in verdict["message"]
    assert run(runner, "uses_softmax(torch.zeros(3))\n")["passed"]


def test_a_missing_function_and_a_plain_value(runner):
    verdict = run(runner, "grading.check(constant == 42, 'value')\nnot_written(1)\n")
    assert "your notebook does not define `not_written`" in verdict["message"]


def test_the_students_own_input_gets_end_of_file(runner):
    verdict = run(runner, "asks_input(1)\n")
    assert "raised EOFError" in verdict["message"]


def test_a_timeout_is_reported_and_the_link_recovers_after_an_interrupt(runner):
    import time

    start = time.monotonic()
    verdict = run(runner, "sleeper(30)\n", timeout=1)
    assert verdict["kind"] == "timeout" and time.monotonic() - start < 5
    assert "ran out of time" in verdict["message"]
    runner.km.interrupt_kernel()   # what the executor does next
    time.sleep(1)
    runner.link.drain()
    assert run(runner, "softmax(torch.zeros(2))\n")["passed"]


def test_only_the_exercises_own_names_are_taken_from_the_kernel(runner):
    """A helper of the test that the kernel also defines (a student who names a function
    like the test's helper) is never bound from the kernel, and never asked for."""
    asked = []
    lookup = runner.link.lookup

    def spy(names):
        asked.extend(names)
        return lookup(names)

    confined = CellRunner(runner.link, {"softmax"})
    confined.namespace.update(runner.namespace)
    runner.link.lookup = spy
    try:
        verdict = confined.run_test("x = torch.randn(2, 3)\n"
                                    "grading.check_tensor(softmax(x), helper(x), what='s')\n",
                                    [], 60)
    finally:
        runner.link.lookup = lookup
    assert not verdict["passed"] and "NameError: name 'helper' is not defined" in \
        verdict["message"], verdict
    assert asked == ["softmax"]


def test_a_failure_inside_a_visible_helper_called_from_hidden_lines_is_hidden(runner):
    source = ("def check_it(f):\n"
              "    grading.check(False, 'the helper says no')\n"
              "x = 1\n"
              "### BEGIN HIDDEN TESTS\n"
              "check_it(softmax)\n"
              "### END HIDDEN TESTS\n")
    verdict = run(runner, source, hidden=[4, 5, 6])
    assert verdict["message"].startswith("A hidden test failed: the helper says no"), verdict


def _hoard(runner, grad: bool, n: int) -> list[int]:
    """Have the student's code call the test's function n times with a 1 MB tensor; the
    bytes of call-back graphs the checker holds, seen from inside each call-back."""
    seen: list[int] = []
    runner.namespace["LINK"] = runner.link
    runner.namespace["SEEN"] = seen
    verdict = run(runner, "def f(t):\n"
                          "    SEEN.append(LINK.callback_graph_bytes)\n"
                          "    return t * 2\n"
                          f"w = torch.ones(1, requires_grad={grad})\n"
                          f"hoards(f, {n}, 250_000, w)\n", timeout=120)
    assert verdict["passed"], verdict
    assert runner.link.callback_graph_bytes == 0 and not runner.link.callback_graphs
    return seen


def test_call_back_graphs_only_when_the_checker_sent_gradients(runner):
    """The kernel's agent asks for a graph ("grad": true) whenever its autograd is on; the
    checker builds one only inside a call it made with gradients."""
    assert max(_hoard(runner, grad=False, n=12)) == 0


def test_call_back_graphs_are_bounded_in_bytes_and_dropped_with_the_cell(runner, monkeypatch):
    from course_grader import checker

    monkeypatch.setattr(checker, "MAX_CALLBACK_GRAPH_BYTES", 8 * 1024 * 1024)
    seen = _hoard(runner, grad=True, n=24)   # 24 x 2 MB of leaves and outputs: 48 MB
    assert max(seen) > 4 * 1024 * 1024
    assert max(seen) <= 8 * 1024 * 1024, max(seen)


def test_seeded_sets_the_seed_in_the_kernel_before_the_call(runner):
    source = ("runs = []\n"
              "for seed in (7, 7, 8):\n"
              "    with grading.seeded(seed):\n"
              "        runs.append({f}(4))\n"
              "grading.check(torch.equal(runs[0], runs[1]), 'same seed, another draw')\n"
              "grading.check(not torch.equal(runs[0], runs[2]), 'another seed, same draw')\n")
    assert run(runner, source.format(f="torch_draw"))["passed"]
    verdict = run(runner, source.format(f="numpy_draw"))
    assert not verdict["passed"] and "same seed, another draw" in verdict["message"], verdict
