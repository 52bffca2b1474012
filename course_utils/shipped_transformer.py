"""Unit 06's Transformer, trained once with lecture 06's recipe and shipped.

Lecture 06 builds its Transformer, shows the lines that train it, and compares it with unit
03's RNN with attention. Six passes over the 6,000 training pairs take half a minute on one
thread, longer than all the rest of the lecture, so `make translators` runs that training
once, with the same code, sizes, recipe and seed, and writes course_utils/data/
transformer.safetensors; the lecture reads the weights when its sizes and recipe are these,
and trains in front of the reader when they are not (its questions change them).

    TASK, SIZES, RECIPE   unit 06's pairs (unit 03's), sizes and training settings
    NAME                  the one model in the file
    build                 a fresh Transformer of some sizes (weights from the global RNG)
    train_transformer     seed_everything(0), build, train -> (model, History)
    is_shipped            are these sizes and settings the ones the file was trained with?
    write_shipped         train with SIZES and RECIPE, measure on the held-out pairs, save
    load                  -> (model in eval mode, History): refuses a file of another recipe
                          or other data
    shipped_metadata      what the file says: recipe, data digest, torch, results
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from course_utils.data import translation
from course_utils.shipped_files import load_variant, read_metadata, require_current, save_variants
from course_utils.shipped_translators import TASK, data_digest
from course_utils.training import History, seed_everything
from course_utils.transformer import Transformer, TransformerConfig
from course_utils.translator import config_for, evaluate, train

__all__ = ["NAME", "RECIPE", "SHIPPED", "SIZES", "TASK", "build", "is_shipped", "load",
           "make_task", "shipped_metadata", "train_transformer", "write_shipped"]

SHIPPED = Path(__file__).parent / "data" / "transformer.safetensors"
SEED = 0
NAME = "Transformer"
# Lecture 06's SIZES and its Transformer's recipe (six passes, batches of 64, lr 0.005
# falling linearly)
SIZES = {"d_model": 48, "n_heads": 4, "d_ff": 96, "n_layers": 2, "norm_first": True,
         "max_len": 30}
RECIPE = {"epochs": 6, "batch_size": 64, "lr": 5e-3, "schedule": "linear"}


def _as_dict() -> dict:
    """Everything in the file's metadata that must match today's code."""
    return {"task": TASK, "sizes": SIZES, "recipe": RECIPE, "seed": SEED}


def make_task() -> translation.TranslationTask:
    """translation.make_task(**TASK): the 6,000 training and 1,000 held-out pairs of units
    03 and 06."""
    return translation.make_task(**TASK)


def build(task: translation.TranslationTask, sizes: dict | None = None) -> Transformer:
    """A fresh Transformer with the task's vocabularies and `sizes` (default SIZES), its
    initial weights drawn from PyTorch's global generator (train_transformer seeds it)."""
    return Transformer(config_for(task, TransformerConfig, **(SIZES if sizes is None else sizes)))


def train_transformer(task: translation.TranslationTask, sizes: dict | None = None,
                      recipe: dict | None = None, progress: bool = True
                      ) -> tuple[Transformer, History]:
    """seed_everything(0), build a model of `sizes` (default SIZES), and train it on
    task.train with `recipe` (default RECIPE: translator.train's epochs, batch_size, lr,
    schedule); the batch order comes from the generator that seed_everything returns, as in
    lecture 06. -> (model, History)."""
    generator = seed_everything(SEED)
    model = build(task, sizes)
    data = translation.make_batch(task.train, task.src_vocab, task.tgt_vocab)
    history = train(model, data, generator=generator, desc=NAME, progress=progress,
                    **(RECIPE if recipe is None else recipe))
    return model, history


def is_shipped(sizes: dict, **training) -> bool:
    """True when `sizes` and the training settings `training` (epochs, batch_size, lr,
    schedule) are exactly SIZES and RECIPE: the model the file holds is then the one
    train_transformer(task, sizes, training) would train (up to the last digits that
    another CPU changes)."""
    return dict(sizes) == SIZES and training == RECIPE


def write_shipped(path=None, progress: bool = True) -> dict:
    """Train with SIZES and RECIPE, measure the exact match on the held-out pairs, and save
    the model to one safetensors file at `path` (by default SHIPPED: `make translators`);
    -> the results."""
    path = SHIPPED if path is None else Path(path)
    task = make_task()
    test_data = translation.make_batch(task.test, task.src_vocab, task.tgt_vocab)
    model, history = train_transformer(task, progress=progress)
    results = {NAME: {"exact_match": round(float(evaluate(model, test_data).float().mean()), 4),
                      "seconds": round(history.seconds, 2),
                      "steps_per_epoch": history.steps_per_epoch}}
    metadata = {"recipe": json.dumps(_as_dict(), sort_keys=True),
                "data_sha256": data_digest(task), "torch": torch.__version__,
                "results": json.dumps(results, sort_keys=True)}
    save_variants(path, {NAME: (model, history)}, metadata)
    return results


def shipped_metadata(path=SHIPPED) -> dict:
    """The metadata that write_shipped saved at `path`, with recipe and results decoded."""
    return read_metadata(path, "Transformer weights", "shipped_transformer.write_shipped")


def load(task: translation.TranslationTask | None = None, path=None
         ) -> tuple[Transformer, History]:
    """-> (the shipped model in eval mode, the History of the run that trained it: loss per
    step and wall time on the machine that wrote the file).

    The file must have been written with today's sizes, recipe and data, so that its model
    is the one train_transformer(task) trains, up to the last digits that another CPU
    changes."""
    path = SHIPPED if path is None else Path(path)
    metadata = shipped_metadata(path)
    task = make_task() if task is None else task
    require_current(path, metadata, _as_dict(), "unit 06's", data_digest(task),
                    "other pairs than make_task() draws now")
    model = build(task)
    loss = load_variant(path, NAME, model)
    result = metadata["results"][NAME]
    history = History(loss=loss, seconds=result["seconds"],
                      steps_per_epoch=result["steps_per_epoch"])
    return model.eval(), history
