"""Tests for course_utils.training (fit, History, running_mean, seconds_per_call,
seed_everything, accuracy_by_bucket) and course_utils.progress (the progress bar)."""

import copy
import math
import os
import random
import re
import time
from pathlib import Path

import nbformat
import numpy as np
import pytest
import torch
import torch.nn as nn
from nbclient import NotebookClient

from course_utils import seed_everything
from course_utils.data.translation import length_buckets
from course_utils.progress import ProgressBar
from course_utils.training import (
    History,
    accuracy_by_bucket,
    available_cpus,
    count_parameters,
    eval_mode,
    fit,
    running_mean,
    seconds_per_call,
)
from course_utils.training import seed_everything as seed_everything_from_module

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


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


def test_available_cpus_counts_the_cores_this_process_may_use():
    assert isinstance(available_cpus(), int) and available_cpus() >= 1
    if not hasattr(os, "sched_getaffinity"):
        assert available_cpus() == (os.cpu_count() or 1)
        return
    assert available_cpus() == len(os.sched_getaffinity(0))
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(before)})  # as the lecture runner pins a run
        assert available_cpus() == 1
    finally:
        os.sched_setaffinity(0, before)


def test_eval_mode_switches_to_eval_and_restores_the_mode_also_on_error():
    model = torch.nn.Sequential(torch.nn.Dropout(0.5))
    for mode in (True, False):
        model.train(mode)
        with eval_mode(model) as inside:
            assert inside is model and not model.training and not model[0].training
        assert model.training is mode and model[0].training is mode
    model.train()
    with pytest.raises(RuntimeError, match="boom"), eval_mode(model):
        raise RuntimeError("boom")
    assert model.training
    with pytest.raises(ValueError, match="torch.nn.Module"), eval_mode("model"):
        pass


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
    message = rf"seed must be an int in \[0, 4294967295\]; got {re.escape(shown)}$"
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


# ----------------------------------------------------------------- running_mean, History

def test_running_mean_by_hand():
    assert running_mean([1.0, 2.0, 3.0, 4.0, 6.0], 2) == [1.5, 2.5, 3.5, 5.0]
    assert running_mean([1.0, 2.0, 3.0, 4.0, 6.0], 5) == [3.2]
    assert running_mean([4.0, 5.0], 1) == [4.0, 5.0]
    values = np.random.default_rng(0).normal(size=40)
    expected = [float(np.mean(values[i:i + 7])) for i in range(34)]
    np.testing.assert_allclose(running_mean(values.tolist(), 7), expected, rtol=1e-12)


@pytest.mark.parametrize(("values", "window", "message"), [
    pytest.param([1.0, 2.0, 3.0], 0, r"window must be an int in \[1, 3\]; got 0", id="zero"),
    pytest.param([1.0, 2.0, 3.0], 4, r"window must be an int in \[1, 3\]; got 4", id="too-wide"),
    pytest.param([1.0, 2.0, 3.0], 2.0, r"window must be an int in \[1, 3\]; got 2.0", id="float"),
    pytest.param([], 1, r"non-empty flat list", id="empty"),
    pytest.param([[1.0, 2.0]], 1, r"non-empty flat list .*\(1, 2\)", id="nested"),
])
def test_running_mean_rejects_bad_windows(values, window, message):
    with pytest.raises(ValueError, match=message):
        running_mean(values, window)


def test_history_epoch_loss_and_running_loss():
    history = History(loss=[4.0, 2.0, 3.0, 1.0, 2.0, 3.0, 0.5], steps_per_epoch=3)
    assert history.epoch_loss() == [3.0, 2.0, 0.5]  # the last epoch holds one step
    steps, means = history.running_loss(3)
    assert steps == [3, 4, 5, 6, 7] and means == pytest.approx([3.0, 2.0, 2.0, 2.0, 5.5 / 3])
    with pytest.raises(ValueError, match="epoch_loss needs steps_per_epoch"):
        History(loss=[1.0, 2.0]).epoch_loss()
    with pytest.raises(ValueError, match=r"window must be an int in \[1, 7\]"):
        history.running_loss(8)


# ----------------------------------------------------------------------------- fit

class Tiny(torch.nn.Module):
    """A two-layer regression net; `modes` records model.training at every loss call."""

    def __init__(self):
        super().__init__()
        self.net = torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.Tanh(),
                                       torch.nn.Linear(5, 1))
        self.modes = []

    def forward(self, x):
        return self.net(x).squeeze(-1)


def mse(model, batch):
    model.modes.append(model.training)
    x, y = batch
    return ((model(x) - y) ** 2).mean()


