"""What a test switches off or swaps while the student's code runs: PyTorch's ready-made
functions (`forbidden`), the course's reference code (`reference_disabled`), the student's own
helpers replaced by correct ones (`substitute`), and the seed a call starts from (`seeded`).
When graded, each is sent along with every call of a student function (`remote`)."""

from __future__ import annotations

import contextlib
import functools
import importlib
import inspect
import sys
import types
from collections.abc import Iterator

import torch

from course_utils.grading import remote
from course_utils.grading.failure import GradingFailure


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
def seeded(seed: int) -> Iterator[None]:
    """Run the block's call of a student function after torch.manual_seed(seed), so that a
    test can ask whether the function draws its randomness from PyTorch's generator (the same
    seed, the same result; NumPy's and Python's random numbers do not follow it). Put one
    call in the block. When graded, the seed is sent along with each call and set in the
    student's kernel just before it."""
    if (test := remote.current()) is not None:   # the checker sends the seed with each call
        with remote.pushed(test.seeds, int(seed)):
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
    if (test := remote.current()) is not None:   # the checker sends the names with each call
        with remote.pushed(test.forbidden, (names, reason)):
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
    if (test := remote.current()) is not None:   # the checker sends them with each call
        with remote.pushed(test.substitutes, functions):
            yield
        return
    main = sys.modules.get("__main__")
    namespace = vars(main) if main is not None else {}
    # a substituted function is the test's, not the student's: what the test forbids the
    # student does not bind it (as when graded, where it runs in the checker)
    with substituted(namespace, {name: called_like(namespace.get(name), unrestricted(f))
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


def unrestricted(function):
    """`function`, run with the open `forbidden` blocks undone: the test's own functions."""
    @functools.wraps(function)
    def run(*args, **kwargs):
        with _lifted():
            return function(*args, **kwargs)

    return run
