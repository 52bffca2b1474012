"""Training: the one training loop of the course, its history, seeding, timing and metrics.

    fit                 train a model with Adam: any loss, any batches, optional clipping,
                        a linear learning-rate decay, evaluation every few steps, a progress bar
    History             what `fit` returns: the loss of every step, the evaluations, the time
    running_mean        mean of every full window of a list (for smooth loss curves)
    seconds_per_call    median wall time of a call (e.g. one training step)
    count_parameters    the trainable parameters of a model, a shared (tied) matrix once
    seed_everything     seed Python, NumPy and PyTorch; return a seeded torch.Generator
    eval_mode           `with eval_mode(model):` evaluation mode inside, the model's mode after
    accuracy_by_bucket  the share of correct examples in each bucket, ordered by bucket

Unit 01 (`bow.train_lm`), units 02-04 (`translator.train`) and the later units train with
`fit`; a lecture calls `fit` directly when it needs a loop of its own.
"""

from __future__ import annotations

import os
import random
import re
import statistics
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn as nn

from course_utils._checks import (
    require_bool,
    require_choice,
    require_int,
    require_positive_number,
    require_str,
)
from course_utils.progress import ProgressBar

__all__ = [
    "History",
    "accuracy_by_bucket",
    "available_cpus",
    "count_parameters",
    "eval_mode",
    "fit",
    "running_mean",
    "seconds_per_call",
    "seed_everything",
]

SCHEDULES = ("constant", "linear")


def count_parameters(model: nn.Module) -> int:
    """The trainable parameters of `model`, a matrix shared by two layers (tied) counted once."""
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module; got {type(model).__name__}")
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """`with eval_mode(model):` runs the block in evaluation mode (no dropout; batch norm's
    running statistics) and gives the model back in the train or eval mode it had, also when
    the block raises."""
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module; got {type(model).__name__}")
    was_training = model.training
    model.eval()
    try:
        yield model
    finally:
        model.train(was_training)


def seed_everything(seed: int = 0) -> torch.Generator:
    """Seed Python's `random`, NumPy and PyTorch so that a notebook gives the same numbers
    on every run, and return a `torch.Generator` seeded the same way for code that wants its
    own stream of random numbers.

    `seed` must be an int in [0, 2**32 - 1] (NumPy's range).
    """
    require_int(seed, "seed", low=0, high=2**32 - 1)
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)
    os.environ["PYTHONHASHSEED"] = str(seed)  # for subprocesses started after this
    generator = torch.Generator()
    generator.manual_seed(seed)
    return generator


def available_cpus() -> int:
    """How many CPUs this process may run on: its affinity set where the system has one
    (Linux; a test harness that pins a run to one core makes it 1), else os.cpu_count()."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


# ----------------------------------------------------------------------------- history

def running_mean(values: Sequence[float], window: int) -> list[float]:
    """The mean of every full window of `window` consecutive values:

        out[i] = (values[i] + ... + values[i + window - 1]) / window,  i = 0 .. len - window

    so len(out) = len(values) - window + 1 (window = 1 gives the values back).
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim != 1 or len(values) == 0:
        raise ValueError(f"values must be a non-empty flat list of numbers (N,); got shape "
                         f"{values.shape}")
    require_int(window, "window", low=1, high=len(values))
    return np.convolve(values, np.ones(window) / window, mode="valid").tolist()


@dataclass
class History:
    """What happened during `fit`.

    loss: the training loss of every step, in order (len = number of steps run);
    eval_step: the 1-based step numbers after which `evaluate` ran;
    metrics: {name: one value per entry of eval_step}, e.g. {"exact_match": [...]};
    seconds: wall time of the whole run (evaluations included);
    steps_per_epoch: steps in one pass over the training data, None when the batches are
    drawn at random without epochs.
    """

    loss: list[float] = field(default_factory=list)
    eval_step: list[int] = field(default_factory=list)
    metrics: dict[str, list[float]] = field(default_factory=dict)
    seconds: float = 0.0
    steps_per_epoch: int | None = None

    def epoch_loss(self) -> list[float]:
        """The mean step loss of each epoch (the last one may hold fewer steps)."""
        if self.steps_per_epoch is None:
            raise ValueError("epoch_loss needs steps_per_epoch: this run drew its batches "
                             "without epochs; use running_loss(window) instead")
        n = self.steps_per_epoch
        chunks = [self.loss[i:i + n] for i in range(0, len(self.loss), n)]
        return [sum(chunk) / len(chunk) for chunk in chunks]

    def running_loss(self, window: int) -> tuple[list[int], list[float]]:
        """(steps, means): the running mean of the step loss over `window` steps, each
        mean placed at the 1-based step that ends its window (window, ..., len(loss))."""
        means = running_mean(self.loss, window)
        return list(range(window, len(self.loss) + 1)), means


