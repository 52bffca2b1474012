"""The check convention of every exercise's tests: a verdict a student can act on.

A test cell calls the student's functions and compares what they return with what is
expected; when it is wrong, it fails with one short message: which function, which input,
what came back, what was expected, and a hint about the usual mistake.

    from course_utils import grading
    grading.check_tensor(softmax(x), expected, what="softmax(x)", hint="...")
    out = grading.call(softmax, x)              # and fail if softmax changed x in place
    grads = grading.gradients(softmax, x)       # the gradient the student's code gives
    with grading.forbidden("torch.softmax", reason="implement the softmax yourself"):
        ...
    with grading.substitute(additive_attention=correct_one):   # judge a function alone
        ...
    grading.summary("softmax", "weighted_average")   # the last cell: where Validate says
                                                     # which tasks pass (validation.py)

The same test cells run in two places. In the student's own kernel (JupyterLab, Validate)
everything here runs directly. When a submission is autograded, test cells run in the
grader's checker process instead (`course_grader.checker`), where each student function is
a stand-in that calls the real one in the sandboxed kernel and brings back plain data;
`forbidden`, `reference_disabled` and `substitute` are then sent along with each call, and
the verdict never depends on anything the student's kernel says but the values.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import sys
import textwrap
import types
from collections.abc import Iterator

import torch

__all__ = [
    "GradingFailure",
    "READY_MADE_SOFTMAX",
    "call",
    "check",
    "check_function",
    "check_tensor",
    "cotangent",
    "forbidden",
    "stand_ins",
    "gradients",
    "reference_disabled",
    "rtol_for",
    "seeded",
    "substitute",
    "summary",
    "wrap_message",
]

# PyTorch's own softmax, under every name it goes by; exercises that ask for a softmax forbid them.
READY_MADE_SOFTMAX = (
    "torch.softmax",
    "torch.Tensor.softmax",
    "torch.nn.functional.softmax",
    "torch.special.softmax",
    "torch._softmax",
    "torch.ops.aten.softmax",
    "torch.ops.aten._softmax",
)


class GradingFailure(AssertionError):
    """A test verdict meant for the student: the message says what to fix.

    Its first line is the sentence that matters (what was called and what was wrong); the
    values and a hint follow on lines of their own. In a notebook (and in nbgrader's Validate)
    it is shown as that message alone, wrapped to 80 columns, without a traceback."""

    def _render_traceback_(self) -> list[str]:
        return wrap_message(f"{type(self).__name__}: {self}").splitlines()


def wrap_message(message: str, width: int = 80) -> str:
    """`message` with each of its lines wrapped to `width` columns (words are not split)."""
    return "\n".join(textwrap.fill(line, width=width, break_long_words=False,
                                   break_on_hyphens=False, subsequent_indent="  ") or line
                     for line in str(message).splitlines())


class RemoteTest:
    """What the checker process asks of this module while it runs a test cell: the names
    to forbid and the functions to substitute are sent along with each call of a student
    function instead of being applied here."""

    def __init__(self) -> None:
        self.forbidden: list[tuple[tuple[str, ...], str]] = []
        self.substitutes: list[dict] = []
        self.seeds: list[int] = []

    def seed(self) -> int | None:
        return self.seeds[-1] if self.seeds else None

    def forbidden_names(self) -> tuple[list[str], str]:
        names = [n for block, _ in self.forbidden for n in block]
        reasons = [r for _, r in self.forbidden]
        return names, "; ".join(dict.fromkeys(reasons))

    def substitute_map(self) -> dict:
        merged: dict = {}
        for block in self.substitutes:
            merged.update(block)
        return merged


REMOTE_TEST: RemoteTest | None = None   # set by course_grader.checker in its own process only


def check(condition: bool, message: str) -> None:
    """Fail with `message` unless `condition` holds."""
    if not condition:
        raise GradingFailure(message)


def _fmt(x: torch.Tensor, first_wrong: int = 0) -> str:
    """Six values of x (flattened), from the first wrong one on (or from the start when it is
    among the first six), with ... where values are left out."""
    flat = x.detach().flatten()
    start = 0 if first_wrong < 6 else first_wrong - 1
    values = flat[start:start + 6].tolist()
    body = ", ".join(f"{v:.4g}" for v in values)
    return (f"[{'..., ' if start else ''}{body}"
            f"{', ...' if start + 6 < flat.numel() else ''}]")


def _kind_of(value) -> str:
    """'a tuple', 'a numpy.ndarray', 'a float': what a value is, for a message (a value the
    grader could not read arrives as a wire.Opaque that names its type)."""
    name = getattr(value, "type_name", None) if type(value).__name__ == "Opaque" else None
    return f"a {name or type(value).__name__}"


def _index(flat_index: int, shape: torch.Size) -> tuple[int, ...]:
    index = []
    for size in reversed(shape):
        index.append(flat_index % size)
        flat_index //= size
    return tuple(reversed(index))


def check_tensor(
    actual,
    expected: torch.Tensor,
    *,
    what: str,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    hint: str = "",
    dtype: torch.dtype | None = None,
) -> None:
    """Check that `actual` is a tensor with the shape and values of `expected`.

    `what` names the call being checked, e.g. "softmax(x, dim=0) for x of shape (3, 4)".
    `hint` is added to every failure message: the likely mistake and how to fix it.
    `dtype`, if given, is the dtype `actual` must have (the input's, for a function that
    promises to keep it).
    """
    tail = f"\nHint: {hint}" if hint else ""
    if actual is None:
        raise GradingFailure(f"{what} returned None; did you forget the `return`?{tail}")
    if not isinstance(actual, torch.Tensor):
        raise GradingFailure(
            f"{what} should return a torch.Tensor; it returned {_kind_of(actual)}.{tail}"
        )
    if tuple(actual.shape) != tuple(expected.shape):
        raise GradingFailure(
            f"{what} returned shape {tuple(actual.shape)}; expected {tuple(expected.shape)}.{tail}"
        )
    if dtype is not None and actual.dtype != dtype:
        raise GradingFailure(
            f"{what} returned dtype {actual.dtype}; expected {dtype}, the dtype of its input.\n"
            f"Keep the input's dtype: no .float(), and make new tensors with dtype=x.dtype "
            f"(or torch.zeros_like / new_zeros).{tail}")
    if not actual.dtype.is_floating_point:
        raise GradingFailure(
            f"{what} returned dtype {actual.dtype}; expected a floating-point tensor "
            f"({expected.dtype}).{tail}"
        )
    got = actual.detach().to(torch.float64)
    want = expected.detach().to(torch.float64)
    bad = ~torch.isfinite(got) & torch.isfinite(want)
    if bad.any():
        where = _index(int(bad.flatten().nonzero()[0]), got.shape)
        raise GradingFailure(
            f"{what} contains {got[where].item()} at index {where}, where {want[where].item():.4g} "
            f"was expected.\nNaN or inf usually means an overflow in exp() or a division by "
            f"zero.{tail}"
        )
    close = torch.isclose(got, want, atol=atol, rtol=rtol, equal_nan=True)
    if not close.all():
        first = int((~close).flatten().nonzero()[0])
        where = _index(first, got.shape)
        worst = (got - want).abs().nan_to_num(0.0).max().item()
        raise GradingFailure(
            f"{what} is wrong at index {where}: got {got[where].item():.6g}, expected "
            f"{want[where].item():.6g}.\n"
            f"Largest difference {worst:.3g}. Returned {_fmt(got, first)}, expected "
            f"{_fmt(want, first)} (flattened).{tail}"
        )




def rtol_for(scale: float, dtype: torch.dtype = torch.float32) -> float:
    """The relative tolerance that a softmax of scores as large as `scale` (in `dtype`) needs:
    any correct method rounds its shifted scores (x - max, or x - logsumexp(x)) by up to an
    ulp of `scale`, which exp turns into as much relative error. Eight ulps, never below 1e-4:
    rtol_for(1e4) is 9.5e-3 in float32, where a logsumexp softmax is off by ~5e-4."""
    return max(1e-4, 8 * abs(float(scale)) * torch.finfo(dtype).eps)


def call(fn, *args, **kwargs):
    """fn(*args, **kwargs), failing if it changed one of its tensor arguments in place (a
    caller's tensors are not the function's to modify)."""
    if REMOTE_TEST is not None:
        return fn(*args, **kwargs)   # the checker's stand-in checks this on every call
    named = _named_tensors(args, kwargs)
    before = [t.detach().clone() for _, t in named]
    result = fn(*args, **kwargs)
    for (label, t), old in zip(named, before, strict=True):
        if not _unchanged(t, old):
            raise GradingFailure(
                f"{_name(fn)}(...) changed its argument {label} in place. Leave the caller's "
                f"tensors alone: compute new tensors (x = x + 1, torch.where, masked_fill "
                f"without the underscore) instead of writing into the ones you were given.")
    return result


def stand_ins(parts: dict) -> dict:
    """For a test of how several of the student's functions work together: {name: (student's
    function, reference, probe arguments)} -> {name: the function the test should use}. That
    is the student's where it computes what the reference computes on the probe (tensors, or
    tuples of tensors, of the same shape and within 1e-4), and the reference where it does
    not or raises, with a note printed: a function's own tests charge its mistake, so this
    test does not charge it again, and judges what the working functions do together
    (gradients that flow through them, a model that learns). With none working, the test
    fails: there is nothing of the student's to judge."""
    chosen = {}
    for name, (own, reference, args) in parts.items():
        expected = reference(*args)
        try:
            agrees = _agree(own(*args), expected)
        except GradingFailure:          # graded: what the student's function raised
            agrees = False
        except Exception:               # noqa: BLE001 - at home, whatever it raised
            if REMOTE_TEST is not None:     # the grader lost the kernel: not the student's mistake
                raise
            agrees = False
        if not agrees:
            print(f"Note: {name} does not compute what the reference does (its own tests say "
                  f"how), so this test uses the reference's {name} in its place.")
        # the reference is the test's, not the student's: what the test forbids does not bind it
        chosen[name] = own if agrees else _unrestricted(reference)
    if all(chosen[name] is not parts[name][0] for name in parts):
        raise GradingFailure(
            f"None of {', '.join(parts)} computes what the reference does yet, so this test "
            f"has nothing of yours to run together. Make their own tests pass first.")
    return chosen


