"""Unit 09's pointer models (lecture 09, section 5), trained once and shipped.

Lecture 09 asks which attention still finds a far position in unit 05's pointer task: full
attention, a sliding window of one layer or of four (whose receptive field covers the row, if
the layers relay), and linear attention. What an attention *cannot* do is only shown by a model
trained until its loss stops falling, so every variant gets the same budget, RECIPE, several
times what full attention needs, and the same batches: `seed_everything(0)` before each model
is built. The trainings take a few minutes on one thread, so `make translators` runs them once
and writes course_utils/data/long_inputs.safetensors; the lecture reads the weights and the loss
of every step, and measures the models itself.

    DATA, SIZES, RECIPE   the task (rows of 24 symbols, a window of 6), the model, the training
    VARIANTS              name -> (attention, n_layers): "full", "window" (the config's
                          window = DATA's) or "linear" (its feature_map, elu + 1 by default)
    make_data             the training rows, the far and the any-distance held-out rows
    build                 a fresh model of one variant (weights from the global RNG)
    train_variant         seed_everything(0), build, train with RECIPE -> (model, History)
    write_shipped         train every variant, measure each on the held-out rows, save
    load                  -> (model in eval mode, History): refuses a file of another recipe
                          or other data
    shipped_metadata      what the file says: recipe, data digest, torch, results
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import torch

from course_utils._checks import require_choice, require_int
from course_utils.data.pointer import PointerData, make_pointer_data
from course_utils.long_inputs import elu_feature_map
from course_utils.pointer_model import PointerModel, accuracy, config_for, train
from course_utils.shipped_files import load_variant, read_metadata, require_current, save_variants
from course_utils.training import History, seed_everything

__all__ = ["DATA", "RECIPE", "SHIPPED", "SIZES", "VARIANTS", "PointerSets", "build", "load",
           "make_data", "shipped_metadata", "train_variant", "write_shipped"]

SHIPPED = Path(__file__).parent / "data" / "long_inputs.safetensors"
SEED = 0
# Rows of 24 different symbols (of 32) and a pointer; the window reaches 6 positions each way.
# The far rows' pointers stand at least window + 1 positions from their target.
DATA = {"length": 24, "n_symbols": 32, "window": 6, "n_train": 192_000, "n_test": 1000,
        "seeds": {"train": 1, "far": 2, "anywhere": 3}}
# Lecture 05's pointer model: 2 heads of d_k = 16; n_layers is the variant's
SIZES = {"d_model": 32, "n_heads": 2, "d_ff": 64}
# Fresh rows at every step (3,000 batches of 64 = the 192,000 training rows), learning rate
# falling linearly: full attention's loss is below 0.01 after a third of it
RECIPE = {"n_steps": 3000, "batch_size": 64, "lr": 1e-2}
DIGEST_ROWS = 1000
VARIANTS = {"full": ("full", 1), "window": ("window", 1), "window, 4 layers": ("window", 4),
            "linear": ("linear", 1)}


class PointerSets(NamedTuple):
    """The rows of lecture 09's section 5: `train` (pointers at any distance), `far` (held
    out, pointers at least window + 1 positions from their target) and `anywhere` (held out,
    any distance)."""

    train: PointerData
    far: PointerData
    anywhere: PointerData


def _as_dict() -> dict:
    """Everything in the file's metadata that must match today's code."""
    return {"data": DATA, "sizes": SIZES, "recipe": RECIPE, "variants": VARIANTS, "seed": SEED}


def make_data(n_train: int | None = None) -> PointerSets:
    """The training rows and the two held-out sets, drawn from DATA's seeds (the same rows on
    every machine). `n_train`: draw only the first n_train training rows (at least
    DIGEST_ROWS, which the file's digest covers): a lecture that trains nothing needs no more
    to check the file, and drawing all 192,000 takes seconds."""
    n_train = DATA["n_train"] if n_train is None else require_int(
        n_train, "n_train", low=min(DIGEST_ROWS, DATA["n_train"]), high=DATA["n_train"])
    shape = {"length": DATA["length"], "n_symbols": DATA["n_symbols"]}
    seeds = DATA["seeds"]
    return PointerSets(
        make_pointer_data(n_train, **shape, seed=seeds["train"]),
        make_pointer_data(DATA["n_test"], **shape, seed=seeds["far"],
                          min_distance=DATA["window"] + 1),
        make_pointer_data(DATA["n_test"], **shape, seed=seeds["anywhere"]))


def data_digest(sets: PointerSets) -> str:
    """SHA-256 of the first DIGEST_ROWS training rows and of every held-out row, in order (the
    later training rows come from the same generator, after these)."""
    digest = hashlib.sha256()
    for data in (sets.train[:DIGEST_ROWS], sets.far, sets.anywhere):
        digest.update(data.ids.numpy().tobytes())
    return digest.hexdigest()


def build(train_data: PointerData, name: str, feature_map: Callable | None = None
          ) -> PointerModel:
    """A fresh pointer model of variant `name`: SIZES, the variant's number of layers and its
    attention, chosen by the config (a window of DATA["window"] positions each way, or linear
    attention with `feature_map`, by default elu + 1; `feature_map` is refused for the other
    variants), its weights drawn from PyTorch's global generator (train_variant seeds it
    first). Every variant starts from the weights full attention draws."""
    require_choice(name, "name", tuple(VARIANTS))
    attention, n_layers = VARIANTS[name]
    if feature_map is not None and attention != "linear":
        raise ValueError(f"feature_map is linear attention's; variant {name!r} has "
                         f"{attention} attention")
    variant = {"window": {"window": DATA["window"]},
               "linear": {"feature_map": feature_map or elu_feature_map}}.get(attention, {})
    return PointerModel(config_for(train_data, **SIZES, n_layers=n_layers, **variant))


def train_variant(train_data: PointerData, name: str, progress: bool = True,
                  n_steps: int | None = None, feature_map: Callable | None = None
                  ) -> tuple[PointerModel, History]:
    """Build variant `name` and train it on `train_data` with RECIPE; the batch order comes
    from the generator that seed_everything(0) returns just before the model is built, so
    every variant sees the same batches. For an experiment (lecture 09's questions): `n_steps`
    instead of RECIPE's, and another `feature_map` for a linear variant. -> (model, History)."""
    generator = seed_everything(SEED)
    model = build(train_data, name, feature_map)
    recipe = RECIPE if n_steps is None else {**RECIPE, "n_steps": n_steps}
    history = train(model, train_data, generator=generator, desc=name, progress=progress,
                    **recipe)
    return model, history


def write_shipped(path=None, progress: bool = True) -> dict:
    """Train every variant, measure its accuracy on the held-out rows, and save them all to
    one safetensors file at `path` (by default SHIPPED: `make translators`); -> the results."""
    path = SHIPPED if path is None else Path(path)
    sets = make_data()
    trained, results = {}, {}
    for name in VARIANTS:
        model, history = trained[name] = train_variant(sets.train, name, progress=progress)
        results[name] = {"far": round(accuracy(model, sets.far), 4),
                         "anywhere": round(accuracy(model, sets.anywhere), 4),
                         "seconds": round(history.seconds, 2),
                         "steps_per_epoch": history.steps_per_epoch}
    metadata = {"recipe": json.dumps(_as_dict(), sort_keys=True),
                "data_sha256": data_digest(sets), "torch": torch.__version__,
                "results": json.dumps(results, sort_keys=True)}
    save_variants(path, trained, metadata)
    return results


def shipped_metadata(path=SHIPPED) -> dict:
    """The metadata that write_shipped saved at `path`, with recipe and results decoded."""
    return read_metadata(path, "pointer model weights", "shipped_long_inputs.write_shipped")


def load(name: str, sets: PointerSets | None = None, path=None) -> tuple[PointerModel, History]:
    """-> (model of variant `name` in eval mode, the History of the run that trained it:
    loss per step and wall time on the machine that wrote the file).

    The file must have been written with today's recipe and rows (`sets`, by default
    make_data()), so that its model is the one train_variant trains, up to the last digits
    that another CPU changes."""
    require_choice(name, "name", tuple(VARIANTS))
    path = SHIPPED if path is None else Path(path)
    metadata = shipped_metadata(path)
    sets = make_data() if sets is None else sets
    require_current(path, metadata, _as_dict(), "unit 09's pointer recipe", data_digest(sets),
                    "other rows than make_data() draws now")
    if name not in metadata["results"]:
        raise ValueError(f"{path} holds no {name!r} model: run `make translators` to train "
                         f"and write the weights again")
    model = build(sets.train, name)
    loss = load_variant(path, name, model)
    result = metadata["results"][name]
    history = History(loss=loss, seconds=result["seconds"],
                      steps_per_epoch=result["steps_per_epoch"])
    return model.eval(), history
