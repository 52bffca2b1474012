"""Tests for course_utils.training: seed_everything and accuracy_by_bucket."""

import os
import random
import re

import numpy as np
import pytest
import torch

from course_utils import seed_everything
from course_utils.data.translation import length_buckets
from course_utils.training import accuracy_by_bucket
from course_utils.training import seed_everything as seed_everything_from_module


@pytest.fixture(autouse=True)
def restore_global_state(monkeypatch):
    """seed_everything changes global RNGs and PYTHONHASHSEED; put them back afterwards."""
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)  # undone at teardown
    py_state, np_state = random.getstate(), np.random.get_state()
    torch_state = torch.get_rng_state()
    yield
    random.setstate(py_state)
    np.random.set_state(np_state)
    torch.set_rng_state(torch_state)


def draws():
    """One draw from each global generator that seed_everything seeds."""
    return (
        random.random(),
        random.randrange(10**9),
        np.random.rand(4).tolist(),
        torch.rand(4).tolist(),
        torch.randint(0, 10**6, (3,)).tolist(),
    )


def test_seed_everything_is_exported_from_the_package():
    assert seed_everything is seed_everything_from_module


def test_same_seed_gives_same_draws_from_random_numpy_and_torch():
    seed_everything(123)
    first = draws()
    seed_everything(123)
    assert draws() == first


def test_different_seeds_give_different_draws_from_each_library():
    seed_everything(1)
    a = draws()
    seed_everything(2)
    b = draws()
    for from_1, from_2 in zip(a, b, strict=True):
        assert from_1 != from_2


def test_seeding_resets_the_stream_after_draws():
    seed_everything(5)
    first = torch.randn(3)
    torch.randn(10)  # move the stream on
    seed_everything(5)
    assert torch.equal(torch.randn(3), first)


def test_seed_everything_seeds_each_library_like_its_own_seed_function():
    seed_everything(42)
    got = (random.random(), np.random.rand(), torch.rand(2))
    random.seed(42)
    np.random.seed(42)
    torch.manual_seed(42)
    assert got[0] == random.random()
    assert got[1] == np.random.rand()
    assert torch.equal(got[2], torch.rand(2))


def test_returned_generator_is_a_torch_generator_seeded_with_the_seed():
    gen = seed_everything(7)
    assert isinstance(gen, torch.Generator)
    assert gen.initial_seed() == 7


def test_returned_generator_is_reproducible():
    a = torch.randn(5, generator=seed_everything(9))
    b = torch.randn(5, generator=seed_everything(9))
    c = torch.randn(5, generator=seed_everything(10))
    assert torch.equal(a, b)
    assert not torch.equal(a, c)


def test_returned_generator_is_independent_of_the_global_stream():
    gen = seed_everything(3)
    expected = torch.randn(4, generator=torch.Generator().manual_seed(3))
    torch.randn(100)  # draws from the global generator must not move `gen`
    assert torch.equal(torch.randn(4, generator=gen), expected)


def test_each_call_returns_a_new_generator():
    first = seed_everything(0)
    torch.rand(3, generator=first)
    second = seed_everything(0)
    assert second is not first
    assert torch.equal(torch.rand(3, generator=second), torch.rand(3, generator=seed_everything(0)))


def test_seed_everything_sets_pythonhashseed_for_subprocesses():
    seed_everything(31)
    assert os.environ["PYTHONHASHSEED"] == "31"


def test_default_seed_is_zero():
    seed_everything()
    default = draws()
    seed_everything(0)
    assert draws() == default


@pytest.mark.parametrize("seed", [0, 1, 2**32 - 1])
def test_seeds_at_the_ends_of_the_range_are_accepted(seed):
    gen = seed_everything(seed)
    assert gen.initial_seed() == seed
    assert os.environ["PYTHONHASHSEED"] == str(seed)


@pytest.mark.parametrize(
    ("seed", "shown"),
    [
        pytest.param(-1, "-1", id="negative"),
        pytest.param(2**32, "4294967296", id="too-big"),
        pytest.param(10**30, str(10**30), id="huge"),
        pytest.param(1.0, "1.0", id="float"),
        pytest.param("3", "'3'", id="str"),
        pytest.param(True, "True", id="bool"),
        pytest.param(None, "None", id="none"),
    ],
)
def test_bad_seeds_are_rejected_with_the_valid_range(seed, shown):
    message = rf"seed must be an int in \[0, 2\*\*32 - 1\]; got {re.escape(shown)}$"
    with pytest.raises(ValueError, match=message):
        seed_everything(seed)


