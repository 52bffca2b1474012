"""The checker: runs a notebook's test cells where the student's code cannot reach.

During autograding (`nbgrader_hooks.SafeExecute`) the student's cells run in the sandboxed
kernel, and the test cells run here, in a separate process that never runs student code:

* the instructor's set-up cells and test cells (their source taken from the gradebook, never
  from the submission) are executed in this process's own namespace;
* a name a test uses is looked up in the student's kernel only if the exercise declares it
  as the student's (what its solution cells define, `nbgrader_hooks.student_names`); a
  function becomes a `StudentFunction`, a stand-in that sends the arguments to the
  kernel as plain data (`course_utils.grading.wire`), has the agent there
  (`course_utils.grading.agent`) call the real function, and decodes what comes back
  (tensors, numbers, strings, tuples...; nothing else is accepted);
* expected values are computed here, with the reference code that the sandbox cannot see;
* gradients flow back through a stand-in (`_RemoteCall`): the kernel computes them for its
  inputs on request, so a test can train a model built from the student's functions;
* functions of the test passed to a student function (a decoder step, a scorer) stay here:
  the kernel calls them back through the grader.

The verdict of a cell is whether its code ran to the end here: a GradingFailure (or any other
error) fails it. Nothing the kernel says is trusted but the values themselves.

Run as `python -m course_grader.checker`; it reads one JSON request per line on stdin and
answers one JSON line on stdout (see `main`).
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import json
import os
import sys
import time
import traceback
from collections import OrderedDict
from dataclasses import dataclass, field

import torch
import zmq
from jupyter_client.blocking.client import BlockingKernelClient

from course_utils import grading
from course_utils.grading import GradingFailure, agent, remote, wire

__all__ = ["CellRunner", "KernelLink", "KernelLost", "StudentFunction", "describe", "main"]

MAX_MESSAGE_BYTES = 256 * 1024 * 1024   # a larger message from the kernel disconnects it
MAX_CALLBACK_GRAPHS = 512                 # call-back graphs kept for their backward
MAX_CALLBACK_GRAPH_BYTES = 256 * 1024 * 1024   # ... and the bytes of their tensors
MAX_PRINTED = 4000                        # characters of a student's printing kept per cell
CELL = "<test cell>"


class KernelLost(Exception):
    """The kernel stopped answering (it died, hung past the deadline, or left the agent)."""


class CellTimeout(KernelLost):
    """The test cell ran out of time while the kernel was working."""


@dataclass
class EncodedCall:
    """A call's arguments as the wire carries them: `args` and `kwargs` as plain data over
    `tensors`; `originals` the tensors they came from and `labels` the parameter of each;
    `grad` whether a gradient should flow back through the call."""

    args: list = field(default_factory=list)
    kwargs: dict = field(default_factory=dict)
    tensors: list = field(default_factory=list)
    originals: list = field(default_factory=list)
    labels: list[str] = field(default_factory=list)
    grad: bool = False


class KernelLink:
    """The grader's end of the agent's conversation with one kernel."""

    def __init__(self, connection: str | dict) -> None:
        """`connection`: a connection file, or the connection info itself."""
        context = zmq.Context()
        # new sockets refuse larger messages: a student's kernel could otherwise send
        # gigabytes for the grader to hold
        context.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        self.kc = BlockingKernelClient(context=context)
        if isinstance(connection, dict):
            self.kc.load_connection_info(connection)
        else:
            self.kc.load_connection_file(connection)
        self.kc.start_channels(iopub=False)
        self.deadline = float("inf")
        # functions already failed once for writing into their arguments: a mistake is
        # charged in the first test that sees it, not again in every later one
        self.charged_in_place: set[str] = set()
        self.callbacks: dict[int, object] = {}
        self.callback_errors: dict[int, BaseException] = {}
        self.callback_labels: dict[int, str] = {}
        self.sent = wire.TensorCache()   # large tensors the kernel's agent keeps (weights)
        self._serving: str | None = None      # msg_id of the running serve(), if any
        self._depth = 0                       # calls in progress (call-backs nest them)
        self._grad_depth = 0                  # ... of which sent with gradients
        self.callback_graph_bytes = 0
        self._next_callback = 0
        # graph id -> (leaves, outputs) of call-backs run with gradients, for their backward
        self.callback_graphs: OrderedDict = OrderedDict()
        self._last_beat = time.monotonic()

    # -- the conversation
    def _send(self, message: dict) -> None:
        self.kc.input(wire.dumps(message))

    def _receive(self, resend_after: float | None = None) -> dict:
        """The agent's next message; KernelLost if the kernel dies, leaves the agent or the
        deadline passes first. With `resend_after`, ask the agent to send its message again
        each time that many seconds pass without one (its first message can be lost while
        this end of the stdin channel is still connecting)."""
        last_ask = time.monotonic()
        while True:
            if time.monotonic() > self.deadline:
                raise CellTimeout("the test ran out of time while your code was running")
            if resend_after is not None and time.monotonic() - last_ask > resend_after:
                self.kc.input(agent.RESEND)
                last_ask = time.monotonic()
            if self.kc.stdin_channel.msg_ready():
                msg = self.kc.stdin_channel.get_msg(timeout=1)
                if msg["parent_header"].get("msg_id") != self._serving:
                    continue
                prompt = msg["content"].get("prompt", "")
                if not isinstance(prompt, str) or not prompt.startswith(agent.PREFIX):
                    self.kc.input("\x04")   # the student's own input(): end of file
                    continue
                try:
                    return wire.loads(prompt[len(agent.PREFIX):])
                except wire.WireError as err:
                    raise KernelLost(f"the kernel sent a malformed message ({err})") from None
            if self.kc.shell_channel.msg_ready():
                reply = self.kc.shell_channel.get_msg(timeout=1)
                if reply["parent_header"].get("msg_id") == self._serving:
                    self._serving = None
                    content = reply.get("content", {})
                    why = (f"{content.get('ename')}: {str(content.get('evalue', ''))[:200]}"
                           if content.get("status") == "error" else
                           "it returned before the test was done")
                    raise KernelLost(f"your code stopped the grader's helper in the kernel "
                                     f"({why})")
                continue
            if time.monotonic() - self._last_beat > 2:
                self._last_beat = time.monotonic()
                if not self.kc.is_alive():
                    raise KernelLost("the kernel died")
            self.kc.stdin_channel.socket.poll(20)

    def _exchange(self, message: dict) -> dict:
        self._send(message)
        while True:
            reply = self._receive()
            if reply.get("type") == "ready":
                continue   # a "ready" sent again after a resend, once the first had arrived
            if reply.get("type") == "callback":
                self._send(self._run_callback(reply))
                continue
            if reply.get("type") == "callback_backward":
                self._send(self._callback_backward(reply))
                continue
            return reply

    def request(self, message: dict) -> dict:
        if self._serving is None:
            self._serving = self.kc.execute(
                "__import__('course_utils.grading.agent', fromlist=['serve']).serve()",
                silent=True, store_history=False, allow_stdin=True)
            first = self._receive(resend_after=2.0)
            if first.get("type") != "ready":
                raise KernelLost("the grader's helper did not start in the kernel")
        return self._exchange(message)

    def forget_graphs(self) -> None:
        """Drop the call-backs' graphs: a test cell's gradients end with the cell."""
        self.callback_graphs.clear()
        self.callback_graph_bytes = 0

    def end(self, wait: float = 10.0) -> None:
        """Close the conversation of a test cell (the kernel is free for the next cell)."""
        self.forget_graphs()
        if self._serving is None:
            return
        serving, self._serving = self._serving, None
        try:
            self._send({"op": "done"})
        except Exception:  # noqa: BLE001 - a dead kernel; the executor finds out
            return
        stop = time.monotonic() + wait
        while time.monotonic() < stop:
            try:
                reply = self.kc.shell_channel.get_msg(timeout=0.2)
            except Exception:  # noqa: BLE001 - queue.Empty
                continue
            if reply["parent_header"].get("msg_id") == serving:
                return

    def abandon(self) -> None:
        """Forget a conversation the executor is about to interrupt."""
        self._serving = None
        self.forget_graphs()

    def drain(self) -> None:
        for channel in (self.kc.stdin_channel, self.kc.shell_channel):
            while channel.msg_ready():
                channel.get_msg(timeout=0.1)

    # -- requests
    def lookup(self, names: list[str]) -> dict:
        reply = self.request({"op": "lookup", "names": names})
        found = reply.get("names") if reply.get("type") == "found" else None
        if not isinstance(found, dict):
            raise KernelLost("the kernel did not answer which names it defines")
        return found

    def call(self, fn: StudentFunction, args: tuple, kwargs: dict):
        """The one path by which a test cell calls student code: send the call (its arguments
        as plain data, with what the test forbids, substitutes and seeds), judge the reply
        (an error, arguments changed in place) and decode the values that came back."""
        if self._depth == 0:
            self.callbacks.clear()
            self.callback_errors.clear()
            self.callback_labels.clear()
        call = describe_call(fn.name, fn.params, args, kwargs)
        for attempt in range(2):
            sent = self._encode_call(fn.params, args, kwargs)
            self._depth += 1
            self._grad_depth += sent.grad
            try:
                reply = self.request({"op": "call", "fn": fn.name, "args": sent.args,
                                      "kwargs": sent.kwargs, "tensors": sent.tensors,
                                      "grad": sent.grad, **self._restrictions()})
            finally:
                self._depth -= 1
                self._grad_depth -= sent.grad
            if reply.get("error") != "CacheMiss" or attempt:
                break
            self.sent.clear()   # the kernel lost track of what it holds: send everything
        _print_student_output(fn.name, reply)
        self._raise_for_error(call, reply)
        records = reply.get("tensors", [])
        if not isinstance(records, list):
            raise KernelLost("the kernel's answer is malformed")
        try:
            plain = [wire.decode_tensor(r) for r in records]
        except wire.WireError as err:
            raise StudentCodeError(f"{call} returned something the grader cannot read: "
                                   f"{err}") from None
        self._charge_in_place(fn.name, call, reply.get("changed", []), sent.labels)
        values = self._connected(reply.get("call"), records, plain, sent)
        try:
            return wire.decode(reply.get("value"), values)
        except (wire.WireError, RecursionError) as err:
            raise StudentCodeError(f"{call} returned something the grader cannot read: "
                                   f"{err}") from None

    def _encode_call(self, params: list[str], args: tuple, kwargs: dict) -> EncodedCall:
        """A call's arguments as plain data, each tensor labelled by the parameter it is in."""
        sent = EncodedCall()

        def fallback(obj, tensors, found):
            return self._fallback(obj, tensors, found, cache=self.sent)

        def enc(label, value):
            start = len(sent.originals)
            data = wire.encode(value, sent.tensors, originals=sent.originals,
                               fallback=fallback, cache=self.sent)
            sent.labels.extend([label] * (len(sent.originals) - start))
            return data

        sent.args = [enc(params[i] if i < len(params) else f"#{i + 1}", a)
                     for i, a in enumerate(args)]
        sent.kwargs = {"dict": [[k, enc(k, v)] for k, v in kwargs.items()]}
        sent.grad = torch.is_grad_enabled() and any(
            isinstance(t, torch.Tensor) and t.requires_grad and t.dtype.is_floating_point
            for t in sent.originals)
        return sent

    def _restrictions(self) -> dict:
        """What the running test cell asks of every call: names forbidden (and why), the
        functions it substitutes (registered as callbacks) and the seed."""
        test = remote.current()
        names, reason = test.forbidden_names() if test else ([], "")
        substitutes = {name: self._register(function, f"{name} (the test's correct one)")
                       for name, function in (test.substitute_map() if test else {}).items()}
        return {"forbidden": names, "reason": reason, "substitutes": substitutes,
                "seed": test.seed() if test else None}

    def _raise_for_error(self, call: str, reply: dict) -> None:
        """The student's code raised (or a test's function it called did), or the kernel
        answered with something that is not a result."""
        if reply.get("type") == "error":
            if reply.get("error") == "CallbackFailed" and self.callback_errors:
                callback_id, err = next(iter(self.callback_errors.items()))
                if isinstance(err, GradingFailure | KernelLost | CellTimeout):
                    raise err
                # the test's function rejected what the student's code handed it
                raise StudentCodeError(
                    f"{call} called {self.callback_labels.get(callback_id, 'the test')}, which "
                    f"raised {type(err).__name__}: {str(err)[:1000]}. Check the arguments "
                    f"your code passes to it (their order and shapes).") from None
            raise StudentCodeError(_raised(call, reply))
        if reply.get("type") != "result":
            raise KernelLost("the kernel answered a call with something else")

    def _charge_in_place(self, name: str, call: str, changed, labels: list[str]) -> None:
        """A function that wrote into its arguments fails, once per function and test cell
        (the test's own tensors are untouched: the kernel wrote into its copies)."""
        if not (isinstance(changed, list) and changed) or name in self.charged_in_place:
            return
        self.charged_in_place.add(name)
        which = sorted({labels[i] for i in changed if isinstance(i, int)
                        and 0 <= i < len(labels)})
        raise GradingFailure(
            f"{call} changed its argument{'s' if len(which) > 1 else ''} "
            f"{', '.join(which)} in place. Leave the caller's tensors alone: compute new "
            f"tensors (x = x + 1, masked_fill, torch.where) instead of writing into the "
            f"ones you were given.")

    def _connected(self, call_id, records: list, plain: list, sent: EncodedCall) -> list:
        """The returned tensors, those the kernel says carry a gradient joined to the
        autograd graph of the arguments, so that backward reaches the student's code."""
        if not (sent.grad and isinstance(call_id, int)):
            return plain
        flagged = [i for i, r in enumerate(records) if r.get("grad") is True
                   and plain[i].dtype.is_floating_point]
        inputs = [t for t in sent.originals if isinstance(t, torch.Tensor) and t.requires_grad
                  and t.dtype.is_floating_point]
        if not flagged:
            return plain
        connected = _RemoteCall.apply(self, call_id, len(records), flagged,
                                      [plain[i] for i in flagged], *inputs)
        values = list(plain)
        for i, t in zip(flagged, connected, strict=True):
            values[i] = t
        return values

    def backward(self, call_id: int, n_outputs: int, flagged: list[int], grads) -> list:
        full = [None] * n_outputs
        for i, g in zip(flagged, grads, strict=True):
            full[i] = g
        encoded: list = []
        reply = self.request({"op": "backward", "call": call_id,
                              "grads": wire.encode(full, encoded), "tensors": encoded})
        if reply.get("type") == "error":
            raise StudentCodeError(f"computing the gradient through your code failed: "
                                   f"{reply.get('error')}: {reply.get('message', '')}")
        tensors = [wire.decode_tensor(r) for r in reply.get("tensors", [])]
        found = wire.decode(reply.get("grads"), tensors)
        if not isinstance(found, list):
            raise KernelLost("the kernel's gradients are malformed")
        return found

    # -- what the kernel can only get by name or by calling back
    def _register(self, function, label: str = "") -> dict:
        self._next_callback += 1
        callback_id = self._next_callback
        self.callbacks[callback_id] = function
        self.callback_labels[callback_id] = label or "a function the test gave it"
        return {"callback": callback_id}

    def _fallback(self, obj, tensors, originals, cache=None):
        if isinstance(obj, StudentFunction):
            return {"kernel_fn": obj.name}
        if isinstance(obj, torch.nn.Module):
            return {"module": _module_spec(obj, tensors, originals, cache)}
        if callable(obj):
            return self._register(obj)
        raise TypeError(f"a test cannot send a {type(obj).__name__} to the student's kernel")

    def _run_callback(self, message: dict) -> dict:
        """Run a function of the test for the student's code. With "grad", its floating-point
        inputs are leaves and its graph is kept, so that `_callback_backward` can answer for
        the gradients through it."""
        callback_id = message.get("id")
        function = self.callbacks.get(callback_id)
        if function is None:
            return {"op": "raise", "message": "no such function"}
        # gradients only inside a call the checker itself sent with gradients: the kernel's
        # claim alone would make the checker build and keep graphs for nothing
        grad = message.get("grad") is True and self._grad_depth > 0
        try:
            tensors = [wire.decode_tensor(r, leaf=grad) for r in message.get("tensors", [])]
            args = wire.decode(message.get("args", []), tensors)
            kwargs = wire.decode(message.get("kwargs", {"dict": []}), tensors)
            with torch.set_grad_enabled(grad):
                result = function(*args, **kwargs)
        except KernelLost:
            raise
        except BaseException as err:  # noqa: BLE001 - reported, then re-raised by `call`
            self.callback_errors[callback_id] = err
            return {"op": "raise", "message": f"{type(err).__name__}: {err}"[:2000]}
        encoded: list = []
        outputs: list = []
        reply = {"op": "return", "tensors": encoded,
                 "value": wire.encode(result, encoded, originals=outputs,
                                      fallback=self._fallback)}
        leaves = [t for t in tensors if t.requires_grad]
        if grad and leaves:
            self._next_callback += 1
            reply["graph"] = self._next_callback
            size = sum(t.nelement() * t.element_size() for t in (*leaves, *outputs)
                       if isinstance(t, torch.Tensor))
            self.callback_graphs[self._next_callback] = (leaves, outputs, size)
            self.callback_graph_bytes += size
            while self.callback_graphs and (
                    len(self.callback_graphs) > MAX_CALLBACK_GRAPHS
                    or self.callback_graph_bytes > MAX_CALLBACK_GRAPH_BYTES):
                self.callback_graph_bytes -= self.callback_graphs.popitem(last=False)[1][2]
        return reply

    def _callback_backward(self, message: dict) -> dict:
        """The gradients of a call-back's outputs (weighted by the kernel's grads) with
        respect to its floating-point inputs; the kernel's autograd asks for them."""
        graph = self.callback_graphs.get(message.get("graph"))
        if graph is None:
            return {"op": "raise", "message": "no such call"}
        leaves, outputs, _ = graph
        try:
            tensors = [wire.decode_tensor(r) for r in message.get("tensors", [])]
            grads = wire.decode(message.get("grads", []), tensors)
            connected = [t for t in outputs if isinstance(t, torch.Tensor) and t.requires_grad]
            if not isinstance(grads, list) or len(grads) != len(connected):
                raise ValueError("one gradient per connected output expected")
            pairs = [(o, g) for o, g in zip(connected, grads, strict=True) if g is not None]
            found = torch.autograd.grad([o for o, _ in pairs], leaves,
                                        [g.to(o.dtype) for o, g in pairs], allow_unused=True,
                                        retain_graph=True) if pairs else [None] * len(leaves)
        except (wire.WireError, ValueError, TypeError, RuntimeError) as err:
            return {"op": "raise", "message": f"{type(err).__name__}: {err}"[:2000]}
        encoded: list = []
        return {"op": "return", "value": wire.encode(list(found), encoded),
                "tensors": encoded}


