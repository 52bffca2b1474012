"""Unit 03's translators, trained once with the unit's recipe and shipped with the package.

Lecture 03 trains its baseline and its attention model in front of the reader; the models it
compares them with (a forward-only encoder, Luong's decoder) and the RNN that lecture 06 sets
beside the Transformer are the same code on the same data with the same seed, trained once by
`make translators` and read from course_utils/data/translators.safetensors, so that no
lecture spends minutes repeating a training it has already shown.

    TASK, SIZES, RECIPE   the data, the sizes and the training recipe of unit 03
    VARIANTS              name -> what that model changes in SIZES (one thing each)
    make_task             the unit's 6,000 training and 1,000 held-out pairs
    build                 a fresh Seq2Seq of one variant (weights from the global RNG)
    train_variant         seed_everything(0), build, train with RECIPE -> (model, History)
    write_shipped         train SHIPPED_VARIANTS, measure each on the held-out pairs, save
    load                  -> (model in eval mode, History): refuses a file of another recipe
                          or other data
    shipped_metadata      what the file says: recipe, data digest, torch, results

A loaded History holds the loss of every step and the wall time of the run that made the file
(that machine's, not this one's).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from course_utils._checks import require_choice
from course_utils.data import translation
from course_utils.seq2seq import config_for
from course_utils.training import History, seed_everything
from course_utils.translator import Seq2Seq, evaluate, train

__all__ = ["RECIPE", "SHIPPED", "SHIPPED_VARIANTS", "SIZES", "TASK", "VARIANTS", "build",
           "load", "make_task", "shipped_metadata", "train_variant", "write_shipped"]

TASK = {"n_train": 6000, "n_test": 1000, "seed": 0, "max_numbers": 8}
SIZES = {"d_emb": 32, "d_h": 64, "bidirectional": True, "max_len": 30}
RECIPE = {"epochs": 6, "batch_size": 128, "lr": 1e-2, "schedule": "linear"}
VARIANTS = {
    "no attention": {},  # unit 02's decoder: the source only through s_0
    "attention": {"attention": "additive"},  # Bahdanau's decoder
    "attention, forward encoder": {"attention": "additive", "bidirectional": False},
    "Luong": {"attention": "multiplicative", "decoder": "luong"},  # general score, input feeding
}
SHIPPED_VARIANTS = ("attention", "attention, forward encoder", "Luong")
SHIPPED = Path(__file__).parent / "data" / "translators.safetensors"
SEED = 0


def make_task() -> translation.TranslationTask:
    """translation.make_task(**TASK): the pairs of units 03, 04 (its translator) and 06."""
    return translation.make_task(**TASK)


def build(task: translation.TranslationTask, name: str) -> Seq2Seq:
    """A fresh model of variant `name` (SIZES changed by VARIANTS[name]), its initial weights
    drawn from PyTorch's global generator (train_variant seeds it first)."""
    require_choice(name, "name", tuple(VARIANTS))
    return Seq2Seq(config_for(task, **{**SIZES, **VARIANTS[name]}))


def train_variant(task: translation.TranslationTask, name: str, progress: bool = True
                  ) -> tuple[Seq2Seq, History]:
    """Build variant `name` and train it on task.train with RECIPE; the batch order comes from
    the generator that seed_everything(0) returns just before the model is built, so every
    variant sees the same batches. -> (model, History)."""
    generator = seed_everything(SEED)
    model = build(task, name)
    data = translation.make_batch(task.train, task.src_vocab, task.tgt_vocab)
    history = train(model, data, generator=generator, desc=name, progress=progress, **RECIPE)
    return model, history


def recipe() -> dict:
    """Everything that decides the shipped weights besides the code: task, sizes, recipe,
    variants and seed."""
    return {"task": TASK, "sizes": SIZES, "recipe": RECIPE, "variants": VARIANTS, "seed": SEED}


def data_digest(task: translation.TranslationTask) -> str:
    """SHA-256 of every training and held-out pair, in order."""
    text = "\n".join(f"{' '.join(p.source)}\t{' '.join(p.target)}"
                     for p in [*task.train, *task.test])
    return hashlib.sha256(text.encode()).hexdigest()