def _agree(got, expected) -> bool:
    if isinstance(expected, tuple):
        return (isinstance(got, tuple | list) and len(got) == len(expected)
                and all(_agree(g, e) for g, e in zip(got, expected, strict=True)))
    return (isinstance(got, torch.Tensor) and got.shape == expected.shape
            and got.dtype.is_floating_point == expected.dtype.is_floating_point
            and torch.allclose(got.detach().double(), expected.detach().double(),
                               rtol=1e-4, atol=1e-4))


def _name(fn) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def _parameter_names(fn) -> list[str]:
    """The names of fn's parameters: a stand-in for a student's function knows them."""
    names = getattr(fn, "params", None)
    if isinstance(names, list):
        return [str(n) for n in names]
    try:
        return list(inspect.signature(fn).parameters)
    except (TypeError, ValueError):
        return []


def _named_tensors(args, kwargs) -> list[tuple[str, torch.Tensor]]:
    found = []

    def walk(label, obj, depth=0):
        if isinstance(obj, torch.Tensor):
            found.append((label, obj))
        elif isinstance(obj, list | tuple) and depth < 4:
            for i, x in enumerate(obj):
                walk(f"{label}[{i}]", x, depth + 1)
        elif isinstance(obj, dict) and depth < 4:
            for k, x in obj.items():
                walk(f"{label}[{k!r}]", x, depth + 1)

    for i, a in enumerate(args):
        walk(f"#{i + 1}", a)
    for k, a in kwargs.items():
        walk(f"`{k}`", a)
    return found


