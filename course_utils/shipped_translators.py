"""The translators of units 02-04, trained once with their unit's recipe and shipped.

Lecture 02 trains its forward seq2seq model and reads the two old tricks (a reversed source,
the final state fed to every step), trained with the same recipe, from
course_utils/data/seq2seq_tricks.safetensors. Lecture 03 trains its attention model in front
of the reader; its baseline (unit 02's decoder, this unit's sizes), the models it compares
them with (a forward-only encoder, Luong's decoder) and the RNN that lecture 06 sets beside
the Transformer are the same code on the same data with the same seed, trained once by `make
translators` and read from course_utils/data/translators.safetensors. Lecture 04 trains
one of its five score functions and reads the other four from score_functions.safetensors.
No lecture spends minutes repeating a training it has already shown.

    Recipe                one unit's task, sizes, training recipe and variants (name -> the
                          one thing that model changes), the variants it ships and its file;
                          .with_training(epochs=8) the same with other training settings
    UNIT02, UNIT03, UNIT04  the three recipes; TASK, SIZES, RECIPE, VARIANTS are unit 03's
    make_task             the recipe's 6,000 training and 1,000 held-out pairs
    build                 a fresh Seq2Seq of one variant, or of other `changes` to the sizes
                          (weights from the global RNG)
    train_variant         seed_everything(0), build, train with the recipe -> (model, History);
                          `changes` and `data` for a model that is none of the variants, or
                          trained on other pairs (the lectures' questions)
    write_shipped         train the shipped variants, measure each on the held-out pairs, save
    load                  -> (model in eval mode, History): refuses a file of another recipe
                          or other data
    shipped_metadata      what a file says: recipe, data digest, torch, results

A loaded History holds the loss of every step and the wall time of the run that made the file
(that machine's, not this one's).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from course_utils._checks import require_choice
from course_utils.data import translation
from course_utils.shipped_files import load_variant, read_metadata, require_current, save_variants
from course_utils.training import History, seed_everything
from course_utils.translator import Seq2Seq, config_for, evaluate, train

__all__ = ["RECIPE", "RECIPES", "SHIPPED", "SHIPPED_VARIANTS", "SIZES", "TASK", "UNIT02",
           "UNIT03", "UNIT04", "VARIANTS", "Recipe", "build", "load", "make_task",
           "shipped_metadata", "train_variant", "write_shipped"]

DATA = Path(__file__).parent / "data"
SEED = 0


@dataclass(frozen=True)
class Recipe:
    """What decides a unit's shipped translators besides the code. task: the arguments of
    translation.make_task; sizes: of translator.config_for; training: of translator.train;
    variants: name -> what that model changes in sizes; shipped: the variants in `path`."""

    unit: str
    task: dict
    sizes: dict
    training: dict
    variants: dict
    shipped: tuple
    path: Path

    def as_dict(self) -> dict:
        """Everything in the file's metadata that must match today's code."""
        return {"task": self.task, "sizes": self.sizes, "recipe": self.training,
                "variants": self.variants, "seed": SEED}

    def with_training(self, **changes) -> Recipe:
        """The same recipe with some training settings changed, for an experiment:
        `train_variant(task, "dot", recipe=UNIT04.with_training(epochs=8))` trains for twice
        the budget. Its models are not the shipped ones, so `load` refuses it."""
        unknown = sorted(set(changes) - set(self.training))
        if unknown:
            raise ValueError(f"with_training changes the settings {sorted(self.training)}; "
                             f"got {unknown}")
        return replace(self, training={**self.training, **changes})


TASK = {"n_train": 6000, "n_test": 1000, "seed": 0, "max_numbers": 8}
SIZES = {"d_emb": 32, "d_h": 64, "bidirectional": True, "max_len": 30}
RECIPE = {"epochs": 6, "batch_size": 128, "lr": 1e-2, "schedule": "linear"}
VARIANTS = {
    "no attention": {},  # unit 02's decoder: the source only through s_0
    "attention": {"attention": "additive"},  # Bahdanau's decoder
    "attention, forward encoder": {"attention": "additive", "bidirectional": False},
    "Luong": {"attention": "multiplicative", "decoder": "luong"},  # general score, input feeding
}
SHIPPED_VARIANTS = ("no attention", "attention", "attention, forward encoder", "Luong")
SHIPPED = DATA / "translators.safetensors"
UNIT03 = Recipe("03", TASK, SIZES, RECIPE, VARIANTS, SHIPPED_VARIANTS, SHIPPED)

# Lecture 04: the unit-03 model with a forward encoder and each score function, on lists of
# up to six numbers, four epochs; it trains "multiplicative" itself.
UNIT04 = Recipe(
    "04", task={"n_train": 6000, "n_test": 1000, "seed": 0, "max_numbers": 6},
    sizes={"d_emb": 32, "d_h": 64, "bidirectional": False, "max_len": 30},
    training={"epochs": 4, "batch_size": 128, "lr": 1e-2, "schedule": "linear"},
    variants={score: {"attention": score}
              for score in ("additive", "multiplicative", "dot", "scaled_dot", "cosine")},
    shipped=("additive", "dot", "scaled_dot", "cosine"),
    path=DATA / "score_functions.safetensors")
# Lecture 02: the forward GRU seq2seq model (d_h = 128, no attention) and the two old tricks;
# it trains "forward" itself.
UNIT02 = Recipe(
    "02", task=TASK,
    sizes={"d_emb": 32, "d_h": 128, "max_len": 30},
    training={"epochs": 6, "batch_size": 128, "lr": 8e-3, "schedule": "constant"},
    variants={"forward": {}, "reversed source": {"reverse_source": True},
              "final state fed to every step": {"feed_final": True}},
    shipped=("reversed source", "final state fed to every step"),
    path=DATA / "seq2seq_tricks.safetensors")
RECIPES = {"02": UNIT02, "03": UNIT03, "04": UNIT04}


def _recipe(recipe) -> Recipe:
    if not isinstance(recipe, Recipe):
        raise ValueError(f"recipe must be a Recipe (UNIT02, UNIT03 or UNIT04); got "
                         f"{type(recipe).__name__}")
    return recipe


def make_task(recipe: Recipe = UNIT03) -> translation.TranslationTask:
    """translation.make_task(**recipe.task): unit 03's pairs (also lectures 02 and 06's), or
    unit 04's."""
    return translation.make_task(**_recipe(recipe).task)