def test_rejected_seed_leaves_the_global_stream_alone():
    torch.manual_seed(11)
    expected = torch.rand(3)
    torch.manual_seed(11)
    with pytest.raises(ValueError):
        seed_everything(-5)
    assert torch.equal(torch.rand(3), expected)
    assert "PYTHONHASHSEED" not in os.environ


# ----------------------------------------------------------------------------- accuracy_by_bucket

def test_accuracy_by_bucket_counts_each_bucket_by_hand():
    correct = torch.tensor([True, False, True, True, False, False])
    labels = ["5-10", "5-10", "<5", "11-20", "11-20", "11-20"]
    result = accuracy_by_bucket(correct, labels)
    assert result == {"<5": (1.0, 1), "5-10": (0.5, 2), "11-20": (pytest.approx(1 / 3), 3)}


def test_accuracy_by_bucket_agrees_with_a_plain_loop_on_random_data():
    gen = torch.Generator().manual_seed(0)
    lengths = torch.randint(1, 50, (500,), generator=gen)
    correct = torch.rand(500, generator=gen) < 1.0 / lengths  # shorter is likelier right
    labels = length_buckets(lengths)
    result = accuracy_by_bucket(correct, labels)
    assert sum(count for _, count in result.values()) == 500
    pairs = list(zip(correct.tolist(), labels, strict=True))
    for bucket, (accuracy, count) in result.items():
        members = [ok for ok, label in pairs if label == bucket]
        assert count == len(members)
        assert accuracy == pytest.approx(sum(members) / len(members))
    assert result["<5"][0] > result["41+"][0]


def test_accuracy_by_bucket_orders_length_buckets_by_length_not_alphabetically():
    labels = ["41+", "11-20", "31-40", "<5", "5-10", "21-30"]
    result = accuracy_by_bucket([True] * 6, labels)
    assert list(result) == ["<5", "5-10", "11-20", "21-30", "31-40", "41+"]


def test_accuracy_by_bucket_keeps_first_appearance_for_labels_without_numbers():
    result = accuracy_by_bucket(np.array([True, False, True]), ["short", "long", "short"])
    assert list(result) == ["short", "long"]
    assert result["long"] == (0.0, 1)


def test_accuracy_by_bucket_follows_a_given_order_and_skips_empty_buckets():
    result = accuracy_by_bucket([False, True], ["b", "a"], order=["a", "c", "b"])
    assert list(result) == ["a", "b"]
    assert result == {"a": (1.0, 1), "b": (0.0, 1)}


@pytest.mark.parametrize(
    "correct",
    [
        pytest.param(torch.tensor([True, False, True]), id="torch"),
        pytest.param(np.array([True, False, True]), id="numpy"),
        pytest.param([True, False, True], id="list"),
    ],
)
def test_accuracy_by_bucket_accepts_tensors_arrays_and_lists(correct):
    assert accuracy_by_bucket(correct, ["x1", "x1", "x2"]) == {"x1": (0.5, 2), "x2": (1.0, 1)}


@pytest.mark.parametrize(
    ("correct", "labels", "order", "message"),
    [
        pytest.param(torch.tensor([1, 0, 1]), ["a"] * 3, None, "1-d boolean.*got dtype int64",
                     id="int-tensor"),
        pytest.param(torch.tensor([0.5, 1.0]), ["a"] * 2, None, "boolean.*float32",
                     id="float-tensor"),
        pytest.param(torch.ones(2, 3, dtype=torch.bool), ["a"] * 2, None,
                     r"shape \(N,\).*shape \(2, 3\)", id="2d"),
        pytest.param([True, False], ["a"], None,
                     r"one label per example.*expected 2 labels; got 1", id="too-few-labels"),
        pytest.param(torch.zeros(0, dtype=torch.bool), [], None, "empty", id="empty"),
        pytest.param([True, False], ["a", "b"], ["a"], r"missing \['b'\]", id="order-missing"),
    ],
)
def test_accuracy_by_bucket_rejects_bad_input(correct, labels, order, message):
    with pytest.raises(ValueError, match=message):
        accuracy_by_bucket(correct, labels, order=order)
