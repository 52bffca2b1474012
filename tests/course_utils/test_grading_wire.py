"""course_utils.grading.wire: plain data both ways, and nothing but plain data."""

import json
import math

import numpy as np
import pytest
import torch

from course_utils.grading import wire


def round_trip(value):
    tensors: list = []
    data = json.loads(json.dumps(wire.encode(value, tensors)))
    decoded = [wire.decode_tensor(json.loads(json.dumps(t))) for t in tensors]
    return wire.decode(data, decoded)


@pytest.mark.parametrize("dtype", list(wire.DTYPES.values()))
def test_tensors_of_every_dtype_come_back_equal(dtype):
    x = (torch.randn(3, 4) * 5).to(dtype)
    back = round_trip(x)
    assert type(back) is torch.Tensor and back.dtype == dtype and back.shape == x.shape
    assert torch.equal(back, x)


def test_nan_inf_empty_scalar_and_non_contiguous_tensors_survive():
    x = torch.tensor([[1.0, float("nan")], [float("inf"), -0.0]]).T
    back = round_trip(x)
    assert torch.equal(back.isnan(), x.isnan())
    assert torch.equal(back.nan_to_num(), x.nan_to_num())
    assert round_trip(torch.zeros(0, 3)).shape == (0, 3)
    assert round_trip(torch.tensor(2.5)).shape == ()


def test_structures_numbers_and_dtypes_keep_their_types():
    value = {"a": (1, 2.5, True, None, "s"), "b": [torch.ones(2), {"c": float("-inf")}],
             "d": torch.float64, "e": np.float32(1.5), "f": np.arange(3)}
    back = round_trip(value)
    assert back["a"] == (1, 2.5, True, None, "s") and isinstance(back["a"], tuple)
    assert isinstance(back["b"], list) and torch.equal(back["b"][0], torch.ones(2))
    assert back["b"][1]["c"] == -math.inf
    assert back["d"] is torch.float64
    assert type(back["e"]) is np.float32 and back["e"] == 1.5
    assert isinstance(back["f"], np.ndarray) and back["f"].tolist() == [0, 1, 2]


class Lying(torch.Tensor):
    """A student's tensor that says it is close to anything."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in (torch.isclose, torch.allclose, torch.equal):
            return True
        return super().__torch_function__(func, types, args, kwargs or {})


def test_a_tensor_subclass_arrives_as_a_plain_tensor_with_its_true_values():
    lying = torch.zeros(3).as_subclass(Lying)
    back = round_trip(lying)
    assert type(back) is torch.Tensor
    assert not torch.allclose(back, torch.ones(3))


@pytest.mark.parametrize("value", [object(), lambda: 1, {1: "int key"}, torch.nn.Linear(2, 2),
                                   torch.zeros(2).to_sparse(), 2**70])
def test_anything_else_becomes_opaque_with_its_type_name(value):
    back = round_trip(value)
    assert isinstance(back, wire.Opaque)
    assert back.type_name


def test_results_that_require_grad_arrive_detached_unless_built_as_leaves():
    record = wire.encode_tensor(torch.ones(2, requires_grad=True))
    assert record["grad"] is True
    assert not wire.decode_tensor(record).requires_grad
    assert wire.decode_tensor(record, leaf=True).requires_grad


@pytest.mark.parametrize("record, problem", [
    ({"dtype": "float32", "shape": [2], "data": "AAAA", "grad": False}, "needs 8 bytes"),
    ({"dtype": "object", "shape": [1], "data": "", "grad": False}, "unknown dtype"),
    ({"dtype": "float32", "shape": [-1], "data": "", "grad": False}, "shape"),
    ({"dtype": "float32", "shape": [1] * 20, "data": "", "grad": False}, "shape"),
    ({"dtype": "float32", "shape": [1], "data": "AAAAAA==", "grad": False, "x": 1}, "exactly"),
    ({"dtype": "float32", "shape": [1], "data": "!!!!", "grad": False}, "base64"),
])
def test_malformed_tensor_records_are_refused(record, problem):
    with pytest.raises(wire.WireError, match=problem):
        wire.decode_tensor(record)


@pytest.mark.parametrize("data", [{"T": 5}, {"pickle": "gASVAAAA"}, {"tuple": 3},
                                  {"dict": [[1, 2]]}, {"a": 1, "b": 2}, {"module": {}},
                                  {"callback": 1}])
def test_unknown_or_malformed_records_are_refused(data):
    with pytest.raises(wire.WireError):
        wire.decode(data, [])


def test_deeply_nested_data_is_refused_not_a_crash():
    deep = "[" * 100_000 + "]" * 100_000
    with pytest.raises(wire.WireError):
        wire.loads('{"x": ' + deep + "}")
    nested = []
    for _ in range(50):
        nested = [nested]
    with pytest.raises(wire.WireError, match="nested too deeply"):
        wire.decode(nested, [])


def test_large_tensors_cross_once_and_a_receiver_that_lost_them_says_so():
    sent, held = wire.TensorCache(), wire.TensorCache()
    weight = torch.randn(64, 32)                                     # 8 KiB: cached
    small = torch.randn(3)                                           # always in full
    first = [wire.encode_tensor(weight, sent), wire.encode_tensor(small, sent)]
    assert "data" in first[0] and "key" in first[0] and "key" not in first[1]
    assert all(torch.equal(wire.decode_tensor(r, cache=held), t)
               for r, t in zip(first, (weight, small), strict=True))
    again = wire.encode_tensor(weight, sent)
    assert set(again) == {"dtype", "shape", "cached", "grad"}
    got = wire.decode_tensor(again, cache=held)
    assert torch.equal(got, weight)
    got.add_(1)                                                      # a copy, not the held one
    assert torch.equal(wire.decode_tensor(again, cache=held), weight)
    changed = weight.clone()
    changed[0, 0] += 1
    assert "data" in wire.encode_tensor(changed, sent)               # other bytes, other key
    with pytest.raises(wire.CacheMiss):
        wire.decode_tensor(again, cache=wire.TensorCache())          # a receiver that forgot
    with pytest.raises(wire.WireError, match="cache that is not there"):
        wire.decode_tensor(again)                                    # no cache at all
    with pytest.raises(wire.WireError, match="cache that is not there"):
        wire.decode_tensor({**again, "cached": "../../etc"}, cache=held)


def test_both_ends_of_a_tensor_cache_forget_the_same_tensors():
    sent, held = wire.TensorCache(budget=3 * 4096), wire.TensorCache(budget=3 * 4096)
    tensors = [torch.full((1024,), float(i)) for i in range(5)]     # 4 KiB each
    for order in ([0, 1, 2], [0, 3], [1, 4, 0, 2, 3]):
        for i in order:
            wire.decode_tensor(wire.encode_tensor(tensors[i], sent), cache=held)
        assert list(sent.entries) == list(held.entries) and held.used <= held.budget
