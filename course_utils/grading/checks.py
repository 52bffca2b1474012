"""The checks a test cell makes: values against what is expected (`check_tensor`), arguments
left unchanged (`call`), gradients (`gradients`, `check_function`) and functions judged
together (`stand_ins`). Each fails with a GradingFailure whose message says what was called,
what came back, what was expected and a hint."""

from __future__ import annotations

import inspect

import torch

from course_utils.grading import remote
from course_utils.grading.failure import GradingFailure
from course_utils.grading.restrictions import unrestricted


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
        # the worst wrong value leads: the first one may be off by 1e-4 where another is off
        # by 0.05, and a student reads the first line only
        gaps = (got - want).abs().nan_to_num(0.0)
        worst = int(torch.where(close, -1.0, gaps).flatten().argmax())
        where = _index(worst, got.shape)
        wrong = int((~close).sum())
        raise GradingFailure(
            f"{what} is wrong at index {where}: got {got[where].item():.6g}, expected "
            f"{want[where].item():.6g}.\n"
            f"Largest difference {gaps[where].item():.3g} ({wrong} of {got.numel()} values "
            f"wrong). Returned {_fmt(got, worst)}, expected {_fmt(want, worst)} "
            f"(flattened).{tail}"
        )


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


def rtol_for(scale: float, dtype: torch.dtype = torch.float32) -> float:
    """The relative tolerance that a softmax of scores as large as `scale` (in `dtype`) needs:
    any correct method rounds its shifted scores (x - max, or x - logsumexp(x)) by up to an
    ulp of `scale`, which exp turns into as much relative error. Eight ulps, never below 1e-4:
    rtol_for(1e4) is 9.5e-3 in float32, where a logsumexp softmax is off by ~5e-4."""
    return max(1e-4, 8 * abs(float(scale)) * torch.finfo(dtype).eps)


def call(fn, *args, **kwargs):
    """fn(*args, **kwargs), failing if it changed one of its tensor arguments in place (a
    caller's tensors are not the function's to modify)."""
    if remote.current() is not None:
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
            if remote.current() is not None:   # the grader lost the kernel, not the student
                raise
            agrees = False
        if not agrees:
            print(f"Note: {name} does not compute what the reference does (its own tests say "
                  f"how), so this test uses the reference's {name} in its place.")
        # the reference is the test's, not the student's: what the test forbids does not bind it
        chosen[name] = own if agrees else unrestricted(reference)
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