class StudentCodeError(GradingFailure):
    """The student's function raised, or returned what cannot be read."""


class StudentFunction:
    """Stands for a function of the student's notebook; calling it calls the real one."""

    def __init__(self, link: KernelLink, name: str, params: list[str]) -> None:
        self.link, self.name, self.params = link, name, [str(p) for p in params]
        self.__name__ = name

    def __call__(self, *args, **kwargs):
        return self.link.call(self, args, kwargs)

    def __repr__(self) -> str:
        return f"<your function {self.name}>"


class MissingName:
    """A name the test uses that the student's notebook does not define."""

    def __init__(self, name: str) -> None:
        self.__name__ = name

    def __call__(self, *args, **kwargs):
        raise GradingFailure(f"your notebook does not define `{self.__name__}`: keep the name "
                             f"the task gives, and make sure its cell runs without an error.")


class _RemoteCall(torch.autograd.Function):
    """Connects the outputs of a student call to its inputs for autograd: the backward pass
    asks the kernel for the gradients of that call."""

    @staticmethod
    def forward(ctx, link, call_id, n_outputs, flagged, outputs, *inputs):
        ctx.link, ctx.call_id, ctx.n_outputs, ctx.flagged = link, call_id, n_outputs, flagged
        ctx.shapes = [(t.shape, t.dtype) for t in inputs]
        return tuple(t.clone() for t in outputs)

    @staticmethod
    def backward(ctx, *grad_outputs):
        found = ctx.link.backward(ctx.call_id, ctx.n_outputs, ctx.flagged, list(grad_outputs))
        if len(found) != len(ctx.shapes):
            raise StudentCodeError("the gradients from your code do not match its inputs")
        grads = []
        for g, (shape, dtype) in zip(found, ctx.shapes, strict=True):
            if g is not None and (not isinstance(g, torch.Tensor) or g.shape != shape):
                raise StudentCodeError("the gradients from your code do not match its inputs")
            grads.append(None if g is None else g.to(dtype))
        return (None, None, None, None, None, *grads)