def _unchanged(t: torch.Tensor, old: torch.Tensor) -> bool:
    new = t.detach()
    if new.shape != old.shape:
        return False
    if new.dtype.is_floating_point:
        return bool(torch.equal(new.isnan(), old.isnan())
                    and torch.equal(new.nan_to_num(), old.nan_to_num()))
    return bool(torch.equal(new, old))


def cotangent(shape, dtype=torch.float64) -> torch.Tensor:
    """The fixed weights that `gradients` sums an output with: no two entries alike, so that
    a gradient sent to the wrong place shows."""
    n = 1
    for size in shape:
        n *= size
    return torch.cos(torch.arange(n, dtype=torch.float64) * 0.7 + 0.3).reshape(shape).to(dtype)


def gradients(fn, *args, **kwargs):
    """The gradients that fn's own code gives: of L = sum over fn's floating-point outputs of
    sum(output * cotangent(output.shape)) with respect to every floating-point tensor among
    the arguments (nested in lists, tuples and dicts too) and every parameter of an nn.Module
    argument. Returns (result, grads): grads mirrors the arguments: a tensor for each tensor
    (zeros where L does not depend on it), {name: grad} for a module, None for anything else;
    keyword arguments come last, as a dict.

    Fails with a GradingFailure if the result is not connected to the inputs (.detach(),
    torch.no_grad(), .item() or NumPy on the way)."""
    leaves: list[torch.Tensor] = []

    def prepare(obj, depth=0):
        if isinstance(obj, torch.Tensor) and obj.dtype.is_floating_point:
            leaf = obj.detach().clone().requires_grad_(True)
            leaves.append(leaf)
            return leaf
        if isinstance(obj, torch.nn.Module):
            for p in obj.parameters():
                p.grad = None
                leaves.append(p)
            return obj
        if isinstance(obj, list | tuple) and depth < 4:
            return type(obj)(prepare(x, depth + 1) for x in obj)
        if isinstance(obj, dict) and depth < 4:
            return {k: prepare(x, depth + 1) for k, x in obj.items()}
        return obj

    args2 = [prepare(a) for a in args]
    kwargs2 = {k: prepare(a) for k, a in kwargs.items()}
    with torch.enable_grad():
        result = fn(*args2, **kwargs2)
        outputs = [t for _, t in _named_tensors((result,), {}) if t.dtype.is_floating_point]
        connected = [t for t in outputs if t.requires_grad]
        if outputs and not connected:
            raise GradingFailure(
                f"{_name(fn)}(...) returned a result that is not connected to its inputs, so "
                f"no gradient can flow back through it and nothing before it would train. "
                f"Compute with differentiable tensor operations only: no torch.no_grad(), "
                f".detach(), .item(), float() or NumPy on the way.")
        loss = sum((t * cotangent(t.shape, t.dtype)).sum() for t in connected)
        found = torch.autograd.grad(loss, leaves, allow_unused=True) if connected else ()
    grads = iter(g if g is not None else torch.zeros_like(leaf)
                 for g, leaf in zip(found, leaves, strict=False))

    def collect(obj, depth=0):
        if isinstance(obj, torch.Tensor) and obj.dtype.is_floating_point:
            return next(grads)
        if isinstance(obj, torch.nn.Module):
            return {name: next(grads) for name, _ in obj.named_parameters()}
        if isinstance(obj, list | tuple) and depth < 4:
            return type(obj)(collect(x, depth + 1) for x in obj)
        if isinstance(obj, dict) and depth < 4:
            return {k: collect(x, depth + 1) for k, x in obj.items()}
        return None

    return result, (*[collect(a) for a in args], *([{k: collect(a) for k, a in kwargs.items()}]
                                                    if kwargs else []))