def draw_batches(generator, n):
    """n batches drawn one by one from `generator` (lazily, as fit reads them)."""
    for _ in range(n):
        x = torch.randn(8, 3, generator=generator)
        yield x, x @ torch.tensor([1.0, -2.0, 0.5]) + 0.1 * torch.randn(8, generator=generator)


def hand_written_adam(model, batches, n_steps, lr, clip=None, linear=False):
    """The loop fit must reproduce bit for bit."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    losses = []
    for k, batch in zip(range(n_steps), batches, strict=False):
        if linear:
            for group in optimizer.param_groups:
                group["lr"] = lr * (1 - k / n_steps)
        loss = mse(model, batch)
        optimizer.zero_grad()
        loss.backward()
        if clip is not None:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize(("clip", "schedule"), [(None, "constant"), (0.5, "constant"),
                                                (0.5, "linear"), (None, "linear")])
def test_fit_equals_a_hand_written_adam_loop_bit_for_bit(clip, schedule):
    torch.manual_seed(0)
    model = Tiny()
    by_hand = copy.deepcopy(model)
    history = fit(model, mse, draw_batches(torch.Generator().manual_seed(1), 20), n_steps=20,
                  lr=0.05, clip=clip, schedule=schedule, progress=False)
    losses = hand_written_adam(by_hand, draw_batches(torch.Generator().manual_seed(1), 20), 20,
                               lr=0.05, clip=clip, linear=schedule == "linear")
    assert history.loss == losses
    for a, b in zip(model.parameters(), by_hand.parameters(), strict=True):
        assert torch.equal(a, b)
    assert history.loss[-1] < history.loss[0]
    assert history.seconds > 0 and history.eval_step == [] and history.metrics == {}
    assert model.modes == [True] * 20 and not model.training  # train mode, then eval mode


def test_clipping_changes_the_run_and_is_clip_grad_norm():
    torch.manual_seed(0)
    model = Tiny()
    unclipped = copy.deepcopy(model)
    clipped = fit(model, mse, draw_batches(torch.Generator().manual_seed(1), 10), n_steps=10,
                  lr=0.05, clip=0.01, progress=False)
    free = fit(unclipped, mse, draw_batches(torch.Generator().manual_seed(1), 10), n_steps=10,
               lr=0.05, progress=False)
    assert clipped.loss[0] == free.loss[0] and clipped.loss[1:] != free.loss[1:]


class Scalar(torch.nn.Module):
    """loss = w: the gradient is 1 at every step, so an Adam step moves w by lr (to 1e-7)."""

    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.zeros(()))


@pytest.mark.parametrize(("schedule", "expected"), [
    ("constant", [0.1] * 5),
    ("linear", [0.1, 0.08, 0.06, 0.04, 0.02]),  # lr * (1 - (k - 1) / n), k = 1..5
])
def test_the_schedule_sets_the_step_size(schedule, expected):
    model = Scalar()
    history = fit(model, lambda m, _: m.w * 1.0, iter(range(5)), n_steps=5, lr=0.1,
                  schedule=schedule, evaluate=lambda m: {"w": m.w.item()}, eval_every=1,
                  progress=False)
    w = [0.0, *history.metrics["w"]]
    steps = [w[k] - w[k + 1] for k in range(5)]
    np.testing.assert_allclose(steps, expected, rtol=1e-5)
    assert history.eval_step == [1, 2, 3, 4, 5]


@pytest.mark.parametrize(("n_steps", "eval_every", "expected"), [
    (7, 3, [3, 6, 7]), (7, 0, [7]), (6, 3, [3, 6]), (7, 7, [7]), (7, 10, [7]),
])
def test_evaluation_runs_every_eval_every_steps_and_after_the_last(n_steps, eval_every, expected):
    torch.manual_seed(0)
    model = Tiny()
    seen = []

    def evaluate(m):
        seen.append((len(m.modes), m.training))
        with torch.no_grad():
            loss = mse(m, next(draw_batches(torch.Generator().manual_seed(9), 1)))
        return {"loss": loss.item(), "steps": len(m.modes)}

    history = fit(model, mse, draw_batches(torch.Generator().manual_seed(1), n_steps),
                  n_steps=n_steps, lr=0.01, evaluate=evaluate, eval_every=eval_every,
                  steps_per_epoch=3, progress=False)
    assert history.eval_step == expected
    assert [training for _, training in seen] == [False] * len(expected)  # eval mode
    assert sorted(history.metrics) == ["loss", "steps"]
    assert len(history.metrics["loss"]) == len(expected)
    # every step after an evaluation ran in train mode again
    assert [mode for mode in model.modes if mode] == [True] * n_steps
    assert history.steps_per_epoch == 3 and len(history.epoch_loss()) == math.ceil(n_steps / 3)


def good_fit_arguments():
    return dict(model=Tiny(), loss_fn=mse, batches=draw_batches(torch.Generator(), 3),
                n_steps=3, lr=0.01, progress=False)


@pytest.mark.parametrize(("change", "message"), [
    pytest.param({"n_steps": 0}, "n_steps must be a positive int; got 0", id="no-steps"),
    pytest.param({"n_steps": 2.0}, "n_steps must be a positive int; got 2.0", id="float-steps"),
    pytest.param({"lr": 0.0}, "lr must be a positive finite number; got 0.0", id="zero-lr"),
    pytest.param({"lr": float("nan")}, "lr must be a positive finite number", id="nan-lr"),
    pytest.param({"lr": "0.1"}, "lr must be a positive finite number", id="str-lr"),
    pytest.param({"schedule": "cosine"}, "schedule must be 'constant' or 'linear'; got 'cosine'",
                 id="schedule"),
    pytest.param({"clip": 0}, "clip must be a positive finite number; got 0", id="zero-clip"),
    pytest.param({"eval_every": -1}, "eval_every must be an int >= 0; got -1", id="eval-every"),
    pytest.param({"eval_every": 2}, "eval_every = 2 needs evaluate", id="no-evaluate"),
    pytest.param({"evaluate": "loss"}, "evaluate must be None or a function", id="evaluate-str"),
    pytest.param({"steps_per_epoch": 0}, "steps_per_epoch must be a positive int", id="epoch"),
    pytest.param({"progress": "yes"}, "progress must be a bool", id="progress"),
    pytest.param({"model": lambda x: x}, "model must be a torch.nn.Module", id="model"),
    pytest.param({"loss_fn": 3.0}, "loss_fn must be a function", id="loss-fn"),
    pytest.param({"batches": lambda: None}, r"batches must be an iterable of batches .*"
                 r"\(draw\(\) for _ in range\(n_steps\)\)", id="batches-function"),
    pytest.param({"batches": 5}, "batches must be an iterable", id="batches-int"),
    pytest.param({"n_steps": 4}, "batches ran out after 3 batches; n_steps = 4", id="too-few"),
    pytest.param({"loss_fn": lambda m, b: ((m(b[0]) - b[1]) ** 2)},
                 r"loss_fn must return a scalar floating-point tensor \(shape \(\)\); got "
                 r"shape \(8,\)", id="loss-not-scalar"),
    pytest.param({"loss_fn": lambda m, b: 1.0}, r"loss_fn must return a scalar .*got float",
                 id="loss-float"),
    pytest.param({"evaluate": lambda m: 0.5}, r"evaluate must return a non-empty dict",
                 id="evaluate-float"),
    pytest.param({"evaluate": lambda m: {"x": "good"}}, r"evaluate must return numbers; 'x'",
                 id="evaluate-str-value"),
])
def test_fit_rejects_bad_arguments(change, message):
    with pytest.raises(ValueError, match=message):
        fit(**(good_fit_arguments() | change))


def test_fit_refuses_evaluations_that_change_their_names():
    names = iter([{"a": 1.0}, {"b": 2.0}])
    arguments = good_fit_arguments() | {"evaluate": lambda m: next(names), "eval_every": 1}
    with pytest.raises(ValueError, match=r"the same names every time: first \['a'\], now \['b'\]"):
        fit(**arguments)


# ----------------------------------------------------------------------------- seconds_per_call

def test_seconds_per_call_is_the_median_after_the_warm_up():
    durations = iter([0.2, 0.001, 0.06, 0.03])  # the warm-up (0.2 s) is not timed
    calls = []

    def fn():
        calls.append(1)
        time.sleep(next(durations))

    seconds = seconds_per_call(fn, repeats=3, warmup=1)
    assert len(calls) == 4
    assert 0.025 <= seconds < 0.06
    with pytest.raises(ValueError, match="repeats must be a positive int"):
        seconds_per_call(fn, repeats=0)
    with pytest.raises(ValueError, match="warmup must be an int >= 0"):
        seconds_per_call(fn, warmup=-1)
    with pytest.raises(ValueError, match="fn must be a function"):
        seconds_per_call(3)


# ----------------------------------------------------------------------------- progress

def test_progress_bar_outside_a_kernel_is_tqdm_on_stderr_or_nothing(capsys):
    with ProgressBar(4, "demo") as bar:
        for loss in (3.0, 2.0, 1.0, 0.0101):
            bar.update(1, loss=loss)
    assert "demo" in capsys.readouterr().err
    assert bar.final_line().startswith("demo: 4/4 steps in ")
    assert bar.final_line().endswith(" s, final loss 0.0101")
    with ProgressBar(4, "quiet", enabled=False) as quiet:
        quiet.update(2, loss=1.5)
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == ""
    assert quiet.final_line().endswith("final loss 1.5, stopped early")
    fit(Tiny(), mse, draw_batches(torch.Generator(), 3), n_steps=3, lr=0.01, progress=False)
    assert capsys.readouterr() == ("", "")


def test_progress_bar_rejects_bad_use():
    with pytest.raises(ValueError, match="total must be a positive int"):
        ProgressBar(0)
    bar = ProgressBar(2, enabled=False)
    with pytest.raises(ValueError, match="more than total = 2"):
        bar.update(3)
    with pytest.raises(ValueError, match="n must be an int >= 0"):
        bar.update(-1)
    bar.close()
    bar.close()  # harmless
    with pytest.raises(ValueError, match="is closed"):
        bar.update(1)


PROGRESS_CELL = """\
import time
from pathlib import Path
import torch
from course_utils.training import fit