# torch.nn modules a test may pass to a student's function: how to rebuild each.
def _rnn(m):
    init = {"input_size": m.input_size, "hidden_size": m.hidden_size,
            "num_layers": m.num_layers, "bias": m.bias, "batch_first": m.batch_first,
            "dropout": float(m.dropout), "bidirectional": m.bidirectional}
    if isinstance(m, torch.nn.RNN):
        init["nonlinearity"] = m.nonlinearity
    if isinstance(m, torch.nn.LSTM) and m.proj_size:
        init["proj_size"] = m.proj_size
    return init


def _cell(m):
    init = {"input_size": m.input_size, "hidden_size": m.hidden_size, "bias": m.bias}
    if isinstance(m, torch.nn.RNNCell):
        init["nonlinearity"] = m.nonlinearity
    return init


_INIT = {
    "Linear": lambda m: {"in_features": m.in_features, "out_features": m.out_features,
                         "bias": m.bias is not None},
    "Embedding": lambda m: {"num_embeddings": m.num_embeddings,
                            "embedding_dim": m.embedding_dim, "padding_idx": m.padding_idx},
    "GRU": _rnn, "LSTM": _rnn, "RNN": _rnn,
    "GRUCell": _cell, "LSTMCell": _cell, "RNNCell": _cell,
    "LayerNorm": lambda m: {"normalized_shape": list(m.normalized_shape), "eps": m.eps,
                            "elementwise_affine": m.elementwise_affine,
                            "bias": getattr(m, "bias", None) is not None},
    "Dropout": lambda m: {"p": m.p},
    "Tanh": lambda m: {}, "ReLU": lambda m: {}, "Identity": lambda m: {},
    "GELU": lambda m: {"approximate": m.approximate},
    "MultiheadAttention": lambda m: {
        "embed_dim": m.embed_dim, "num_heads": m.num_heads, "dropout": m.dropout,
        "bias": m.in_proj_bias is not None, "add_bias_kv": m.bias_k is not None,
        "add_zero_attn": m.add_zero_attn, "kdim": m.kdim, "vdim": m.vdim,
        "batch_first": m.batch_first},
}
assert set(_INIT) | {"Sequential", "ModuleList"} == agent.MODULES


