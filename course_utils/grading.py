"""The one convention that every exercise's tests follow.

A test cell compares what the student's function returns with what is expected and, when
it is wrong, fails with a message a student can act on: which function, which input, what
came back, what was expected, and a hint about the usual mistake. Hidden tests also make
the course's reference code (and, where an exercise says so, PyTorch's ready-made
function) raise while the student's code runs, so that delegating to it cannot pass.

    from course_utils import grading
    grading.check_tensor(softmax(x), expected, what="softmax(x)", hint="...")
    with grading.forbidden("torch.softmax", reason="implement the softmax yourself"):
        ...
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import types
from collections.abc import Iterator

import torch

from course_utils import integrity
from course_utils.integrity import TamperingDetected

__all__ = [
    "GradingFailure",
    "READY_MADE_SOFTMAX",
    "TamperingDetected",
    "check",
    "check_tensor",
    "forbidden",
    "reference_disabled",
]

# PyTorch's own softmax, under every name it goes by; exercises that ask for a softmax forbid them.
READY_MADE_SOFTMAX = (
    "torch.softmax",
    "torch.Tensor.softmax",
    "torch.nn.functional.softmax",
    "torch.special.softmax",
)


class GradingFailure(AssertionError):
    """A test verdict meant for the student: the message says what to fix."""


def check(condition: bool, message: str) -> None:
    """Fail with `message` unless `condition` holds (and nothing was tampered with)."""
    integrity.verify()
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
) -> None:
    """Check that `actual` is a tensor with the shape and values of `expected`.

    `what` names the call being checked, e.g. "softmax(x, dim=0) for x of shape (3, 4)".
    `hint` is added to every failure message: the likely mistake and how to fix it.
    Raises TamperingDetected first if a function the tests rely on was replaced.
    """
    integrity.verify()
    tail = f" Hint: {hint}" if hint else ""
    if actual is None:
        raise GradingFailure(f"{what} returned None; did you forget the `return`?{tail}")
    if not isinstance(actual, torch.Tensor):
        raise GradingFailure(
            f"{what} should return a torch.Tensor; it returned a {type(actual).__name__}.{tail}"
        )
    if tuple(actual.shape) != tuple(expected.shape):
        raise GradingFailure(
            f"{what} returned shape {tuple(actual.shape)}; expected {tuple(expected.shape)}.{tail}"
        )
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
            f"was expected. NaN or inf usually means an overflow in exp() or a division by "
            f"zero.{tail}"
        )
    close = torch.isclose(got, want, atol=atol, rtol=rtol, equal_nan=True)
    if not close.all():
        first = int((~close).flatten().nonzero()[0])
        where = _index(first, got.shape)
        worst = (got - want).abs().nan_to_num(0.0).max().item()
        raise GradingFailure(
            f"{what} is wrong at index {where}: got {got[where].item():.6g}, expected "
            f"{want[where].item():.6g} (largest difference {worst:.3g}). "
            f"Returned {_fmt(got, first)}, expected {_fmt(want, first)} (flattened).{tail}"
        )


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
def forbidden(*names: str, reason: str) -> Iterator[None]:
    """Make the named callables raise GradingFailure while the block runs.

    names: dotted paths such as "torch.softmax" or "torch.Tensor.softmax".
    reason: what the student should do instead; it goes into the message.

    A Python function has its code swapped, so that a reference the student took earlier
    (`from course_utils.attention import softmax`) raises too; other callables (PyTorch's
    C functions) are replaced where they are looked up.
    """
    undo = []
    try:
        for dotted in names:
            owner, attr = _resolve(dotted)
            original = getattr(owner, attr)
            message = f"your code called {dotted}, which this exercise forbids: {reason}"
            integrity.allow(dotted)
            if isinstance(original, types.FunctionType) and not original.__closure__:
                # the new code shows under every name bound to this function
                also = [a for a in integrity.aliases(original) if a != dotted]
                integrity.allow(*also)
                code = original.__code__
                original.__code__ = _raising_code(message)

                def restore(original=original, code=code, also=also):
                    original.__code__ = code
                    integrity.disallow(*also)

                undo.append((dotted, restore))
                continue

            def blocked(*args, _message=message, **kwargs):
                raise GradingFailure(_message)

            functools.update_wrapper(blocked, original, assigned=("__name__", "__doc__"))
            setattr(owner, attr, blocked)
            undo.append((dotted, functools.partial(setattr, owner, attr, original)))
        yield
    finally:
        for dotted, restore in reversed(undo):
            restore()
            integrity.disallow(dotted)
        for dotted in names[len(undo):]:
            integrity.disallow(dotted)


def _public_functions(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", [])
    return [f"{module_name}.{n}" for n in names if callable(getattr(module, n))]


@contextlib.contextmanager
def reference_disabled(*module_names: str) -> Iterator[None]:
    """Make every public function of the given `course_utils` modules raise while the block
    runs, so that a solution that only calls the reference implementation fails.

    Default: `course_utils.attention`.
    """
    module_names = module_names or ("course_utils.attention",)
    names = [n for m in module_names for n in _public_functions(m)]
    with forbidden(*names, reason="write the computation yourself instead of calling the "
                                  "course's reference code"):
        yield


integrity.verify()  # the baseline: what the watched functions are when the tests start