def check_function(fn, args: tuple, expected, *, what: str, hint: str = "", output=None,
                   atol: float = 1e-7, rtol: float = 1e-6, grad_hint: str = "") -> None:
    """The contract of a function that will be trained, checked in float64:

    1. fn(*args) leaves its tensor arguments unchanged (`call`);
    2. its result (or result[output]) has the shape, dtype and values of expected(*args), a
       correct formula the test writes out; the dtype is that of expected(*args);
    3. the gradients its own code gives with respect to every floating-point argument (and
       the parameters of module arguments) are those of expected's (`gradients`).

    Give float64 arguments: any correct method agrees with another to ~1e-12 there, so the
    default tolerances (rtol 1e-6) leave room for every order of summation and still catch
    a wrong formula."""
    pick = (lambda r: r) if output is None else (lambda r: r[output])
    tail = f"\nHint: {hint}" if hint else ""
    result = call(fn, *args)
    if output is not None and not (isinstance(result, tuple | list) and len(result) > output):
        raise GradingFailure(f"{what} should return a tuple of at least {output + 1} values; "
                             f"it returned {_kind_of(result)}.{tail}")
    want = expected(*args)
    check_tensor(pick(result), want, what=what, hint=hint, atol=atol, rtol=rtol,
                 dtype=want.dtype)

    def picked(*a):
        return pick(fn(*a))

    picked.__name__ = _name(fn)
    _, got = gradients(picked, *args)
    _, wanted = gradients(expected, *args)
    params = _parameter_names(fn)
    for i, (g, w) in enumerate(zip(got, wanted, strict=True)):
        pairs = (g.items() if isinstance(w, dict) else [("", g)]) if w is not None else []
        for name, value in pairs:
            w_value = w[name] if isinstance(w, dict) else w
            label = (f"{params[i]}" if i < len(params) else f"argument #{i + 1}") + \
                (f" (parameter {name})" if name else "")
            check_tensor(value, w_value, atol=atol, rtol=rtol,
                         what=f"the gradient of {what} with respect to {label}",
                         hint=grad_hint or "the values are right but the gradient is not: "
                              "compute with differentiable tensor operations only.")