def _module_spec(module: torch.nn.Module, tensors: list, originals: list,
                 cache: wire.TensorCache | None = None) -> dict:
    kind = type(module).__name__
    if getattr(torch.nn, kind, None) is not type(module) or kind not in agent.MODULES:
        raise TypeError(f"a test can pass only these torch.nn modules to a student's function: "
                        f"{', '.join(sorted(agent.MODULES))}; not {kind}")
    spec = {"type": kind, "training": module.training}
    if kind in ("Sequential", "ModuleList"):
        spec["children"] = [_module_spec(child, tensors, originals, cache) for child in module]
        return spec
    spec["init"] = _INIT[kind](module)
    spec["params"] = {}
    for name, param in module.named_parameters(recurse=False):
        tensors.append(wire.encode_tensor(param, cache))
        originals.append(param)
        spec["params"][name] = len(tensors) - 1
    return spec


# ------------------------------------------------------------------ describing calls

def describe(obj, depth: int = 0) -> str:
    """A short description of a value for a message: shapes and dtypes, not numbers."""
    if isinstance(obj, torch.Tensor):
        dtype = str(obj.dtype).removeprefix("torch.")
        return f"{tuple(obj.shape)} {dtype}" if obj.dim() else f"{obj.item():.4g} ({dtype})"
    if isinstance(obj, torch.nn.Module):
        return f"{type(obj).__name__}({obj.extra_repr()})"
    if isinstance(obj, StudentFunction):
        return f"your {obj.name}"
    if isinstance(obj, wire.Opaque):
        return repr(obj)
    if isinstance(obj, dict) and depth < 2:
        inner = ", ".join(f"{k}: {describe(v, depth + 1)}" for k, v in list(obj.items())[:6])
        return "{" + inner + (", ..." if len(obj) > 6 else "") + "}"
    if isinstance(obj, list | tuple) and depth < 2:
        inner = ", ".join(describe(v, depth + 1) for v in obj[:4])
        inner += ", ..." if len(obj) > 4 else ""
        return f"({inner})" if isinstance(obj, tuple) else f"[{inner}]"
    if callable(obj):
        return "a function"
    text = repr(obj)
    return text if len(text) <= 40 else text[:37] + "..."


