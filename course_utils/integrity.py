"""Has anything that grading relies on been replaced? The tamper check of every test.

A test passes only if the functions it calls are the genuine ones: numpy's and PyTorch's
assertion helpers, the builtins, `course_utils.grading` and the `course_utils` reference
it compares with. A submission that replaces one of them (`np.testing.assert_allclose =
lambda *a, **k: None`, a new `__code__`, a fake module in `sys.modules`, a global name
`grading` that points elsewhere) must fail, with a verdict that says tampering was detected.

The check compares *fingerprints*: for every watched name, the identity of the object
and of its code. `fingerprint()` takes one; `changes(before, after)` names what differs.

Two layers use it:
* the autograder (`nbgrader_hooks.SafeExecute`) takes a fingerprint before the first cell
  runs and keeps it outside the kernel; around each graded test cell it sends the source of
  `fingerprint` itself (so that replacing this module does not help) and compares;
* `grading.check` and `grading.check_tensor` call `verify()`, against the fingerprint taken
  when `course_utils.grading` was imported, so that a student sees the same verdict at home.
"""

from __future__ import annotations

__all__ = [
    "TamperingDetected", "WATCHED_MODULES", "allow", "changes", "describe",
    "disallow", "fingerprint", "import_watched", "verify",
]

# Modules whose callables a test may rely on. Missing ones are skipped; every loaded
# `course_utils` module is watched as well.
WATCHED_MODULES = (
    "builtins", "math", "numpy", "numpy.testing", "torch", "torch.testing",
    "torch.nn.functional", "torch.special",
    # Not relied on, but imported before the baseline: the first torch.optim optimizer
    # imports torch._dynamo, which wraps torch.manual_seed; had it loaded after the baseline,
    # an exercise that trains with Adam would look as if it had replaced torch.manual_seed.
    "torch._dynamo",
)


class TamperingDetected(AssertionError):
    """A function or module that the tests rely on was replaced by the submission."""


def fingerprint(watched, names=None, expected=False):
    """{watched name: [id of the object, id of its __code__ (0 if none)]}.

    Covers every callable in `vars(module)` of the `watched` modules (names) and of every loaded
    `course_utils` module, every callable of `torch.Tensor`, the module objects themselves
    (`sys.modules[name]`), and for `names` ({global name: dotted target, e.g. "np":
    "numpy"}) the object that `__main__`'s global of that name refers to, or with
    `expected=True` the target itself; `expected=True` also imports the watched modules
    (the autograder's baseline, taken before the first cell). Self-contained on purpose: the
    autograder ships this function's source into the kernel.
    """
    import importlib as _importlib
    import sys as _sys

    modules = _sys.modules
    if expected:  # import what will be watched, and the modules the names point into
        for name in [*watched, *(names or {}).values()]:
            for candidate in (name, name.rpartition(".")[0]):
                try:
                    _importlib.import_module(candidate)
                    break
                except (ImportError, ValueError):
                    continue
    keep = modules.setdefault("_course_integrity_keep", type(_sys)("_course_integrity_keep"))
    kept = keep.__dict__.setdefault("objects", {})  # genuine objects stay alive: ids stay unique
    wanted = list(watched) + sorted(m for m in list(modules)
                                    if m == "course_utils" or m.startswith("course_utils."))
    result = {}
    # IPython and ipykernel install their own versions of these around every execution
    swapped_builtins = {"input", "exit", "quit", "get_ipython", "display", "help", "copyright",
                        "credits", "license", "breakpoint"}

    def note(key, obj):
        code = getattr(obj, "__code__", None) if callable(obj) else None
        result[key] = [id(obj), id(code) if code is not None else 0]
        kept[id(obj)] = obj
        if code is not None:
            kept[id(code)] = code

    for name in wanted:
        module = modules.get(name)
        if module is None:
            continue
        note(f"sys.modules[{name!r}]", module)
        for attr, obj in list(vars(module).items()):
            if callable(obj) and not attr.startswith("__") and not (
                name == "builtins" and attr in swapped_builtins
            ):
                note(f"{name}.{attr}", obj)
    tensor = getattr(modules.get("torch"), "Tensor", None)
    if tensor is not None:
        for attr, obj in list(vars(tensor).items()):
            if callable(obj):
                note(f"torch.Tensor.{attr}", obj)
    main = vars(modules["__main__"]) if "__main__" in modules else {}
    for global_name, target in sorted((names or {}).items()):
        key = f"the name `{global_name}` (should be {target})"
        if not expected:
            note(key, main.get(global_name))
            continue
        try:  # "numpy.testing" is a module; "math.log" is an attribute of one
            obj = _importlib.import_module(target)
        except ImportError:
            module_name, _, attr = target.rpartition(".")
            try:
                obj = getattr(_importlib.import_module(module_name), attr)
            except (ImportError, AttributeError, ValueError):
                continue
        note(key, obj)
    return result


def changes(before: dict, after: dict) -> list[str]:
    """Watched names whose object or code differs between two fingerprints, or that vanished."""
    return sorted(key for key, value in before.items() if after.get(key) != value)


def describe(changed: list[str], limit: int = 5) -> str:
    """A verdict for the student naming (at most `limit` of) the replaced functions."""
    shown = ", ".join(changed[:limit]) + (f" and {len(changed) - limit} more"
                                          if len(changed) > limit else "")
    return (f"Tampering detected: {shown} {'was' if len(changed) == 1 else 'were'} replaced "
            f"or changed by the submission. Tests only trust the genuine functions; this test "
            f"scores 0.")


def import_watched(watched=WATCHED_MODULES) -> None:
    """Import the watched modules that are installed (numpy.testing, for one, loads lazily)."""
    import importlib

    for name in watched:
        try:
            importlib.import_module(name)
        except ImportError:
            pass


_BASELINE: dict | None = None
# Names that `grading.forbidden` has replaced on purpose while a test runs.
_ALLOWED: dict[str, int] = {}  # name -> how many open blocks allow it (blocks nest)


def allow(*names: str) -> None:
    """Let `verify` accept that these watched names ("torch.softmax") differ for now."""
    for name in names:
        _ALLOWED[name] = _ALLOWED.get(name, 0) + 1


def disallow(*names: str) -> None:
    """Undo one `allow` of each name."""
    for name in names:
        if _ALLOWED.get(name, 0) <= 1:
            _ALLOWED.pop(name, None)
        else:
            _ALLOWED[name] -= 1


def aliases(obj) -> list[str]:
    """The watched names of the baseline bound to `obj` itself, e.g. both
    "course_utils.attention.masked_softmax" and "course_utils.bow.masked_softmax" (a module
    that imported it by name): swapping obj's code changes every one of them."""
    return sorted(key for key, (obj_id, _) in (_BASELINE or {}).items() if obj_id == id(obj))


def verify() -> None:
    """Raise TamperingDetected if a watched function changed since the first call.

    The first call (made when `course_utils.grading` is imported) takes the baseline; names
    that appear later (modules imported since) are not compared.
    """
    global _BASELINE
    if _BASELINE is None:
        import_watched()
        _BASELINE = fingerprint(WATCHED_MODULES)
        return
    changed = [c for c in changes(_BASELINE, fingerprint(WATCHED_MODULES)) if c not in _ALLOWED]
    if changed:
        raise TamperingDetected(describe(changed))
