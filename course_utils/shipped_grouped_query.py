"""Unit 09's three translators, trained once with unit 06's recipe and shipped.

Lecture 09 compares multi-head, grouped-query and multi-query attention in unit 06's
Transformer on unit 06's translation task, at the same budget: the recipe that lecture 06
trains its Transformer with (six passes, batches of 64, a learning rate of 0.005 falling
linearly, `seed_everything(0)` before each model is built), the only change the number of
key/value heads of the decoder's attention (the config's `n_kv_heads`).
Three such trainings take about a minute and a half on one thread, so `make translators`
runs them once and writes course_utils/data/grouped_query.safetensors; the lecture reads
the weights and measures the models itself. With n_kv_heads = n_heads the model is lecture
06's Transformer, the same weights after the same seed.

    TASK, SIZES, RECIPE   unit 06's pairs, sizes and training settings
    VARIANTS              name -> n_kv_heads (4: multi-head, 2: grouped-query, 1: multi-query)
    build                 a fresh model of one variant (weights from the global RNG)
    train_variant         seed_everything(0), build, train with the recipe -> (model, History)
    write_shipped         train every variant, measure each on the held-out pairs, save
    load                  -> (model in eval mode, History): refuses a file of another recipe
                          or other data
    shipped_metadata      what the file says: recipe, data digest, torch, results
"""

from __future__ import annotations

import json
from pathlib import Path

import torch

from course_utils._checks import require_choice
from course_utils.data import translation
from course_utils.shipped_files import load_variant, read_metadata, require_current, save_variants
from course_utils.shipped_translators import TASK, data_digest
from course_utils.training import History, seed_everything
from course_utils.transformer import Transformer, TransformerConfig
from course_utils.translator import config_for, evaluate, train

__all__ = ["RECIPE", "SHIPPED", "SIZES", "TASK", "VARIANTS", "build", "load", "make_task",
           "shipped_metadata", "train_variant", "write_shipped"]

SHIPPED = Path(__file__).parent / "data" / "grouped_query.safetensors"
SEED = 0
# Lecture 06's Transformer (its SIZES and RECIPES["Transformer"], six passes, linear schedule)
SIZES = {"d_model": 48, "n_heads": 4, "d_ff": 96, "n_layers": 2, "norm_first": True,
         "max_len": 30}
RECIPE = {"epochs": 6, "batch_size": 64, "lr": 5e-3, "schedule": "linear"}
VARIANTS = {"multi-head": 4, "grouped-query": 2, "multi-query": 1}  # name -> n_kv_heads


def _as_dict() -> dict:
    """Everything in the file's metadata that must match today's code."""
    return {"task": TASK, "sizes": SIZES, "recipe": RECIPE, "variants": VARIANTS, "seed": SEED}


def make_task() -> translation.TranslationTask:
    """translation.make_task(**TASK): the 6,000 training and 1,000 held-out pairs of units
    03 and 06."""
    return translation.make_task(**TASK)


def build(task: translation.TranslationTask, name: str) -> Transformer:
    """A fresh Transformer of variant `name`: unit 06's sizes, the decoder's self- and
    cross-attention with VARIANTS[name] key/value heads; its initial weights drawn from
    PyTorch's global generator (train_variant seeds it first)."""
    require_choice(name, "name", tuple(VARIANTS))
    return Transformer(config_for(task, TransformerConfig, **SIZES, n_kv_heads=VARIANTS[name]))


def train_variant(task: translation.TranslationTask, name: str, progress: bool = True
                  ) -> tuple[Transformer, History]:
    """Build variant `name` and train it on task.train with RECIPE; the batch order comes
    from the generator that seed_everything(0) returns just before the model is built, as in
    lecture 06, so every variant sees the same batches. -> (model, History)."""
    generator = seed_everything(SEED)
    model = build(task, name)
    data = translation.make_batch(task.train, task.src_vocab, task.tgt_vocab)
    history = train(model, data, generator=generator, desc=name, progress=progress, **RECIPE)
    return model, history


def write_shipped(path=None, progress: bool = True) -> dict:
    """Train every variant, measure its exact match on the held-out pairs, and save them all
    to one safetensors file at `path` (by default SHIPPED: `make translators`); -> the
    results."""
    path = SHIPPED if path is None else Path(path)
    task = make_task()
    test_data = translation.make_batch(task.test, task.src_vocab, task.tgt_vocab)
    trained, results = {}, {}
    for name in VARIANTS:
        model, history = trained[name] = train_variant(task, name, progress=progress)
        results[name] = {"exact_match": round(float(evaluate(model, test_data).float().mean()), 4),
                         "seconds": round(history.seconds, 2),
                         "steps_per_epoch": history.steps_per_epoch}
    metadata = {"recipe": json.dumps(_as_dict(), sort_keys=True),
                "data_sha256": data_digest(task), "torch": torch.__version__,
                "results": json.dumps(results, sort_keys=True)}
    save_variants(path, trained, metadata)
    return results


def shipped_metadata(path=SHIPPED) -> dict:
    """The metadata that write_shipped saved at `path`, with recipe and results decoded."""
    return read_metadata(path, "grouped-query translator weights",
                         "shipped_grouped_query.write_shipped")


def load(name: str, task: translation.TranslationTask | None = None, path=None
         ) -> tuple[Transformer, History]:
    """-> (model of variant `name` in eval mode, the History of the run that trained it:
    loss per step and wall time on the machine that wrote the file).

    The file must have been written with today's recipe and data, so that its model is the
    one train_variant(task, name) trains, up to the last digits that another CPU changes."""
    require_choice(name, "name", tuple(VARIANTS))
    path = SHIPPED if path is None else Path(path)
    metadata = shipped_metadata(path)
    task = make_task() if task is None else task
    require_current(path, metadata, _as_dict(), "unit 09's", data_digest(task),
                    "other pairs than make_task() draws now")
    if name not in metadata["results"]:
        raise ValueError(f"{path} holds no {name!r} model: run `make translators` to train "
                         f"and write the weights again")
    model = build(task, name)
    loss = load_variant(path, name, model)
    result = metadata["results"][name]
    history = History(loss=loss, seconds=result["seconds"],
                      steps_per_epoch=result["steps_per_epoch"])
    return model.eval(), history