def describe_call(name: str, params: list[str], args: tuple, kwargs: dict) -> str:
    parts = [f"{params[i]} {describe(a)}" if i < len(params) else describe(a)
             for i, a in enumerate(args)]
    parts += [f"{k}={describe(v)}" for k, v in kwargs.items()]
    return f"{name}({', '.join(parts)})"


def _raised(call: str, reply: dict) -> str:
    where = str(reply.get("where", ""))
    if reply.get("error") == "NotImplementedError" and not reply.get("message"):
        return (f"{call} raised NotImplementedError: the function is not written yet (replace "
                f"`raise NotImplementedError()` with your code)")
    return (f"{call} raised {str(reply.get('error', 'an error'))[:100]}: "
            f"{str(reply.get('message', ''))[:1500]}" + (f" ({where})" if where else ""))


_printed_budget = [MAX_PRINTED]


def _print_student_output(name: str, reply: dict) -> None:
    """What the student's function printed, shown in the test cell as plain text; stderr
    and warnings are shown too, with a note that they cost nothing."""
    parts = []
    if isinstance(reply.get("stdout"), str) and reply["stdout"]:
        parts.append(reply["stdout"])
    noted = [str(w) for w in reply.get("warnings", []) if isinstance(w, str)]
    if isinstance(reply.get("stderr"), str) and reply["stderr"]:
        noted.append(reply["stderr"].rstrip())
    if noted:
        parts.append(f"[{name} wrote this to stderr or warned; it does not cost points]\n"
                     + "\n".join(noted) + "\n")
    text = "".join(parts)
    if not text or _printed_budget[0] <= 0:
        return
    if len(text) > _printed_budget[0]:
        text = text[:_printed_budget[0]] + "\n[... the rest of your printing was cut ...]\n"
    _printed_budget[0] -= len(text)
    sys.stdout.write(text)


