"""Plain data between the student's kernel and the grader: JSON, never pickle.

What crosses is numbers, strings, booleans, None, lists, tuples, dicts with string keys,
tensors and NumPy arrays (dtype, shape and raw little-endian bytes in base64) and dtypes.
`encode(obj, tensors)` turns such a value into JSON-ready data, appending every tensor to
`tensors` and leaving `{"T": index}` in its place; `decode(data, tensors)` turns it back.
Anything else is encoded as `{"opaque": type name}` and decoded as an `Opaque`, which a check
reports as "returned a <type>": the grader never builds an object of a type the data names.

Both ends use this module: the grader trusts nothing it decodes beyond its being plain data.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import sys
from collections import OrderedDict

import numpy as np
import torch

__all__ = ["DTYPES", "Opaque", "TensorCache", "WireError", "decode", "decode_tensor", "dumps",
           "encode", "encode_tensor", "loads"]

# The dtypes that may cross, by name; bfloat16 has no NumPy twin and travels as its bits.
DTYPES = {
    "float64": torch.float64, "float32": torch.float32, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32,
    "int16": torch.int16, "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool,
}
_NAMES = {dtype: name for name, dtype in DTYPES.items()}
MAX_DIMS = 16
MAX_ITEMS = 100_000      # entries of one list, tuple or dict
MAX_DEPTH = 32           # nesting of lists, tuples and dicts
MAX_STRING = 100_000     # characters of one string
MIN_CACHED_BYTES = 4096  # smaller tensors always travel in full
_KEY = re.compile(r"[0-9a-f]{32}")


class WireError(ValueError):
    """The data is not plain data of the kinds this module knows."""


class Opaque:
    """Stands for a value the other side could not send as plain data."""

    def __init__(self, type_name: str) -> None:
        self.type_name = str(type_name)[:100]

    def __repr__(self) -> str:
        return f"<a {self.type_name} (not plain data)>"


class TensorCache:
    """The large tensors that one side has sent and the other keeps, by a hash of their bytes,
    so that weights sent with every call (a GRU's, at each decoder step) cross once. Both
    sides apply the same least-recently-used rule to the same sequence of records, so the
    sender knows what the receiver holds; a receiver that does not (a restarted kernel, a
    student's meddling) answers with a miss, and the sender starts again from nothing."""

    def __init__(self, budget: int = 64 * 1024 * 1024) -> None:
        self.budget, self.used = budget, 0
        self.entries: OrderedDict = OrderedDict()   # key -> (value, size in bytes)

    def get(self, key: str):
        entry = self.entries.get(key)
        if entry is None:
            return None
        self.entries.move_to_end(key)
        return entry[0]

    def put(self, key: str, value, size: int) -> None:
        if key in self.entries:
            self.used -= self.entries.pop(key)[1]
        self.entries[key] = (value, size)
        self.used += size
        while self.used > self.budget and len(self.entries) > 1:
            _, (_, old) = self.entries.popitem(last=False)
            self.used -= old

    def clear(self) -> None:
        self.entries.clear()
        self.used = 0


class CacheMiss(WireError):
    """A record refers to a tensor the receiver does not hold."""


def encode_tensor(t: torch.Tensor, cache: TensorCache | None = None) -> dict:
    """{"dtype", "shape", "data" (base64), "grad" (requires_grad)} for a strided CPU tensor.
    With a `cache` (the sender's), a large tensor the receiver already holds is sent as
    {"dtype", "shape", "cached": key, "grad"}, and one it does not as the full record with
    its "key"."""
    if t.layout != torch.strided or t.device.type != "cpu":
        raise WireError(f"a {t.layout} tensor on {t.device} (expected a dense CPU tensor)")
    if t.dtype not in _NAMES:
        raise WireError(f"a tensor of dtype {t.dtype} (expected one of {', '.join(DTYPES)})")
    plain = torch.Tensor._make_subclass(torch.Tensor, t.detach()) if type(t) is not torch.Tensor \
        else t.detach()
    plain = plain.contiguous()
    if plain.dtype == torch.bfloat16:
        plain = plain.view(torch.int16)
    raw = plain.numpy().astype(plain.numpy().dtype.newbyteorder("<"), copy=False).tobytes()
    record = {"dtype": _NAMES[t.dtype], "shape": list(t.shape), "grad": bool(t.requires_grad)}
    if cache is not None and len(raw) >= MIN_CACHED_BYTES:
        key = hashlib.blake2b(f"{record['dtype']}{record['shape']}".encode() + raw,
                              digest_size=16).hexdigest()
        if cache.get(key) is not None:
            return {**record, "cached": key}
        cache.put(key, True, len(raw))
        record["key"] = key
    record["data"] = base64.b64encode(raw).decode("ascii")
    return record


_RECORDS = ({"dtype", "shape", "data", "grad"}, {"dtype", "shape", "data", "grad", "key"},
            {"dtype", "shape", "cached", "grad"})


def decode_tensor(data, leaf: bool = False, cache: TensorCache | None = None) -> torch.Tensor:
    """A new plain torch.Tensor from `encode_tensor`'s data, every field checked; with
    `leaf=True` it requires grad when the record says so (the grader never does that: what
    connects a student's result to autograd is decided on the grader's side). With a `cache`
    (the receiver's), records that carry a key are kept and cached ones looked up there;
    without one, only full records are accepted."""
    if not isinstance(data, dict) or set(data) not in _RECORDS:
        raise WireError("a tensor record needs exactly dtype, shape, data and grad")
    if ("key" in data or "cached" in data) and (
            cache is None or not isinstance(data.get("key", data.get("cached")), str)
            or not _KEY.fullmatch(data.get("key", data.get("cached")))):
        raise WireError("a tensor record refers to a cache that is not there")
    if "cached" in data:
        held = cache.get(data["cached"])
        if held is None or held.dtype != DTYPES.get(data["dtype"]) or \
                list(held.shape) != data["shape"]:
            raise CacheMiss("a tensor record refers to a tensor that is not held")
        tensor = held.clone()
        if leaf and data["grad"] is True and tensor.dtype.is_floating_point:
            tensor.requires_grad_(True)
        return tensor
    dtype = DTYPES.get(data["dtype"]) if isinstance(data["dtype"], str) else None
    shape = data["shape"]
    if dtype is None:
        raise WireError(f"unknown dtype {str(data['dtype'])[:40]!r}")
    if (not isinstance(shape, list) or len(shape) > MAX_DIMS
            or not all(type(n) is int and n >= 0 for n in shape)):
        raise WireError("a tensor's shape must be a list of at most 16 sizes >= 0")
    if not isinstance(data["data"], str):
        raise WireError("a tensor's data must be a base64 string")
    try:
        raw = base64.b64decode(data["data"], validate=True)
    except ValueError:
        raise WireError("a tensor's data is not base64") from None
    itemsize = torch.empty((), dtype=dtype).element_size()
    if len(raw) != math.prod(shape) * itemsize:
        raise WireError(f"a tensor of shape {tuple(shape)} and dtype {data['dtype']} needs "
                        f"{math.prod(shape) * itemsize} bytes, got {len(raw)}")
    wire_dtype = torch.int16 if dtype == torch.bfloat16 else dtype
    native = np.dtype(str(wire_dtype).removeprefix("torch."))
    array = np.frombuffer(raw, dtype=native.newbyteorder("<")).astype(native, copy=True)
    tensor = torch.from_numpy(array).reshape(shape)
    if dtype == torch.bfloat16:
        tensor = tensor.view(torch.bfloat16)
    if "key" in data:
        cache.put(data["key"], tensor.clone(), len(raw))
    if leaf and data["grad"] is True and tensor.dtype.is_floating_point:
        tensor.requires_grad_(True)
    return tensor


def encode(obj, tensors: list, depth: int = 0, originals: list | None = None, fallback=None,
           cache: TensorCache | None = None):
    """JSON-ready data for `obj`; tensors go to `tensors` and are referred to by index (and,
    if `originals` is given, the tensor objects themselves go there in the same order).
    `fallback(obj, tensors, originals)` may encode what plain data cannot hold (the grader's
    modules and call-backs); it returns None for what it does not know. `cache`: see
    `encode_tensor`."""
    if depth > MAX_DEPTH:
        return {"opaque": "structure nested too deeply"}
    if obj is None or isinstance(obj, bool | str) and type(obj) in (bool, str):
        return obj if not isinstance(obj, str) else obj[:MAX_STRING]
    if type(obj) is int:
        return obj if abs(obj) < 2**63 else {"opaque": "int too large"}
    if type(obj) is float:
        return obj if math.isfinite(obj) else {"float": repr(obj)}
    if isinstance(obj, torch.Tensor):
        try:
            record = encode_tensor(obj, cache)
        except WireError:
            return {"opaque": f"tensor ({obj.layout}, {obj.dtype})"}
        tensors.append(record)
        if originals is not None:
            originals.append(obj)
        return {"T": len(tensors) - 1}
    if isinstance(obj, np.ndarray):
        try:
            record = encode_tensor(torch.from_numpy(np.ascontiguousarray(obj)))
        except (WireError, TypeError):
            return {"opaque": f"numpy.ndarray of dtype {obj.dtype}"}
        tensors.append(record)
        if originals is not None:
            originals.append(None)
        return {"ndarray": len(tensors) - 1}
    if isinstance(obj, np.generic) and obj.dtype.kind in "biuf":
        return {"npscalar": obj.dtype.name, "value": obj.item() if obj.dtype.kind != "f"
                or math.isfinite(obj.item()) else repr(obj.item())}
    if isinstance(obj, torch.dtype):
        return {"dtype": _NAMES.get(obj, str(obj))}
    if type(obj) in (list, tuple, torch.Size):
        if len(obj) > MAX_ITEMS:
            return {"opaque": f"{type(obj).__name__} of more than {MAX_ITEMS} items"}
        items = [encode(x, tensors, depth + 1, originals, fallback, cache) for x in obj]
        return items if type(obj) is list else {"tuple": items}
    if type(obj) is dict:
        if len(obj) > MAX_ITEMS or not all(type(k) is str for k in obj):
            return {"opaque": "dict (keys must be strings)"}
        return {"dict": [[k, encode(v, tensors, depth + 1, originals, fallback, cache)]
                         for k, v in obj.items()]}
    if fallback is not None:
        record = fallback(obj, tensors, originals)
        if record is not None:
            return record
    return {"opaque": _type_name(obj)}


def _type_name(obj) -> str:
    cls = type(obj)
    module = getattr(cls, "__module__", "") or ""
    name = getattr(cls, "__qualname__", "object")
    return name if module in ("builtins", "__main__") else f"{module}.{name}"


_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


def decode(data, tensors: list, depth: int = 0, extra=None):
    """The value `encode` produced, rebuilt from plain data only; WireError if malformed.
    `extra(key, value)` may build the records that only one side accepts (the kernel's
    modules and call-backs); it returns NotImplemented for a key it does not know."""
    if depth > MAX_DEPTH:
        raise WireError("data nested too deeply")
    if data is None or type(data) in (bool, int, float, str):
        if type(data) is str and len(data) > MAX_STRING:
            raise WireError("a string longer than the limit")
        return data
    if type(data) is list:
        if len(data) > MAX_ITEMS:
            raise WireError("a list longer than the limit")
        return [decode(x, tensors, depth + 1, extra) for x in data]
    if type(data) is not dict or len(data) not in (1, 2):
        raise WireError("unknown record")
    ((key, value),) = data.items() if len(data) == 1 else (("npscalar", data),)
    if key in ("T", "ndarray"):
        if type(value) is not int or not 0 <= value < len(tensors):
            raise WireError("a tensor reference out of range")
        return tensors[value] if key == "T" else tensors[value].detach().numpy()
    if key == "tuple" and type(value) is list:
        return tuple(decode(value, tensors, depth, extra))
    if key == "dict" and type(value) is list:
        if len(value) > MAX_ITEMS or not all(type(kv) is list and len(kv) == 2
                                             and type(kv[0]) is str for kv in value):
            raise WireError("a malformed dict record")
        return {k: decode(v, tensors, depth + 1, extra) for k, v in value}
    if key == "float" and value in ("nan", "inf", "-inf"):
        return _FLOATS[value]
    if key == "dtype" and type(value) is str:
        return DTYPES.get(value, Opaque(f"dtype {value[:40]}"))
    if key == "opaque" and type(value) is str:
        return Opaque(value)
    if key == "npscalar" and set(data) == {"npscalar", "value"}:
        kind, number = data["npscalar"], data["value"]
        if kind not in ("float16", "float32", "float64", "int8", "int16", "int32", "int64",
                        "uint8", "bool") or type(number) not in (int, float, bool, str):
            raise WireError("a malformed NumPy scalar")
        number = _FLOATS.get(number, number) if type(number) is str else number
        if type(number) is str:
            raise WireError("a malformed NumPy scalar")
        return np.dtype(kind).type(number)
    if extra is not None:
        built = extra(key, value)
        if built is not NotImplemented:
            return built
    raise WireError("unknown record")


def dumps(message: dict) -> str:
    return json.dumps(message, separators=(",", ":"))


def loads(text: str) -> dict:
    """Parse one message; WireError for anything but a JSON object."""
    if not isinstance(text, str):
        raise WireError("a message must be text")
    try:
        limit = sys.getrecursionlimit()
        message = json.loads(text)
    except RecursionError:
        raise WireError(f"a message nested deeper than {limit}") from None
    except ValueError as err:
        raise WireError(f"not JSON: {err}") from None
    if type(message) is not dict:
        raise WireError("a message must be a JSON object")
    return message
