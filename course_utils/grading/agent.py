"""The grader's hands in the student's kernel: it calls the student's functions on request.

When a submission is autograded, its test cells do not run in the student's kernel: they run
in the grader's checker process (`course_grader.checker`), where each student function is a
stand-in that asks this agent to call the real one. The grader starts `serve()` in the kernel
for each test cell; the two sides then take turns over the kernel's stdin channel (an
`input_request` carries the agent's message, the `input_reply` the grader's), with plain
data only (`course_utils.grading.wire`). Requests:

    lookup    what each name is in the student's namespace (a function, plain data, missing)
    call      call a function with arguments; reply with the result, or the error it raised
    backward  gradients of an earlier call's outputs with respect to its inputs
    done      end of the test cell

Arguments may hold modules (rebuilt from an allow-list of `torch.nn` classes and their
weights), the student's own functions by name, and call-backs: functions of the test that
the agent calls by asking the grader (`{"callback": id}`), so that the test's code never
enters the kernel. Nothing here is trusted by the grader: a student can replace any of it,
and gains nothing, because the verdict is computed from the values alone.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import linecache
import sys
import traceback
import warnings
from collections import OrderedDict

import torch

from course_utils.grading import restrictions, wire

__all__ = ["MODULES", "serve"]

PREFIX = "course-grader:"   # every agent message starts with this
# The grader's answer when a message of the agent may have been lost: a kernel drops what it
# sends on its stdin channel before the grader's end of that channel has connected.
RESEND = "course-grader:resend"
MAX_TEXT = 4000             # characters of the student's printed output kept per call
# torch.nn classes a test may pass to a student function (rebuilt here from their weights).
MODULES = frozenset({
    "Linear", "Embedding", "GRU", "LSTM", "RNN", "GRUCell", "LSTMCell", "RNNCell", "LayerNorm",
    "Dropout", "Tanh", "ReLU", "GELU", "Identity", "Sequential", "ModuleList",
    "MultiheadAttention",
})
_GRAPHS: OrderedDict = OrderedDict()   # call id -> (leaves, outputs) kept for `backward`
_RECEIVED = wire.TensorCache()          # large tensors the grader sent (weights), by content
_MAX_GRAPHS = 512
_next_call = [0]


class CallbackFailed(Exception):
    """A function of the test, called back from the student's code, raised."""


def _ask(message: dict) -> dict:
    kernel = _kernel()
    text = RESEND
    while text == RESEND:
        text = kernel.raw_input(PREFIX + wire.dumps(message))
    try:
        return wire.loads(text)
    except wire.WireError:
        return {"op": "done"}


def _kernel():
    from IPython import get_ipython

    return get_ipython().kernel


def _exchange(message: dict) -> dict:
    """Send `message`; serve the grader's requests until it answers with return, raise or
    done, and give that answer back."""
    while True:
        request = _ask(message)
        op = request.get("op")
        if op in ("return", "raise", "done"):
            return request
        handler = _HANDLERS.get(op)
        try:
            message = handler(request) if handler else _error_message(
                ValueError(f"unknown request {str(op)[:40]!r}"))
        except Exception as err:  # noqa: BLE001 - a malformed request is answered, not raised
            message = _error_message(err)


def serve() -> None:
    """Answer the grader until it says the test cell is done."""
    _exchange({"type": "ready"})


# ------------------------------------------------------------------------ requests

def _lookup(request: dict) -> dict:
    namespace = _namespace()
    found = {}
    for name in request.get("names", [])[:1000]:
        if not isinstance(name, str) or name not in namespace:
            found[str(name)[:100]] = {"kind": "missing"}
            continue
        obj = namespace[name]
        if callable(obj):
            try:
                params = list(inspect.signature(obj).parameters)
            except (TypeError, ValueError):
                params = []
            found[name] = {"kind": "function", "params": params[:50]}
        else:
            tensors: list = []
            found[name] = {"kind": "value", "value": wire.encode(obj, tensors),
                           "tensors": tensors}
    return {"type": "found", "names": found}


def _namespace() -> dict:
    return vars(sys.modules["__main__"])