# ------------------------------------------------------------------ running cells

class CellRunner:
    """The namespace of one notebook's set-up and test cells, and the link to its kernel.

    `student_names`: the only names a test cell may take from the student's kernel (see
    `nbgrader_hooks.student_names`); any other name a test uses must be defined by the
    instructor's set-up or earlier test cells, which run here in the instructor's order."""

    def __init__(self, link: KernelLink | None, student_names: set[str] | frozenset[str]) -> None:
        self.link = link
        self.student_names = frozenset(student_names)
        self.namespace: dict = {"__name__": "__checker__"}

    def run_setup(self, source: str) -> dict:
        out = io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                exec(compile(source, "<set-up cell>", "exec"), self.namespace)  # noqa: S102
        except BaseException as err:  # noqa: BLE001 - reported to the executor
            return {"ok": False, "message": f"{type(err).__name__}: {err}"[:2000]}
        return {"ok": True}

    def _bind_student_names(self, tree: ast.AST) -> None:
        # only the exercise's own names leave the checker: a helper of the test is never
        # taken from the kernel, and no other identifier of a test is sent there
        wanted = sorted({node.id for node in ast.walk(tree)
                         if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)
                         and node.id in self.student_names and node.id not in self.namespace
                         and not hasattr(builtins, node.id)})
        if not wanted or self.link is None:
            for name in wanted:
                self.namespace[name] = MissingName(name)
            return
        for name, info in self.link.lookup(wanted).items():
            if name not in wanted or not isinstance(info, dict):
                continue
            kind = info.get("kind")
            if kind == "function":
                params = info.get("params") if isinstance(info.get("params"), list) else []
                self.namespace[name] = StudentFunction(self.link, name, params)
            elif kind == "value":
                try:
                    tensors = [wire.decode_tensor(r) for r in info.get("tensors", [])]
                    self.namespace[name] = wire.decode(info.get("value"), tensors)
                except (wire.WireError, RecursionError):
                    self.namespace[name] = wire.Opaque("value")
            else:
                self.namespace[name] = MissingName(name)
        for name in wanted:   # the student's kernel may answer with fewer names
            self.namespace.setdefault(name, MissingName(name))

    def run_test(self, source: str, hidden_lines: list[int], timeout: float) -> dict:
        """Run one test cell: {"passed", "message", "kind", "stdout"}."""
        out = io.StringIO()
        _printed_budget[0] = MAX_PRINTED
        remote.start()
        if self.link is not None:
            self.link.deadline = time.monotonic() + timeout
        verdict = {"passed": True, "message": "", "kind": "passed"}
        try:
            tree = ast.parse(source)
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                # student names are bound per cell: a later cell may define new ones
                for name in [n for n, v in self.namespace.items()
                             if isinstance(v, StudentFunction | MissingName | wire.Opaque)]:
                    del self.namespace[name]
                self._bind_student_names(tree)
                exec(compile(tree, CELL, "exec"), self.namespace)  # noqa: S102
        except CellTimeout as err:
            verdict = {"passed": False, "kind": "timeout", "message": str(err)}
        except KernelLost as err:
            verdict = {"passed": False, "kind": "kernel", "message": str(err)}
        except MemoryError:
            if self.link is not None:
                self.link.forget_graphs()
            verdict = {"passed": False, "kind": "failure", "message": (
                "the grader ran out of memory judging this test: your code returned values, "
                "or called the test's functions with values, far larger than the task asks for")}
        except BaseException as err:  # noqa: BLE001 - every failure is a verdict
            verdict = self._verdict(err, set(hidden_lines))
        finally:
            remote.stop()
            if self.link is not None:
                self.link.deadline = float("inf")
                if verdict["kind"] in ("timeout", "kernel"):
                    self.link.abandon()
                else:
                    self.link.end()
        verdict["shown"] = grading.wrap_message(verdict["message"])   # the traceback's text
        verdict["stdout"] = out.getvalue()[:MAX_PRINTED + 1000]
        return verdict

    @staticmethod
    def _verdict(err: BaseException, hidden: set[int]) -> dict:
        lines = [lineno for frame, lineno in traceback.walk_tb(err.__traceback__)
                 if frame.f_code.co_filename == CELL]
        # hidden if any line of the cell on the way to the failure is hidden: a check function
        # defined in the visible part and called from the hidden part fails in a hidden test
        in_hidden = any(line in hidden for line in lines)
        if isinstance(err, GradingFailure):
            message = str(err)
            kind = "failure"
        else:
            message = f"{type(err).__name__}: {err}"[:2000]
            message = ("the test could not run to its end: " + message +
                       ". Check what your function returns (type, shape, how many values).")
            kind = "crash"
        if in_hidden:
            message = "A hidden test failed: " + message
        return {"passed": False, "kind": kind, "message": message}