def _resolve(dotted: str):
    """'torch.nn.functional.softmax' -> (the module or class that holds it, 'softmax')."""
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            owner = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:-1]:
            owner = getattr(owner, name)
        return owner, parts[-1]
    raise ValueError(f"cannot resolve {dotted!r}; expected a dotted name such as 'torch.softmax'")


def _raising_code(message: str) -> types.CodeType:
    """The code of a function that raises GradingFailure(message) whatever it is given; it
    names nothing but builtins, so it runs in any function's globals."""
    source = ("def blocked(*args, **kwargs):\n"
              "    raise __import__('course_utils.grading', fromlist=['GradingFailure'])"
              f".GradingFailure({message!r})\n")
    namespace: dict = {}
    exec(source, namespace)  # noqa: S102 - our own constant source
    return namespace["blocked"].__code__


@contextlib.contextmanager
def _pushed(stack: list, item) -> Iterator[None]:
    stack.append(item)
    try:
        yield
    finally:
        stack.pop()


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Run the block's call of a student function after torch.manual_seed(seed), so that a
    test can ask whether the function draws its randomness from PyTorch's generator (the same
    seed, the same result; NumPy's and Python's random numbers do not follow it). Put one
    call in the block. When graded, the seed is sent along with each call and set in the
    student's kernel just before it."""
    if REMOTE_TEST is not None:   # the checker sends the seed along with each call
        with _pushed(REMOTE_TEST.seeds, int(seed)):
            yield
        return
    torch.manual_seed(int(seed))
    yield


@contextlib.contextmanager
def forbidden(*names: str, reason: str, missing_ok: bool = False) -> Iterator[None]:
    """Make the named callables raise GradingFailure while the block runs.

    names: dotted paths such as "torch.softmax" or "torch.Tensor.softmax".
    reason: what the student should do instead; it goes into the message.
    missing_ok: skip names that cannot be resolved here (instead of a ValueError).

    In the student's kernel this is a convenience, not a guarantee: a Python function has its
    code swapped (so that a reference taken earlier raises too), other callables are replaced
    where they are looked up, and code determined to get around it can. The grader flags
    such code for the instructor (course_publish/guides/instructors.md, "Shortcuts").
    """
    if REMOTE_TEST is not None:   # the checker sends the names along with each call
        with _pushed(REMOTE_TEST.forbidden, (names, reason)):
            yield
        return
    undo = []
    try:
        for dotted in names:
            try:
                owner, attr = _resolve(dotted)
                original = getattr(owner, attr)
            except (ValueError, AttributeError, ImportError):
                if missing_ok:
                    continue
                raise
            message = f"your code called {dotted}, which this exercise forbids: {reason}"
            if isinstance(original, types.FunctionType) and not original.__closure__:
                swap = (original, "__code__", original.__code__, _raising_code(message))
            else:
                def blocked(*args, _message=message, **kwargs):
                    raise GradingFailure(_message)

                functools.update_wrapper(blocked, original, assigned=("__name__", "__doc__"))
                swap = (owner, attr, original, blocked)
            setattr(swap[0], swap[1], swap[3])
            undo.append(swap)
            _BLOCKED.append(swap)
        yield
    finally:
        for swap in reversed(undo):
            setattr(swap[0], swap[1], swap[2])
            _BLOCKED.remove(swap)