def build(task: translation.TranslationTask, name: str, recipe: Recipe = UNIT03,
          changes: dict | None = None) -> Seq2Seq:
    """A fresh model of variant `name` (the recipe's sizes changed by variants[name]), its
    initial weights drawn from PyTorch's global generator (train_variant seeds it first).

    With `changes` (Seq2SeqConfig fields, as a variant's entry), the recipe's sizes are changed
    by `changes` instead, and `name` is only a label: a model that is none of the recipe's
    variants, such as {"attention": "additive", "d_a": 8}."""
    recipe = _recipe(recipe)
    if changes is None:
        changes = recipe.variants[require_choice(name, "name", tuple(recipe.variants))]
    elif not isinstance(changes, dict):
        raise ValueError(f"changes must be a dict of Seq2SeqConfig fields, as "
                         f"{{'attention': 'additive', 'd_a': 8}}; got {type(changes).__name__}")
    return Seq2Seq(config_for(task, **{**recipe.sizes, **changes}))


def train_variant(task: translation.TranslationTask, name: str, progress: bool = True,
                  recipe: Recipe = UNIT03, changes: dict | None = None,
                  data: translation.TranslationBatch | None = None) -> tuple[Seq2Seq, History]:
    """Build variant `name` and train it on task.train with the recipe's training settings;
    the batch order comes from the generator that seed_everything(0) returns just before the
    model is built, so every variant sees the same batches. -> (model, History).

    `changes`: train a model of other sizes instead (see `build`); `data`: a
    translation.TranslationBatch to train on instead of all of task.train (a subset, say).
    With neither, the model is the one the recipe ships under `name`."""
    recipe = _recipe(recipe)
    if data is None:
        data = translation.make_batch(task.train, task.src_vocab, task.tgt_vocab)
    elif not isinstance(data, translation.TranslationBatch):
        raise ValueError(f"data must be a translation.TranslationBatch (translation.make_batch"
                         f"(pairs, ...)); got {type(data).__name__}")
    generator = seed_everything(SEED)
    model = build(task, name, recipe, changes)
    history = train(model, data, generator=generator, desc=name, progress=progress,
                    **recipe.training)
    return model, history