class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(()))

def loss_fn(model, batch):
    time.sleep(0.02)  # long enough for the bar to be redrawn a few times
    return (model.w - batch) ** 2

history = fit(Net(), loss_fn, iter([0.0] * 30), n_steps=30, lr=0.1, progress=True,
              desc="tiny")
"""


def test_in_a_notebook_the_bar_is_text_and_ends_as_one_final_line(tmp_path):
    """Executed by nbclient (as nbval and `make lectures` do), the stored cell holds one text
    output, the final line, and no ipywidgets view and no stderr."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(PROGRESS_CELL),
                nbformat.v4.new_code_cell("print(len(history.loss))")]
    NotebookClient(nb, timeout=120, kernel_name="python3", resources={
        "metadata": {"path": str(tmp_path)}}).execute()
    outputs = nb.cells[0].outputs
    assert all(WIDGET_VIEW not in out.get("data", {}) for out in outputs), outputs
    assert all(out.output_type != "stream" for out in outputs), outputs  # no stderr, no tqdm
    texts = [out["data"]["text/plain"] for out in outputs if "text/plain" in out.get("data", {})]
    assert len(texts) == 1, outputs
    assert re.fullmatch(r"tiny: 30/30 steps in \d+\.\d s, final loss \S+", texts[0]), texts[0]
    assert nb.cells[1].outputs[0]["text"] == "30\n"