def _call(request: dict) -> dict:
    # Long on purpose: one call of a student function for the checker, in the order the
    # wire fixes (decode, forbid, substitute, call, encode); audited as one sequence.
    namespace = _namespace()
    name = request["fn"]
    fn = namespace.get(name) if isinstance(name, str) else None
    if not callable(fn):
        return {"type": "error", "error": "NameError",
                "message": f"your notebook does not define a function `{name}`"}
    grad = bool(request.get("grad"))
    try:
        tensors = [wire.decode_tensor(t, leaf=grad, cache=_RECEIVED)
                   for t in request.get("tensors", [])]
    except wire.CacheMiss:
        _RECEIVED.clear()   # the grader then sends everything again
        return {"type": "error", "error": "CacheMiss", "message": "tensors not held"}
    leaves: dict[int, torch.Tensor] = {i: t for i, t in enumerate(tensors) if t.requires_grad}
    build = _Builder(tensors, leaves, namespace)
    args = wire.decode(request.get("args", []), tensors, extra=build)
    kwargs = wire.decode(request.get("kwargs", {"dict": []}), tensors, extra=build)
    before = [t.detach().clone() for t in tensors]
    out, err = io.StringIO(), io.StringIO()
    forbidden = [n for n in request.get("forbidden", []) if isinstance(n, str)]
    home = getattr(fn, "__globals__", namespace)
    substitutes = {k: restrictions.called_like(home.get(k), build("callback", v.get("callback")))
                   for k, v in request.get("substitutes", {}).items()
                   if isinstance(k, str) and isinstance(v, dict)}
    with contextlib.ExitStack() as stack:
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(err))
        caught = stack.enter_context(warnings.catch_warnings(record=True))
        warnings.simplefilter("default")
        if forbidden:
            stack.enter_context(restrictions.forbidden(
                *forbidden, reason=str(request.get("reason", ""))[:500], missing_ok=True))
        stack.enter_context(restrictions.substituted(home, substitutes))
        stack.enter_context(torch.set_grad_enabled(grad))
        if type(request.get("seed")) is int:   # grading.seeded: the test's seed, then the call
            torch.manual_seed(request["seed"])
        try:
            result = fn(*args, **kwargs)
        except CallbackFailed as failure:
            return {"type": "error", "error": "CallbackFailed", "message": str(failure)}
        except BaseException as raised:  # noqa: BLE001 - reported to the grader, whatever it is
            if isinstance(raised, KeyboardInterrupt):
                raise
            message = _error_message(raised)
            message.update(_printed(out, err, caught))
            return message
    changed = [i for i, (t, b) in enumerate(zip(tensors, before, strict=True))
               if not _same(t, b)]
    encoded: list = []
    outputs: list = []
    value = wire.encode(result, encoded, originals=outputs)
    call_id = None
    if grad and leaves and any(t is not None and t.requires_grad for t in outputs):
        _next_call[0] += 1
        call_id = _next_call[0]
        _GRAPHS[call_id] = (sorted(leaves.items()), outputs)
        while len(_GRAPHS) > _MAX_GRAPHS:
            _GRAPHS.popitem(last=False)
    return {"type": "result", "value": value, "tensors": encoded, "call": call_id,
            "changed": changed, **_printed(out, err, caught)}


def _backward(request: dict) -> dict:
    leaves, outputs = _GRAPHS[int(request["call"])]
    tensors = [wire.decode_tensor(t) for t in request.get("tensors", [])]
    grads_out = wire.decode(request["grads"], tensors)
    pairs = [(o, g) for o, g in zip(outputs, grads_out, strict=True)
             if g is not None and o is not None and o.requires_grad]
    inputs = [leaf for _, leaf in leaves]
    found = torch.autograd.grad([o for o, _ in pairs], inputs, [g for _, g in pairs],
                                allow_unused=True, retain_graph=True) if pairs else \
        [None] * len(inputs)
    encoded: list = []
    return {"type": "grads", "grads": wire.encode([g for g in found], encoded),
            "tensors": encoded, "leaves": [i for i, _ in leaves]}


def _release(request: dict) -> dict:
    for call_id in request.get("calls", []):
        _GRAPHS.pop(call_id, None)
    return {"type": "released"}


_HANDLERS = {"lookup": _lookup, "call": _call, "backward": _backward, "release": _release}


# ------------------------------------------------------------------------ helpers

def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.equal(a.detach(), b) or (
        a.dtype.is_floating_point and torch.equal(a.detach().isnan(), b.isnan())
        and torch.equal(a.detach().nan_to_num(), b.nan_to_num())))


def _printed(out: io.StringIO, err: io.StringIO, caught) -> dict:
    notes = [f"{w.category.__name__}: {w.message}" for w in caught[:20]]
    return {"stdout": out.getvalue()[:MAX_TEXT], "stderr": err.getvalue()[:MAX_TEXT],
            "warnings": [n[:500] for n in notes]}


def _error_message(err: BaseException) -> dict:
    """The error a student function raised: its type, message and the line of the student's
    own code it came from (the deepest frame in a notebook cell)."""
    where = ""
    for frame, lineno in traceback.walk_tb(err.__traceback__):
        filename = frame.f_code.co_filename
        if "ipykernel_" in filename or filename.startswith("<ipython-input"):
            line = linecache.getline(filename, lineno).strip()
            where = f"in {frame.f_code.co_name}, line {lineno}: {line}"[:300]
    return {"type": "error", "error": type(err).__name__[:100],
            "message": str(err)[:2000], "where": where}