def main() -> int:
    """Serve the executor: one JSON request per line on stdin, one JSON answer per line.

        {"op": "connect", "connection_info": {...}, "student_names": [...]}  -> {"ok": true}
        {"op": "setup", "source": ...}                  -> {"ok": bool, "message"}
        {"op": "test", "source", "hidden_lines", "timeout"}  -> the verdict
        {"op": "recover"}                               -> {"ok": bool} after an interrupt
    """
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)   # stray writes to fd 1 (C libraries) must not corrupt the answers
    sys.stdout = sys.stderr
    torch.set_num_threads(1)
    runner = CellRunner(None, frozenset())
    for line in sys.stdin:
        try:
            request = json.loads(line)
            op = request.get("op")
            if op == "connect":
                runner.link = KernelLink(request.get("connection_info")
                                         or request["connection_file"])
                runner.student_names = frozenset(
                    str(n) for n in request.get("student_names", []))
                answer = {"ok": True}
            elif op == "setup":
                answer = runner.run_setup(request["source"])
            elif op == "test":
                answer = runner.run_test(request["source"], request.get("hidden_lines", []),
                                         float(request.get("timeout", 120)))
            elif op == "recover":
                answer = {"ok": True}
                if runner.link is not None:
                    time.sleep(0.5)
                    runner.link.drain()
            elif op == "stop":   # nothing to keep: no clean-up of PyTorch and ZeroMQ to wait for
                answers.write(json.dumps({"ok": True}) + "\n")
                answers.flush()
                os._exit(0)
            else:
                answer = {"ok": False, "message": f"unknown op {op!r}"}
        except Exception as err:  # noqa: BLE001 - the executor decides what to do
            answer = {"ok": False, "passed": False, "kind": "grader",
                      "message": f"the grader failed: {type(err).__name__}: {err}"[:2000]}
        answers.write(json.dumps(answer) + "\n")
    if runner.link is not None:
        runner.link.kc.stop_channels()
    return 0


if __name__ == "__main__":
    sys.exit(main())