def write_shipped(path=SHIPPED, names=SHIPPED_VARIANTS, progress: bool = True) -> dict:
    """Train each variant of `names`, measure its exact match on the held-out pairs, and save
    them all to one safetensors file at `path` (`make translators`); -> the results."""
    names = tuple(require_choice(n, "name", tuple(VARIANTS)) for n in names)
    task = make_task()
    test_data = translation.make_batch(task.test, task.src_vocab, task.tgt_vocab)
    tensors, results = {}, {}
    for name in names:
        model, history = train_variant(task, name, progress=progress)
        for key, value in model.state_dict().items():
            tensors[f"{name}/{key}"] = value.detach().contiguous()
        tensors[f"{name}/.loss"] = torch.tensor(history.loss, dtype=torch.float64)
        results[name] = {"exact_match": round(float(evaluate(model, test_data).float().mean()), 4),
                         "seconds": round(history.seconds, 2),
                         "steps_per_epoch": history.steps_per_epoch}
    metadata = {"recipe": json.dumps(recipe(), sort_keys=True), "data_sha256": data_digest(task),
                "torch": torch.__version__, "results": json.dumps(results, sort_keys=True)}
    save_file(tensors, str(path), metadata)
    Path(path).chmod(0o644)  # safetensors writes 0600; the file ships to every user
    return results


def shipped_metadata(path=SHIPPED) -> dict:
    """The metadata that write_shipped saved at `path`, with recipe and results decoded."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no translator weights at {path}; `make translators` "
                                f"writes them")
    with safe_open(str(path), "pt") as f:
        metadata = dict(f.metadata() or {})
    try:
        return {**metadata, "recipe": json.loads(metadata["recipe"]),
                "results": json.loads(metadata["results"])}
    except (KeyError, json.JSONDecodeError):
        raise ValueError(f"{path} has no recipe or results in its metadata: it was not "
                         f"written by shipped_translators.write_shipped") from None


def load(name: str, task: translation.TranslationTask | None = None, path=SHIPPED
         ) -> tuple[Seq2Seq, History]:
    """-> (model of variant `name` in eval mode, the History of the run that trained it:
    loss per step and wall time on the machine that wrote the file).

    The file must have been written with today's recipe and data, so that its model is the
    one train_variant(task, name) trains, up to the last digits that another CPU changes."""
    metadata = shipped_metadata(path)
    if metadata["recipe"] != json.loads(json.dumps(recipe())):
        raise ValueError(f"{path} was trained with the recipe {metadata['recipe']}, but "
                         f"course_utils.shipped_translators's is now {recipe()}: run "
                         f"`make translators` to train and write the weights again")
    task = make_task() if task is None else task
    if metadata.get("data_sha256") != data_digest(task):
        raise ValueError(f"{path} was trained on other pairs than make_task() draws now: run "
                         f"`make translators` to train and write the weights again")
    shipped = tuple(metadata["results"])
    if name not in shipped:
        raise ValueError(f"name must be one of the shipped variants {shipped}; got {name!r}"
                         + (" (train it with train_variant)" if name in VARIANTS else ""))
    model = Seq2Seq(config_for(task, **{**SIZES, **VARIANTS[name]}))
    prefix = f"{name}/"
    state = {k[len(prefix):]: v for k, v in load_file(str(path)).items() if k.startswith(prefix)}
    loss = state.pop(".loss", None)
    expected = model.state_dict()
    if loss is None or set(state) != set(expected) or any(
            state[k].shape != expected[k].shape for k in expected):
        raise ValueError(f"{path} does not hold the weights of a {name!r} model of today's "
                         f"sizes: run `make translators` to write them again")
    model.load_state_dict(state)
    result = metadata["results"][name]
    history = History(loss=loss.tolist(), seconds=result["seconds"],
                      steps_per_epoch=result["steps_per_epoch"])
    return model.eval(), history