def data_digest(task: translation.TranslationTask) -> str:
    """SHA-256 of every training and held-out pair, in order."""
    text = "\n".join(f"{' '.join(p.source)}\t{' '.join(p.target)}"
                     for p in [*task.train, *task.test])
    return hashlib.sha256(text.encode()).hexdigest()


def write_shipped(path=None, names=None, progress: bool = True, recipe: Recipe = UNIT03
                  ) -> dict:
    """Train each variant of `names` (by default the recipe's shipped ones), measure its exact
    match on the held-out pairs, and save them all to one safetensors file at `path` (by
    default the recipe's: `make translators`); -> the results."""
    recipe = _recipe(recipe)
    path = recipe.path if path is None else Path(path)
    names = recipe.shipped if names is None else tuple(names)
    names = tuple(require_choice(n, "name", tuple(recipe.variants)) for n in names)
    task = make_task(recipe)
    test_data = translation.make_batch(task.test, task.src_vocab, task.tgt_vocab)
    trained, results = {}, {}
    for name in names:
        model, history = trained[name] = train_variant(task, name, progress=progress,
                                                       recipe=recipe)
        results[name] = {"exact_match": round(float(evaluate(model, test_data).float().mean()), 4),
                         "seconds": round(history.seconds, 2),
                         "steps_per_epoch": history.steps_per_epoch}
    metadata = {"recipe": json.dumps(recipe.as_dict(), sort_keys=True),
                "data_sha256": data_digest(task), "torch": torch.__version__,
                "results": json.dumps(results, sort_keys=True)}
    save_variants(path, trained, metadata)
    return results


def shipped_metadata(path=SHIPPED) -> dict:
    """The metadata that write_shipped saved at `path`, with recipe and results decoded."""
    return read_metadata(path, "translator weights", "shipped_translators.write_shipped")


def load(name: str, task: translation.TranslationTask | None = None, path=None,
         recipe: Recipe = UNIT03) -> tuple[Seq2Seq, History]:
    """-> (model of variant `name` in eval mode, the History of the run that trained it:
    loss per step and wall time on the machine that wrote the file).

    The file (by default the recipe's) must have been written with today's recipe and data,
    so that its model is the one train_variant(task, name, recipe=recipe) trains, up to the
    last digits that another CPU changes."""
    recipe = _recipe(recipe)
    path = recipe.path if path is None else Path(path)
    metadata = shipped_metadata(path)
    task = make_task(recipe) if task is None else task
    require_current(path, metadata, recipe.as_dict(), f"unit {recipe.unit}'s", data_digest(task),
                    "other pairs than make_task() draws now")
    shipped = tuple(metadata["results"])
    if name not in shipped:
        raise ValueError(f"name must be one of the shipped variants {shipped}; got {name!r}"
                         + (" (train it with train_variant)" if name in recipe.variants
                            else ""))
    model = Seq2Seq(config_for(task, **{**recipe.sizes, **recipe.variants[name]}))
    loss = load_variant(path, name, model)
    result = metadata["results"][name]
    history = History(loss=loss, seconds=result["seconds"],
                      steps_per_epoch=result["steps_per_epoch"])
    return model.eval(), history