_BLOCKED: list = []   # (owner, attribute, original, blocked) of the open `forbidden` blocks


@contextlib.contextmanager
def _lifted() -> Iterator[None]:
    """Undo the open `forbidden` blocks while the block runs (for the test's own functions)."""
    swaps = list(_BLOCKED)
    for owner, attr, original, _ in reversed(swaps):
        setattr(owner, attr, original)
    try:
        yield
    finally:
        for owner, attr, _, blocked in swaps:
            setattr(owner, attr, blocked)


def _public_functions(module_name: str) -> list[str]:
    try:
        module = importlib.import_module(module_name)
    except ImportError:  # out of reach (the grading sandbox): nothing to switch off
        return []
    names = getattr(module, "__all__", [])
    return [f"{module_name}.{n}" for n in names if callable(getattr(module, n, None))]


@contextlib.contextmanager
def reference_disabled(*module_names: str) -> Iterator[None]:
    """Make every public function of the given `course_utils` modules raise while the block
    runs, so that a solution that only calls the reference implementation fails.

    Default: `course_utils.attention`. When grading, the reference modules are not even
    installed in the student's sandbox; this makes the same true at home.
    """
    module_names = module_names or ("course_utils.attention",)
    names = [n for m in module_names for n in _public_functions(m)]
    with forbidden(*names, reason="write the computation yourself instead of calling the "
                                  "course's reference code", missing_ok=True):
        yield


@contextlib.contextmanager
def substituted(namespace: dict, functions: dict) -> Iterator[None]:
    """Bind `functions` ({name: function}) in `namespace` while the block runs."""
    missing = object()
    saved = {name: namespace.get(name, missing) for name in functions}
    namespace.update(functions)
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is missing:
                namespace.pop(name, None)
            else:
                namespace[name] = old


@contextlib.contextmanager
def substitute(**functions) -> Iterator[None]:
    """Let the student's functions call these (correct) functions instead of the student's
    own of the same name while the block runs: a test of attention_decoder_step then judges
    that function alone, not the additive_attention it calls. Gradients flow through them
    (when graded, the checker answers for the gradients of the functions it runs)."""
    if REMOTE_TEST is not None:   # the checker sends them along with each call
        with _pushed(REMOTE_TEST.substitutes, functions):
            yield
        return
    main = sys.modules.get("__main__")
    namespace = vars(main) if main is not None else {}
    # a substituted function is the test's, not the student's: what the test forbids the
    # student does not bind it (as when graded, where it runs in the checker)
    with substituted(namespace, {name: called_like(namespace.get(name), _unrestricted(f))
                                 for name, f in functions.items()}):
        yield


def called_like(own, function):
    """`function`, called the way the student's `own` function of the same name is: the
    arguments of a call are bound to own's parameters and handed on by position, so that a
    call by keyword with the student's own parameter names reaches the right ones."""
    try:
        signature = inspect.signature(own)
    except (TypeError, ValueError):
        return function

    @functools.wraps(function)
    def adapted(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return function(*args, **kwargs)
        return function(*bound.args, **bound.kwargs)

    return adapted


def _unrestricted(function):
    @functools.wraps(function)
    def run(*args, **kwargs):
        with _lifted():
            return function(*args, **kwargs)

    return run


def _show_briefly(shell, etype, value, tb, tb_offset=None):
    """IPython shows a GradingFailure as its message, wrapped to 80 columns, not a traceback
    through this module."""
    lines = value._render_traceback_()
    lines[0] = f"\x1b[0;31m{etype.__name__}\x1b[0m" + lines[0][len(etype.__name__):]
    shell._showtraceback(etype, value, lines)


def _install_brief_display() -> None:
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is not None and hasattr(shell, "set_custom_exc"):
        shell.set_custom_exc((GradingFailure,), _show_briefly)


_install_brief_display()

# Validate's account of the tasks (validation.py reads GradingFailure, defined above).
from course_utils.grading import validation  # noqa: E402
from course_utils.grading.validation import summary  # noqa: E402

validation.install()