def test_nbval_sees_the_first_drawing_and_the_final_line_as_the_same_output():
    """nbval does not apply update_display_data: it compares the bar's first drawing with the
    stored final line. tests/nbval_sanitize.cfg turns both into "desc: <progress bar>"."""
    from nbval.plugin import get_sanitize_patterns

    config = (Path(__file__).parents[1] / "nbval_sanitize.cfg").read_text()
    patterns = get_sanitize_patterns(config)

    def sanitize(text):
        for regex, replace in patterns:
            text = re.sub(regex, replace, text)
        return text

    bar = ProgressBar(282, "no attention", enabled=False)
    first = bar._meter()
    bar.update(282, loss=0.0101)
    bar.close()
    assert re.fullmatch(r"no attention: 282/282 steps in \d+\.\d s, final loss 0.0101",
                        bar.final_line())
    assert sanitize(first) == sanitize(bar.final_line()) == "no attention: <progress bar>"
    assert sanitize("trained 5 models for 188 steps each\n") == \
        "trained 5 models for 188 steps each\n"


def test_count_parameters_counts_trainable_weights_and_a_tied_matrix_once():
    embed, frozen = nn.Embedding(10, 4), nn.Linear(4, 3)
    out = nn.Linear(4, 10)
    out.weight = embed.weight  # tied: one (10, 4) matrix in two places
    frozen.requires_grad_(False)
    model = nn.ModuleDict({"embed": embed, "out": out, "frozen": frozen})
    assert count_parameters(model) == 10 * 4 + 10  # the matrix once, out's bias; not frozen
    assert count_parameters(nn.Linear(3, 2)) == 3 * 2 + 2
    with pytest.raises(ValueError, match="torch.nn.Module"):
        count_parameters([torch.zeros(3)])