# ----------------------------------------------------------------------------- the loop

def fit(model: nn.Module, loss_fn: Callable, batches: Iterable, *, n_steps: int, lr: float,
        schedule: str = "constant", clip: float | None = None,
        evaluate: Callable[[nn.Module], Mapping[str, float]] | None = None,
        eval_every: int = 0, steps_per_epoch: int | None = None, progress: bool = True,
        desc: str = "training") -> History:
    """Train `model` with Adam for `n_steps` steps and return its History.

    Each step takes the next batch from `batches`, computes `loss_fn(model, batch)` (a scalar
    tensor), and updates every parameter of `model`:

        zero the gradients; loss.backward(); clip; optimizer.step(); scheduler.step()

    batches: an iterable of batches, read one per step (a generator is best: it draws each
        batch when the step needs it, so its random numbers are drawn in the order a
        hand-written loop draws them); it must hold at least n_steps batches;
    schedule: "constant" keeps lr; "linear" lowers it linearly, step k = 1 .. n_steps
        using lr * (1 - (k - 1) / n_steps): lr at step 1, lr / n_steps at the last;
    clip: None, or the largest gradient norm (`torch.nn.utils.clip_grad_norm_`);
    evaluate: None, or `evaluate(model) -> {name: number}`, called (with the model in eval
        mode) after every `eval_every` steps (0 = never in between) and after the last step;
    steps_per_epoch: the number of steps in one pass over the data, kept in the History
        for `History.epoch_loss` (None when batches are drawn without epochs);
    progress: show a `ProgressBar` (a text line in a notebook, tqdm in a terminal) labelled
        `desc`, with the latest loss.

    The model is in train mode during the steps and in eval mode when `fit` returns. The same
    seeds, the same batches and the same loss give the same numbers as a hand-written loop
    that calls the optimizer in this order.
    """
    # Long on purpose: the course's one training loop, read by every unit; the step, the
    # schedule, clipping, evaluation and the progress bar are easier to follow in one place.
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module; got {type(model).__name__}")
    if not callable(loss_fn):
        raise ValueError(f"loss_fn must be a function loss_fn(model, batch) -> scalar tensor; "
                         f"got {type(loss_fn).__name__}")
    if callable(batches) or not isinstance(batches, Iterable):
        raise ValueError(f"batches must be an iterable of batches (e.g. a generator "
                         f"expression); got {type(batches).__name__}. For a function that "
                         f"draws one batch, pass (draw() for _ in range(n_steps))")
    n_steps = require_int(n_steps, "n_steps")
    lr = require_positive_number(lr, "lr")
    require_choice(schedule, "schedule", SCHEDULES)
    if clip is not None:
        clip = require_positive_number(clip, "clip")
    if evaluate is not None and not callable(evaluate):
        raise ValueError(f"evaluate must be None or a function evaluate(model) -> "
                         f"{{name: number}}; got {type(evaluate).__name__}")
    eval_every = require_int(eval_every, "eval_every", low=0)
    if eval_every and evaluate is None:
        raise ValueError(f"eval_every = {eval_every} needs evaluate, the function to call")
    if steps_per_epoch is not None:
        steps_per_epoch = require_int(steps_per_epoch, "steps_per_epoch")
    require_bool(progress, "progress")
    require_str(desc, "desc")

    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scheduler = None
    if schedule == "linear":  # LambdaLR's k counts from 0: step k + 1 uses lr * (1 - k / n)
        scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda k: 1 - k / n_steps)
    history = History(steps_per_epoch=steps_per_epoch)
    start = time.perf_counter()
    batch_iter = iter(batches)
    model.train()
    with ProgressBar(n_steps, desc, enabled=progress) as bar:
        for step in range(1, n_steps + 1):
            try:
                batch = next(batch_iter)
            except StopIteration:
                raise ValueError(f"batches ran out after {step - 1} batches; n_steps = "
                                 f"{n_steps} needs one batch per step") from None
            loss = loss_fn(model, batch)
            if not isinstance(loss, torch.Tensor) or loss.dim() != 0 \
                    or not loss.dtype.is_floating_point:
                got = (f"shape {tuple(loss.shape)}, dtype {loss.dtype}"
                       if isinstance(loss, torch.Tensor) else type(loss).__name__)
                raise ValueError(f"loss_fn must return a scalar floating-point tensor (shape "
                                 f"()); got {got}")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if clip is not None:
                nn.utils.clip_grad_norm_(model.parameters(), clip)
            optimizer.step()
            if scheduler is not None:
                scheduler.step()
            value = loss.item()
            history.loss.append(value)
            bar.update(1, loss=value)
            due = step == n_steps or (eval_every and step % eval_every == 0)
            if evaluate is not None and due:
                with eval_mode(model):
                    _record(history, step, evaluate(model))
    model.eval()
    history.seconds = time.perf_counter() - start
    return history