class _Builder:
    """Builds the records only the kernel accepts: modules, the student's functions by name
    and call-backs into the grader."""

    def __init__(self, tensors, leaves, namespace):
        self.tensors, self.leaves, self.namespace = tensors, leaves, namespace

    def __call__(self, key, value):
        if key == "module":
            return self.module(value)
        if key == "kernel_fn" and isinstance(value, str):
            fn = self.namespace.get(value)
            if not callable(fn):
                raise NameError(f"your notebook does not define a function `{value}`")
            return fn
        if key == "callback" and isinstance(value, int):
            return _callback(value)
        return NotImplemented

    def module(self, spec: dict) -> torch.nn.Module:
        kind = spec.get("type")
        if kind not in MODULES:
            raise wire.WireError(f"module type {str(kind)[:40]!r} is not allowed")
        cls = getattr(torch.nn, kind)
        if kind in ("Sequential", "ModuleList"):
            children = [self.module(child) for child in spec.get("children", [])]
            module = cls(*children) if kind == "Sequential" else cls(children)
        else:
            init = spec.get("init", {})
            if not all(isinstance(v, int | float | bool | list) or v is None
                       for v in init.values()):
                raise wire.WireError("module settings must be plain numbers")
            module = cls(**init)
            for name, param in module.named_parameters(recurse=False):
                index = spec.get("params", {}).get(name)
                if type(index) is not int or not 0 <= index < len(self.tensors):
                    raise wire.WireError(f"no weights for {kind}.{name}")
                value = self.tensors[index]
                if value.shape != param.shape:
                    raise wire.WireError(f"{kind}.{name} has shape {tuple(value.shape)}, "
                                         f"expected {tuple(param.shape)}")
                with torch.no_grad():
                    param.data = value.detach().clone()
                param.requires_grad_(index in self.leaves)
                if index in self.leaves:
                    self.leaves[index] = param
        module.train(bool(spec.get("training", False)))
        return module


def _callback(callback_id: int):
    def call_the_test(*args, **kwargs):
        tensors: list = []
        originals: list = []
        message = {"type": "callback", "id": callback_id,
                   "args": wire.encode(list(args), tensors, originals=originals),
                   "kwargs": wire.encode(dict(kwargs), tensors, originals=originals),
                   "tensors": tensors}
        inputs = [t for t in originals if t is not None and t.requires_grad
                  and t.dtype.is_floating_point]
        if torch.is_grad_enabled() and inputs:
            # the test's function computes in the grader; gradients through it come back
            # from there too, so that the student's code around it still trains
            message["grad"] = True
            found: dict = {}
            connected = _TestFunction.apply(message, found, *inputs)
            values = list(found["values"])
            for i, t in zip(found["flagged"], connected, strict=True):
                values[i] = t
            return wire.decode(found["value"], values)
        reply = _exchange(message)
        values = _returned(reply)
        return wire.decode(reply.get("value"), values)

    call_the_test.__name__ = f"test_function_{callback_id}"
    return call_the_test


def _returned(reply: dict) -> list:
    if reply.get("op") != "return":
        raise CallbackFailed(str(reply.get("message", "the test's function failed"))[:2000])
    return [wire.decode_tensor(t) for t in reply.get("tensors", [])]


class _TestFunction(torch.autograd.Function):
    """A call-back into the grader as one autograd node: forward sends the inputs, backward
    asks the grader for the gradients of its function at those inputs."""

    @staticmethod
    def forward(ctx, message, found, *inputs):
        reply = _exchange(message)
        values = _returned(reply)
        records = reply.get("tensors", [])
        flagged = [i for i, (r, t) in enumerate(zip(records, values, strict=True))
                   if r.get("grad") is True and t.dtype.is_floating_point]
        found.update(value=reply.get("value"), values=values, flagged=flagged)
        ctx.graph = reply.get("graph")
        ctx.shapes = [(t.shape, t.dtype) for t in inputs]
        return tuple(values[i] for i in flagged)

    @staticmethod
    def backward(ctx, *grad_outputs):
        encoded: list = []
        reply = _exchange({"type": "callback_backward", "graph": ctx.graph,
                           "grads": wire.encode(list(grad_outputs), encoded),
                           "tensors": encoded})
        grads = wire.decode(reply.get("value"), _returned(reply))
        if not isinstance(grads, list) or len(grads) != len(ctx.shapes) or not all(
                g is None or isinstance(g, torch.Tensor) and g.shape == shape
                for g, (shape, _) in zip(grads, ctx.shapes, strict=True)):
            raise CallbackFailed("the grader's gradients do not match the call")
        return (None, None, *(None if g is None else g.to(dtype)
                              for g, (_, dtype) in zip(grads, ctx.shapes, strict=True)))