def _record(history: History, step: int, results) -> None:
    """Append one evaluation's {name: number} to the history (the names never change)."""
    if not isinstance(results, Mapping) or not results:
        raise ValueError(f"evaluate must return a non-empty dict {{name: number}}; "
                         f"got {results!r}")
    if history.metrics and set(results) != set(history.metrics):
        raise ValueError(f"evaluate must return the same names every time: first "
                         f"{sorted(history.metrics)}, now {sorted(results)}")
    values = {}
    for name, value in results.items():
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        if isinstance(value, bool) or not isinstance(value, int | float | np.number):
            raise ValueError(f"evaluate must return numbers; {name!r} is {value!r}")
        values[str(name)] = float(value)
    history.eval_step.append(step)
    for name, value in values.items():
        history.metrics.setdefault(name, []).append(value)


def seconds_per_call(fn: Callable[[], object], repeats: int = 5, warmup: int = 1) -> float:
    """The median wall time of `fn()` over `repeats` calls, after `warmup` untimed calls
    (allocations, kernel selection). The median shrugs off a call slowed by another program.
    """
    if not callable(fn):
        raise ValueError(f"fn must be a function of no arguments; got {type(fn).__name__}")
    repeats = require_int(repeats, "repeats")
    warmup = require_int(warmup, "warmup", low=0)
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


# ----------------------------------------------------------------------------- metrics

def _bucket_key(label: str) -> tuple[int, int]:
    """Sort key of a bucket label such as "<5", "5-10", "41+": its first integer, and for
    equal integers "<n" before the rest (so "<5" comes before "5-10")."""
    number = int(re.search(r"\d+", label).group())
    return number, 0 if label.lstrip().startswith("<") else 1


def accuracy_by_bucket(correct, labels: Sequence[str], order: Sequence[str] | None = None
                       ) -> dict[str, tuple[float, int]]:
    """Accuracy within each bucket of examples, and how many examples the bucket holds:

        accuracy[b] = #{i : labels[i] = b and correct[i]} / #{i : labels[i] = b}

    correct: (N,) bool (tensor, array or list), one entry per example, e.g. `exact_match`;
    labels: N bucket names, e.g. `translation.length_buckets(lengths)`.
    order: the buckets in the order wanted; by default, when every label holds a number,
    by that number ("<5", "5-10", "11-20", ..., "41+"), otherwise in order of first
    appearance. A bucket of `order` that no example falls in is left out.
    Returns {label: (accuracy in [0, 1], count)}.
    """
    if isinstance(correct, torch.Tensor):
        flags = correct.detach().cpu().numpy()
    else:
        flags = np.asarray(correct)
    if flags.ndim != 1 or flags.dtype != np.bool_:
        raise ValueError(f"correct must be a 1-d boolean tensor, array or list of shape (N,); "
                         f"got dtype {flags.dtype} and shape {tuple(flags.shape)}")
    labels = [str(label) for label in labels]
    if len(labels) != len(flags):
        raise ValueError(f"labels must hold one label per example: correct has shape "
                         f"({len(flags)},), so expected {len(flags)} labels; got {len(labels)}")
    if not labels:
        raise ValueError("correct and labels are empty: there is no example to count")
    present = list(dict.fromkeys(labels))  # distinct labels in order of first appearance
    if order is not None:
        order = [str(label) for label in order]
        missing = [label for label in present if label not in order]
        if missing:
            raise ValueError(f"order must list every bucket that occurs; missing {missing}")
        buckets = [label for label in order if label in present]
    elif all(re.search(r"\d", label) for label in present):
        buckets = sorted(present, key=_bucket_key)
    else:
        buckets = present
    names = np.array(labels)  # (N,)
    result = {}
    for bucket in buckets:
        members = names == bucket  # (N,) bool
        count = int(members.sum())
        result[bucket] = (float(flags[members].mean()), count)
    return result
